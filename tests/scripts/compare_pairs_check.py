#!/usr/bin/env python3
"""scripts/compare-pairs.py on vectors whose cosines, thresholds and
accuracies are known by hand.

usage: compare_pairs_check.py SCRATCH_DIR
"""
import json
import os
import subprocess
import sys

from vectors_file import write

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "compare-pairs.py")


def pairs(path, rows):
    with open(path, "w") as f:
        for source, target, label in rows:
            f.write(json.dumps({"source": source, "target": target, "label": label}) + "\n")


def main():
    scratch = sys.argv[1]
    os.makedirs(scratch, exist_ok=True)
    ids = ["a", "b", "c", "d"]
    # "good": cos(a,b) = 1, cos(a,c) = 0, cos(c,d) = 1, cos(b,d) = 0.
    write(os.path.join(scratch, "good.h5"), ids, [[1, 0], [2, 0], [0, 1], [0, 3]])
    # "bad": every document the same direction: every cosine 1.
    write(os.path.join(scratch, "bad.h5"), ids, [[1, 1], [1, 1], [2, 2], [3, 3]])
    valid, test = os.path.join(scratch, "valid.jsonl"), os.path.join(scratch, "test.jsonl")
    # good's validation cosines 1 (related) and 0 (not): the best threshold is
    # their midpoint, 0.5, and every pair is right. bad's are 1 and 1: one
    # distinct score, so the candidates are 0 (all related) and 2 (none), both
    # right on half; ties go to the lowest, 0.
    pairs(valid, [("a", "b", 1), ("a", "c", 0)])
    # On the test pairs good is right on all four; bad calls all related: 2 of 4.
    pairs(test, [("c", "d", 1), ("b", "d", 0), ("a", "b", 1), ("a", "c", 0)])
    out = subprocess.run([sys.executable, SCRIPT, "--valid", valid, "--test", test,
                          "good=" + os.path.join(scratch, "good.h5"), "bad=" + os.path.join(scratch, "bad.h5"),
                          "same=" + os.path.join(scratch, "good.h5")],
                         check=True, capture_output=True, text=True).stdout
    lines = [json.loads(line) for line in out.splitlines()]
    rows = {r["row"]: r for r in lines if "row" in r}
    differences = {r["difference"]: r for r in lines if "difference" in r}
    assert rows["good"]["test_accuracy"] == 1.0 and rows["good"]["threshold"] == 0.5, rows["good"]
    assert rows["bad"]["test_accuracy"] == 0.5 and rows["bad"]["threshold"] == 0.0, rows["bad"]
    good_bad = differences["good - bad"]
    assert good_bad["accuracy"] == 0.5, good_bad
    # Every resample of the four pairs holds only differences of 0 (right on
    # both) and 1: the interval lies within [0, 1] and holds 0.5.
    assert 0 <= good_bad["ci95"][0] <= 0.5 <= good_bad["ci95"][1] <= 1, good_bad
    assert differences["good - same"] == {"difference": "good - same", "accuracy": 0.0, "ci95": [0.0, 0.0]}
    missing = os.path.join(scratch, "missing.jsonl")
    pairs(missing, [("a", "zz", 1)])
    failed = subprocess.run([sys.executable, SCRIPT, "--valid", missing, "--test", test,
                             "good=" + os.path.join(scratch, "good.h5")], capture_output=True, text=True)
    assert failed.returncode != 0 and "no vector for 'zz'" in failed.stderr, failed.stderr
    print("compare-pairs.py: thresholds, accuracies and intervals as worked out by hand")


if __name__ == "__main__":
    main()
