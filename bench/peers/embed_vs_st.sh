#!/usr/bin/env bash
# docmatch embed vs sentence-transformers, same model (all-MiniLM-L6-v2), same
# documents, same reading (the first W windows of 256 WordPiece tokens, mean
# pooling, windows averaged), one after the other in one invocation on this
# machine's CPU threads. Prints one JSON line per side and the ratio.
#
#   bench/peers/embed_vs_st.sh [DOCUMENTS=500] [WINDOWS=4]
#
# Needs data/wikispeedia (README, Corpora) and a build. Both sides are timed
# as whole processes (start, model load, reading, embedding, writing) on a
# warm page cache; the sentence-transformers side also reports its model-only
# rate. sentence-transformers tokenizes inside its time, docmatch reads ids
# that `prepare` wrote: prepare's time for the same documents is printed too.
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-500}
W=${2:-4}
PY=${DOCMATCH_VENV:-$HOME/.cache/docmatch/venv}/bin/python
MINILM=${DOCMATCH_MODELS:-$HOME/.cache/docmatch/models}/all-minilm-l6-v2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The first N articles as their own corpora (SentencePiece order = WordPiece order).
head -n "$N" data/wikispeedia/articles.jsonl > "$work/articles.jsonl"
build/src/docmatch import-hf "$MINILM" --output "$work/minilm" --chunks "$W" > /dev/null
tp=$(date +%s.%N)
build/src/docmatch prepare --input "$work/articles.jsonl" --output "$work/corpus" \
  --tokenizer "$work/minilm" --no-progress > /dev/null 2>&1
prepare_s=$(awk -v a="$(date +%s.%N)" -v b="$tp" 'BEGIN { print a - b }')  # awk: no bc needed

t0=$(date +%s.%N)
st=$("$PY" scripts/baselines/st-embed.py --model "$MINILM" --corpus "$work/corpus" \
  --articles "$work/articles.jsonl" --max-windows "$W" --output "$work/st.h5" 2>/dev/null)
t1=$(date +%s.%N)
build/src/docmatch embed --model "$work/minilm" --corpus "$work/corpus" --output "$work/docmatch.h5" \
  --batch-size 8 --no-progress > /dev/null 2>&1
t2=$(date +%s.%N)

"$PY" - "$st" "$t0" "$t1" "$t2" "$N" "$W" "$work" "$prepare_s" <<'PYEOF'
import json, sys
import h5py, numpy as np
st, t0, t1, t2, n, w, work = sys.argv[1], *map(float, sys.argv[2:5]), int(sys.argv[5]), int(sys.argv[6]), sys.argv[7]
prepare_s = float(sys.argv[8])
st = json.loads(st)
a = h5py.File(f"{work}/docmatch.h5")["vectors"][:]
b = h5py.File(f"{work}/st.h5")["vectors"][:]
st_process, dm_process = t1 - t0, t2 - t1
rows = [
    {"side": "sentence-transformers", "documents": n, "windows": st["windows"], "process_s": round(st_process, 2),
     "docs_per_s": round(n / st_process, 2), "model_only_docs_per_s": st["docs_per_s"]},
    {"side": "docmatch embed", "documents": n, "windows": st["windows"], "process_s": round(dm_process, 2),
     "docs_per_s": round(n / dm_process, 2), "prepare_s": round(prepare_s, 2)},
]
for r in rows:
    print(json.dumps(r))
print(json.dumps({"ratio_docmatch_over_st_process": round(st_process / dm_process, 3),
                  "max_abs_vector_difference": float(np.abs(a - b).max())}))
PYEOF
