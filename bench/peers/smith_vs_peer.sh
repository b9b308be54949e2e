#!/usr/bin/env bash
# docmatch vs the Python peer on the SMITH pre-training step, in one
# invocation: for each config, bench/smith_step times docmatch's step and
# dumps its batch, initial weights and config; bench/peers/smith_peer.py then
# times the same step in eager PyTorch and under torch.compile (same torch
# version, same threads) and must reach the same first loss. Prints the JSON
# lines and a table with docmatch / peer ratios.
#
#   bench/peers/smith_vs_peer.sh [--corpus corpora/wikispeedia] [--steps 10] [config=batch ...]
#   (default: smith-tiny=8 smith-paper=32)
set -euo pipefail
cd "$(dirname "$0")/../.."
corpus=corpora/wikispeedia steps=10
configs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --corpus) corpus=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    *) configs+=("$1"); shift ;;
  esac
done
[ ${#configs[@]} -gt 0 ] || configs=(smith-tiny=8 smith-paper=32)
PY=${DOCMATCH_VENV:-$HOME/.cache/docmatch/venv}/bin/python
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for entry in "${configs[@]}"; do
  name=${entry%%=*} batch=${entry#*=}
  build/bench/smith_step --model "configs/models/$name.yaml" --corpus "$corpus" --batch "$batch" \
    --steps "$steps" --dump "$work/$name" | sed "s/^{/{\"config\": \"$name\", /" | tee -a "$work/out.jsonl"
  "$PY" bench/peers/smith_peer.py "$work/$name" --steps "$steps" --compile 2>"$work/$name.peer.log" |
    sed "s/^{/{\"config\": \"$name\", /" | tee -a "$work/out.jsonl" || { cat "$work/$name.peer.log" >&2; exit 1; }
done
"$PY" - "$work/out.jsonl" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("\n| config | side | step ms | docs/s | tokens/s | first loss | docmatch / side |")
print("|---|---|---|---|---|---|---|")
for config in dict.fromkeys(r["config"] for r in rows):
    mine = next(r for r in rows if r["config"] == config and r["side"] == "docmatch")
    for r in (r for r in rows if r["config"] == config):
        ratio = r["step_ms"] / mine["step_ms"]
        print(f"| {config} | {r['side']} | {r['step_ms']:.1f} | {r['docs_per_s']:.2f} | {r['tokens_per_s']:.0f} | "
              f"{r['losses'][0]:.6f} | {ratio:.3f} |")
        if abs(r["losses"][0] - mine["losses"][0]) > 1e-4 * abs(mine["losses"][0]):
            sys.exit(f"{config}: {r['side']} first loss {r['losses'][0]} differs from docmatch's {mine['losses'][0]}")
PYEOF
