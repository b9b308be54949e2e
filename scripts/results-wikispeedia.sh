#!/usr/bin/env bash
# Reproduces docs/RESULTS.md: every method trained and evaluated on the
# Wikispeedia matching set at CPU sizes (configs/wikispeedia/*.yaml).
#
#   scripts/results-wikispeedia.sh                 # every row, then the table
#   scripts/results-wikispeedia.sh smith-wp han    # some rows
#   DOCMATCH_RANKS=2 scripts/results-wikispeedia.sh
#
# Rows from pretrained weights (issue: import-hf) start from all-MiniLM-L6-v2
# (scripts/fetch-models.py) on corpora/wikispeedia-minilm, the same articles
# prepared with its WordPiece vocabulary: smith-short (SMITH-Short: 4 blocks x
# 128 tokens, the sentence encoder from MiniLM) and match-bert-minilm (the
# first 256 tokens); match-bert-minilm-contrastive fine-tunes the latter's
# import with the contrastive loss instead of BCE, and match-bert-minilm-zeroshot
# evaluates that import without fine-tuning. match-bert-minilm-docsplit-nolabels
# trains the import further with DocSplit on the articles (no labels), and
# match-bert-minilm-docsplit-contrastive fine-tunes that contrastively;
# match-bert-minilm-contrastive-learned-temperature learns the contrastive
# temperature and match-bert-minilm-contrastive-temperature-<T> fixes it at T
# (match-bert-minilm-contrastive-lr-<LR>: the peak learning rate at LR).
# sdr-minilm continues MiniLM as SDR's sentence encoder with SDR's objective on
# corpora/wikispeedia-minilm-1024 (each article's first 1,024 WordPiece tokens)
# and scores it with the paper's z-score; sdr-minilm-zeroshot scores the import
# untrained; the -cosine rows rank their mean sentence vectors by cosine. Rows
# ending in -hybrid rank with the dense row's vectors fused with docmatch's
# TF-IDF (eval --lexical-weight 0.5); tfidf-wordpiece is that TF-IDF alone. The reference rows st-minilm (sentence-transformers, first
# 4 windows of 256) and tfidf are vectors made outside docmatch
# (scripts/baselines/) scored by `docmatch eval --embeddings`.
#
# Needs corpora/wikispeedia and data/wikispeedia (README, "Corpora"). Each row
# writes checkpoints/wikispeedia/<row>-{pretrain,finetune}/ and
# runs/wikispeedia/<row>/metrics.json; scripts/results-table.py prints the
# table from those. Rows whose metrics.json exists are skipped (delete it to
# run a row again).
set -euo pipefail
cd "$(dirname "$0")/.."
for need in corpora/wikispeedia/manifest.json data/wikispeedia/pairs.train.jsonl; do
  [ -e "$need" ] || { echo "results: $need is missing; see the README's Corpora section" >&2; exit 1; }
