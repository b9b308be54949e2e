#!/usr/bin/env bash
# Contrastive fine-tuning's memory and step time: docmatch finetune --loss
# contrastive against sentence-transformers' MultipleNegativesRankingLoss
# (bench/peers/mnrl_peer.py), the same model (all-MiniLM-L6-v2), the same
# related pairs (in-batch negatives only), batch and token cut, one after the
# other in one invocation on this machine's CPU threads. docmatch runs plain
# and with gradient caching (--grad-cache 4). Prints one JSON line per side
# and the ratios to the peer.
#
#   bench/peers/mnrl_vs_st.sh [BATCH=16] [STEPS=4]
#
# Reads the tiny manual-page corpus the tests build (build/tests/e2e: run
# `ctest -R E2E.TinyManpagesCorpus` once) and a build.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-16}
STEPS=${2:-4}
PY=${DOCMATCH_VENV:-$HOME/.cache/docmatch/venv}/bin/python
MINILM=${DOCMATCH_MODELS:-$HOME/.cache/docmatch/models}/all-minilm-l6-v2
E=build/tests/e2e
[ -f $E/articles.jsonl ] || { echo "no $E/articles.jsonl: run ctest -R E2E.TinyManpagesCorpus first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
build/src/docmatch import-hf "$MINILM" --output "$work/minilm" > /dev/null
build/src/docmatch prepare --input $E/articles.jsonl --output "$work/corpus" --tokenizer "$work/minilm" \
  --no-progress > /dev/null 2>&1

docmatch_side() {  # name, extra flags
  local name=$1
  shift
  /usr/bin/time -f '%M' -o "$work/rss" build/src/docmatch finetune --init "$work/minilm" --corpus "$work/corpus" \
    --train-pairs $E/pairs.train.jsonl --loss contrastive --hard-negatives 0 --batch-size "$B" --steps "$STEPS" \
    --log-every 1 --checkpoint-every 100000 --validate-every 0 --run "$work/run-$name" --fresh --no-progress \
    --device cpu --time-split "$@" > "$work/$name.log" 2>&1
  "$PY" - "$name" "$work/rss" "$work/run-$name/metrics.jsonl" "$B" <<'PYEOF'
import json, sys
name, rss, metrics, batch = sys.argv[1:5]
lines = [json.loads(l) for l in open(metrics)]
steps = [l["train/time/step_ms"] for l in lines[1:] if "train/time/step_ms" in l]
print(json.dumps({"side": name, "batch_size": int(batch), "last_loss": round(lines[-1]["train/loss"], 4),
                  "s_per_step": round(sum(steps) / len(steps) / 1000, 3),
                  "peak_rss_mib": round(int(open(rss).read().split()[-1]) / 1024)}))
PYEOF
}

peer=$("$PY" bench/peers/mnrl_peer.py "$MINILM" $E/articles.jsonl $E/pairs.train.jsonl --batch-size "$B" \
  --steps "$STEPS" --threads "$(nproc)" 2> /dev/null)
plain=$(docmatch_side "docmatch")
cached=$(docmatch_side "docmatch --grad-cache 4" --grad-cache 4)
echo "$peer"
echo "$plain"
echo "$cached"
"$PY" - "$peer" "$plain" "$cached" <<'PYEOF'
import json, sys
peer, *ours = map(json.loads, sys.argv[1:])
for side in ours:
    print(json.dumps({"ratio": side["side"] + " / peer",
                      "peak_rss": round(side["peak_rss_mib"] / peer["peak_rss_mib"], 3),
                      "s_per_step": round(side["s_per_step"] / peer["s_per_step"], 3)}))
PYEOF
