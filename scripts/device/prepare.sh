#!/usr/bin/env bash
# Run HERE (a machine with Debian 12's registry and a CPU build), before the
# first device call: fills .device/ (ignored by git) with what the GPU machine
# lacks, within the 64 MiB a call carries (the working tree included):
#   .device/build.tar.xz    this machine's build, stripped (scripts/device/pack-build.sh):
#                           the GPU machine runs it instead of compiling for minutes
#   .device/debs/           the Debian run-time libraries it needs (fetch-debs.py --runtime)
#   .device/corpus.tar.xz   1,500 Wikispeedia articles prepared with the corpus's
#                           tokenizer (a 30 MB shard, 7 MiB compressed), which
#                           gpu-checks.sh unpacks there; data/wikispeedia and
#                           corpora/wikispeedia are made first where missing
#   scripts/device/prepare.sh --build-there   instead: no build, and every package the
#                           build needs (headers too, 49 MB), for gpu-checks.sh to compile there
# Then: device runs with carry [".device"], a few stages a call:
#   bash scripts/device/gpu-checks.sh build test train    (then: bench large)
set -euo pipefail
cd "$(dirname "$0")/../.."
limit=$((64 * 1024 * 1024))
if [ "${1:-}" = --build-there ]; then
  rm -f .device/build.tar.xz
  python3 scripts/device/fetch-debs.py --output .device/debs
else
  scripts/device/pack-build.sh
  python3 scripts/device/fetch-debs.py --output .device/debs --runtime
fi
rm -rf .device/corpus  # an earlier prepare.sh's uncompressed shard: it would not fit beside the packages
if [ ! -f .device/corpus.tar.xz ]; then
  # A fresh checkout has neither: make them as the README's Corpora section does
  # (the articles from ../shared/data, then the corpus and its tokenizer: minutes).
  if [ ! -s data/wikispeedia/articles.jsonl ]; then
    "${DOCMATCH_VENV:-$HOME/.cache/docmatch/venv}/bin/python" scripts/make-wikispeedia.py --output data/wikispeedia
  fi
  if [ ! -f corpora/wikispeedia/tokenizer.model ]; then
    build/src/docmatch prepare --config configs/prepare-wikispeedia.yaml --output corpora/wikispeedia --no-progress
  fi
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  head -n 1500 data/wikispeedia/articles.jsonl > "$work/articles.jsonl"
  build/src/docmatch prepare --input "$work/articles.jsonl" --output "$work/corpus" \
    --tokenizer corpora/wikispeedia/tokenizer.model --max-document-tokens 65536 --no-progress
  tar -C "$work/corpus" -cJf .device/corpus.tar.xz.tmp .  # the corpus's files at the archive's top
  mv .device/corpus.tar.xz.tmp .device/corpus.tar.xz
fi
# The training pairs among those articles, for gpu-checks.sh's finetune stage.
python3 - <<'PYEOF'
import json
ids = set()
with open("data/wikispeedia/articles.jsonl") as f:
    for i, line in zip(range(1500), f):
        ids.add(json.loads(line)["id"])
with open(".device/pairs.jsonl", "w") as out:
    for line in open("data/wikispeedia/pairs.train.jsonl"):
        p = json.loads(line)
        if p["source"] in ids and p["target"] in ids:
            out.write(line)
PYEOF
# What a call carries: the tracked and untracked-but-not-ignored files, and .device.
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2> /dev/null |
       awk '{ s += $1 } END { print s + 0 }')
# issue 41's curve parts travel in calls of their own (prepare-curve.py checks those).
device=$(find .device -type f -not -path '.device/curve*' -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
total=$((tree + device))
printf '[device] carried: tree %.1f MiB + .device %.1f MiB = %.1f MiB of %d MiB\n' \
  "$(awk -v b=$tree 'BEGIN { print b / 1048576 }')" "$(awk -v b=$device 'BEGIN { print b / 1048576 }')" \
  "$(awk -v b=$total 'BEGIN { print b / 1048576 }')" $((limit / 1048576))
if [ "$total" -gt "$limit" ]; then
  echo "[device] over the limit: a device call would be refused; carry less (fewer articles, fewer packages)" >&2
  exit 1
fi
