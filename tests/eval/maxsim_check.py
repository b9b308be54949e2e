#!/usr/bin/env python3
"""MatchBERT with window_pooling maxsim (late interaction over windows) on
the tiny real corpus (tiny_manpages.py), against float64 numpy:

  * `embed` keeps every window's vector: per page min(chunks, windows)
    unit rows, equal within 2e-5 to the python/ package's float64 forward
    of the exported model (a second formulation of the encoder), with more
    than 64 windows for many pages (the transformer then runs in slices);
    the file's one vector per page is the windows' normalised mean;
  * eval --model ranks by MaxSim (each query window's best cosine among the
    candidate's windows, averaged over the query's windows): MRR and P@1
    equal numpy's, which differ from the mean vectors' cosine; with
    --lexical-weight 0.5, numpy's (MaxSim + TF-IDF cosine) / 2; and with
    --queries (query pages apart from the candidates) the same, dense and
    hybrid;
  * eval --valid-pairs / --test-pairs classifies each pair by its MaxSim:
    the threshold chosen on the validation pairs, the test accuracy and
    counts equal numpy's (which differ from the mean cosine's), for the
    model and for the fused file below;
  * fuse with a cosine file (weights 1 and 3) keeps the windows, each with
    the other file's scaled vector beside it, so the fused MaxSim is
    0.25 MaxSim + 0.75 cosine (checked on every pair); eval reads it without
    --model and ranks by that, dense and hybrid;
  * search --id re-ranks by MaxSim: numpy's top 5 and scores, over every
    page, and over the mean vectors' 10 best with --rerank 10;
  * two maxsim files are not fused (named), search refuses TF-IDF on a
    MaxSim file, saying eval fuses it, and eval refuses a file without
    windows for a maxsim model; the MaxSim file fused second, its rows
    reversed, gives the same fused windows.

usage: maxsim_check.py DOCMATCH FIXTURE SCRATCH
"""
import json
import os
import shutil
import sys
from collections import Counter

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))
from queries_check import check, documents, ranking, run, tfidf_rows  # noqa: E402
from docmatch_encoder.model import Model, match_bert_rows  # noqa: E402

MAXSIM = """model: {kind: match_bert, hidden: 32, heads: 2, intermediate: 64, layers: 1, max_tokens: 16,
        pooling: mean, chunks: 80, window_pooling: maxsim, dropout: 0.1}
"""
PLAIN = """model: {kind: match_bert, hidden: 24, heads: 2, intermediate: 48, layers: 1, max_tokens: 64,
        dropout: 0.1}
"""


def unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def read(path):
    """ids, vectors (N, D), windows: a list of (W, D) arrays or None."""
    with h5py.File(path, "r") as f:
        ids = [i.decode() if isinstance(i, bytes) else i for i in f["document_ids"][:]]
        vectors = f["vectors"][:].astype(np.float64)
        if "sentence_vectors" not in f:
            return ids, vectors, None
        rows = f["sentence_vectors"][:].astype(np.float64)
        paragraphs, offsets = f["paragraph_offsets"][:], f["document_offsets"][:]
        check(list(offsets) == list(range(len(ids) + 1)), "a maxsim document is not one paragraph of windows")
        return ids, vectors, [rows[paragraphs[d]:paragraphs[d + 1]] for d in range(len(ids))]


def maxsim(windows):
    """(N, N) float64: mean over a's windows of the best cosine among b's."""
    n = len(windows)
    out = np.empty((n, n))
    for a in range(n):
        for b in range(n):
            out[a, b] = (windows[a] @ windows[b].T).max(1).mean()
    return out


def pairs(path, row):
    """(sources, targets, labels) of a labelled pair file, as rows."""
    records = [json.loads(line) for line in open(path)]
    return (np.array([row[r["source"]] for r in records]), np.array([row[r["target"]] for r in records]),
            np.array([r["label"] for r in records]))


