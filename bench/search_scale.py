#!/usr/bin/env python3
"""How exact `docmatch search` scales with the number of vectors: writes
synthetic embeddings files (random unit vectors, float32) of N documents,
then times `docmatch search` for 1 query and for a batch of queries given
as document ids, whole process. Prints one JSON line per (N, queries).

usage: search_scale.py DOCMATCH SCRATCH [--sizes 100000 700000] [--dimension 384] [--queries 1 64]
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("docmatch")
    parser.add_argument("scratch")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100000, 700000])
    parser.add_argument("--dimension", type=int, default=384)
    parser.add_argument("--queries", type=int, nargs="+", default=[1, 64])
    args = parser.parse_args()
    os.makedirs(args.scratch, exist_ok=True)
    rng = np.random.default_rng(1)
    for n in args.sizes:
        path = os.path.join(args.scratch, f"vectors-{n}.h5")
        if not os.path.exists(path):
            vectors = rng.standard_normal((n, args.dimension), dtype=np.float32)
            write_embeddings(path, [f"doc-{i}" for i in range(n)], vectors, "synthetic", "none")
        for q in args.queries:
            queries = os.path.join(args.scratch, f"queries-{q}.jsonl")
            with open(queries, "w") as f:
                for i in random.Random(q).sample(range(n), q):
                    f.write(json.dumps({"id": f"doc-{i}"}) + "\n")
            runs = []
            for _ in range(3):
                start = time.time()
                subprocess.run([args.docmatch, "search", "--embeddings", path, "--queries", queries, "--format",
                                "jsonl"], check=True, stdout=subprocess.DEVNULL)
                runs.append(time.time() - start)
            print(json.dumps({"documents": n, "dimension": args.dimension, "queries": q,
                              "seconds_median_of_3": round(sorted(runs)[1], 3),
                              "queries_per_second": round(q / sorted(runs)[1], 2),
                              "file_mb": round(os.path.getsize(path) / 2**20)}), flush=True)


if __name__ == "__main__":
    main()
