#!/usr/bin/env python3
"""`docmatch eval --queries`: queries from a corpus of their own, ranked
against every document of the candidate corpus, on the tiny real corpus
(tiny_manpages.py) split in two:

  * the queries are the relevance file's query pages, prepared as a corpus
    of their own with the candidates' tokenizer (ids prefixed "q:", so
    nothing can match by id); the candidates are every other page;
  * eval's MRR, P@1 and rankings.jsonl equal numpy's over the two `embed`
    files (float64 cosine, no candidate left out), with the model and,
    scored by cosine, from the two files alone (--query-embeddings);
  * hybrid at --lexical-weight 0.5: the TF-IDF side weighs a query's tokens
    with the candidates' idf only (recomputed here from the shards);
  * --queries without --relevance, a query id that is not in the queries
    corpus, and a queries corpus of another tokenizer are errors naming
    what is wrong.

usage: queries_check.py DOCMATCH FIXTURE SCRATCH
"""
import glob
import json
import math
import os
import shutil
import subprocess
import sys
from collections import Counter

import h5py
import numpy as np

TINY = """model: {kind: match_bert, hidden: 32, heads: 2, intermediate: 64, layers: 1, max_tokens: 128, dropout: 0.1}
"""


def check(condition, message):
    if not condition:
        sys.exit("FAILED: " + message)


def run(docmatch, *args, fail=False):
    result = subprocess.run([docmatch, *args], capture_output=True, text=True)
    if fail:
        check(result.returncode != 0, f"{args[0]} {args[1:6]} should have failed")
    elif result.returncode != 0:
        sys.exit(f"FAILED: docmatch {' '.join(args)}\n{result.stdout}\n{result.stderr}")
    return result


def read_vectors(path):
    with h5py.File(path, "r") as f:
        return [i.decode() for i in f["document_ids"][:]], f["vectors"][:].astype(np.float64)


def documents(corpus):
    """Every document's token ids, in corpus order, from the shards."""
    docs = []
    for shard in sorted(glob.glob(os.path.join(corpus, "shard-*.h5"))):
        with h5py.File(shard, "r") as f:
            tokens, sentences = f["tokens"][:], f["sentence_offsets"][:]
            paragraphs, offsets = f["paragraph_offsets"][:], f["document_offsets"][:]
            for d in range(len(offsets) - 1):
                docs.append(tokens[sentences[paragraphs[offsets[d]]]:sentences[paragraphs[offsets[d + 1]]]].tolist())
    return docs


def tfidf_rows(docs, df, n):
    """sklearn's sublinear TF-IDF rows with the idf of a corpus of n documents
    (document frequencies df); tokens that corpus never saw weigh nothing."""
    rows = []
    for d in docs:
        row = {t: (1 + math.log(c)) * (math.log((1 + n) / (1 + df[t])) + 1) for t, c in Counter(d).items() if df[t]}
        norm = math.sqrt(sum(v * v for v in row.values())) or 1.0
        rows.append({t: v / norm for t, v in row.items()})
    return rows


def ranking(scores, relevant):
    """MRR and P@1 over queries: scores (Q, N), relevant[q] a set of columns.
    Ties rank in column order, as eval's stable order does."""
    mrr = p1 = 0.0
    for q, row in enumerate(scores):
        order = np.argsort(-row, kind="stable")
        first = next(i for i, c in enumerate(order) if c in relevant[q]) + 1
        mrr += 1 / first
        p1 += first == 1
    return mrr / len(scores), p1 / len(scores)


