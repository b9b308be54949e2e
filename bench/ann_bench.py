#!/usr/bin/env python3
"""Exact `docmatch search` against `search --ann` (HNSW, `docmatch index`) on
synthetic 384-d embeddings files: clustered vectors (clusters of about 100
documents, within-cluster cosine near 0.8: neighbourhoods as real document
vectors have) and, with --uniform, independent random vectors (no structure:
the hard case for any graph index).

For each size: the index build (whole `docmatch index` process), then the
same Q document-id queries searched exactly and with --ann at each --ef,
whole process, median of 3; recall@10 is the share of exact's top 10 (query
itself left out) that --ann returns. Prints one JSON line per row.

usage: ann_bench.py DOCMATCH SCRATCH [--sizes 100000 700000] [--queries 1024] [--ef 32 128 512] [--uniform]
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "baselines"))
from docmatch_vectors import write_embeddings  # noqa: E402


def vectors(n, d, uniform, rng):
    if uniform:
        return rng.standard_normal((n, d), dtype=np.float32)
    centers = rng.standard_normal((max(1, n // 100), d), dtype=np.float32)
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    noise = rng.standard_normal((n, d), dtype=np.float32)
    noise *= 0.5 / np.sqrt(d)  # |noise| ~ 0.5: cosine to the center ~ 0.9, between members ~ 0.8
    return centers[rng.integers(0, len(centers), n)] + noise


def search(docmatch, path, queries, extra):
    runs, out = [], None
    for _ in range(3):
        start = time.time()
        proc = subprocess.run([docmatch, "search", "--embeddings", path, "--queries", queries, "--format", "jsonl",
                               "--exclude-self", "--top", "10", *extra], check=True, capture_output=True, text=True)
        runs.append(time.time() - start)
        out = [[h["id"] for h in json.loads(line)["hits"]] for line in proc.stdout.splitlines()]
    return sorted(runs)[1], out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("docmatch")
    parser.add_argument("scratch")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100000, 700000])
    parser.add_argument("--dimension", type=int, default=384)
    parser.add_argument("--queries", type=int, default=1024)
    parser.add_argument("--ef", type=int, nargs="+", default=[32, 128, 512])
    parser.add_argument("--uniform", action="store_true")
    args = parser.parse_args()
    os.makedirs(args.scratch, exist_ok=True)
    rng = np.random.default_rng(3)
    kind = "uniform" if args.uniform else "clustered"
    for n in args.sizes:
        path = os.path.join(args.scratch, f"{kind}-{n}.h5")
        if not os.path.exists(path):
            write_embeddings(path, [f"doc-{i}" for i in range(n)], vectors(n, args.dimension, args.uniform, rng),
                             "synthetic", "none")
        start = time.time()
        subprocess.run([args.docmatch, "index", "--embeddings", path, "--overwrite", "--no-progress"], check=True,
                       stdout=subprocess.DEVNULL)
        build = time.time() - start
        queries = os.path.join(args.scratch, f"queries-{n}.jsonl")
        with open(queries, "w") as f:
            for i in random.Random(n).sample(range(n), args.queries):
                f.write(json.dumps({"id": f"doc-{i}"}) + "\n")
        exact_s, exact = search(args.docmatch, path, queries, [])
        common = {"vectors": kind, "documents": n, "dimension": args.dimension, "queries": args.queries,
                  "file_mb": round(os.path.getsize(path) / 2**20), "index_mb": round(os.path.getsize(path + ".hnsw") / 2**20),
                  "index_build_s": round(build, 1)}
        print(json.dumps({**common, "search": "exact", "seconds": round(exact_s, 2),
                          "queries_per_s": round(args.queries / exact_s, 1), "recall_at_10": 1.0}), flush=True)
        for ef in args.ef:
            ann_s, ann = search(args.docmatch, path, queries, ["--ann", "--ef", str(ef)])
            recall = np.mean([len(set(a) & set(e)) / len(e) for a, e in zip(ann, exact)])
            print(json.dumps({**common, "search": f"ann ef {ef}", "seconds": round(ann_s, 2),
                              "queries_per_s": round(args.queries / ann_s, 1), "recall_at_10": round(float(recall), 4),
                              "speedup_vs_exact": round(exact_s / ann_s, 2)}), flush=True)


if __name__ == "__main__":
    main()
