#!/usr/bin/env bash
# Command (1) of the README: sets everything up and runs the main job on the
# default real corpus, Debian's manual pages, which this script installs and
# renders itself. Today the main job is `prepare` (pages -> sentences ->
# tokens -> HDF5 shards), a summary of the corpus, and a tiny SMITH-WP+SP
# pre-training run with checkpoints (finetune and eval join as they land).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
if [ ! -s data/manpages/articles.jsonl ]; then
  echo "[quickstart] rendering Debian's manual pages into data/manpages/"
  python3 scripts/make-manpages.py --output data/manpages
fi
build/src/docmatch prepare --config configs/prepare-manpages.yaml --overwrite
build/src/docmatch inspect corpora/manpages
echo "[quickstart] one document decoded back from the shards:"
build/src/docmatch inspect corpora/manpages --doc printf.3 | sed -n 1,24p
echo "[quickstart] SMITH-WP+SP pre-training, tiny, on the manpages corpus:"
build/src/docmatch pretrain --config configs/pretrain-smith-tiny.yaml --fresh
tail -n 3 checkpoints/smith-tiny-manpages/metrics.jsonl
