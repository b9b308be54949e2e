#!/usr/bin/env python3
"""Run THERE (python3 with numpy and safetensors) by gpu-checks.sh's curve
stage (or here, to check it): puts scripts/device/prepare-curve.py's two
halves back together as a model folder, the word embedding table full size
(rows the corpus never uses are zeros) and checksums.json updated for it;
unpacks the corpus and the relevance lists beside.

usage: restore-curve.py STASH ROWS OUTPUT
  STASH   .device/curve1's files (call 1 copied them to /tmp/curve)
  ROWS    .device/curve2 (the rest of the embedding rows)
  OUTPUT  the model folder to write; STASH/corpus and STASH/relevance.jsonl appear too
"""
import json
import lzma
import os
import shutil
import sys
import tarfile
import zlib

import numpy as np
from safetensors.numpy import load_file, save_file


def crc32(path):
    value = 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            value = zlib.crc32(block, value)
    return f"{value:08x}"


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    stash, rows_dir, output = sys.argv[1:4]
    weights = load_file(os.path.join(stash, "weights.safetensors"))
    with open(os.path.join(stash, "weights.safetensors"), "rb") as f:
        metadata = json.loads(f.read(int.from_bytes(f.read(8), "little"))).get("__metadata__")
    table, count = None, 0
    for folder in (stash, rows_dir):  # the rows that call 1 carried, then call 2's
        path = os.path.join(folder, "rows.safetensors")
        rows = load_file(path)
        with open(path, "rb") as f:
            about = json.loads(f.read(int.from_bytes(f.read(8), "little")))["__metadata__"]
        if table is None:
            shape = tuple(int(n) for n in about["shape"].split(","))
            table = np.zeros(shape, dtype=rows["rows"].dtype)
        table[rows["ids"]] = rows["rows"]
        count += len(rows["ids"])
    weights[about["name"]] = table
    os.makedirs(output, exist_ok=True)
    save_file(weights, os.path.join(output, "model.safetensors"), metadata=metadata)
    for name in ("config.json", "import.json", "tokenizer.wordpiece"):
        shutil.copy(os.path.join(stash, name), output)
    checksums = json.load(open(os.path.join(stash, "checksums.json")))
    for name in checksums["files"]:
        path = os.path.join(output, name)
        checksums["files"][name] = {"bytes": os.path.getsize(path), "crc32": crc32(path)}
    with open(os.path.join(output, "checksums.json"), "w") as f:
        json.dump(checksums, f, indent=2)
    if not os.path.isdir(os.path.join(stash, "corpus")):
        with tarfile.open(os.path.join(stash, "corpus.tar.xz")) as tar:
            tar.extractall(stash)
    if not os.path.exists(os.path.join(stash, "relevance.jsonl")):
        with lzma.open(os.path.join(stash, "relevance.jsonl.xz")) as src, \
                open(os.path.join(stash, "relevance.jsonl"), "wb") as dst:
            shutil.copyfileobj(src, dst)
    print(f"[restore-curve] {output}: {count} of {table.shape[0]} embedding rows; corpus and relevance in {stash}")


if __name__ == "__main__":
    main()
