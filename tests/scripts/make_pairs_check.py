#!/usr/bin/env python3
"""scripts/make-pairs.py's split by source, and its cross-validation folds
(--test-from): which source lands in which split is worked out by hand from
each id's bucket, the first 8 hex digits of SHA-1(id) over 0xFFFFFFFF:

  i 0.016  l 0.030  k 0.078  h 0.156  d 0.235  f 0.289
  g 0.332  e 0.347  j 0.360  c 0.518  a 0.527  b 0.913

usage: make_pairs_check.py SCRATCH_DIR
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "make-pairs.py")
IDS = list("abcdefghijkl")

# (--test-from, --test, --valid 0.1): the expected test and valid sources.
FOLDS = {
    "fold1": (0.0, 0.3, set("ilkhdf"), set("gej")),   # test [0, 0.3), valid [0.3, 0.4)
    "fold2": (0.3, 0.3, set("gejca"), set()),        # test [0.3, 0.6), valid [0.6, 0.7)
    "fold3": (0.6, 0.4, set("b"), set("ilk")),       # test [0.6, 1), valid wraps to [0, 0.1)
}


def run(*args, check=True):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, check=check)


def read(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def main():
    scratch = sys.argv[1]
    os.makedirs(scratch, exist_ok=True)
    articles = os.path.join(scratch, "articles.jsonl")
    with open(articles, "w") as f:
        for i in IDS:
            f.write(json.dumps({"id": i, "text": "x"}) + "\n")
    related = os.path.join(scratch, "related.jsonl")
    with open(related, "w") as f:  # a ring with chords: 24 pairs, 4 neighbours each, 7 non-neighbours
        for n, i in enumerate(IDS):
            for step in (1, 3):
                f.write(json.dumps({"source": i, "target": IDS[(n + step) % len(IDS)]}) + "\n")

    outputs = {}
    for name, (start, test, _, _) in FOLDS.items():
        outputs[name] = os.path.join(scratch, name)
        run("--articles", articles, "--related", related, "--output", outputs[name], "--valid", "0.1",
            "--test", str(test), "--test-from", str(start))
    default = os.path.join(scratch, "default")
    run("--articles", articles, "--related", related, "--output", default, "--valid", "0.1", "--test", "0.3")

    failures = []
    every_fold = []
    tested = []
    for name, (_, _, test_sources, valid_sources) in FOLDS.items():
        split = {s: read(os.path.join(outputs[name], f"pairs.{s}.jsonl")) for s in ("train", "valid", "test")}
        expected = {"test": test_sources, "valid": valid_sources,
                    "train": set(IDS) - test_sources - valid_sources}
        for s, pairs in split.items():
            wrong = {p["source"] for p in pairs} - expected[s]
            if wrong:
                failures.append(f"{name}: sources {sorted(wrong)} in {s}, expected only {sorted(expected[s])}")
        every_fold.append(sorted(json.dumps(p, sort_keys=True) for s in split.values() for p in s))
        queries = [r["query"] for r in read(os.path.join(outputs[name], "relevance.test.jsonl"))]
        positives = {p["source"] for p in split["test"] if p["label"] == 1}
        if set(queries) != positives:
            failures.append(f"{name}: relevance.test queries {sorted(queries)} != test sources {sorted(positives)}")
        tested += queries
    if len(set(map(tuple, every_fold))) != 1 or len(every_fold[0]) != 48:
        failures.append("the folds do not hold the same 24 positive and 24 negative pairs")
    all_sources = {p["source"] for p in map(json.loads, every_fold[0]) if p["label"] == 1}
    if len(tested) != len(set(tested)) or set(tested) != all_sources:
        failures.append(f"held-out queries over the folds {sorted(tested)} are not each source once "
                        f"({sorted(all_sources)})")
    for f in ("pairs.train", "pairs.valid", "pairs.test", "relevance.test", "relevance.valid"):
        with open(os.path.join(default, f + ".jsonl")) as a, open(os.path.join(outputs["fold1"], f + ".jsonl")) as b:
            if a.read() != b.read():
                failures.append(f"{f}: no --test-from differs from --test-from 0")

    refused = [
        (["--test-from", "1.0"], "--test-from 1.0 is outside [0, 1)"),
        (["--valid", "0.7", "--test", "0.4"], "must be at least 0 and sum to at most 1"),
    ]
    for extra, message in refused:
        r = run("--articles", articles, "--related", related, "--output", os.path.join(scratch, "bad"), *extra,
                check=False)
        if r.returncode == 0 or message not in r.stderr:
            failures.append(f"{extra}: exit {r.returncode}, stderr {r.stderr!r}, expected {message!r}")
    # A document related to every other one has no negative to draw: named, not a hang.
    star = os.path.join(scratch, "star.jsonl")
    with open(star, "w") as f:
        for i in IDS[1:]:
            f.write(json.dumps({"source": "a", "target": i}) + "\n")
    r = subprocess.run([sys.executable, SCRIPT, "--articles", articles, "--related", star, "--output",
                        os.path.join(scratch, "star")], capture_output=True, text=True, timeout=60)
    if r.returncode == 0 or "'a' is related to every other document" not in r.stderr:
        failures.append(f"a star relation: exit {r.returncode}, stderr {r.stderr!r}")

    for f in failures:
        print("FAIL:", f)
    if failures:
        sys.exit(1)
    print(f"make-pairs: 3 folds, {len(tested)} held-out queries, each source once; refusals named")


if __name__ == "__main__":
    main()
