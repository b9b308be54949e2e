#!/usr/bin/env bash
# Command (1) of the README: sets everything up and runs the main job on the
# default real corpus, Debian's manual pages, which this script installs and
# renders itself:
#   prepare  pages -> sentences -> tokens -> HDF5 shards (+ labelled pairs)
#   pretrain tiny SMITH-WP+SP, checkpoints in checkpoints/smith-tiny-manpages
#   finetune Siamese on SEE ALSO pairs, best model by validation loss
#   eval     held-out pair classification and corpus-wide ranking
# Set DOCMATCH_RANKS=2 (or more) to run the training stages under mpirun.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
if [ ! -s data/manpages/articles.jsonl ]; then
  echo "[quickstart] rendering Debian's manual pages into data/manpages/"
  python3 scripts/make-manpages.py --output data/manpages
fi
python3 scripts/make-pairs.py --articles data/manpages/articles.jsonl --related data/manpages/related.jsonl \
  --output data/manpages
build/src/docmatch prepare --config configs/prepare-manpages.yaml --overwrite
build/src/docmatch inspect corpora/manpages
echo "[quickstart] one document decoded back from the shards:"
build/src/docmatch inspect corpora/manpages --doc printf.3 | sed -n 1,24p

run=(build/src/docmatch)
if [ "${DOCMATCH_RANKS:-1}" -gt 1 ]; then
  run=(mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$DOCMATCH_RANKS" build/src/docmatch)
fi
echo "[quickstart] SMITH-WP+SP pre-training, tiny, on the manpages corpus:"
"${run[@]}" pretrain --config configs/pretrain-smith-tiny.yaml --fresh
tail -n 2 checkpoints/smith-tiny-manpages/metrics.jsonl
echo "[quickstart] fine-tuning on SEE ALSO pairs:"
"${run[@]}" finetune --config configs/finetune-smith-tiny.yaml --fresh
grep valid checkpoints/smith-tiny-manpages-finetune/metrics.jsonl | tail -n 3
echo "[quickstart] evaluation on held-out pairs and corpus-wide ranking:"
"${run[@]}" eval --config configs/eval-smith-tiny.yaml
