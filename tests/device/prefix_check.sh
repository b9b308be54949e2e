#!/usr/bin/env bash
# scripts/device/ on this machine: the Debian packages the GPU machine lacks
# are downloaded (fetch-debs.py), unpacked under a private prefix (env.sh),
# and then
#   * the prefix's own mpirun starts 2 ranks on the prefix's Open MPI
#     libraries (relocated with OPAL_PREFIX), and
#   * a CMake configure of docmatch with env.sh's hints finds MPI, HDF5, ICU,
#     glog, gflags, GTest, yaml-cpp, CLI11, nlohmann-json and SentencePiece
#     inside the prefix, none of them in the system's /usr.
# usage: prefix_check.sh SCRATCH TORCH_CMAKE_PREFIX
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
scratch="$1" torch_prefix="$2"
mkdir -p "$scratch"
cd "$root"
if [ ! -s "$scratch/debs/packages.txt" ]; then
  python3 scripts/device/fetch-debs.py --output "$scratch/debs"
fi
export DOCMATCH_DEBS="$scratch/debs" DOCMATCH_PREFIX="$scratch/prefix"
rm -rf "$DOCMATCH_PREFIX"
source scripts/device/env.sh
fail() { echo "FAILED: $*" >&2; exit 1; }

[ "$(command -v mpirun)" = "$DOCMATCH_PREFIX/usr/bin/mpirun" ] || fail "mpirun is $(command -v mpirun)"
# ldd's output is read whole first: `ldd | grep -q` under pipefail fails at
# random when grep stops reading early and ldd dies of SIGPIPE (seen under -j2).
mpirun_libraries=$(ldd "$(command -v mpirun)")
grep -q "libopen-pal.so.* => $DOCMATCH_PREFIX/" <<<"$mpirun_libraries" || fail "mpirun loads the system's Open MPI"
ranks=$(mpirun --allow-run-as-root --oversubscribe -np 2 bash -c 'echo "rank $OMPI_COMM_WORLD_RANK"' | sort | tr '\n' ' ')
[ "$ranks" = "rank 0 rank 1 " ] || fail "the prefix's mpirun printed: $ranks"

rm -rf "$scratch/configure"
cmake -S . -B "$scratch/configure" -G Ninja -DCMAKE_PREFIX_PATH="$torch_prefix;$DOCMATCH_EXTRA_PREFIX" \
  "${DOCMATCH_CMAKE_ARGS[@]}" > "$scratch/configure.log" 2>&1 || { tail -n 30 "$scratch/configure.log"; fail "configure"; }
cache="$scratch/configure/CMakeCache.txt"
found=0
for key in MPI_mpi_LIBRARY MPI_C_HEADER_DIR HDF5_C_LIBRARY_hdf5 ICU_INCLUDE_DIR ICU_UC_LIBRARY_RELEASE glog_DIR \
           gflags_DIR GTest_DIR yaml-cpp_DIR CLI11_DIR nlohmann_json_DIR SENTENCEPIECE_INCLUDE_DIRS; do
  value=$(grep -E "^$key(:[A-Z]+)?=" "$cache" | head -n 1 | cut -d= -f2-)
  case "$value" in
    "$DOCMATCH_PREFIX"/*) found=$((found + 1)) ;;
    *) fail "$key = '$value', not under $DOCMATCH_PREFIX" ;;
  esac
done
echo "{\"packages\": $(wc -l < "$DOCMATCH_DEBS/packages.txt"), \"megabytes\": $(du -sm "$DOCMATCH_DEBS" | cut -f1)," \
     "\"mpirun_ranks\": 2, \"dependencies_in_prefix\": $found}"
