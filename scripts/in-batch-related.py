#!/usr/bin/env python3
"""How many of a source's in-batch candidates are labelled related to it.

finetune --loss contrastive scores each source against every target and
hard negative of the global batch. It leaves out the pair's own target,
the other pairs of the same source, and copies of the source or target.
Any other candidate that a training pair calls related (either direction)
still counts as a negative: a false negative. This draws batches of related
pairs at random, each with one of its source's labelled negatives, and
prints the count of such candidates a source has, per batch size.

  python scripts/in-batch-related.py --pairs data/wiki-t03/pairs.train.jsonl --batch 16 64 256 1024
"""
import argparse
import collections
import json
import random
import statistics


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", required=True, help="training pairs JSONL: {source, target, label}")
    parser.add_argument("--batch", type=int, nargs="+", default=[16, 64, 256, 1024], help="global batch sizes")
    parser.add_argument("--draws", type=int, default=20, help="batches drawn per size")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    pairs = [json.loads(line) for line in open(args.pairs) if line.strip()]
    positives = [p for p in pairs if p["label"] == 1]
    negatives = collections.defaultdict(list)
    related = collections.defaultdict(set)
    for p in pairs:
        if p["label"] == 0:
            negatives[p["source"]].append(p["target"])
        else:
            related[p["source"]].add(p["target"])
            related[p["target"]].add(p["source"])
    degree = [len(v) for v in related.values()]
    print(json.dumps({"pairs": args.pairs, "related_pairs": len(positives), "articles": len(related),
                      "related_per_article_mean": round(sum(degree) / len(degree), 2),
                      "related_per_article_median": statistics.median(degree)}))
    rng = random.Random(args.seed)
    for size in args.batch:
        if size > len(positives):
            print(json.dumps({"batch": size, "skipped": f"only {len(positives)} related pairs"}))
            continue
        candidates = among_targets = among_negatives = rows = 0
        for _ in range(args.draws):
            batch = rng.sample(positives, size)
            sources = [p["source"] for p in batch]
            targets = [p["target"] for p in batch]
            hard = [rng.choice(negatives[s]) if negatives[s] else None for s in sources]
            for i in range(size):
                s, t = sources[i], targets[i]
                for j in range(size):  # the loss's own masks first
                    if j == i or sources[j] == s or targets[j] in (s, t):
                        continue
                    candidates += 1
                    among_targets += targets[j] in related[s]
                for x in hard:
                    if x is None or x in (s, t):
                        continue
                    candidates += 1
                    among_negatives += x in related[s]
                rows += 1
        print(json.dumps({"batch": size, "candidates_per_source": round(candidates / rows, 1),
                          "related_among_targets": round(among_targets / rows, 1),
                          "related_among_hard_negatives": round(among_negatives / rows, 1),
                          "share_related": round((among_targets + among_negatives) / candidates, 3)}))


if __name__ == "__main__":
    main()
