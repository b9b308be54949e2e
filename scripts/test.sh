#!/usr/bin/env bash
# Command (2) of the README, and what CI runs: installs every dependency,
# builds, and runs the whole test suite (GoogleTest via ctest, plus the format
# checks with h5py). Works from nothing on a fresh Debian 12 machine.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
ctest --test-dir "${DOCMATCH_BUILD_DIR:-build}" --output-on-failure -j "$(nproc)"
