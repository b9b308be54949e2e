#!/usr/bin/env bash
# docmatch vs the Python peer on the SMITH pre-training step, in one
# invocation: for each config, bench/smith_step times docmatch's step and
# dumps its batch, initial weights and config; bench/peers/smith_peer.py then
# times the same step in eager PyTorch and under torch.compile (same torch
# version, same threads, each in its own process so that peak memory is its
# own) and must reach the same first loss. Prints the JSON lines and a table
# with docmatch / peer ratios.
#
# On CPU a third peer row runs eager with glibc tuned the way docmatch tunes
# its own allocator (GLIBC_TUNABLES: no mmap, no trimming), so the table also
# shows how much of the ratio is the allocator and how much the rest.
#
#   bench/peers/smith_vs_peer.sh [--corpus corpora/wikispeedia] [--steps 10]
#       [--device cpu|cuda] [--precision fp32|bf16] [config=batch ...]
#   (default: smith-tiny=8 smith-paper=32)
set -euo pipefail
cd "$(dirname "$0")/../.."
corpus=corpora/wikispeedia steps=10 device=cpu precision=fp32
configs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --corpus) corpus=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --precision) precision=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) configs+=("$1"); shift ;;
  esac
done
[ ${#configs[@]} -gt 0 ] || configs=(smith-tiny=8 smith-paper=32)
PY=${DOCMATCH_VENV:-$HOME/.cache/docmatch/venv}/bin/python
BUILD=${DOCMATCH_BUILD_DIR:-build}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--steps "$steps" --device "$device" --precision "$precision")
peer() {  # name, extra arguments...
  local name=$1; shift
  "$PY" bench/peers/smith_peer.py "$work/$name" "${common[@]}" "$@" 2>"$work/$name.peer.log" |
    sed "s/^{/{\"config\": \"$name\", /" | tee -a "$work/out.jsonl" || { cat "$work/$name.peer.log" >&2; exit 1; }
}
for entry in "${configs[@]}"; do
  name=${entry%%=*} batch=${entry#*=}
  "$BUILD"/bench/smith_step --model "configs/models/$name.yaml" --corpus "$corpus" --batch "$batch" \
    "${common[@]}" --dump "$work/$name" | sed "s/^{/{\"config\": \"$name\", /" | tee -a "$work/out.jsonl"
  peer "$name"
  peer "$name" --no-eager --compile
  if [ "$device" = cpu ]; then
    GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736 peer "$name" --label "+retain"
  fi
done
"$PY" - "$work/out.jsonl" "$precision" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
tolerance = 1e-4 if sys.argv[2] == "fp32" else 2e-2  # bf16 autocast rounds differently on each side
print("\n| config | side | step ms | docs/s | tokens/s | peak memory | first loss | docmatch speed / side's |")
print("|---|---|---|---|---|---|---|---|")
for config in dict.fromkeys(r["config"] for r in rows):
    mine = next(r for r in rows if r["config"] == config and r["side"] == "docmatch")
    for r in (r for r in rows if r["config"] == config):
        ratio = r["step_ms"] / mine["step_ms"]
        memory = (f"{r['peak_reserved_gib']:.2f} GiB" if r.get("peak_reserved_gib") is not None
                  else f"{r['peak_rss_mib']:.0f} MiB RSS")
        print(f"| {config} | {r['side']} | {r['step_ms']:.1f} | {r['docs_per_s']:.2f} | {r['tokens_per_s']:.0f} | "
              f"{memory} | {r['losses'][0]:.6f} | {ratio:.3f} |")
        if abs(r["losses"][0] - mine["losses"][0]) > tolerance * abs(mine["losses"][0]):
            sys.exit(f"{config}: {r['side']} first loss {r['losses'][0]} differs from docmatch's {mine['losses'][0]}")
PYEOF
