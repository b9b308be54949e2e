#!/usr/bin/env bash
# Run HERE after scripts/build.sh: packs this machine's build (the PyPI torch
# 2.11.0 CUDA build that the GPU machine's Python also has, so the same
# libtorch ABI) as .device/build.tar.xz: every executable stripped of its
# debug information, and CTest's files. A device call then spends none of its
# minutes compiling: gpu-checks.sh unpacks it as build/ and points the paths
# this build was made with (the checkout, the venv's torch, the venv's Python,
# mpiexec) at what the GPU machine has. The pack is only as new as the build:
# it records the commit and refuses a tree with uncommitted source changes.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${DOCMATCH_BUILD_DIR:-build}
[ -x "$BUILD/src/docmatch" ] || { echo "[pack-build] no $BUILD/src/docmatch: run scripts/build.sh first" >&2; exit 1; }
if ! git diff --quiet HEAD -- src tests bench CMakeLists.txt; then
  echo "[pack-build] src, tests or bench differ from HEAD: commit, rebuild, then pack" >&2
  exit 1
fi
ninja -C "$BUILD" > /dev/null  # the pack must be the tree's build
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$(pwd -P)
mkdir -p "$work/build"
# CTest's files: the test lists gtest_discover_tests wrote, and every folder's CTestTestfile.cmake.
(cd "$BUILD" && find . \( -name CMakeFiles -o -name Testing \) -prune -o \
   \( -name CTestTestfile.cmake -o -name '*_include.cmake' -o -name '*_tests.cmake' \) -print) |
  while read -r f; do mkdir -p "$work/build/$(dirname "$f")"; cp "$BUILD/$f" "$work/build/$f"; done
# Executables (ELF files with the execute bit), stripped.
(cd "$BUILD" && find . \( -name CMakeFiles -o -name Testing \) -prune -o -type f -perm -u+x -print) |
  while read -r f; do
    head -c 4 "$BUILD/$f" | grep -q ELF || continue
    mkdir -p "$work/build/$(dirname "$f")"
    strip -o "$work/build/$f" "$BUILD/$f"
  done
venv=${DOCMATCH_VENV:-$HOME/.cache/docmatch/venv}
{
  echo "commit=$(git rev-parse HEAD)"
  echo "root=$root"
  echo "venv=$venv"
  echo "site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  echo "mpiexec=$(grep -m 1 '^MPIEXEC_EXECUTABLE' "$BUILD/CMakeCache.txt" | cut -d= -f2)"
} > "$work/build/device-pack.env"
mkdir -p .device
tar -C "$work" -cJf .device/build.tar.xz.tmp build
mv .device/build.tar.xz.tmp .device/build.tar.xz
echo "[pack-build] .device/build.tar.xz: $(du -h .device/build.tar.xz | cut -f1), $(grep -c . "$work/build/device-pack.env") keys:"
cat "$work/build/device-pack.env"
