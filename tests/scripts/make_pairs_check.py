#!/usr/bin/env python3
"""scripts/make-pairs.py's split by source, and its cross-validation folds
(--test-from): which source lands in which split is worked out by hand from
each id's bucket, the first 8 hex digits of SHA-1(id) over 2^32:

  i 0.016  l 0.030  k 0.078  h 0.156  d 0.235  f 0.289
  g 0.332  e 0.347  j 0.360  c 0.518  a 0.527  b 0.913

With --seed 1 every one of the 12 ids is the source of some pair, so each
fold's sources are compared with the hand-worked sets for equality. The
boundaries are checked on buckets written by hand (split_of_prefix): the
last bucket 0xFFFFFFFF, and five folds of 0.2 given as a user types them,
whose float sums (0.4 + 0.2 = 0.6000000000000001) must still share each
boundary bucket with the next fold.

usage: make_pairs_check.py SCRATCH_DIR
"""
import importlib.util
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
    return subprocess.run([sys.executable, SCRIPT, "--seed", "1", *args], capture_output=True, text=True,
                          check=check)


def boundary_failures():
    spec = importlib.util.spec_from_file_location("make_pairs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    split = module.split_of_prefix
    failures = []
    last = 0xFFFFFFFF
    for args, expected in (((last, 0.1, 0.3, 0.0), "train"), ((last, 0.1, 0.4, 0.6), "test"),
                           ((0, 0.1, 0.3, 0.0), "test"), ((0, 0.1, 0.4, 0.6), "valid"),
                           ((0, 0.0, 1.0, 0.0), "test")):
        if split(*args) != expected:
            failures.append(f"split_of_prefix{args} = {split(*args)!r}, expected {expected!r}")
    # Five folds of 0.2: 0.2 * 2^32 = 858993459.2, so the boundaries are the
    # buckets 858993459, 1717986918, 2576980378 (0.6 * 2^32 = ...377.6) and
    # 3435973837 (...836.8); each bucket next to one must be test in one fold.
    starts = ["0", "0.2", "0.4", "0.6", "0.8"]
    for boundary in (0, 858993459, 1717986918, 2576980378, 3435973837):
        for prefix in (boundary - 1, boundary, boundary + 1):
            prefix %= 1 << 32
            tested = [s for s in starts if split(prefix, 0.0, 0.2, float(s)) == "test"]
            if len(tested) != 1:
                failures.append(f"bucket {prefix} is test in the folds starting at {tested}, not in exactly one")
    return failures


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

    failures = boundary_failures()
    every_fold = []
    tested = []
    for name, (_, _, test_sources, valid_sources) in FOLDS.items():
        split = {s: read(os.path.join(outputs[name], f"pairs.{s}.jsonl")) for s in ("train", "valid", "test")}
        expected = {"test": test_sources, "valid": valid_sources,
                    "train": set(IDS) - test_sources - valid_sources}
        for s, pairs in split.items():
            found = {p["source"] for p in pairs}
            if found != expected[s]:
                failures.append(f"{name}: sources {sorted(found)} in {s}, expected {sorted(expected[s])}")
        every_fold.append(sorted(json.dumps(p, sort_keys=True) for s in split.values() for p in s))
        queries = [r["query"] for r in read(os.path.join(outputs[name], "relevance.test.jsonl"))]
        positives = {p["source"] for p in split["test"] if p["label"] == 1}
        if set(queries) != positives:
            failures.append(f"{name}: relevance.test queries {sorted(queries)} != test sources {sorted(positives)}")
        tested += queries
    if len(set(map(tuple, every_fold))) != 1 or len(every_fold[0]) != 48:
        failures.append("the folds do not hold the same 24 positive and 24 negative pairs")
    if sorted(tested) != IDS:
        failures.append(f"held-out queries over the folds {sorted(tested)} are not each of the 12 ids once")

    refused = [
        (["--test-from", "1.0"], "--test-from 1.0 is outside [0, 1)"),
        (["--test-from", "-0.1"], "--test-from -0.1 is outside [0, 1)"),
        (["--test-from", "nan"], "--test-from nan is outside [0, 1)"),
        (["--valid", "0.7", "--test", "0.4"], "must be at least 0 and sum to at most 1"),
        (["--valid", "-0.1"], "must be at least 0 and sum to at most 1"),
        (["--test", "nan"], "must be at least 0 and sum to at most 1"),
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
    print(f"make-pairs: 3 folds, {len(tested)} held-out queries, each id once; boundaries shared; refusals named")


if __name__ == "__main__":
    main()
