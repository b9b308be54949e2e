#!/usr/bin/env python3
"""Label-free proxies for `docmatch choose`, tried on every row of its table.

choose's own proxy ranks the four dense readers by how well each document's
first half of windows finds its second half. This study asks whether two
wider proxies, which also rank the lexical readers and the fusions, pick a
row that the labels would accept:

  halves     the same task for all 26 rows: TF-IDF and BM25 over the halves'
             token ids (the windows' tokens, 254 a window), fusion weights
             chosen on half of the documents, the pick measured on the other
  consensus  pseudo-relevance from the readers' agreement: each sampled
             document's top K of the reciprocal-rank fusion of the six
             readers (the dense ones and the lexical ones weighing half each),
             then every row measured against it as against labels

For each, the row it picks and that row's MRR on the labels, and its
difference from the labelled best row with a paired bootstrap interval
(10,000 resamples; within the best's interval when it reaches 0) (every query of
the relevance list, split in halves with numpy's seeded generator: fusion
weights on one, MRR on the other), beside the labelled best row's. The
readers are recomputed here from choose's windows file and the corpus, so
its figures are close to, not equal to, choose's (another query split; the
BM25 of the halves reads token ids, not words).

usage: choose_proxies.py CHOOSE_OUTPUT CORPUS RELEVANCE   (prints one JSON line)
  e.g. choose_proxies.py choose-pydoc corpora/pydoc-minilm data/pydoc/relevance.jsonl
Needs h5py, numpy and scipy (the project's venv has them).
"""
import glob
import itertools
import json
import math
import os
import sys
from collections import Counter

import h5py
import numpy as np
import scipy.sparse as sp

DENSE, LEXICAL = ["first", "mean", "max", "maxsim"], ["tfidf", "bm25"]
ROWS = ([(b,) for b in DENSE + LEXICAL] + [(d, l) for d in DENSE for l in LEXICAL] +
        list(itertools.combinations(DENSE, 2)) + [p + ("tfidf",) for p in itertools.combinations(DENSE, 2)])
GRID = [round(0.1 * i, 1) for i in range(11)]
WINDOW_TOKENS = 254  # a window of 256 with [CLS] and [SEP]


def unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def windows_of(path):
    with h5py.File(path, "r") as f:
        rows = unit(f["sentence_vectors"][:].astype(np.float64))
        offsets = f["paragraph_offsets"][:][f["document_offsets"][:]]
        ids = [x.decode() for x in f["document_ids"][:]]
    return ids, [rows[offsets[i]:offsets[i + 1]] for i in range(len(ids))]


def tokens_of(corpus, ids):
    tokens, offsets, seen = [], [0], []
    for path in sorted(glob.glob(os.path.join(corpus, "shard-*.h5"))):
        with h5py.File(path, "r") as f:
            t = f["tokens"][:]
            o = f["sentence_offsets"][:][f["paragraph_offsets"][:][f["document_offsets"][:]]]
            offsets += (o[1:] + offsets[-1]).tolist()
            tokens.append(t)
            seen += [x.decode() for x in f["document_ids"][:]]
    assert seen == ids, "the windows file and the corpus hold other documents"
    tokens = np.concatenate(tokens)
    return [tokens[offsets[i]:offsets[i + 1]] for i in range(len(ids))]


def counts(rows, width):
    r, c, v = [], [], []
    for i, (terms, n) in enumerate(rows):
        r += [i] * len(terms)
        c += list(terms)
        v += list(n)
    return sp.csr_matrix((v, (r, c)), shape=(len(rows), width), dtype=np.float64)


def tfidf(count_rows):
    """sklearn's TfidfVectorizer(sublinear_tf=True) rows, L2-normalised."""
    m = count_rows.copy()
    m.data = 1 + np.log(m.data)
    df = np.bincount(m.indices, minlength=m.shape[1])
    m = m.multiply(np.log((1 + m.shape[0]) / (1 + df)) + 1).tocsr()
    norm = np.sqrt(m.multiply(m).sum(1)).A1
    norm[norm == 0] = 1
    return sp.diags(1 / norm) @ m