done
docmatch=(build/src/docmatch)
if [ "${DOCMATCH_RANKS:-1}" -gt 1 ]; then
  docmatch=(mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$DOCMATCH_RANKS" build/src/docmatch)
fi
corpus=corpora/wikispeedia
data=data/wikispeedia
models=configs/wikispeedia
ckpt=checkpoints/wikispeedia
out=runs/wikispeedia
wp_corpus=corpora/wikispeedia-minilm
sdr_corpus=corpora/wikispeedia-minilm-1024
minilm=${DOCMATCH_MODELS:-$HOME/.cache/docmatch/models}/all-minilm-l6-v2
python=${DOCMATCH_VENV:-$HOME/.cache/docmatch/venv}/bin/python
quiet=(--no-progress)
[ -t 2 ] && quiet=()

# row objective model [steps, default 1,000]: SMITH's rows pass 3,000, since the masked-block task
# leaves chance only after about 1,000 (docs/RESULTS.md); SDR keeps the default.
pretrain() {
  local steps=${4:-1000}
  "${docmatch[@]}" pretrain --corpus $corpus --model-config "$models/$3.yaml" --objective "$2" --run "$ckpt/$1-pretrain" \
    --steps $steps --batch-size 8 --lr 5e-4 --warmup-steps 100 --decay-steps $steps --checkpoint-every 500 \
    --log-every 50 --seed 1 --fresh "${quiet[@]}"
}
finetune() {  # row (--init folder | --model-config yaml)
  local row=$1; shift
  "${docmatch[@]}" finetune --corpus $corpus "$@" --train-pairs $data/pairs.train.jsonl \
    --valid-pairs $data/pairs.valid.jsonl --run "$ckpt/$row-finetune" --loss bce --steps 600 --batch-size 16 --lr 1e-3 \
    --warmup-steps 60 --decay-steps 600 --validate-every 50 --checkpoint-every 200 --log-every 50 --seed 1 \
    --fresh "${quiet[@]}"
}
evaluate() {  # row model-folder [corpus [eval flags...]]; an empty model folder: --embeddings scored by cosine
  local name=$1 what=()
  [ -z "$2" ] || what=(--model "$2")
  local on=${3:-$corpus}
  shift $(($# < 3 ? $# : 3))
  "${docmatch[@]}" eval "${what[@]}" --corpus "$on" --valid-pairs $data/pairs.valid.jsonl \
    --test-pairs $data/pairs.test.jsonl --relevance $data/relevance.jsonl --max-queries 500 --seed 1 \
    --output "$out/$name" "${quiet[@]}" "$@"
}
hybrid() {  # row dense-row: the dense row's model and vectors, fused with the TF-IDF cosine at weight 0.5
  local dense=$2 folder
  folder=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["model"])' "$out/$dense/metrics.json")
  evaluate "$1" "$folder" $wp_corpus --embeddings "$out/$dense/embeddings.h5" --lexical-weight 0.5
}
minilm_docsplit() {  # MiniLM -> DocSplit on the articles, no labels (configs/wikispeedia/match-bert-minilm-docsplit.yaml)
  import_minilm match-bert-minilm
  [ -e "$ckpt/match-bert-minilm-docsplit-pretrain/latest/config.json" ] ||
    "${docmatch[@]}" pretrain --config "$models/match-bert-minilm-docsplit.yaml" --corpus $wp_corpus \
      --init "$ckpt/match-bert-minilm-import" --fresh "${quiet[@]}"
}
import_minilm() {  # import row: configs/wikispeedia/<import row>.yaml, then the WordPiece corpus once
  build/src/docmatch import-hf "$minilm" --config "$models/$1.yaml" || return
  [ -e $wp_corpus/manifest.json ] || build/src/docmatch prepare --config configs/prepare-wikispeedia.yaml \
    --output $wp_corpus --tokenizer "$ckpt/$1-import" "${quiet[@]}"
}
sdr_minilm() {  # SDR's sentence encoder from MiniLM (configs/wikispeedia/sdr-minilm.yaml), and its corpus once:
  # the same articles in WordPiece, each cut to its first 1,024 tokens (SDR scoring encodes every sentence)
  build/src/docmatch import-hf "$minilm" --config "$models/sdr-minilm.yaml" || return
  [ -e $sdr_corpus/manifest.json ] || build/src/docmatch prepare --config configs/prepare-wikispeedia.yaml \
    --output $sdr_corpus --tokenizer "$ckpt/sdr-minilm-import" --max-document-tokens 1024 "${quiet[@]}"
}
needs() {  # row path earlier-row: stop unless the earlier row has written path
  [ -e "$2" ] || { echo "results: $1 reads $2: run the $3 row first" >&2; exit 2; }
}
contrastive() {  # row init-folder [finetune flags...]: match-bert-minilm-contrastive.yaml from the folder, then eval
  local row=$1 init=$2
  shift 2
  "${docmatch[@]}" finetune --config "$models/match-bert-minilm-contrastive.yaml" --corpus $wp_corpus --init "$init" \
    --run "$ckpt/$row-finetune" "$@" --fresh "${quiet[@]}" &&
  evaluate "$row" "$ckpt/$row-finetune/best" $wp_corpus
}
from_minilm() {  # row [import row]: import (default the row's own config), fine-tune with configs/wikispeedia/<row>.yaml
  local imported=${2:-$1}
  import_minilm "$imported"
  "${docmatch[@]}" finetune --config "$models/$1.yaml" --corpus $wp_corpus --init "$ckpt/$imported-import" --fresh \
    "${quiet[@]}"
  evaluate "$1" "$ckpt/$1-finetune/best" $wp_corpus
}

row() {  # a row that ends in "|| exit 1; return" is done there (a failed step stops the script, not only the
  # chain: set -e does not look inside && lists); the others fall through to fine-tuning's evaluation below
  case "$1" in
    smith-np)    finetune "$1" --model-config $models/smith.yaml ;;
    smith-wp)    pretrain "$1" wp smith 3000 && finetune "$1" --init "$ckpt/$1-pretrain/latest" ;;
    smith-wp+sp) pretrain "$1" wp+sp smith 3000 && finetune "$1" --init "$ckpt/$1-pretrain/latest" ;;
    docsplit)    pretrain "$1" docsplit smith 3000 && finetune "$1" --init "$ckpt/$1-pretrain/latest" ;;
    smith-wp-encoder | smith-wp+sp-encoder | docsplit-encoder)  # a pre-trained row's encoder before fine-tuning
                 needs "$1" "$ckpt/${1%-encoder}-pretrain/latest" "${1%-encoder}"
                 evaluate "$1" "$ckpt/${1%-encoder}-pretrain/latest" || exit 1; return ;;
    smith-random)  # the floor for the encoders above: smith.yaml's random weights (one step at lr 1e-12)
                 "${docmatch[@]}" pretrain --corpus $corpus --model-config $models/smith.yaml --objective wp \
                   --run "$ckpt/$1" --steps 1 --lr 1e-12 --warmup-steps 0 --batch-size 8 --seed 1 --fresh "${quiet[@]}" &&
                 evaluate "$1" "$ckpt/$1/latest" || exit 1; return ;;
    match-bert)  finetune "$1" --model-config $models/match-bert.yaml ;;
    smash)       finetune "$1" --model-config $models/smash.yaml ;;
    han)         finetune "$1" --model-config $models/han.yaml ;;
    sdr)         pretrain "$1" sdr sdr && evaluate "$1" "$ckpt/$1-pretrain/latest" || exit 1; return ;;
    sdr-raw)     # the same model and vectors, scored without the paper's z-score (the authors' public code)
                 evaluate "$1" "$ckpt/sdr-pretrain/latest" $corpus --embeddings "$out/sdr/embeddings.h5" \
                   --no-sdr-normalize || exit 1; return ;;
    smith-short | match-bert-minilm) from_minilm "$1" || exit 1; return ;;
    match-bert-minilm-contrastive) from_minilm "$1" match-bert-minilm || exit 1; return ;;
    match-bert-minilm-contrastive-learned-temperature | match-bert-minilm-contrastive-temperature-* | \
      match-bert-minilm-contrastive-lr-*)
                 # the contrastive row with its temperature learned (from 0.05), or with the temperature or
                 # peak learning rate fixed at the row name's value
                 local changed=(--learn-temperature)
                 case "$1" in
                   *-temperature-*) changed=(--temperature "${1#*-temperature-}") ;;
                   *-lr-*) changed=(--lr "${1#*-lr-}") ;;  # 5e-5 has a dash of its own
                 esac
                 import_minilm match-bert-minilm &&
                 contrastive "$1" "$ckpt/match-bert-minilm-import" "${changed[@]}" || exit 1; return ;;
    sdr-minilm-cosine | sdr-minilm-zeroshot-cosine)  # the same model's document vectors (its sentence vectors
                 # averaged), ranked by plain cosine instead of the hierarchical score
                 needs "$1" "$out/${1%-cosine}/embeddings.h5" "${1%-cosine}"
                 evaluate "$1" "" $sdr_corpus --embeddings "$out/${1%-cosine}/embeddings.h5" || exit 1; return ;;
    sdr-minilm-zeroshot)  # SDR's score over MiniLM's sentence vectors, no training
                 sdr_minilm && evaluate "$1" "$ckpt/sdr-minilm-import" $sdr_corpus || exit 1; return ;;
    sdr-minilm)  sdr_minilm &&
                 "${docmatch[@]}" pretrain --config "$models/sdr-minilm.yaml" --corpus $sdr_corpus \
                   --init "$ckpt/sdr-minilm-import" --fresh "${quiet[@]}" &&
                 evaluate "$1" "$ckpt/sdr-minilm-pretrain/latest" $sdr_corpus || exit 1; return ;;
    match-bert-minilm-docsplit-nolabels) minilm_docsplit &&
                 evaluate "$1" "$ckpt/match-bert-minilm-docsplit-pretrain/latest" $wp_corpus || exit 1; return ;;
    match-bert-minilm-docsplit-contrastive) minilm_docsplit &&
                 contrastive "$1" "$ckpt/match-bert-minilm-docsplit-pretrain/latest" || exit 1; return ;;
    docsplit-nolabels-batch-*)  # the global-batch curve: 10 DocSplit steps from MiniLM at batch N, by
                 # gradient caching in chunks of 16 documents (the size of one plain step of the row above)
                 import_minilm match-bert-minilm &&
                 "${docmatch[@]}" pretrain --config "$models/match-bert-minilm-docsplit.yaml" --corpus $wp_corpus \
                   --init "$ckpt/match-bert-minilm-import" --run "$ckpt/$1-pretrain" --batch-size "${1##*-}" \
                   --grad-cache 16 --steps 10 --warmup-steps 1 --decay-steps 10 --log-every 1 --fresh "${quiet[@]}" &&
                 evaluate "$1" "$ckpt/$1-pretrain/latest" $wp_corpus || exit 1; return ;;
    match-bert-minilm-contrastive-hybrid | match-bert-minilm-docsplit-nolabels-hybrid | match-bert-minilm-zeroshot-hybrid)
                 hybrid "$1" "${1%-hybrid}" || exit 1; return ;;
    tfidf-wordpiece)  # docmatch's own TF-IDF over the WordPiece corpus alone (eval --lexical-weight 1)
                 evaluate "$1" "$ckpt/match-bert-minilm-import" $wp_corpus \
                   --embeddings "$out/match-bert-minilm-zeroshot/embeddings.h5" --lexical-weight 1 || exit 1; return ;;
    match-bert-minilm-zeroshot)  # the import itself, no fine-tuning
                 import_minilm match-bert-minilm &&
                 evaluate "$1" "$ckpt/match-bert-minilm-import" $wp_corpus || exit 1; return ;;
    st-minilm)   "$python" scripts/baselines/st-embed.py --model "$minilm" --corpus $corpus \
                   --articles $data/articles.jsonl --max-windows 4 --output "$out/$1/vectors.h5" &&
                 evaluate "$1" "" $corpus --embeddings "$out/$1/vectors.h5" || exit 1; return ;;
    tfidf)       "$python" scripts/baselines/tfidf-embed.py --corpus $corpus --articles $data/articles.jsonl \
                   --output "$out/$1/vectors.h5" &&
                 evaluate "$1" "" $corpus --embeddings "$out/$1/vectors.h5" || exit 1; return ;;
    *) echo "results: unknown row '$1' (smith-np smith-wp smith-wp+sp docsplit smith-random smith-wp-encoder" \
            "smith-wp+sp-encoder docsplit-encoder match-bert smash han sdr sdr-raw" \
            "smith-short match-bert-minilm match-bert-minilm-zeroshot match-bert-minilm-contrastive" \
            "match-bert-minilm-contrastive-learned-temperature match-bert-minilm-contrastive-temperature-<T>" \
            "match-bert-minilm-contrastive-lr-<LR>" \
            "sdr-minilm sdr-minilm-zeroshot sdr-minilm-cosine sdr-minilm-zeroshot-cosine" \
            "match-bert-minilm-docsplit-nolabels match-bert-minilm-docsplit-contrastive" \
            "match-bert-minilm-contrastive-hybrid match-bert-minilm-docsplit-nolabels-hybrid" \
            "match-bert-minilm-zeroshot-hybrid tfidf-wordpiece docsplit-nolabels-batch-<N>" \
            "st-minilm tfidf)" >&2
       exit 2 ;;
  esac
  evaluate "$1" "$ckpt/$1-finetune/best"
}

rows=("$@")
[ ${#rows[@]} -gt 0 ] || rows=(smith-np smith-wp smith-wp+sp docsplit smith-random smith-wp-encoder
                               smith-wp+sp-encoder docsplit-encoder match-bert smash han sdr smith-short
                               match-bert-minilm match-bert-minilm-zeroshot match-bert-minilm-contrastive
                               match-bert-minilm-docsplit-nolabels match-bert-minilm-docsplit-contrastive
                               match-bert-minilm-contrastive-hybrid match-bert-minilm-docsplit-nolabels-hybrid
                               match-bert-minilm-zeroshot-hybrid match-bert-minilm-contrastive-learned-temperature
                               sdr-minilm sdr-minilm-zeroshot sdr-minilm-cosine sdr-minilm-zeroshot-cosine
                               tfidf-wordpiece st-minilm tfidf)
for r in "${rows[@]}"; do
  if [ -s "$out/$r/metrics.json" ]; then
    echo "[results] $r: $out/$r/metrics.json exists, skipped"
    continue
  fi
  start=$SECONDS
  echo "[results] $r"
  row "$r"
  echo "[results] $r done in $((SECONDS - start)) s"
done
python3 scripts/results-table.py "$out"
