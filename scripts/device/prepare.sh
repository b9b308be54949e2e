#!/usr/bin/env bash
# Run HERE (a machine with Debian 12's registry and a CPU build), before the
# first device call: fills .device/ (ignored by git) with what the GPU machine
# lacks, within the 64 MiB a call carries:
#   .device/debs/     Debian packages for the build (scripts/device/fetch-debs.py)
#   .device/corpus/   1,500 Wikispeedia articles prepared with the corpus's
#                     tokenizer, for the GPU training runs
# Then: device run with carry [".device"] and command
#   bash scripts/device/gpu-checks.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 scripts/device/fetch-debs.py --output .device/debs
if [ ! -f .device/corpus/manifest.json ]; then
  [ -s data/wikispeedia/articles.jsonl ] && [ -f corpora/wikispeedia/tokenizer.model ] || {
    echo "[device] needs data/wikispeedia and corpora/wikispeedia (README, Corpora)" >&2; exit 1; }
  head -n 1500 data/wikispeedia/articles.jsonl > /tmp/docmatch-device-articles.jsonl
  build/src/docmatch prepare --input /tmp/docmatch-device-articles.jsonl --output .device/corpus \
    --tokenizer corpora/wikispeedia/tokenizer.model --max-document-tokens 65536 --no-progress
fi
du -sh .device/debs .device/corpus