def bm25(queries, documents, k1=1.2, b=0.75):
    length = documents.sum(1).A1
    df = np.bincount(documents.indices, minlength=documents.shape[1])
    idf = np.log(1 + (documents.shape[0] - df + 0.5) / (df + 0.5))
    d = documents.tocoo()
    parts = d.data / (d.data + k1 * (1 - b + b * length[d.row] / length.mean())) * idf[d.col]
    return (queries @ sp.csr_matrix((parts, (d.row, d.col)), shape=documents.shape).T).toarray()


def min_max(scores, self_columns=None):
    s = scores.astype(np.float64).copy()
    if self_columns is not None:
        s[np.arange(len(s)), self_columns] = np.nan
    low, high = np.nanmin(s, 1, keepdims=True), np.nanmax(s, 1, keepdims=True)
    span = np.where(high > low, high - low, 1)
    return np.nan_to_num((s - low) / span, nan=0.0)


def maxsim(queries, documents):
    rows = np.concatenate(documents)
    owner = np.concatenate([[j] * len(w) for j, w in enumerate(documents)])
    starts = np.r_[0, np.flatnonzero(np.diff(owner)) + 1]
    return np.array([np.maximum.reduceat(q @ rows.T, starts, axis=1).mean(0) for q in queries])


def dense_readers(queries, documents):
    """(Q, M) scores of each dense reader, query windows against document windows."""
    return {"first": np.stack([q[0] for q in queries]) @ np.stack([d[0] for d in documents]).T,
            "mean": unit(np.stack([q.mean(0) for q in queries])) @ unit(np.stack([d.mean(0) for d in documents])).T,
            "max": unit(np.stack([q.max(0) for q in queries])) @ unit(np.stack([d.max(0) for d in documents])).T,
            "maxsim": maxsim(queries, documents)}


def combos(row):
    if len(row) == 1:
        yield {row[0]: 1.0}
    elif len(row) == 2:
        for w in GRID:
            yield {row[0]: 1 - w, row[1]: w}
    else:
        for pair in GRID:
            for w in GRID:
                yield {row[0]: (1 - w) * (1 - pair), row[1]: (1 - w) * pair, row[2]: w}


def reciprocal_ranks(scores, relevant):
    """scores (Q, M), relevant (Q, M) bool; ties against the relevant."""
    best = np.where(relevant, scores, -np.inf).max(1, keepdims=True)
    return 1.0 / ((scores > best).sum(1) + (scores == best).sum(1))


def table(bases, rows_index, relevant, choosing, measured):
    """Each row: its weights chosen on `choosing`, its MRR on `measured` (indices into the queries)."""
    out = {}
    for row in ROWS:
        def mrr(c, part):
            s = sum(w * bases[b][rows_index[part]] for b, w in c.items() if w)
            return reciprocal_ranks(s, relevant[part]).mean()
        best = max(combos(row), key=lambda c: (mrr(c, choosing), -sum(1 for w in c.values() if w)))
        out["+".join(row)] = (float(mrr(best, measured)), {b: round(w, 2) for b, w in best.items() if w})
    return out


