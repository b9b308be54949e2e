#!/usr/bin/env python3
"""Labelled matching pairs from a corpus's relation list.

Reads articles.jsonl (for the ids) and a relation list of {"source", "target"}
lines (e.g. data/manpages/related.jsonl: SEE ALSO references), and writes into
--output pairs.train.jsonl, pairs.valid.jsonl and pairs.test.jsonl with
{"source", "target", "label"}:

  * positives: every related pair, once per unordered pair;
  * negatives: one per positive, the same source with a document drawn
    uniformly among those it is not related to (either direction);
  * the split goes by source document (a stable hash of its id: the first
    32 bits of its SHA-1, a fraction of 2^32), so no source of a test pair is
    a source in training: 80 / 10 / 10 by default; test takes the buckets
    from --test-from (default 0) on, valid the next ones, wrapping at 1;
  * cross-validation: the same --seed gives the same pairs and negatives for
    any --test-from, so runs at --test 0.3 with --test-from 0, 0.3 and 0.6
    (--test 0.4 for the last, to reach 1) hold out disjoint query sets that
    together cover every source, each never a source in its own training;
  * relevance.{valid,test}.jsonl: each source of that split with the targets
    of its positive pairs ({"query", "relevant"}, what `eval --relevance`
    reads): ranking lists whose links are not training pairs.

Deterministic for a given --seed.
"""
import argparse
import hashlib
import json
import os
import random


HASH_RANGE = 1 << 32  # a document's bucket: the first 32 bits of SHA-1 of its id


def split_of_prefix(prefix, valid, test, test_from=0.0):
    """The split of a bucket in [0, 2^32). Each fraction becomes a boundary on
    the buckets, rounded once from where it lies (test_from + test, not
    test_from's boundary plus test's width), so one fold's end and the next
    fold's start are the same bucket and no bucket falls in two folds or none."""
    start = round(test_from * HASH_RANGE)
    test_end = round((test_from + test) * HASH_RANGE)
    valid_end = round((test_from + test + valid) * HASH_RANGE)
    offset = (prefix - start) % HASH_RANGE
    if offset < test_end - start:
        return "test"
    if offset < valid_end - start:
        return "valid"
    return "train"


def split_of(doc_id, valid, test, test_from=0.0):
    prefix = int(hashlib.sha1(doc_id.encode("utf-8")).hexdigest()[:8], 16)
    return split_of_prefix(prefix, valid, test, test_from)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--articles", required=True)
    parser.add_argument("--related", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--valid", type=float, default=0.1)
    parser.add_argument("--test", type=float, default=0.1)
    parser.add_argument("--test-from", type=float, default=0.0,
                        help="where the test buckets start in [0, 1): one fold of a cross-validation")
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()
    if not 0.0 <= args.test_from < 1.0:
        parser.error(f"--test-from {args.test_from} is outside [0, 1)")
    if not (args.valid >= 0 and args.test >= 0 and args.valid + args.test <= 1.0):  # NaN fails too
        parser.error(f"--valid {args.valid} and --test {args.test} must be at least 0 and sum to at most 1")

    with open(args.articles, encoding="utf-8") as f:
        ids = [json.loads(line)["id"] for line in f if line.strip()]
    known = set(ids)
    related = set()
    with open(args.related, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            record = json.loads(line)
            s, t = record["source"], record["target"]
            if s not in known or t not in known:
                raise SystemExit(f"{args.related}:{number}: unknown id {s if s not in known else t!r}")
            if s != t:
                related.add(tuple(sorted((s, t))))
    neighbours = {}
    for a, b in related:
        neighbours.setdefault(a, set()).add(b)
        neighbours.setdefault(b, set()).add(a)

    rng = random.Random(args.seed)
    splits = {"train": [], "valid": [], "test": []}
    for a, b in sorted(related):
        source, target = (a, b) if rng.random() < 0.5 else (b, a)
        split = splits[split_of(source, args.valid, args.test, args.test_from)]
        split.append({"source": source, "target": target, "label": 1})
        if len(neighbours[source]) >= len(known) - 1:
            raise SystemExit(f"{args.related}: {source!r} is related to every other document: "
                             "no negative can be drawn for it")
        while True:
            other = ids[rng.randrange(len(ids))]
            if other != source and other not in neighbours[source]:
                break
        split.append({"source": source, "target": other, "label": 0})
    os.makedirs(args.output, exist_ok=True)
    for name, pairs in splits.items():
        rng.shuffle(pairs)
        with open(os.path.join(args.output, f"pairs.{name}.jsonl"), "w", encoding="utf-8") as out:
            for p in pairs:
                out.write(json.dumps(p) + "\n")
    # Ranking lists that training never saw: each valid/test source with the
    # targets of its positive pairs in that split (every related pair is in
    # exactly one split, so none of these links is a training pair).
    for name in ("valid", "test"):
        lists = {}
        for p in splits[name]:
            if p["label"] == 1:
                lists.setdefault(p["source"], []).append(p["target"])
        with open(os.path.join(args.output, f"relevance.{name}.jsonl"), "w", encoding="utf-8") as out:
            for source in sorted(lists):
                out.write(json.dumps({"query": source, "relevant": sorted(lists[source])}) + "\n")
    print(json.dumps({name: len(pairs) for name, pairs in splits.items()}))


if __name__ == "__main__":
    main()
