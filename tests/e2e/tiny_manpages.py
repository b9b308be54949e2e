#!/usr/bin/env python3
"""Fixture for the end-to-end tests: a tiny real corpus.

Renders Debian's manual pages (scripts/make-manpages.py), keeps the 240 pages
with the most SEE ALSO links and the links among them, makes labelled pairs
(scripts/make-pairs.py) and prepares the corpus with a small tokenizer, and
the next 40 pages with the same tokenizer as a validation corpus.

usage: tiny_manpages.py DOCMATCH SCRATCH
Writes SCRATCH/raw/, SCRATCH/pairs.{train,valid,test}.jsonl,
SCRATCH/related.jsonl, SCRATCH/corpus/ and SCRATCH/valid-corpus/.
"""
import collections
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    docmatch, scratch = sys.argv[1], sys.argv[2]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    raw = os.path.join(scratch, "raw")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts/make-manpages.py"), "--output", raw], check=True)
    links = [json.loads(l) for l in open(os.path.join(raw, "related.jsonl"))]
    degree = collections.Counter()
    for l in links:
        degree[l["source"]] += 1
        degree[l["target"]] += 1
    ranked = [doc for doc, _ in sorted(degree.items(), key=lambda kv: (-kv[1], kv[0]))]
    keep, held_out = set(ranked[:240]), set(ranked[240:280])
    with open(os.path.join(scratch, "articles.jsonl"), "w") as out, \
            open(os.path.join(scratch, "held-out.jsonl"), "w") as valid:
        for line in open(os.path.join(raw, "articles.jsonl")):
            doc = json.loads(line)["id"]
            if doc in keep:
                out.write(line)
            elif doc in held_out:
                valid.write(line)
    with open(os.path.join(scratch, "related.jsonl"), "w") as out:
        for l in links:
            if l["source"] in keep and l["target"] in keep:
                out.write(json.dumps(l) + "\n")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts/make-pairs.py"), "--articles",
                    os.path.join(scratch, "articles.jsonl"), "--related", os.path.join(scratch, "related.jsonl"),
                    "--output", scratch, "--valid", "0.2", "--test", "0.2"], check=True)
    subprocess.run([docmatch, "prepare", "--input", os.path.join(scratch, "articles.jsonl"), "--output",
                    os.path.join(scratch, "corpus"), "--vocab-size", "1000", "--documents-per-shard", "100",
                    "--no-progress"], check=True)
    # 40 other pages, with the corpus's tokenizer: pre-training's validation set.
    subprocess.run([docmatch, "prepare", "--input", os.path.join(scratch, "held-out.jsonl"), "--output",
                    os.path.join(scratch, "valid-corpus"), "--tokenizer", os.path.join(scratch, "corpus",
                    "tokenizer.model"), "--no-progress"], check=True)


if __name__ == "__main__":
    main()
