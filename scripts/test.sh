#!/usr/bin/env bash
# Command (2) of the README, and what CI runs: installs every dependency with
# the test rig (Slurm and munge, the reference BM25 and trec_eval packages),
# builds, and runs the whole test suite (GoogleTest via ctest, plus the format
# checks with h5py). Works from nothing on a fresh Debian 12 machine.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --test-rig
scripts/build.sh
# One test run at a time in a build tree: the tests' scratch folders live in
# it, so a second run waits here instead of deleting what the first one uses.
build_dir=${DOCMATCH_BUILD_DIR:-build}
exec 9>"$build_dir/.test-run.lock"
if ! flock -n 9; then
  echo "[test] another test run is using $build_dir; waiting for it to end" >&2
  flock 9
fi
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)"
