#!/usr/bin/env python3
"""Pair classification of several embeddings files on the same labelled
pairs, with paired bootstrap intervals: each file's cosine of a pair's two
documents, the threshold chosen on --valid as `docmatch eval` chooses it (a
midpoint between neighbouring distinct scores, or below or above them all,
maximising accuracy; ties to the lowest), its accuracy on --test, and for
every two files the difference of their accuracies with a 95% interval
from resampling the test pairs (10,000 resamples, seed 0). Pairs sharing a
document are not independent, so the intervals are narrower than they
should be. One JSON object a line.

usage: compare-pairs.py --valid pairs.valid.jsonl --test pairs.test.jsonl NAME=embeddings.h5 ...
"""
import argparse
import json

import h5py
import numpy as np


def read_pairs(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    return [(r["source"], r["target"]) for r in rows], np.array([int(r["label"]) for r in rows])


def cosines(path, pairs):
    with h5py.File(path, "r") as f:
        ids = {(i.decode() if isinstance(i, bytes) else i): n for n, i in enumerate(f["document_ids"][:])}
        vectors = f["vectors"][:].astype(np.float64)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    missing = [d for pair in pairs for d in pair if d not in ids]
    if missing:
        raise SystemExit(f"[compare-pairs] {path} has no vector for '{missing[0]}'")
    return np.array([vectors[ids[a]] @ vectors[ids[b]] for a, b in pairs])


def choose_threshold(scores, labels):
    distinct = np.unique(scores)
    candidates = np.concatenate([[distinct[0] - 1], (distinct[1:] + distinct[:-1]) / 2, [distinct[-1] + 1]])
    accuracy = [((scores >= t) == labels).mean() for t in candidates]
    return float(candidates[int(np.argmax(accuracy))])  # the first, lowest, of the best


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--valid", required=True)
    parser.add_argument("--test", required=True)
    parser.add_argument("rows", nargs="+", help="NAME=embeddings.h5")
    args = parser.parse_args()
    valid, valid_labels = read_pairs(args.valid)
    test, test_labels = read_pairs(args.test)
    correct = {}
    for row in args.rows:
        name, path = row.split("=", 1)
        threshold = choose_threshold(cosines(path, valid), valid_labels)
        correct[name] = ((cosines(path, test) >= threshold) == test_labels).astype(float)
        print(json.dumps({"row": name, "pairs": len(test), "test_accuracy": round(correct[name].mean(), 4),
                          "threshold": round(threshold, 6)}))
    resamples = np.random.default_rng(0).integers(0, len(test), size=(10000, len(test)))
    names = list(correct)
    for i, first in enumerate(names):
        for second in names[i + 1:]:
            difference = correct[first] - correct[second]
            boots = difference[resamples].mean(1)
            print(json.dumps({"difference": f"{first} - {second}", "accuracy": round(difference.mean(), 4),
                              "ci95": [round(np.percentile(boots, 2.5), 4), round(np.percentile(boots, 97.5), 4)]}))


if __name__ == "__main__":
    main()