def classify(scores, labels, threshold):
    predicted = scores >= threshold
    return {"accuracy": float((predicted == (labels == 1)).mean()),
            "true_positives": int((predicted & (labels == 1)).sum()),
            "false_positives": int((predicted & (labels == 0)).sum())}


def choose_threshold(scores, labels):
    """eval's rule: the first of (below all, midpoints, above all) with the best accuracy."""
    distinct = np.unique(scores)
    candidates = [distinct[0] - 1.0] + list((distinct[:-1] + distinct[1:]) / 2) + [distinct[-1] + 1.0]
    accuracy = [classify(scores, labels, t)["accuracy"] for t in candidates]
    return candidates[int(np.argmax(accuracy))]


def check_classification(got, score, valid, test, name):
    """eval's metrics["classification"] against numpy's, pairs scored by score[source, target]."""
    threshold = choose_threshold(score[valid[0], valid[1]], valid[2])
    want = classify(score[test[0], test[1]], test[2], threshold)
    test_got = got["classification"]["test"]
    check(abs(test_got["threshold"] - threshold) < 1e-5 and all(test_got[k] == want[k] for k in want),
          f"{name}: test {test_got} against numpy's threshold {threshold} and {want}")
    return want["accuracy"], threshold


def train(docmatch, corpus, scratch, name, config, seed):
    path = os.path.join(scratch, name + ".yaml")
    with open(path, "w") as f:
        f.write(config)
    run_dir = os.path.join(scratch, name + "-run")
    run(docmatch, "pretrain", "--corpus", corpus, "--model-config", path, "--objective", "wp", "--run", run_dir,
        "--steps", "2", "--batch-size", "4", "--lr", "1e-3", "--warmup-steps", "1", "--decay-steps", "2", "--seed",
        str(seed), "--no-progress", "--device", "cpu")
    return os.path.join(run_dir, "latest")


def evaluate(docmatch, scratch, name, *args):
    out = os.path.join(scratch, name)
    run(docmatch, "eval", *args, "--max-queries", "0", "--output", out, "--no-progress")
    return json.load(open(os.path.join(out, "metrics.json")))


