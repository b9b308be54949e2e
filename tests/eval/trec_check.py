#!/usr/bin/env python3
"""eval's ranking metrics, run files and --lexical-weight auto, held against
trec_eval (pytrec-eval-terrier, PyPI) and numpy:

  * a small BEIR-shaped set written here (queries apart from the corpus,
    graded qrels in BEIR's tab-separated form), with vectors that carry the
    topics plus noise;
  * for the dense ranking and its hybrid with BM25 (w 0.5), every metric eval
    reports (MRR, MRR@10, nDCG@10 graded, MAP, P@1, P@10, recall@1/10/100)
    equals trec_eval's on the run.trec eval wrote, to 1e-9; the run's scores
    equal numpy's cosines (and the hybrid's, numpy's blend of the two runs'
    scores); `search --format trec` writes the hits its JSON gives;
  * --lexical-weight auto: the weights' MRRs on the half that chose equal
    numpy's from the two sides' scores, the chosen weight is their best,
    and the half reported (the queries of its run) is the other one, its
    metrics again trec_eval's.

usage: trec_check.py DOCMATCH SCRATCH
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "baselines"))
from docmatch_vectors import write_embeddings  # noqa: E402  (the format's one writer in Python)
import pytrec_eval

TOPICS, CANDIDATES, QUERIES, DIM = 8, 80, 24, 16
MEASURES = {"recip_rank", "ndcg_cut.10", "map", "P.1", "P.10", "recall.1", "recall.10", "recall.100"}
# docmatch's name for each trec_eval measure.
NAMES = {"mrr": "recip_rank", "ndcg@10": "ndcg_cut_10", "map": "map", "p@1": "P_1", "p@10": "P_10",
         "recall@1": "recall_1", "recall@10": "recall_10", "recall@100": "recall_100"}


def check(condition, message):
    if not condition:
        sys.exit("FAILED: " + message)


def run(docmatch, *args):
    result = subprocess.run([docmatch, *args], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"FAILED: docmatch {' '.join(args)}\n{result.stdout}\n{result.stderr[-3000:]}")
    return result


def read_run(path):
    """query -> {document: score} of a TREC run file, checking its six fields and ranks."""
    scores, ranks = {}, {}
    for line in open(path):
        query, q0, document, rank, score, tag = line.split()
        check(q0 == "Q0" and tag == "docmatch", f"run line {line!r}")
        scores.setdefault(query, {})[document] = float(score)
        ranks.setdefault(query, []).append(int(rank))
    for query, got in ranks.items():
        check(got == list(range(1, len(got) + 1)), f"{path}: ranks of {query} are {got[:5]}...")
    return scores


def trec_means(qrels, run, measures=MEASURES):
    per_query = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    names = next(iter(per_query.values())).keys()
    return {name: float(np.mean([values[name] for values in per_query.values()])) for name in names}


def compare(metrics, qrels, run, label):
    """Every ranking metric of metrics.json against trec_eval on the run eval wrote."""
    for query, scores in run.items():
        values = sorted(scores.values())
        check(len(set(values)) == len(values), f"{label}: tied scores in {query}'s run (trec_eval breaks ties by id)")
    ours = metrics["ranking"]
    theirs = trec_means(qrels, run)
    top10 = {q: dict(sorted(s.items(), key=lambda x: -x[1])[:10]) for q, s in run.items()}
    theirs["mrr@10"] = trec_means(qrels, top10, {"recip_rank"})["recip_rank"]
    for ours_name, their_name in NAMES.items():
        check(abs(ours[ours_name] - theirs[their_name]) < 1e-9,
              f"{label}: {ours_name} {ours[ours_name]} against trec_eval's {their_name} {theirs[their_name]}")
    check(abs(ours["mrr@10"] - theirs["mrr@10"]) < 1e-9, f"{label}: mrr@10 {ours['mrr@10']} vs {theirs['mrr@10']}")
    check(ours["queries"] == len(run), f"{label}: {ours['queries']} queries, the run has {len(run)}")
    return {name: round(ours[name], 6) for name in list(NAMES) + ["mrr@10"]}


def reciprocal_ranks(scores, relevant):
    """1 / rank of the best relevant candidate of each row, ties broken against the relevant ones."""
    out = []
    for row, rel in zip(scores, relevant):
        best = max(row[c] for c in rel)
        out.append(1.0 / (1 + sum(1 for c, s in enumerate(row) if s > best or (s == best and c not in rel))))
    return np.array(out)


def main():
    docmatch, scratch = sys.argv[1:3]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    rng = np.random.default_rng(7)
    common = [f"common{i}" for i in range(50)]
    topic_words = [[f"t{t}word{i}" for i in range(15)] for t in range(TOPICS)]

    def text(topic, length):
        return " ".join(rng.choice(topic_words[topic]) if rng.random() < 0.6 else rng.choice(common)
                        for _ in range(length)) + "."

    # BEIR's layout: corpus.jsonl (_id, title, text), queries.jsonl, qrels/test.tsv.
    doc_topic = [d % TOPICS for d in range(CANDIDATES)]
    query_topic = [q % TOPICS for q in range(QUERIES)]
    doc_ids, query_ids = [f"d{d}" for d in range(CANDIDATES)], [f"q{q}" for q in range(QUERIES)]
    with open(os.path.join(scratch, "corpus.jsonl"), "w") as f:
        for d in range(CANDIDATES):
            f.write(json.dumps({"id": doc_ids[d], "text": text(doc_topic[d], int(rng.integers(40, 160)))}) + "\n")
    with open(os.path.join(scratch, "queries.jsonl"), "w") as f:
        for q in range(QUERIES):
            f.write(json.dumps({"id": query_ids[q], "text": text(query_topic[q], int(rng.integers(6, 14)))}) + "\n")
    qrels = {}
    for q in range(QUERIES):
        same = [d for d in range(CANDIDATES) if doc_topic[d] == query_topic[q]]
        other = [d for d in range(CANDIDATES) if doc_topic[d] != query_topic[q]]
        picked = rng.permutation(same)[:6]
        grades = {doc_ids[d]: int(g) for d, g in zip(picked, [2, 2, 1, 1, 1, 0])}
        grades.update({doc_ids[d]: 0 for d in rng.permutation(other)[:3]})
        qrels[query_ids[q]] = grades
    os.makedirs(os.path.join(scratch, "qrels"))
    qrels_path = os.path.join(scratch, "qrels", "test.tsv")
    with open(qrels_path, "w") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for q, grades in qrels.items():
            for d, g in grades.items():
                f.write(f"{q}\t{d}\t{g}\n")

    corpus, queries = os.path.join(scratch, "corpus"), os.path.join(scratch, "queries")
    run(docmatch, "prepare", "--input", os.path.join(scratch, "corpus.jsonl"), "--output", corpus, "--vocab-size",
        "200", "--no-progress")
    run(docmatch, "prepare", "--input", os.path.join(scratch, "queries.jsonl"), "--output", queries, "--tokenizer",
        os.path.join(corpus, "tokenizer.model"), "--no-progress")
    centres = rng.standard_normal((TOPICS, DIM))
    doc_vectors = centres[doc_topic] + 1.5 * rng.standard_normal((CANDIDATES, DIM))
    query_vectors = centres[query_topic] + 1.5 * rng.standard_normal((QUERIES, DIM))
    write_embeddings(os.path.join(scratch, "docs.h5"), doc_ids, doc_vectors, "match_bert", "elsewhere")
    write_embeddings(os.path.join(scratch, "queries.h5"), query_ids, query_vectors, "match_bert", "elsewhere")
    base = ["eval", "--embeddings", os.path.join(scratch, "docs.h5"), "--corpus", corpus, "--queries", queries,
            "--query-embeddings", os.path.join(scratch, "queries.h5"), "--relevance", qrels_path,
            "--write-rankings", str(CANDIDATES), "--no-progress"]

    def evaluate(name, *extra):
        out = os.path.join(scratch, name)
        printed = run(docmatch, *base, "--output", out, *extra).stdout
        return json.load(open(os.path.join(out, "metrics.json"))), read_run(os.path.join(out, "run.trec")), printed

    figures = {}
    # Dense: the run's scores are the cosines, and every metric trec_eval's.
    dense_metrics, dense_run, printed = evaluate("dense")
    unit = lambda m: m / np.linalg.norm(m, axis=1, keepdims=True)  # noqa: E731
    cosines = unit(query_vectors.astype(np.float32).astype(np.float64)) @ \
        unit(doc_vectors.astype(np.float32).astype(np.float64)).T
    worst = max(abs(dense_run[query_ids[q]][doc_ids[d]] - cosines[q, d])
                for q in range(QUERIES) for d in range(CANDIDATES))
    check(worst < 1e-12 and all(len(dense_run[q]) == CANDIDATES for q in query_ids),
          f"dense run: {worst} from numpy's cosines, or not every candidate")
    figures["dense"] = compare(dense_metrics, qrels, dense_run, "dense")
    check("nDCG@10" in printed and "R@10" in printed and "HR@" not in printed, f"eval's table:\n{printed}")

    # BM25 alone (its scores, min-max normalised per query) and the hybrid.
    _, lexical_run, _ = evaluate("bm25", "--lexical", "bm25", "--lexical-weight", "1")
    hybrid_metrics, hybrid_run, _ = evaluate("hybrid", "--lexical", "bm25", "--lexical-weight", "0.5")
    dense = np.array([[dense_run[q][d] for d in doc_ids] for q in query_ids])
    lexical = np.array([[lexical_run[q][d] for d in doc_ids] for q in query_ids])
    check(lexical.min() == 0 and np.allclose(lexical.max(axis=1), 1), "BM25's side is min-max normalised per query")
    blended = 0.5 * dense + 0.5 * lexical
    worst = max(abs(hybrid_run[query_ids[q]][doc_ids[d]] - blended[q, d])
                for q in range(QUERIES) for d in range(CANDIDATES))
    check(worst < 1e-12, f"hybrid run: {worst} from numpy's blend of the two runs")
    figures["hybrid_bm25_0.5"] = compare(hybrid_metrics, qrels, hybrid_run, "hybrid")
    check("BM25" in hybrid_metrics["score"] and "0.5" in hybrid_metrics["score"], hybrid_metrics["score"])

    # --lexical-weight auto: the choosing half is what the reported run leaves out.
    auto_metrics, auto_run, printed = evaluate("auto", "--lexical", "bm25", "--lexical-weight", "auto")
    chosen = auto_metrics["lexical_weight"]
    reported = [q for q in range(QUERIES) if query_ids[q] in auto_run]
    choosing = [q for q in range(QUERIES) if query_ids[q] not in auto_run]
    check(len(reported) == QUERIES - QUERIES // 2 and len(choosing) == QUERIES // 2 and
          chosen["chosen_on_queries"] == len(choosing) and chosen["reported_on_queries"] == len(reported),
          f"halves: {len(choosing)} chose, {len(reported)} reported; metrics say {chosen}")
    relevant = [{doc_ids.index(d) for d, g in qrels[query_ids[q]].items() if g >= 1} for q in range(QUERIES)]
    grid = [0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1]
    mrr = {}
    for w in grid:
        fused = (1 - w) * dense + w * lexical
        mrr[w] = float(np.mean(reciprocal_ranks(fused[choosing], [relevant[q] for q in choosing])))
        check(abs(chosen["mrr_by_weight"][str(w)] - mrr[w]) < 1e-12,
              f"MRR at weight {w} on the choosing half: {chosen['mrr_by_weight']} against numpy {mrr[w]}")
    best = max(grid, key=lambda w: (mrr[w], -w))
    check(chosen["chosen"] == best, f"chose {chosen['chosen']}, numpy's best is {best} ({mrr})")
    fused = (1 - best) * dense + best * lexical
    reported_mrr = float(np.mean(reciprocal_ranks(fused[reported], [relevant[q] for q in reported])))
    check(abs(auto_metrics["ranking"]["mrr"] - reported_mrr) < 1e-12,
          f"reported MRR {auto_metrics['ranking']['mrr']} against numpy's {reported_mrr} at {best}")
    if best < 1:  # at weight 1 BM25's ties decide, which trec_eval breaks by id
        figures["auto"] = compare(auto_metrics, {q: qrels[q] for q in auto_run}, auto_run, "auto")
    check(f"lexical weight {best:.1f}" in printed and f"on {len(choosing)} queries" in printed,
          f"eval's table names the choice:\n{printed}")
    figures["auto_choice"] = {"weight": best, "mrr_by_weight": {str(w): round(mrr[w], 6) for w in grid}}

    # search --format trec gives the hits of its JSON, as run lines.
    search = ["search", "--embeddings", os.path.join(scratch, "docs.h5"), "--id", "d3", "--top", "5"]
    lines = run(docmatch, *search, "--format", "trec").stdout.splitlines()
    hits = json.loads(run(docmatch, *search, "--format", "jsonl").stdout.splitlines()[0])["hits"]
    fields = [line.split() for line in lines]
    check(len(fields) == 5 and [f[:4] + f[5:] for f in fields] ==
          [["d3", "Q0", h["id"], str(h["rank"]), "docmatch"] for h in hits] and
          all(float(f[4]) == h["score"] for h, f in zip(hits, fields)),
          f"search --format trec:\n{lines}\nagainst {hits}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
