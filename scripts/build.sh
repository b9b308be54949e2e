#!/usr/bin/env bash
# Configures and builds docmatch in build/ (Ninja, ccache, precompiled torch
# header), against the libtorch of the venv that install-deps.sh made.
#   scripts/build.sh [extra cmake -D options]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${DOCMATCH_VENV:-$HOME/.cache/docmatch/venv}
BUILD_DIR=${DOCMATCH_BUILD_DIR:-build}
if [ ! -x "$VENV/bin/python" ]; then
  echo "[build] no virtual environment at $VENV: run scripts/install-deps.sh first" >&2
  exit 1
fi
TORCH_PREFIX=$("$VENV/bin/python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/docmatch/ccache}
# Clones at other paths (CI) share the cache: paths are hashed relative to here.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
# PCH and ccache: let ccache hash the precompiled header by content.
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
GENERATOR=()
command -v ninja >/dev/null && [ ! -f "$BUILD_DIR/Makefile" ] && GENERATOR=(-G Ninja)
cmake -S . -B "$BUILD_DIR" "${GENERATOR[@]}" -DCMAKE_PREFIX_PATH="$TORCH_PREFIX${DOCMATCH_EXTRA_PREFIX:+;$DOCMATCH_EXTRA_PREFIX}" \
  -DDOCMATCH_PYTHON="$VENV/bin/python" "$@"
# DOCMATCH_BUILD_TARGETS="a b": only those targets (scripts/device/gpu-checks.sh).
read -r -a targets <<< "${DOCMATCH_BUILD_TARGETS:-}"
cmake --build "$BUILD_DIR" -j "$(nproc)" ${targets[@]+--target "${targets[@]}"}
