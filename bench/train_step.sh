#!/usr/bin/env bash
# The SMITH pre-training step, measured: for each model config, `docmatch
# pretrain --time-split` for 2K steps (K to warm up, K measured) on a real
# corpus, then one JSON line per config and a table:
#   docs/s and real tokens/s (measured steps), the step's time split (data wait,
#   forward, backward, gradient communication, optimizer, other), peak RSS, the
#   achieved model TFLOP/s (model/smith.h, SmithPretrainingFlops) and model
#   FLOPs utilisation against the stated peak: the fp32 rate of a 4096^3
#   matrix product through the same libtorch on the same threads (what this
#   CPU's BLAS reaches), or --peak-tflops when given (e.g. 989 for an H100's
#   dense bf16).
#
#   bench/train_step.sh [--corpus corpora/wikispeedia] [--steps K] [--ranks N]
#                       [--device cpu|cuda] [--precision fp32|bf16] [--peak-tflops P]
#                       [config=batch ...]   (default: smith-tiny=8 smith-paper=32)
set -euo pipefail
cd "$(dirname "$0")/.."
corpus=corpora/wikispeedia steps=3 ranks=1 device=cpu precision=fp32 peak=""
configs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --corpus) corpus=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --precision) precision=$2; shift 2 ;;
    --peak-tflops) peak=$2; shift 2 ;;
    *) configs+=("$1"); shift ;;
  esac
done
[ ${#configs[@]} -gt 0 ] || configs=(smith-tiny=8 smith-paper=32)
PY=${DOCMATCH_VENV:-$HOME/.cache/docmatch/venv}/bin/python
BUILD=${DOCMATCH_BUILD_DIR:-build}
launch=()
[ "$ranks" -gt 1 ] && launch=(mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$ranks")
if [ -z "$peak" ]; then
  peak=$("$PY" - "$device" <<'PYEOF'
import sys, time, torch
device = sys.argv[1]
a = torch.randn(4096, 4096, device=device)
b = torch.randn(4096, 4096, device=device)
for _ in range(2):
    a @ b
if device == "cuda":
    torch.cuda.synchronize()
start = time.perf_counter()
for _ in range(5):
    a @ b
if device == "cuda":
    torch.cuda.synchronize()
print(round(5 * 2 * 4096 ** 3 / (time.perf_counter() - start) / 1e12, 4))
PYEOF
)
  peak_source="fp32 4096^3 matmul, measured"
else
  peak_source="stated"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# GNU time reads each run's peak RSS; without it (a bare image) the RSS column is empty.
gnu_time=$(type -P time || true)
for entry in "${configs[@]}"; do
  name=${entry%%=*} batch=${entry#*=}
  measure=()
  [ -n "$gnu_time" ] && measure=("$gnu_time" -f "%M" -o "$work/$name.rss")
  "${measure[@]}" "${launch[@]}" "$BUILD"/src/docmatch pretrain --corpus "$corpus" \
    --model-config "configs/models/$name.yaml" --objective wp+sp --run "$work/$name" --steps $((2 * steps)) \
    --log-every "$steps" --checkpoint-every 100000 --batch-size "$batch" --device "$device" \
    --precision "$precision" --time-split --fresh --no-progress > "$work/$name.log" 2>&1 ||
    { cat "$work/$name.log" >&2; exit 1; }
  "$PY" - "$work/$name/metrics.jsonl" "$work/$name.rss" "$name" "$batch" "$ranks" "$peak" "$peak_source" \
    "$device" "$precision" <<'PYEOF'
import json, os, sys
metrics, rss, name, batch, ranks, peak, source, device, precision = sys.argv[1:]
rows = [json.loads(l) for l in open(metrics) if '"train/time/step_ms"' in l]
m = rows[-1]  # the measured interval, after the warm-up one
split = {k.split("/")[-1][:-3]: round(v, 1) for k, v in m.items() if k.startswith("train/time/")}
tflops = m.get("train/model_tflops_per_s", 0.0)
print(json.dumps({"bench": "train_step", "config": name, "device": device, "precision": precision,
                  "ranks": int(ranks), "batch_per_rank": int(batch), "docs_per_s": round(m["train/docs_per_s"], 2),
                  "tokens_per_s": round(m["train/tokens_per_s"], 1), "time_ms": split,
                  "peak_rss_mib_per_rank": (round(int(open(rss).read().split()[-1]) / 1024, 1)
                                            if os.path.exists(rss) else None),
                  "model_tflops_per_s_per_rank": round(tflops, 4), "peak_tflops": float(peak),
                  "peak_source": source, "mfu": round(tflops / float(peak), 4)}))
PYEOF
done | tee "$work/out.jsonl"
"$PY" - "$work/out.jsonl" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
phases = ["data", "forward", "backward", "comm", "optimizer", "other"]
print("\n| config | docs/s | tokens/s | step ms | " + " | ".join(f"{p} ms" for p in phases) +
      " | RSS MiB | TFLOP/s | MFU |")
print("|---" * (7 + len(phases)) + "|")
for r in rows:
    t = r["time_ms"]
    print(f"| {r['config']} b{r['batch_per_rank']}x{r['ranks']} | {r['docs_per_s']} | {r['tokens_per_s']:.0f} | "
          f"{t.get('step', 0)} | " + " | ".join(str(t.get(p, 0)) for p in phases) +
          f" | {r['peak_rss_mib_per_rank']} | {r['model_tflops_per_s_per_rank']} | {r['mfu']:.1%} |")
PYEOF
