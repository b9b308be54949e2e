#!/usr/bin/env python3
"""Whether one ranking row really beats another: MRR of several vector files
over every query of a relevance file, and paired bootstrap intervals of the
differences (the same queries resampled for both rows).

`docmatch eval` ranks a sample of queries (--max-queries) and reports one MRR
per row; two rows a hundredth apart may be noise. This reads the vectors each
row ranked with (an `embed`/`eval` embeddings.h5, or a baseline's
vectors.h5), ranks every query by cosine against every other document the way
eval does (a relevant document ties pessimistically: it ranks below every
irrelevant document of equal score), and prints one JSON line per row and per
pair of rows.

A row whose score is not one cosine (a hybrid, `eval --lexical-weight`; a
maxsim model's windows, whose file this refuses) is read from the rankings.jsonl that `eval --max-queries 0 --write-rankings 1`
writes: each line carries its query's first relevant rank.

With --half 1 or --half 2 only one half of the queries counts (split by a
hash of the query id, the same halves on every run): choose a setting such as
eval's --lexical-weight on one half and report it on the other, so that the
reported row was not tuned on its own queries.

With --by-length ARTICLES.jsonl the same lines follow for each quarter of the
queries by the query document's length in words ("group": "1/4" the shortest,
with its word range), bootstrapped within the group: whether reading a long
document whole pays more the longer it is.

  python scripts/compare-rankings.py --relevance data/wikispeedia/relevance.jsonl \\
      contrastive=runs/wikispeedia/match-bert-minilm-contrastive/embeddings.h5 \\
      tfidf=runs/wikispeedia/tfidf/vectors.h5 hybrid=runs/all-queries/hybrid/rankings.jsonl
"""
import argparse
import hashlib
import json

import h5py
import numpy as np


def load(path):
    with h5py.File(path, "r") as h:
        kind = h.attrs.get("kind", b"")
        kind = kind.decode() if isinstance(kind, bytes) else str(kind)
        # An SDR file's vectors are its mean sentence vectors, a row of their
        # own ("cosine of the mean sentence vector"); a maxsim file's would be
        # a mean pooling under the maxsim model's name.
        if "sentence_vectors" in h and kind != "sdr":
            raise SystemExit(f"{path}: holds windows that eval scores by MaxSim, not by the cosine of its vectors; "
                             "give this row as the rankings.jsonl of eval --max-queries 0 --write-rankings 1")
        ids = [i.decode() if isinstance(i, bytes) else i for i in h["document_ids"][:]]
        vectors = h["vectors"][:].astype(np.float64)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return ids, vectors


def reciprocal_ranks(ids, vectors, relevance):
    """1 / rank of each query's best-ranked relevant document, query order of `relevance`."""
    index = {d: i for i, d in enumerate(ids)}
    out = np.empty(len(relevance))
    for n, (query, relevant) in enumerate(relevance):
        q = index[query]
        scores = vectors @ vectors[q]
        scores[q] = -np.inf  # the query itself is no candidate
        is_relevant = np.zeros(len(ids), dtype=bool)
        is_relevant[[index[r] for r in relevant]] = True
        best = scores[is_relevant].max()
        out[n] = 1.0 / (1 + np.count_nonzero(scores > best) + np.count_nonzero((scores == best) & ~is_relevant))
    return out


