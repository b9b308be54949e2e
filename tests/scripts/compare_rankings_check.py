#!/usr/bin/env python3
"""scripts/compare-rankings.py on vectors whose ranks are known by hand: MRR
per row, the paired difference, pessimistic ties, and the groups of queries
by length (--by-length), and the two halves of the queries (--half).

usage: compare_rankings_check.py SCRATCH_DIR
"""
import json
import os
import subprocess
import sys

import h5py
import numpy as np
from vectors_file import write

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "compare-rankings.py")


def main():
    scratch = sys.argv[1]
    os.makedirs(scratch, exist_ok=True)
    ids = ["a", "b", "c", "d"]
    # Row "good": a's nearest is b (relevant): rank 1. c's relevant d ties with
    # b at the top: pessimistic, rank 2.
    write(os.path.join(scratch, "good.h5"), ids, [[1, 0], [0.9, 0.1], [0, 1], [0.5, 0.5]])
    # Row "bad": a is closest to d, then c, b last (rank 3); c is closer to a
    # (cosine 0.981) than to its relevant d (0.956): rank 2.
    write(os.path.join(scratch, "bad.h5"), ids, [[1, 0], [-1, 0], [1, 0.2], [1, -0.1]])
    relevance = os.path.join(scratch, "relevance.jsonl")
    with open(relevance, "w") as f:
        f.write(json.dumps({"query": "a", "relevant": ["b"]}) + "\n")
        f.write(json.dumps({"query": "c", "relevant": ["d"]}) + "\n")
        f.write(json.dumps({"query": "b", "relevant": []}) + "\n")  # no relevant documents: not a query
    out = subprocess.run([sys.executable, SCRIPT, "--relevance", relevance, "--resamples", "200",
                          f"good={scratch}/good.h5", f"bad={scratch}/bad.h5"],
                         check=True, capture_output=True, text=True).stdout
    lines = [json.loads(l) for l in out.splitlines()]
    good, bad, diff = lines
    # good: a -> b rank 1; c -> d: scores of c against a, b, d are 0, 0.1/|b|, 0.5/|d|: d first.
    expected_good = (1 / 1 + 1 / 1) / 2
    cd = np.array([0.5, 0.5]) / np.linalg.norm([0.5, 0.5])
    cb = np.array([0.9, 0.1]) / np.linalg.norm([0.9, 0.1])
    assert cd @ [0, 1] > cb @ [0, 1]
    expected_bad = (1 / 3 + 1 / 2) / 2
    assert good["queries"] == 2 and bad["queries"] == 2, lines
    assert abs(good["mrr"] - round(expected_good, 4)) < 1e-9, (good, expected_good)
    assert abs(bad["mrr"] - round(expected_bad, 4)) < 1e-9, (bad, expected_bad)
    assert abs(diff["mrr"] - round(expected_good - expected_bad, 4)) < 1e-9, diff
    assert diff["difference"] == "good - bad" and diff["share_of_resamples_above_0"] > 0.5, diff
    # A tie is pessimistic: a copy of b's direction for d puts b second for a.
    write(os.path.join(scratch, "tie.h5"), ids, [[1, 0], [0.9, 0.1], [0, 1], [0.9, 0.1]])
    out = subprocess.run([sys.executable, SCRIPT, "--relevance", relevance, "--resamples", "10",
                          f"tie={scratch}/tie.h5"], check=True, capture_output=True, text=True).stdout
    tie = json.loads(out.splitlines()[0])
    # a -> b ties with d: rank 2; c -> d ties with b (both 0.1/|.|) and beats a: rank 2.
    assert abs(tie["mrr"] - 0.5) < 1e-9, tie
    # A tie between two relevant documents costs nothing (eval's EvaluateRanking
    # puts the irrelevant ones first among equals, not the relevant ones): a's
    # relevant b and d tie at the top, rank 1; c's relevant d still ties with
    # the irrelevant b, rank 2.
    both = os.path.join(scratch, "both.jsonl")
    with open(both, "w") as f:
        f.write(json.dumps({"query": "a", "relevant": ["b", "d"]}) + "\n")
        f.write(json.dumps({"query": "c", "relevant": ["d"]}) + "\n")
    out = subprocess.run([sys.executable, SCRIPT, "--relevance", both, "--resamples", "10",
                          f"tie={scratch}/tie.h5"], check=True, capture_output=True, text=True).stdout
    relevant_tie = json.loads(out.splitlines()[0])
    assert abs(relevant_tie["mrr"] - round((1 / 1 + 1 / 2) / 2, 4)) < 1e-9, relevant_tie
    # --by-length: c (1 word) is the shorter query, a (3 words) the longer; b's
    # length does not matter (no query). Each group holds one query, so its
    # MRR is that query's reciprocal rank from above.
    articles = os.path.join(scratch, "articles.jsonl")
    with open(articles, "w") as f:
        for doc_id, text in (("a", "one two three"), ("b", "x y z w v"), ("c", "single"), ("d", "p q")):
            f.write(json.dumps({"id": doc_id, "text": text}) + "\n")
    out = subprocess.run([sys.executable, SCRIPT, "--relevance", relevance, "--resamples", "50", "--by-length",
                          articles, "--groups", "2", f"good={scratch}/good.h5", f"bad={scratch}/bad.h5"],
                         check=True, capture_output=True, text=True).stdout
    grouped = [json.loads(l) for l in out.splitlines() if "group" in json.loads(l)]
    by = {(g["group"], g.get("row", g.get("difference"))): g for g in grouped}
    assert len(grouped) == 6, grouped
    assert by[("1/2", "good")]["words"] == [1, 1] and by[("2/2", "good")]["words"] == [3, 3], grouped
    assert by[("1/2", "good")]["mrr"] == 1.0 and by[("1/2", "bad")]["mrr"] == 0.5, grouped
    assert by[("2/2", "good")]["mrr"] == 1.0 and by[("2/2", "bad")]["mrr"] == round(1 / 3, 4), grouped
    assert by[("2/2", "good - bad")]["mrr"] == round(1 - 1 / 3, 4) and by[("1/2", "bad")]["queries"] == 1, grouped
    # --half: the same "bad" vectors with c renamed e. sha256("a") starts with
    # 0xca (even: half 1), sha256("e") with 0x3f (odd: half 2). Each half
    # holds one query, so its MRR is that query's reciprocal rank from above.
    write(os.path.join(scratch, "bad-e.h5"), ["a", "b", "e", "d"], [[1, 0], [-1, 0], [1, 0.2], [1, -0.1]])
    halves = os.path.join(scratch, "halves.jsonl")
    with open(halves, "w") as f:
        f.write(json.dumps({"query": "a", "relevant": ["b"]}) + "\n")
        f.write(json.dumps({"query": "e", "relevant": ["d"]}) + "\n")
    by_half = {}
    for half in ("1", "2"):
        out = subprocess.run([sys.executable, SCRIPT, "--relevance", halves, "--resamples", "10", "--half", half,
                              f"bad={scratch}/bad-e.h5"], check=True, capture_output=True, text=True).stdout
        by_half[half] = json.loads(out.splitlines()[0])
    assert by_half["1"]["queries"] == 1 and by_half["1"]["mrr"] == round(1 / 3, 4), by_half
    assert by_half["2"]["queries"] == 1 and by_half["2"]["mrr"] == 0.5, by_half
    # A half with no query is refused by name, not reported as an empty row.
    only_a = os.path.join(scratch, "only-a.jsonl")
    with open(only_a, "w") as f:
        f.write(json.dumps({"query": "a", "relevant": ["b"]}) + "\n")
    empty = subprocess.run([sys.executable, SCRIPT, "--relevance", only_a, "--half", "2", f"bad={scratch}/bad-e.h5"],
                           capture_output=True, text=True)
    assert empty.returncode != 0 and "no query with a relevant document in half 2" in empty.stderr, empty
    # A file of windows (a maxsim model's) is not ranked by its mean vectors' cosine.
    windows = os.path.join(scratch, "windows.h5")
    write(windows, ["a", "b", "e", "d"], [[1, 0], [-1, 0], [1, 0.2], [1, -0.1]])
    with h5py.File(windows, "a") as h:
        h.attrs["kind"] = "match_bert"
        h["sentence_vectors"] = np.zeros((4, 2), dtype=np.float32)
    refused = subprocess.run([sys.executable, SCRIPT, "--relevance", halves, f"maxsim={windows}"],
                             capture_output=True, text=True)
    assert refused.returncode != 0 and "scores by MaxSim" in refused.stderr, refused
    print(f"compare-rankings: good {good['mrr']}, bad {bad['mrr']}, tie {tie['mrr']}, "
          f"relevant tie {relevant_tie['mrr']} as computed by hand")


if __name__ == "__main__":
    main()
