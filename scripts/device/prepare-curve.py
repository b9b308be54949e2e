#!/usr/bin/env python3
"""Run HERE (the venv's Python: h5py, numpy, safetensors) after
scripts/device/prepare.sh: packs issue 41's labelled batch curve for the GPU
machine, which has no registry and takes 64 MiB a call. The MiniLM import
alone is 90 MB, so it travels in two calls that follow each other while the
machine is warm (it stays so 30 s):

  .device/curve1/  (call 1, carry [".device/curve1"]; the command only copies
                   it to /tmp/curve): every weight but the word embeddings,
                   the import's other files, the Wikipedia corpus cut at 512
                   tokens a document (the curve's reader takes 256), the
                   link pairs (data/wiki-t03), the category relevance
                   lists, and the first of the word embedding rows below
  .device/curve2/  (call 2, carry [".device/build.tar.xz", ".device/debs",
                   ".device/curve2"], `gpu-checks.sh build curve`): the other
                   word embedding rows. Only the rows of the token ids that
                   corpus uses (and the special ids 0-103) travel;
                   scripts/device/restore-curve.py puts them back in a full
                   table there

Rows the corpus never uses are zeros there. Training never reads them, so
they get no gradient, and eval never reads them: the model computes what the
full import computes on this corpus (checked here: docs/RESULTS.md, "MRR against
the global batch", caveats).

usage: prepare-curve.py [--model runs/curve41/flat256] [--docmatch build/src/docmatch]
"""
import argparse
import glob
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

import h5py
import numpy as np
from safetensors.numpy import load_file, save_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIMIT = 64 * 1024 * 1024
EMBEDDING = "embeddings.tokens.weight"
SPECIAL = 104  # MiniLM's [PAD] 0 ... [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103


def tree_bytes():
    """What every call carries besides its carry: tracked and untracked-not-ignored files."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           check=True, capture_output=True).stdout.split(b"\0")
    return sum(os.path.getsize(os.path.join(ROOT, n.decode())) for n in names
               if n and os.path.isfile(os.path.join(ROOT, n.decode())))


def folder_bytes(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(path, "**"), recursive=True) if os.path.isfile(p))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="runs/curve41/flat256", help="the MiniLM import (import-hf output)")
    parser.add_argument("--docmatch", default="build/src/docmatch")
    parser.add_argument("--articles", default="data/wikispeedia/articles.jsonl")
    parser.add_argument("--pairs", default="data/wiki-t03", help="pairs.{train,valid,test}.jsonl")
    parser.add_argument("--relevance", default="data/wikispeedia/relevance.jsonl")
    parser.add_argument("--tokens", type=int, default=512, help="tokens kept a document")
    args = parser.parse_args()
    os.chdir(ROOT)
    for path in (args.model + "/model.safetensors", args.articles, args.relevance, args.pairs + "/pairs.train.jsonl"):
        if not os.path.exists(path):
            sys.exit(f"[prepare-curve] {path} is missing (docs/RESULTS.md, 'MRR against the global batch', makes it)")
    one, two = ".device/curve1", ".device/curve2"
    for d in (one, two):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    with tempfile.TemporaryDirectory() as work:
        corpus = os.path.join(work, "corpus")
        subprocess.run([args.docmatch, "prepare", "--input", args.articles, "--output", corpus, "--tokenizer",
                        args.model, "--max-document-tokens", str(args.tokens), "--no-progress"], check=True,
                       stdout=subprocess.DEVNULL)
        used = set(range(SPECIAL))
        for shard in sorted(glob.glob(os.path.join(corpus, "shard-*.h5"))):
            with h5py.File(shard, "r") as f:
                used.update(np.unique(f["tokens"][:]).tolist())
        with tarfile.open(os.path.join(one, "corpus.tar.xz"), "w:xz") as tar:
            tar.add(corpus, arcname="corpus")
    weights = load_file(os.path.join(args.model, "model.safetensors"))
    with open(os.path.join(args.model, "model.safetensors"), "rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    table = weights.pop(EMBEDDING)
    ids = np.array(sorted(used), dtype=np.int64)
    save_file(weights, os.path.join(one, "weights.safetensors"), metadata=header.get("__metadata__"))
    for name in ("config.json", "import.json", "tokenizer.wordpiece", "checksums.json"):
        shutil.copy(os.path.join(args.model, name), one)
    for split in ("train", "valid", "test"):
        shutil.copy(os.path.join(args.pairs, f"pairs.{split}.jsonl"), one)
    with open(args.relevance, "rb") as src, lzma.open(os.path.join(one, "relevance.jsonl.xz"), "wb") as dst:
        shutil.copyfileobj(src, dst)
    # The rows: as many as call 1 has room for (2 MiB spare), the rest in call 2.
    tree = tree_bytes()
    per_row = table.shape[1] * table.itemsize + 8
    first = int(max(0, min(len(ids), (LIMIT - 2 * 2**20 - tree - folder_bytes(one)) // per_row)))
    about = {"name": EMBEDDING, "shape": ",".join(map(str, table.shape))}
    for folder, part in ((one, ids[:first]), (two, ids[first:])):
        save_file({"ids": part, "rows": np.ascontiguousarray(table[part])}, os.path.join(folder, "rows.safetensors"),
                  metadata=about)

    calls = {"call 1": [one], "call 2": [".device/build.tar.xz", ".device/debs", two]}
    print(f"[prepare-curve] {len(ids)} of {table.shape[0]} embedding rows used; the tree carries "
          f"{tree / 2**20:.1f} MiB in every call")
    over = False
    for call, paths in calls.items():
        missing = [p for p in paths if not os.path.exists(p)]
        if missing:
            sys.exit(f"[prepare-curve] {call} needs {missing}: run scripts/device/prepare.sh first")
        total = tree + sum(folder_bytes(p) for p in paths)
        print(f"[prepare-curve] {call}: carry {json.dumps(paths)}: {total / 2**20:.1f} MiB of 64")
        over |= total > LIMIT
    if over:
        sys.exit("[prepare-curve] a call is over 64 MiB: a device call would refuse it (try --tokens 256)")


if __name__ == "__main__":
    main()