def main():
    docmatch, fixture, scratch = sys.argv[1:4]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    corpus = os.path.join(fixture, "corpus")
    tokenizer = os.path.join(corpus, "tokenizer.model")
    articles = [json.loads(line) for line in open(os.path.join(fixture, "articles.jsonl"))]
    relevance = [json.loads(line) for line in open(os.path.join(fixture, "relevance.test.jsonl"))]
    query_pages = {r["query"] for r in relevance}

    # Queries and candidates, apart; a query's relevant pages that are
    # queries themselves are left out of its list.
    with open(os.path.join(scratch, "queries.jsonl"), "w") as f:
        for a in articles:
            if a["id"] in query_pages:
                f.write(json.dumps({**a, "id": "q:" + a["id"]}) + "\n")
    with open(os.path.join(scratch, "candidates.jsonl"), "w") as f:
        for a in articles:
            if a["id"] not in query_pages:
                f.write(json.dumps(a) + "\n")
    lists = []
    with open(os.path.join(scratch, "relevance.jsonl"), "w") as f:
        for r in relevance:
            kept = [t for t in r["relevant"] if t not in query_pages]
            if kept:
                f.write(json.dumps({"query": "q:" + r["query"], "relevant": kept}) + "\n")
                lists.append(("q:" + r["query"], kept))
    check(len(lists) >= 20, f"only {len(lists)} queries keep a relevant candidate")
    for name in ("queries", "candidates"):
        run(docmatch, "prepare", "--input", os.path.join(scratch, name + ".jsonl"), "--output",
            os.path.join(scratch, name), "--tokenizer", tokenizer, "--no-progress")
    queries, candidates = os.path.join(scratch, "queries"), os.path.join(scratch, "candidates")

    # A model with two steps behind it (a flat encoder: its vectors spread).
    with open(os.path.join(scratch, "tiny.yaml"), "w") as f:
        f.write(TINY)
    run(docmatch, "pretrain", "--corpus", corpus, "--model-config", os.path.join(scratch, "tiny.yaml"), "--objective",
        "wp", "--run", os.path.join(scratch, "run"), "--steps", "2", "--batch-size", "4", "--warmup-steps", "1",
        "--decay-steps", "2", "--no-progress")
    model = os.path.join(scratch, "run", "latest")

    out = os.path.join(scratch, "eval")
    run(docmatch, "eval", "--model", model, "--corpus", candidates, "--queries", queries, "--relevance",
        os.path.join(scratch, "relevance.jsonl"), "--write-rankings", "5", "--output", out, "--no-progress")
    metrics = json.load(open(os.path.join(out, "metrics.json")))["ranking"]
    query_ids, query_vectors = read_vectors(os.path.join(out, "query-embeddings.h5"))
    candidate_ids, candidate_vectors = read_vectors(os.path.join(out, "embeddings.h5"))
    check(len(candidate_ids) == len(articles) - len(query_pages) and metrics["candidates"] == len(candidate_ids),
          f"every candidate, none left out: {metrics['candidates']} of {len(candidate_ids)}")
    rows = [query_ids.index(q) for q, _ in lists]
    relevant = [{candidate_ids.index(t) for t in kept} for _, kept in lists]
    unit_q = query_vectors / np.linalg.norm(query_vectors, axis=1, keepdims=True)
    unit_c = candidate_vectors / np.linalg.norm(candidate_vectors, axis=1, keepdims=True)
    cosines = unit_q[rows] @ unit_c.T
    mrr, p1 = ranking(cosines, relevant)
    check(metrics["queries"] == len(lists), f"{metrics['queries']} queries ranked, expected {len(lists)}")
    check(abs(metrics["mrr"] - mrr) < 1e-9 and abs(metrics["p@1"] - p1) < 1e-9,
          f"MRR {metrics['mrr']} / P@1 {metrics['p@1']} against numpy {mrr} / {p1}")
    written = [json.loads(line) for line in open(os.path.join(out, "rankings.jsonl"))]
    in_order = sorted(range(len(lists)), key=lambda i: rows[i])  # the queries corpus's order
    check([w["query"] for w in written] == [lists[i][0] for i in in_order],
          "rankings.jsonl: a line per query, in the queries corpus's order")
    for w, i in zip(written, in_order):
        order = np.argsort(-cosines[i], kind="stable")[:5]
        check([h["id"] for h in w["hits"]] == [candidate_ids[c] for c in order], f"rankings of {w['query']}: {w}")

    # The same from the two files alone, by cosine.
    alone = os.path.join(scratch, "eval-files")
    run(docmatch, "eval", "--embeddings", os.path.join(out, "embeddings.h5"), "--corpus", candidates, "--queries",
        queries, "--query-embeddings", os.path.join(out, "query-embeddings.h5"), "--relevance",
        os.path.join(scratch, "relevance.jsonl"), "--output", alone, "--no-progress")
    files_mrr = json.load(open(os.path.join(alone, "metrics.json")))["ranking"]["mrr"]
    check(abs(files_mrr - mrr) < 1e-9, f"from the files: MRR {files_mrr} against numpy {mrr}")

    # Hybrid: the TF-IDF side with the candidates' idf alone.
    hybrid = os.path.join(scratch, "eval-hybrid")
    run(docmatch, "eval", "--embeddings", os.path.join(out, "embeddings.h5"), "--corpus", candidates, "--queries",
        queries, "--query-embeddings", os.path.join(out, "query-embeddings.h5"), "--relevance",
        os.path.join(scratch, "relevance.jsonl"), "--lexical-weight", "0.5", "--output", hybrid, "--no-progress")
    hybrid_mrr = json.load(open(os.path.join(hybrid, "metrics.json")))["ranking"]["mrr"]
    candidate_docs, query_docs = documents(candidates), documents(queries)
    df = Counter(t for d in candidate_docs for t in set(d))
    c_rows = tfidf_rows(candidate_docs, df, len(candidate_docs))
    q_rows = tfidf_rows([query_docs[r] for r in rows], df, len(candidate_docs))
    lexical = np.array([[sum(w * c.get(t, 0.0) for t, w in q.items()) for c in c_rows] for q in q_rows])
    expected, _ = ranking(0.5 * cosines + 0.5 * lexical, relevant)
    check(abs(hybrid_mrr - expected) < 1e-9, f"hybrid MRR {hybrid_mrr} against numpy {expected}")
    # Counting the queries in the idf would give other weights: the check can fail.
    merged = Counter(df)
    for d in query_docs:
        merged.update(set(d))
    other = tfidf_rows([query_docs[r] for r in rows], merged, len(candidate_docs) + len(query_docs))
    check(any(abs(a.get(t, 0) - b.get(t, 0)) > 1e-6 for a, b in zip(q_rows, other) for t in a),
          "the queries' weights do not depend on whose idf")

    # Mistakes, named.
    said = run(docmatch, "eval", "--model", model, "--corpus", candidates, "--queries", queries, "--output",
               os.path.join(scratch, "e1"), "--no-progress", fail=True).stderr
    check("--queries ranks its documents against the corpus: give --relevance" in said, said)
    bad = os.path.join(scratch, "bad.jsonl")
    with open(bad, "w") as f:
        f.write(json.dumps({"query": lists[0][1][0], "relevant": [lists[0][1][0]]}) + "\n")
    said = run(docmatch, "eval", "--model", model, "--corpus", candidates, "--queries", queries, "--relevance", bad,
               "--query-embeddings", os.path.join(out, "query-embeddings.h5"), "--embeddings",
               os.path.join(out, "embeddings.h5"), "--output", os.path.join(scratch, "e2"), "--no-progress",
               fail=True).stderr
    check(f'bad.jsonl:1: query "{lists[0][1][0]}" is not a document of corpus' in said and queries in said, said)
    # A tokenizer of its own, trained on the query pages.
    run(docmatch, "prepare", "--input", os.path.join(scratch, "queries.jsonl"), "--output",
        os.path.join(scratch, "foreign"), "--vocab-size", "300", "--no-progress")
    said = run(docmatch, "eval", "--model", model, "--corpus", candidates, "--queries", os.path.join(scratch, "foreign"),
               "--relevance", os.path.join(scratch, "relevance.jsonl"), "--output", os.path.join(scratch, "e3"),
               "--no-progress", fail=True).stderr
    check("was prepared with another tokenizer than" in said, said)

    print(json.dumps({"queries": len(lists), "candidates": len(candidate_ids), "mrr": round(mrr, 6),
                      "p_at_1": round(p1, 6), "hybrid_mrr": round(hybrid_mrr, 6)}))


if __name__ == "__main__":
    main()