def written_reciprocal_ranks(path, relevance):
    """1 / first_relevant_rank of each query in an `eval --write-rankings` file, query order of `relevance`."""
    first = {}
    for number, line in enumerate(open(path, encoding="utf-8"), 1):
        if line.strip():
            record = json.loads(line)
            if "first_relevant_rank" not in record:
                raise SystemExit(f"{path}:{number}: no first_relevant_rank; written by an older docmatch eval?")
            first[record["query"]] = record["first_relevant_rank"]
    missing = [query for query, _ in relevance if query not in first]
    if missing:
        raise SystemExit(f"{path}: {len(missing)} of {len(relevance)} queries not ranked (first: {missing[0]}); "
                         "run eval with --max-queries 0")
    unfound = [query for query, _ in relevance if not first[query]]
    if unfound:
        raise SystemExit(f"{path}: {len(unfound)} queries had no relevant candidate besides themselves "
                         f"(first: {unfound[0]}); drop them from the relevance file")
    return np.array([1.0 / first[query] for query, _ in relevance])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--relevance", required=True, help="JSONL {query, relevant: [ids]} (make-wikispeedia.py)")
    parser.add_argument("--resamples", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--by-length", metavar="ARTICLES.jsonl",
                        help="also report each quarter of the queries by the query's length in words")
    parser.add_argument("--groups", type=int, default=4, help="with --by-length: how many length groups")
    parser.add_argument("--half", type=int, choices=(1, 2),
                        help="only the queries of this half (1: the first byte of the query id's SHA-256 is even)")
    parser.add_argument("rows", nargs="+", metavar="NAME=VECTORS.h5|RANKINGS.jsonl")
    args = parser.parse_args()
    relevance = []
    for line in open(args.relevance, encoding="utf-8"):
        if line.strip():
            record = json.loads(line)
            if record["relevant"] and (args.half is None or query_half(record["query"]) == args.half):
                relevance.append((record["query"], record["relevant"]))
    if not relevance:
        raise SystemExit(f"{args.relevance}: no query with a relevant document"
                         + (f" in half {args.half}" if args.half else ""))
    rows = {}
    for spec in args.rows:
        name, path = spec.split("=", 1)
        if path.endswith(".jsonl"):
            rows[name] = written_reciprocal_ranks(path, relevance)
        else:
            rows[name] = reciprocal_ranks(*load(path), relevance)
    rng = np.random.default_rng(args.seed)
    report(rows, np.arange(len(relevance)), rng, args.resamples, {})
    if args.by_length:
        words = document_words(args.by_length)
        missing = [query for query, _ in relevance if query not in words]
        if missing:
            raise SystemExit(f"{args.by_length}: {len(missing)} queries are not among its documents "
                             f"(first: {missing[0]})")
        lengths = np.array([words[query] for query, _ in relevance])
        order = np.argsort(lengths, kind="stable")
        for g, part in enumerate(np.array_split(order, args.groups)):
            if len(part):
                report(rows, part, rng, args.resamples, {"group": f"{g + 1}/{args.groups}",
                                                         "words": [int(lengths[part].min()), int(lengths[part].max())]})


def query_half(query):
    """1 or 2: which half of the queries `--half` puts this query id in."""
    return 1 + hashlib.sha256(query.encode("utf-8")).digest()[0] % 2


def document_words(path):
    """Words of each document of an articles.jsonl ({"id", "text"} a line)."""
    words = {}
    for line in open(path, encoding="utf-8"):
        if line.strip():
            record = json.loads(line)
            words[record["id"]] = len(record["text"].split())
    return words


def report(rows, queries, rng, resamples, label):
    """One line per row and per pair of rows over the queries numbered `queries`."""
    samples = queries[rng.integers(0, len(queries), size=(resamples, len(queries)))]
    for name, rr in rows.items():
        means = rr[samples].mean(axis=1)
        print(json.dumps({**label, "row": name, "queries": len(queries), "mrr": round(float(rr[queries].mean()), 4),
                          "ci95": [round(float(np.percentile(means, q)), 4) for q in (2.5, 97.5)]}))
    names = list(rows)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            diff = rows[a] - rows[b]
            means = diff[samples].mean(axis=1)
            print(json.dumps({**label, "difference": f"{a} - {b}", "mrr": round(float(diff[queries].mean()), 4),
                              "ci95": [round(float(np.percentile(means, q)), 4) for q in (2.5, 97.5)],
                              "share_of_resamples_above_0": round(float((means > 0).mean()), 4)}))


if __name__ == "__main__":
    main()