def main():
    output, corpus, relevance_file = sys.argv[1:4]
    rng = np.random.default_rng(1234)
    ids, windows = windows_of(os.path.join(output, "windows.h5"))
    N, index = len(ids), {d: i for i, d in enumerate(ids)}
    tokens = tokens_of(corpus, ids)
    with h5py.File(os.path.join(corpus, "words.h5"), "r") as f:
        offsets, terms, term_counts = f["document_offsets"][:], f["term_ids"][:], f["term_counts"][:]
    words = counts([(terms[offsets[i]:offsets[i + 1]], term_counts[offsets[i]:offsets[i + 1]]) for i in range(N)],
                   int(terms.max()) + 1)
    width = int(max(t.max() for t in tokens if len(t))) + 1
    lexical_rows = tfidf(counts([np.unique(t, return_counts=True) for t in tokens], width))

    # The labels.
    bases = dense_readers(windows, windows)
    bases["tfidf"] = (lexical_rows @ lexical_rows.T).toarray()
    bases["bm25"] = min_max(bm25(words, words), np.arange(N))
    for s in bases.values():
        np.fill_diagonal(s, -np.inf)
    relevant = {}
    for line in open(relevance_file):
        j = json.loads(line)
        if "source" in j:
            relevant.setdefault(index[j["source"]], set()).add(index[j["target"]])
        else:
            relevant.setdefault(index[j["query"]], set()).update(index[r] for r in j["relevant"] if r in index)
    queries = np.array(sorted(q for q, r in relevant.items() if r - {q}))
    mask = np.zeros((len(queries), N), bool)
    for i, q in enumerate(queries):
        mask[i, list(relevant[q] - {q})] = True
    order = rng.permutation(len(queries))
    labelled = table(bases, queries, mask, np.sort(order[:len(order) // 2]), np.sort(order[len(order) // 2:]))
    measured_labels = (queries, mask, np.sort(order[len(order) // 2:]))

    def on_labels(weights):
        q, m, part = measured_labels
        return reciprocal_ranks(sum(w * bases[b][q[part]] for b, w in weights.items()), m[part])

    best_row = max(labelled, key=lambda r: labelled[r][0])
    best_rr = on_labels(labelled[best_row][1])
    draws = rng.integers(0, len(best_rr), size=(10000, len(best_rr)))
    result = {"documents": N, "queries": len(queries), "labelled_best": best_row,
              "labelled_best_mrr": round(labelled[best_row][0], 4), "proxies": {}}

    # halves: each long document's first half of windows finds its second half.
    long_documents = [d for d in range(N) if len(windows[d]) >= 2]
    sample = np.sort(rng.choice(long_documents, min(2000, len(long_documents)), replace=False))
    position = {d: k for k, d in enumerate(long_documents)}
    half = {d: len(windows[d]) // 2 for d in long_documents}
    firsts = [windows[d][:half[d]] for d in sample]
    seconds = [windows[d][half[d]:] for d in long_documents]
    first_tokens = [tokens[d][:half[d] * WINDOW_TOKENS] for d in sample]
    second_tokens = [tokens[d][half[d] * WINDOW_TOKENS:len(windows[d]) * WINDOW_TOKENS] for d in long_documents]
    halves = dense_readers(firsts, seconds)
    both = tfidf(counts([np.unique(t, return_counts=True) for t in first_tokens + second_tokens], width))
    halves["tfidf"] = (both[:len(sample)] @ both[len(sample):].T).toarray()
    halves["bm25"] = min_max(bm25(counts([np.unique(t, return_counts=True) for t in first_tokens], width),
                                  counts([np.unique(t, return_counts=True) for t in second_tokens], width)))
    own = np.zeros((len(sample), len(long_documents)), bool)
    own[np.arange(len(sample)), [position[d] for d in sample]] = True
    split = rng.permutation(len(sample))
    proxies = {"halves": table(halves, np.arange(len(sample)), own, np.sort(split[:len(split) // 2]),
                               np.sort(split[len(split) // 2:]))}

    # consensus: pseudo-relevance from the readers' reciprocal-rank fusion.
    share = {"first": 0.125, "mean": 0.125, "max": 0.125, "maxsim": 0.125, "tfidf": 0.25, "bm25": 0.25}
    drawn = np.sort(rng.choice(N, min(2000, N), replace=False))
    fused = sum(w / (61 + (-bases[b][drawn]).argsort(1).argsort(1)) for b, w in share.items())
    fused[np.arange(len(drawn)), drawn] = -np.inf
    for k in (5, 10):
        pseudo = np.zeros((len(drawn), N), bool)
        pseudo[np.arange(len(drawn))[:, None], (-fused).argsort(1)[:, :k]] = True
        split = rng.permutation(len(drawn))
        proxies[f"consensus_top{k}"] = table(bases, drawn, pseudo, np.sort(split[:len(split) // 2]),
                                             np.sort(split[len(split) // 2:]))
    for name, rows in proxies.items():
        pick = max(rows, key=lambda r: rows[r][0])
        gap = on_labels(rows[pick][1]) - best_rr
        low, high = np.percentile(gap[draws].mean(1), [2.5, 97.5])
        result["proxies"][name] = {"pick": pick, "weights": rows[pick][1], "proxy_mrr": round(rows[pick][0], 4),
                                   "labelled_mrr_of_pick": round(float((gap + best_rr).mean()), 4),
                                   "minus_best": round(float(gap.mean()), 4),
                                   "minus_best_ci95": [round(float(low), 4), round(float(high), 4)],
                                   "within_best_interval": bool(high >= 0)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