def main():
    docmatch, fixture, scratch = sys.argv[1:4]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    corpus = os.path.join(fixture, "corpus")
    relevance_file = os.path.join(fixture, "relevance.test.jsonl")
    model = train(docmatch, corpus, scratch, "maxsim", MAXSIM, 1)
    vectors_file = os.path.join(scratch, "maxsim.h5")
    run(docmatch, "embed", "--model", model, "--corpus", corpus, "--output", vectors_file, "--no-progress")
    ids, vectors, windows = read(vectors_file)
    check(windows is not None, "embed kept no windows for a maxsim model")
    docs = documents(corpus)
    expected_counts = [max(1, min(80, -(-len(d) // 15))) for d in docs]
    check([len(w) for w in windows] == expected_counts, "windows per page differ from min(chunks, ceil(n / 15))")
    sliced = sum(c > 64 for c in expected_counts)
    check(sliced >= 10, f"only {sliced} pages have more than 64 windows: the slicing is not exercised")
    check(max(np.abs(np.linalg.norm(w, axis=1) - 1).max() for w in windows) < 1e-5, "windows are not unit vectors")
    means = np.stack([unit(w.sum(0)) for w in windows])
    check(np.abs(vectors - means).max() < 1e-5, "the file's vector is not the windows' normalised mean")

    # The python/ package's float64 forward of the exported model: the same windows.
    export = os.path.join(scratch, "export")
    run(docmatch, "export", "--model", model, "--corpus", corpus, "--output", export, "--format", "docmatch")
    reference = Model(export)
    worst = 0.0
    for d in range(0, len(docs), 7):
        rows = match_bert_rows(np.array(docs[d]), reference.config, reference.weights)
        check(rows.shape == windows[d].shape, f"page {ids[d]}: {rows.shape} windows against {windows[d].shape}")
        worst = max(worst, np.abs(rows - windows[d]).max())
    check(worst < 2e-5, f"windows differ from the float64 reference by {worst:.2e}")

    # eval --model: MaxSim, not the mean vectors' cosine; then with TF-IDF.
    lists = [json.loads(line) for line in open(relevance_file)]
    row = {i: n for n, i in enumerate(ids)}
    rows = [row[r["query"]] for r in lists]
    relevant = [{row[t] for t in r["relevant"]} for r in lists]
    late = maxsim(windows)

    def ranked(scores):
        scores = scores[rows].copy()
        scores[np.arange(len(rows)), rows] = -np.inf  # a query is not its own candidate
        return ranking(scores, relevant)

    mrr, p1 = ranked(late)
    cosine_mrr, _ = ranked(means @ means.T)
    check(abs(mrr - cosine_mrr) > 1e-6, "MaxSim and the mean cosine rank alike: the check could not fail")
    metrics = evaluate(docmatch, scratch, "eval", "--model", model, "--embeddings", vectors_file, "--corpus", corpus,
                       "--relevance", relevance_file)
    got = metrics["ranking"]
    check(metrics["score"] == "maxsim over windows", f"score {metrics['score']}")
    check(abs(got["mrr"] - mrr) < 1e-9 and abs(got["p@1"] - p1) < 1e-9,
          f"MRR {got['mrr']} / P@1 {got['p@1']} against numpy's MaxSim {mrr} / {p1} (mean cosine: {cosine_mrr})")
    # --windows-mean: the same file ranked by its document vectors (the windows' mean).
    metrics = evaluate(docmatch, scratch, "eval-mean", "--model", model, "--embeddings", vectors_file, "--corpus",
                       corpus, "--relevance", relevance_file, "--windows-mean")
    check(abs(metrics["ranking"]["mrr"] - cosine_mrr) < 1e-9 and "windows' mean" in metrics["score"],
          f"--windows-mean: MRR {metrics['ranking']['mrr']} ({metrics['score']}) against numpy's mean cosine "
          f"{cosine_mrr}")
    df = Counter(t for d in docs for t in set(d))
    weights = tfidf_rows(docs, df, len(docs))
    lexical = np.array([[sum(w * c.get(t, 0.0) for t, w in q.items()) for c in weights] for q in weights])
    hybrid_mrr, _ = ranked(0.5 * late + 0.5 * lexical)
    metrics = evaluate(docmatch, scratch, "eval-hybrid", "--model", model, "--embeddings", vectors_file, "--corpus",
                       corpus, "--relevance", relevance_file, "--lexical-weight", "0.5")
    check(abs(metrics["ranking"]["mrr"] - hybrid_mrr) < 1e-9,
          f"hybrid MRR {metrics['ranking']['mrr']} against numpy {hybrid_mrr}")
    check(abs(hybrid_mrr - mrr) > 1e-6, "TF-IDF changed no ranking: the hybrid check could not fail")

    # Pair classification: each pair scored by its MaxSim, the threshold
    # chosen on the validation pairs.
    valid = pairs(os.path.join(fixture, "pairs.valid.jsonl"), row)
    test = pairs(os.path.join(fixture, "pairs.test.jsonl"), row)
    pair_args = ("--valid-pairs", os.path.join(fixture, "pairs.valid.jsonl"), "--test-pairs",
                 os.path.join(fixture, "pairs.test.jsonl"))
    metrics = evaluate(docmatch, scratch, "eval-pairs", "--model", model, "--embeddings", vectors_file, "--corpus",
                       corpus, *pair_args)
    accuracy, threshold = check_classification(metrics, late, valid, test, "eval --test-pairs (maxsim)")
    cosine_threshold = choose_threshold((means @ means.T)[valid[0], valid[1]], valid[2])
    check(abs(cosine_threshold - threshold) > 1e-4, "MaxSim and the mean cosine choose one threshold: the check "
          "could not fail")

    # fuse with a cosine file: the windows kept, MaxSim = 0.25 MaxSim + 0.75 cosine.
    plain_file = os.path.join(scratch, "plain.h5")
    run(docmatch, "embed", "--model", train(docmatch, corpus, scratch, "plain", PLAIN, 2), "--corpus", corpus,
        "--output", plain_file, "--no-progress")
    plain_ids, plain, plain_windows = read(plain_file)
    check(plain_ids == ids and plain_windows is None, "the plain model's file")
    fused_file = os.path.join(scratch, "fused.h5")
    run(docmatch, "fuse", "--embeddings", vectors_file, "--embeddings", plain_file, "--weight", "1", "--weight", "3",
        "--output", fused_file)
    fused_ids, fused, fused_windows = read(fused_file)
    check(fused_ids == ids and fused_windows is not None, "the fused file kept no windows")
    p = unit(plain)
    for d in range(len(ids)):
        want = np.concatenate([windows[d] * 0.5, np.repeat(p[d:d + 1] * np.sqrt(0.75), len(windows[d]), 0)], 1)
        check(np.abs(fused_windows[d] - want).max() < 1e-6, f"page {ids[d]}: fused windows differ from numpy's")
    combined = 0.25 * late + 0.75 * (p @ p.T)
    identity = np.abs(maxsim(fused_windows) - combined).max()
    check(identity < 1e-5, f"the fused MaxSim differs from 0.25 MaxSim + 0.75 cosine by {identity:.2e}")
    fused_mrr, _ = ranked(combined)
    metrics = evaluate(docmatch, scratch, "eval-fused", "--embeddings", fused_file, "--corpus", corpus,
                       "--relevance", relevance_file, "--write-rankings", "10")
    check(abs(metrics["ranking"]["mrr"] - fused_mrr) < 1e-9,
          f"fused MRR {metrics['ranking']['mrr']} against numpy {fused_mrr}")
    fused_accuracy, _ = check_classification(
        evaluate(docmatch, scratch, "eval-fused-pairs", "--embeddings", fused_file, "--corpus", corpus, *pair_args),
        combined, valid, test, "eval --test-pairs (fused file)")
    # The top 10 of every query, too: they differ from MaxSim's alone, so the
    # cosine's share is seen even where the MRR does not move.
    # (eval's MaxSim runs in float32: near-ties within 2e-6 may swap.)
    written = {r["query"]: r["hits"]
               for r in map(json.loads, open(os.path.join(scratch, "eval-fused", "rankings.jsonl")))}

    def top10(scores, q):
        s = scores[q].copy()
        s[q] = -np.inf
        return [ids[i] for i in np.argsort(-s, kind="stable")[:10]]

    for q in rows:
        hits = written[ids[q]]
        best = np.sort(np.delete(combined[q], q))[::-1][:10]
        theirs = np.array([combined[q, row[h["id"]]] for h in hits])
        check(len(hits) == 10 and np.abs(theirs - best).max() < 2e-6 and
              max(abs(h["score"] - combined[q, row[h["id"]]]) for h in hits) < 2e-6,
              f"query {ids[q]}: the fused top 10 {[h['id'] for h in hits]} is not numpy's {top10(combined, q)}")
    check(any(top10(combined, q) != top10(late, q) for q in rows), "the cosine's share moved no top 10")
    fused_hybrid_mrr, _ = ranked(0.5 * combined + 0.5 * lexical)
    metrics = evaluate(docmatch, scratch, "eval-fused-hybrid", "--embeddings", fused_file, "--corpus", corpus,
                       "--relevance", relevance_file, "--lexical-weight", "0.5")
    check(abs(metrics["ranking"]["mrr"] - fused_hybrid_mrr) < 1e-9,
          f"fused hybrid MRR {metrics['ranking']['mrr']} against numpy {fused_hybrid_mrr}")

    # search --id: the mean cosine picks --rerank candidates, MaxSim orders them.
    query = ids[rows[0]]

    def search(rerank):
        out = run(docmatch, "search", "--embeddings", vectors_file, "--id", query, "--top", "5", "--exclude-self",
                  "--rerank", str(rerank), "--format", "jsonl").stdout
        hits = [json.loads(line) for line in out.splitlines() if line.strip()]
        return hits[0]["hits"] if len(hits) == 1 and "hits" in hits[0] else hits

    hits = search(len(ids))
    scores = late[rows[0]].copy()
    scores[rows[0]] = -np.inf
    top = np.argsort(-scores, kind="stable")[:5]
    check([h["id"] for h in hits] == [ids[i] for i in top], f"search --id {query}: {hits}")
    check(all(abs(h["score"] - scores[i]) < 1e-5 for h, i in zip(hits, top)), f"search scores {hits}")
    # With --rerank 10 only the mean vectors' 10 best are re-ordered by MaxSim.
    hits = search(10)
    first = (means @ means[rows[0]]).copy()
    first[rows[0]] = -np.inf
    pool = np.argsort(-first, kind="stable")[:10]
    reranked = sorted(pool, key=lambda i: (-scores[i], i))[:5]
    check([h["id"] for h in hits] == [ids[i] for i in reranked], f"search --rerank 10 --id {query}: {hits}")

    # eval --queries: query pages apart from the candidates, both embedded
    # with windows; MaxSim of the query windows against the candidates'
    # (and the hybrid, the idf counting the candidates alone).
    query_pages = {r["query"] for r in lists}
    articles = [json.loads(line) for line in open(os.path.join(fixture, "articles.jsonl"))]
    for name, keep in (("queries", lambda a: a["id"] in query_pages), ("candidates", lambda a: a["id"] not in
                                                                            query_pages)):
        with open(os.path.join(scratch, name + ".jsonl"), "w") as f:
            for a in filter(keep, articles):
                f.write(json.dumps({**a, "id": ("q:" if name == "queries" else "") + a["id"]}) + "\n")
        run(docmatch, "prepare", "--input", os.path.join(scratch, name + ".jsonl"), "--output",
            os.path.join(scratch, name), "--tokenizer", os.path.join(corpus, "tokenizer.model"), "--no-progress")
    apart = [("q:" + r["query"], [t for t in r["relevant"] if t not in query_pages]) for r in lists]
    apart = [(q, kept) for q, kept in apart if kept]
    check(len(apart) >= 20, f"only {len(apart)} queries keep a relevant candidate")
    with open(os.path.join(scratch, "relevance-apart.jsonl"), "w") as f:
        for q, kept in apart:
            f.write(json.dumps({"query": q, "relevant": kept}) + "\n")
    for name, weight in (("eval-apart", "0"), ("eval-apart-hybrid", "0.5")):
        out = os.path.join(scratch, name)
        run(docmatch, "eval", "--model", model, "--corpus", os.path.join(scratch, "candidates"), "--queries",
            os.path.join(scratch, "queries"), "--relevance", os.path.join(scratch, "relevance-apart.jsonl"),
            "--lexical-weight", weight, "--max-queries", "0", "--output", out, "--no-progress")
        query_ids, _, query_windows = read(os.path.join(out, "query-embeddings.h5"))
        candidate_ids, _, candidate_windows = read(os.path.join(out, "embeddings.h5"))
        qrows = [query_ids.index(q) for q, _ in apart]
        scores = np.array([[(query_windows[q] @ c.T).max(1).mean() for c in candidate_windows] for q in qrows])
        if weight == "0.5":
            query_docs, candidate_docs = documents(os.path.join(scratch, "queries")), documents(
                os.path.join(scratch, "candidates"))
            cdf = Counter(t for d in candidate_docs for t in set(d))
            crows = tfidf_rows(candidate_docs, cdf, len(candidate_docs))
            qtf = tfidf_rows([query_docs[q] for q in qrows], cdf, len(candidate_docs))
            scores = 0.5 * scores + 0.5 * np.array([[sum(w * c.get(t, 0.0) for t, w in q.items()) for c in crows]
                                                     for q in qtf])
        apart_relevant = [{candidate_ids.index(t) for t in kept} for _, kept in apart]
        want, _ = ranking(scores, apart_relevant)
        if weight == "0":  # the check can fail: the mean vectors' cosine ranks otherwise
            qm = np.stack([unit(query_windows[q].sum(0)) for q in qrows])
            cm = np.stack([unit(c.sum(0)) for c in candidate_windows])
            check(abs(ranking(qm @ cm.T, apart_relevant)[0] - want) > 1e-6, "MaxSim and the mean cosine agree apart")
        got = json.load(open(os.path.join(out, "metrics.json")))["ranking"]
        check(got["queries"] == len(apart) and abs(got["mrr"] - want) < 1e-9,
              f"{name}: MRR {got['mrr']} over {got['queries']} queries against numpy {want} over {len(apart)}")

    said = run(docmatch, "fuse", "--embeddings", vectors_file, "--embeddings", fused_file, "--output",
               os.path.join(scratch, "twice.h5"), fail=True).stderr
    check("both score by MaxSim" in said and not os.path.exists(os.path.join(scratch, "twice.h5")), said)
    said = run(docmatch, "search", "--embeddings", vectors_file, "--id", query, "--lexical-weight", "0.5", "--corpus",
               corpus, fail=True).stderr
    check("re-ranks by MaxSim" in said and "eval --lexical-weight fuses" in said, said)
    # A maxsim model does not score a file without windows (nor a mean model one with them).
    said = run(docmatch, "eval", "--model", model, "--embeddings", plain_file, "--corpus", corpus, "--relevance",
               relevance_file, "--output", os.path.join(scratch, "e-mismatch"), "--no-progress", fail=True).stderr
    check("holds no window or sentence vectors" in said, said)
    # The MaxSim file second, its rows in another order: the same fused file.
    shuffled = os.path.join(scratch, "maxsim-shuffled.h5")
    order = list(range(len(ids)))[::-1]
    with h5py.File(vectors_file, "r") as f, h5py.File(shuffled, "w") as g:
        g["document_ids"] = np.array([ids[i] for i in order], dtype=h5py.string_dtype())
        g["vectors"] = f["vectors"][:][order]
        g["sentence_vectors"] = np.concatenate([windows[i] for i in order]).astype(np.float32)
        g["paragraph_offsets"] = np.cumsum([0] + [len(windows[i]) for i in order]).astype(np.int64)
        g["document_offsets"] = np.arange(len(ids) + 1, dtype=np.int64)
        for k, v in f.attrs.items():
            g.attrs[k] = v
    second = os.path.join(scratch, "fused-second.h5")
    run(docmatch, "fuse", "--embeddings", plain_file, "--embeddings", shuffled, "--weight", "3", "--weight", "1",
        "--output", second)
    second_ids, _, second_windows = read(second)
    check(second_ids == ids, "the fused file does not follow the first input's order")
    moved = max(np.abs(second_windows[d] - np.concatenate([fused_windows[d][:, 32:], fused_windows[d][:, :32]], 1))
                .max() for d in range(len(ids)))
    check(moved < 1e-6, f"the MaxSim file second and reordered fuses differently: {moved:.2e}")
    print(json.dumps({"documents": len(ids), "windows": int(sum(expected_counts)), "over_64": int(sliced),
                      "reference_error": float(worst), "mrr_maxsim": round(mrr, 6), "mrr_mean_cosine":
                      round(cosine_mrr, 6), "mrr_hybrid": round(hybrid_mrr, 6), "mrr_fused": round(fused_mrr, 6),
                      "test_accuracy_maxsim": accuracy, "test_accuracy_fused": fused_accuracy}))


if __name__ == "__main__":
    main()
