#!/usr/bin/env bash
# Command (1) of the README: sets everything up and runs the main job on the
# default real corpus, Debian's manual pages, which this script installs and
# renders itself. Today the main job is `prepare` (pages -> sentences ->
# tokens -> HDF5 shards) followed by a summary of the corpus.
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
