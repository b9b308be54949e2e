#!/usr/bin/env python3
"""`docmatch search` and `docmatch encode` on the tiny real corpus
(tiny_manpages.py), against numpy over the vectors `embed` wrote:

  * search by id puts the document itself first (score 1) and returns the
    same top 10, with the same scores, as a float64 numpy cosine ranking;
    --exclude-self returns numpy's next 10; scoring 7 rows at a time
    (--block-rows 7, so the top-k is merged across 35 blocks) changes nothing;
  * --queries mixes document ids and texts; a document's own text, encoded
    as `prepare` would, finds that document first;
  * `encode` of the corpus's raw JSONL equals `embed`'s vectors (JSON lines
    and --output HDF5), and search reads the encode file;
  * hybrid search at --lexical-weight 0.5 scores (cosine + TF-IDF cosine) / 2,
    with the TF-IDF recomputed here from the shards' token ids;
  * SDR re-ranks with its hierarchical score: a document finds itself first,
    at cosine 1 with --no-sdr-normalize, and by default at the z-scored
    score numpy computes over every document's paragraphs;
  * an unknown id, a query line without text or id, and a text query against
    a model folder without a tokenizer are errors naming what is wrong.

usage: search_check.py DOCMATCH FIXTURE SCRATCH
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

# A flat encoder: its vectors spread after 2 steps (a tiny SMITH's are all
# within 1e-5 of one another then, which would make every ranking a near-tie).
TINY = """model: {kind: match_bert, hidden: 32, heads: 2, intermediate: 64, layers: 1, max_tokens: 128, dropout: 0.1}
"""
SDR = """model: {kind: sdr, hidden: 32, heads: 2, intermediate: 64, layers: 1, max_tokens: 32, dropout: 0.1}
"""


def check(condition, message):
    if not condition:
        sys.exit("FAILED: " + message)


class Runner:
    def __init__(self, docmatch):
        self.docmatch = docmatch

    def __call__(self, *args, stdin=None, fail=False, cwd=None):
        result = subprocess.run([self.docmatch, *args], input=stdin, capture_output=True, text=True, cwd=cwd)
        if fail:
            check(result.returncode != 0, f"{args[0]} {args[1:4]} should have failed")
        elif result.returncode != 0:
            sys.exit(f"FAILED: docmatch {' '.join(args)}\n{result.stdout}\n{result.stderr}")
        return result


def sdr_zscored_self_score(path, row):
    """SDR's normalised score of document `row` against itself with every
    document as a candidate, in float64: each source paragraph's scores (mean
    over its sentences of the best cosine in a candidate paragraph) z-scored
    over all candidate paragraphs, the best of its own paragraphs, averaged."""
    with h5py.File(path, "r") as f:
        sentences = f["sentence_vectors"][:].astype(np.float64)
        paragraphs, documents = f["paragraph_offsets"][:], f["document_offsets"][:]
    sentences /= np.linalg.norm(sentences, axis=1, keepdims=True)
    own = range(documents[row], documents[row + 1])
    total = 0.0
    for p in own:
        cosines = sentences[paragraphs[p]:paragraphs[p + 1]] @ sentences.T  # (sentences of p, all)
        best = np.maximum.reduceat(cosines, paragraphs[:-1], axis=1)       # (sentences of p, all paragraphs)
        scores = best.mean(0)
        z = (scores - scores.mean()) / scores.std()
        total += z[documents[row]:documents[row + 1]].max()
    return total / len(own)


def read_vectors(path):
    with h5py.File(path, "r") as f:
        return [i.decode() for i in f["document_ids"][:]], f["vectors"][:].astype(np.float64)


def hits(output):
    return [json.loads(line) for line in output.splitlines() if line.strip()]


def cosine_top(vectors, row, k, exclude_self=False):
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    scores = unit @ unit[row]
    if exclude_self:
        scores[row] = -np.inf
    order = np.argsort(-scores, kind="stable")[:k]
    return order, scores[order]


def same_ranking(got, order, scores, ids, what):
    """The same ids in the same order (exact ties by row, as numpy's stable
    sort), scores equal to 1e-9."""
    check([h["id"] for h in got] == [ids[row] for row in order],
          f"{what}: {[h['id'] for h in got]} against numpy {[ids[row] for row in order]}")
    for hit, score in zip(got, scores):
        check(abs(hit["score"] - score) < 1e-9, f"{what}: score {hit['score']} against numpy {score}")


def shard_lengths(corpus):
    """Every document's token count, in corpus order, from the shards' offsets."""
    lengths = []
    for shard in sorted(glob.glob(os.path.join(corpus, "shard-*.h5"))):
        with h5py.File(shard, "r") as f:
            sentences, paragraphs = f["sentence_offsets"][:], f["paragraph_offsets"][:]
            documents = f["document_offsets"][:]
            for d in range(len(documents) - 1):
                lengths.append(int(sentences[paragraphs[documents[d + 1]]] - sentences[paragraphs[documents[d]]]))
    return lengths


def tfidf(corpus):
    """sklearn's TfidfVectorizer(sublinear_tf=True) over the shards' token ids, unit rows."""
    docs = []
    for shard in sorted(glob.glob(os.path.join(corpus, "shard-*.h5"))):
        with h5py.File(shard, "r") as f:
            tokens, sentences = f["tokens"][:], f["sentence_offsets"][:]
            paragraphs, documents = f["paragraph_offsets"][:], f["document_offsets"][:]
            for d in range(len(documents) - 1):
                first = sentences[paragraphs[documents[d]]]
                last = sentences[paragraphs[documents[d + 1]]]
                docs.append(tokens[first:last].tolist())
    n = len(docs)
    df = Counter(t for d in docs for t in set(d))
    rows = []
    for d in docs:
        counts = Counter(d)
        row = {t: (1 + math.log(c)) * (math.log((1 + n) / (1 + df[t])) + 1) for t, c in counts.items()}
        norm = math.sqrt(sum(v * v for v in row.values()))
        rows.append({t: v / norm for t, v in row.items()})
    return rows


def main():
    docmatch, fixture, scratch = sys.argv[1:4]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    run = Runner(docmatch)
    corpus = os.path.join(fixture, "corpus")
    articles = os.path.join(fixture, "articles.jsonl")
    for name, text in (("tiny.yaml", TINY), ("sdr.yaml", SDR)):
        with open(os.path.join(scratch, name), "w") as f:
            f.write(text)

    # A model folder with a few steps behind it, and its embed file.
    model_run = os.path.join(scratch, "match-bert")
    run("pretrain", "--corpus", corpus, "--model-config", os.path.join(scratch, "tiny.yaml"), "--objective", "wp",
        "--run", model_run, "--steps", "2", "--batch-size", "4", "--warmup-steps", "1", "--decay-steps", "2",
        "--no-progress")
    model = os.path.join(model_run, "latest")
    embeddings = os.path.join(scratch, "match-bert.h5")
    embedded = run("embed", "--model", model, "--corpus", corpus, "--output", embeddings, "--no-progress")
    ids, vectors = read_vectors(embeddings)
    figures = {"documents": len(ids)}
    # It says once what it wrote, and how many documents the model reads in
    # part: a flat encoder of 128 tokens reads 127 of each after [CLS].
    said = embedded.stdout + embedded.stderr
    check(said.count("documents -> ") == 1, f"embed says what it wrote once: {said}")
    lengths = shard_lengths(corpus)
    cut = [n for n in lengths if n > 127]
    figures["embed_cut_documents"] = len(cut)
    expected = (f"{len(cut)} of {len(lengths)} documents are longer than the match_bert model reads (e.g. '")
    left_out = f": {sum(n - 127 for n in cut)} of {sum(lengths)} tokens ("
    check(cut and expected in embedded.stderr and left_out in embedded.stderr,
          f"the truncation warning, expected '{expected}...{left_out}': {embedded.stderr}")

    # By id: itself first, then numpy's order; the same with 7-row blocks.
    for row in (0, 17, len(ids) - 1):
        got = hits(run("search", "--embeddings", embeddings, "--id", ids[row], "--format", "jsonl",
                       "--include-self").stdout)
        check(len(got) == 1 and got[0]["query"] == ids[row], f"one result line per query: {got}")
        first = got[0]["hits"][0]
        check(first["id"] == ids[row] and abs(first["score"] - 1) < 1e-9, f"{ids[row]} found {first} first")
        order, scores = cosine_top(vectors, row, 10)
        same_ranking(got[0]["hits"], order, scores, ids, f"search --id {ids[row]}")
        check([h["rank"] for h in got[0]["hits"]] == list(range(1, 11)), "ranks 1..10")
        check(all(h["title"] for h in got[0]["hits"]), "titles come from the corpus the file names")
        blocked = hits(run("search", "--embeddings", embeddings, "--id", ids[row], "--format", "jsonl",
                           "--block-rows", "7", "--include-self").stdout)
        check([h["id"] for h in blocked[0]["hits"]] == [h["id"] for h in got[0]["hits"]] and
              all(abs(a["score"] - b["score"]) < 1e-12 for a, b in zip(blocked[0]["hits"], got[0]["hits"])),
              f"--block-rows 7 changed the hits of {ids[row]}")
        order, scores = cosine_top(vectors, row, 10, exclude_self=True)
        others = hits(run("search", "--embeddings", embeddings, "--id", ids[row], "--format", "jsonl",
                          "--exclude-self").stdout)[0]["hits"]
        check(ids[row] not in [h["id"] for h in others], "--exclude-self left the query in")
        same_ranking(others, order, scores, ids, f"search --id {ids[row]} --exclude-self")
        # Leaving the query out is the default.
        default = hits(run("search", "--embeddings", embeddings, "--id", ids[row], "--format", "jsonl").stdout)
        check(default[0]["hits"] == others, f"search --id {ids[row]} without a flag kept the query")
    table = run("search", "--embeddings", embeddings, "--id", ids[3], "--top", "3").stdout

    # An embed file made with relative paths is read the same from another
    # directory: titles, and text queries through the model it names.
    os.symlink(corpus, os.path.join(scratch, "corpus-link"))
    run("embed", "--model", os.path.relpath(model, scratch), "--corpus", "corpus-link", "--output", "relative.h5",
        "--no-progress", cwd=scratch)
    elsewhere = run("search", "--embeddings", os.path.join(scratch, "relative.h5"), "--id", ids[3], "--format",
                    "jsonl", cwd="/")
    check(all(h["title"] for h in hits(elsewhere.stdout)[0]["hits"]) and "not there" not in elsewhere.stderr,
          f"titles from another directory: {elsewhere.stdout[:200]} {elsewhere.stderr}")
    text = run("search", "--embeddings", os.path.join(scratch, "relative.h5"), "--text", "manual page", cwd="/")
    check(text.stdout.startswith('query: "manual page"'), f"a text query from another directory: {text.stdout[:80]}")
    check(table.startswith(f"query: {ids[3]}") and len(table.splitlines()) == 5, f"the table:\n{table}")

    # eval --write-rankings: each query's top 4 by the model's cosine (eval
    # scores are the model's logits, amplifier x cosine), numpy's order.
    relevance = os.path.join(scratch, "relevance.jsonl")
    with open(relevance, "w") as f:
        for q in range(0, len(ids), 5):
            f.write(json.dumps({"query": ids[q], "relevant": [ids[(q + 1) % len(ids)], ids[(q + 7) % len(ids)]]})
                    + "\n")
    run("eval", "--model", model, "--corpus", corpus, "--embeddings", embeddings, "--relevance", relevance,
        "--output", os.path.join(scratch, "eval"), "--write-rankings", "4", "--no-progress")
    written = [json.loads(line) for line in open(os.path.join(scratch, "eval", "rankings.jsonl"))]
    check([w["query"] for w in written] == [ids[q] for q in range(0, len(ids), 5)], "a line per query, in order")
    for w in written:
        row = ids.index(w["query"])
        order, scores = cosine_top(vectors, row, 4, exclude_self=True)
        check([h["id"] for h in w["hits"]] == [ids[i] for i in order], f"rankings.jsonl for {w['query']}: {w}")
        ratios = [h["score"] / s for h, s in zip(w["hits"], scores)]
        check(max(ratios) - min(ratios) < 1e-5, f"scores not one multiple of the cosines: {ratios}")
        check([h["relevant"] for h in w["hits"]] == [h["id"] in w["relevant"] for h in w["hits"]], "relevant flags")
    figures["rankings_written"] = len(written)

    # search --ann: the HNSW index gives exact search's hits on this small
    # file; a stale or truncated index, or --ann with hybrid scores, is refused.
    # The tiny model's vectors are nearly parallel (cosines within 1e-6 of
    # each other, so float noise orders them); the index is checked on random
    # vectors of the same shape, whose neighbours are well separated.
    spread = os.path.join(scratch, "spread.h5")
    shutil.copy(embeddings, spread)
    with h5py.File(spread, "r+") as f:
        shape = f["vectors"].shape
        f["vectors"][...] = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    run("index", "--embeddings", spread, "--no-progress")
    for row in (0, 17, len(ids) - 1):
        exact = hits(run("search", "--embeddings", spread, "--id", ids[row], "--format", "jsonl",
                         "--exclude-self").stdout)[0]["hits"]
        approximate = hits(run("search", "--embeddings", spread, "--id", ids[row], "--format", "jsonl",
                               "--exclude-self", "--ann").stdout)[0]["hits"]
        check([h["id"] for h in approximate] == [h["id"] for h in exact] and
              max(abs(a["score"] - b["score"]) for a, b in zip(approximate, exact)) < 1e-5,
              f"--ann on {ids[row]}: {approximate} vs {exact}")
    err = run("index", "--embeddings", spread, "--no-progress", fail=True).stderr
    check("exists; pass --overwrite" in err, err)
    err = run("search", "--embeddings", spread, "--id", ids[0], "--ann", "--lexical-weight", "0.5",
              fail=True).stderr
    check("--ann finds the nearest cosines" in err, err)
    stale = os.path.join(scratch, "stale.h5")
    shutil.copy(spread, stale)
    shutil.copy(spread + ".hnsw", stale + ".hnsw")
    shutil.copy(spread + ".hnsw.json", stale + ".hnsw.json")
    with h5py.File(stale, "r+") as f:
        f["vectors"][0] = -f["vectors"][0]  # same size, same ids: other vectors
    err = run("search", "--embeddings", stale, "--id", ids[0], "--ann", fail=True).stderr
    check("was built from other vectors" in err and "docmatch index" in err, err)
    # One row that a sample of rows would miss (the old check read rows
    # i * N / 64), changed in place; and a copy with the same bytes, which the
    # index still fits.
    for name, row in (("one-row.h5", 1), ("same-bytes.h5", None)):
        other = os.path.join(scratch, name)
        shutil.copy(spread, other)
        shutil.copy(spread + ".hnsw", other + ".hnsw")
        shutil.copy(spread + ".hnsw.json", other + ".hnsw.json")
        if row is not None:
            with h5py.File(other, "r+") as f:
                f["vectors"][row] = f["vectors"][row][::-1]
        result = run("search", "--embeddings", other, "--id", ids[0], "--ann", fail=row is not None)
        check(row is None or "was built from other vectors" in result.stderr, f"{name}: {result.stderr}")
    with open(spread + ".hnsw", "r+b") as f:
        f.truncate(1000)
    err = run("search", "--embeddings", spread, "--id", ids[0], "--ann", fail=True).stderr
    check("truncated or replaced" in err, err)

    # Embeddings files written by h5py with the usual string types: fixed
    # ASCII ids (S30), variable-length UTF-8 and fixed ASCII attributes,
    # float64 vectors; the same hits as docmatch's own file. Duplicate ids
    # are named.
    foreign = os.path.join(scratch, "h5py-written.h5")
    with h5py.File(foreign, "w") as f:
        f["document_ids"] = np.array(ids, dtype="S30")
        f["vectors"] = vectors
        f.attrs["docmatch_format"] = "docmatch-embeddings"
        f.attrs["format_version"] = 1
        f.attrs["dimension"] = vectors.shape[1]
        f.attrs["kind"] = np.bytes_("match_bert")
        f.attrs["model"] = "elsewhere"
    theirs = hits(run("search", "--embeddings", foreign, "--id", ids[5], "--format", "jsonl").stdout)[0]["hits"]
    ours = hits(run("search", "--embeddings", embeddings, "--id", ids[5], "--format", "jsonl").stdout)[0]["hits"]
    check([h["id"] for h in theirs] == [h["id"] for h in ours], f"an h5py-written file: {theirs} vs {ours}")
    # The other usual string types: fixed-length UTF-8, variable-length
    # ASCII and variable-length UTF-8 ids, fixed UTF-8 and variable ASCII
    # attributes; the same hits.
    for label, id_type, attribute in (
            ("fixed UTF-8", h5py.string_dtype("utf-8", 40), h5py.string_dtype("utf-8", 24)),
            ("variable ASCII", h5py.string_dtype("ascii"), h5py.string_dtype("ascii")),
            ("variable UTF-8", h5py.string_dtype("utf-8"), h5py.string_dtype("utf-8"))):
        typed = os.path.join(scratch, "h5py-" + label.replace(" ", "-") + ".h5")
        with h5py.File(typed, "w") as f:
            f.create_dataset("document_ids", data=[i.encode() for i in ids], dtype=id_type)
            f["vectors"] = vectors
            f.attrs.create("docmatch_format", "docmatch-embeddings".encode(), dtype=attribute)
            f.attrs["format_version"] = 1
            f.attrs["dimension"] = vectors.shape[1]
            f.attrs.create("kind", "match_bert".encode(), dtype=attribute)
            f.attrs.create("model", "elsewhere".encode(), dtype=attribute)
        theirs = hits(run("search", "--embeddings", typed, "--id", ids[5], "--format", "jsonl").stdout)[0]["hits"]
        check([h["id"] for h in theirs] == [h["id"] for h in ours], f"h5py {label} strings: {theirs} vs {ours}")
    with h5py.File(foreign, "r+") as f:
        f["document_ids"][3] = np.bytes_(ids[7])
    err = run("search", "--embeddings", foreign, "--id", ids[5], fail=True).stderr
    check(f"document id '{ids[7]}' is in rows 3 and 7" in err, f"duplicate ids: {err}")

    # Every query's first relevant rank in rankings.jsonl, read back by
    # scripts/compare-rankings.py, gives the MRR that the script's own numpy
    # ranking of the same vectors gives (the spread vectors: no near ties).
    spread_eval = os.path.join(scratch, "spread-eval")
    run("eval", "--embeddings", spread, "--corpus", corpus, "--relevance", relevance, "--output", spread_eval,
        "--write-rankings", "1", "--no-progress")
    written = [json.loads(line) for line in open(os.path.join(spread_eval, "rankings.jsonl"))]
    with h5py.File(spread, "r") as f:
        unit = f["vectors"][:].astype(np.float64)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    for w in written:
        q = ids.index(w["query"])
        cosines = unit @ unit[q]
        cosines[q] = -np.inf
        relevant = np.isin(ids, w["relevant"])
        best = cosines[relevant].max()
        check(w["first_relevant_rank"] == 1 + int(np.count_nonzero(cosines > best))
              + int(np.count_nonzero((cosines == best) & ~relevant)),
              f"first_relevant_rank of {w['query']}: {w['first_relevant_rank']}")
    compare = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "compare-rankings.py")
    lines = [json.loads(line) for line in subprocess.run(
        [sys.executable, compare, "--relevance", relevance, "--resamples", "200", f"vectors={spread}",
         f"written={os.path.join(spread_eval, 'rankings.jsonl')}"],
        check=True, capture_output=True, text=True).stdout.splitlines()]
    by_row = {line.get("row", line.get("difference")): line for line in lines}
    check(by_row["vectors"]["queries"] == len(written) and by_row["vectors"]["mrr"] == by_row["written"]["mrr"]
          and by_row["vectors - written"]["mrr"] == 0, f"compare-rankings on the two forms: {lines}")
    figures["compare_rankings_mrr_from_rankings_jsonl"] = by_row["written"]["mrr"]
    partial = os.path.join(scratch, "partial.jsonl")
    with open(partial, "w") as f:
        f.writelines(json.dumps(w) + "\n" for w in written[1:])
    refused = subprocess.run([sys.executable, compare, "--relevance", relevance, f"partial={partial}"],
                             capture_output=True, text=True)
    check(refused.returncode != 0 and "--max-queries 0" in refused.stderr, f"a partial file: {refused.stderr}")

    # Texts: a document's raw text finds it (tokenized as prepare does).
    raw = [json.loads(line) for line in open(articles)]
    by_id = {a["id"]: a for a in raw}
    queries = os.path.join(scratch, "queries.jsonl")
    with open(queries, "w") as f:
        f.write(json.dumps({"id": ids[5]}) + "\n\n")
        f.write(json.dumps({"id": "as-text", "text": by_id[ids[9]]["text"]}) + "\n")
    got = hits(run("search", "--embeddings", embeddings, "--queries", queries, "--tokenizer", corpus,
                   "--format", "jsonl", "--top", "3", "--include-self").stdout)
    check([g["query"] for g in got] == [ids[5], "as-text"], f"queries in order: {[g['query'] for g in got]}")
    check(got[0]["hits"][0]["id"] == ids[5], "an id line is a document query")
    check(got[1]["hits"][0]["id"] == ids[9] and abs(got[1]["hits"][0]["score"] - 1) < 1e-5,
          f"the text of {ids[9]} found {got[1]['hits'][0]}")
    # Many text queries, embedded --batch-size at a time among document
    # queries: each finds its own document at cosine 1 (the batch's padding
    # changes no vector), in the order given.
    with open(queries, "w") as f:
        for i in range(12):
            f.write(json.dumps({"id": f"t{i}", "text": by_id[ids[i]]["text"]} if i % 3 else {"id": ids[i]}) + "\n")
    got = hits(run("search", "--embeddings", embeddings, "--queries", queries, "--tokenizer", corpus,
                   "--format", "jsonl", "--top", "1", "--batch-size", "3", "--include-self").stdout)
    check([g["query"] for g in got] == [f"t{i}" if i % 3 else ids[i] for i in range(12)],
          f"batched queries in order: {[g['query'] for g in got]}")
    for i, g in enumerate(got):
        check(g["hits"][0]["id"] == ids[i] and abs(g["hits"][0]["score"] - 1) < 1e-5,
              f"query {i} ({g['query']}), embedded in a batch of texts, found {g['hits'][0]}")
    stdin = run("search", "--embeddings", embeddings, "--text", "-", "--tokenizer", corpus, "--format", "jsonl",
                stdin=by_id[ids[9]]["text"])
    check(hits(stdin.stdout)[0]["hits"][0]["id"] == ids[9], "--text - reads standard input")
    check(hits(stdin.stdout)[0]["query"] == by_id[ids[9]]["text"],
          f"JSON lines echo a text query as given: {hits(stdin.stdout)[0]['query'][:80]!r}")

    # encode: the corpus's raw JSONL gives embed's vectors.
    lines = hits(run("encode", "--model", model, "--tokenizer", corpus, "--input", articles).stdout)
    encoded = {line["id"]: np.array(line["vector"]) for line in lines}
    check(sorted(encoded) == sorted(ids), f"encode wrote {len(encoded)} of {len(ids)} documents")
    figures["encode_max_abs_diff"] = max(float(np.abs(encoded[i] - vectors[r]).max()) for r, i in enumerate(ids))
    check(figures["encode_max_abs_diff"] < 1e-6, f"encode differs from embed by {figures['encode_max_abs_diff']}")
    encoded_h5 = os.path.join(scratch, "encoded.h5")
    run("encode", "--model", model, "--tokenizer", corpus, "--input", articles, "--output", encoded_h5)
    run("encode", "--model", model, "--tokenizer", corpus, "--input", articles, "--output", encoded_h5, fail=True)
    empty_input = os.path.join(scratch, "empty.jsonl")
    open(empty_input, "w").close()
    err = run("encode", "--model", model, "--input", empty_input, "--output", os.path.join(scratch, "none.h5"),
              fail=True).stderr
    check("no document with text in" in err and not os.path.exists(os.path.join(scratch, "none.h5")),
          f"encode of an empty input: {err}")
    h5_ids, h5_vectors = read_vectors(encoded_h5)
    check(h5_ids == [a["id"] for a in raw] and np.abs(h5_vectors - np.stack([encoded[i] for i in h5_ids])).max() < 1e-6,
          "encode --output holds the JSON lines' vectors in input order")
    from_encode = hits(run("search", "--embeddings", encoded_h5, "--id", ids[2], "--format", "jsonl",
                           "--include-self").stdout)
    check(from_encode[0]["hits"][0]["id"] == ids[2], "search reads an encode file")

    # Hybrid: (cosine + TF-IDF cosine) / 2, the TF-IDF recomputed here.
    rows = tfidf(corpus)
    check(len(rows) == len(ids), f"{len(rows)} shard documents, {len(ids)} vectors")
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    q = 17
    lexical = np.array([sum(v * r.get(t, 0.0) for t, v in rows[q].items()) for r in rows])
    fused = 0.5 * (unit @ unit[q]) + 0.5 * lexical
    order = np.argsort(-fused, kind="stable")[:10]
    got = hits(run("search", "--embeddings", embeddings, "--id", ids[q], "--format", "jsonl",
                   "--lexical-weight", "0.5", "--include-self").stdout)[0]["hits"]
    same_ranking(got, order, fused[order], ids, "hybrid search")

    # SDR: the hierarchical score re-ranks; a document is its own best match.
    sdr_run = os.path.join(scratch, "sdr")
    run("pretrain", "--corpus", corpus, "--model-config", os.path.join(scratch, "sdr.yaml"), "--objective", "sdr",
        "--run", sdr_run, "--steps", "2", "--batch-size", "4", "--warmup-steps", "1", "--decay-steps", "2",
        "--no-progress")
    sdr_embeddings = os.path.join(scratch, "sdr.h5")
    run("embed", "--model", os.path.join(sdr_run, "latest"), "--corpus", corpus, "--output", sdr_embeddings,
        "--no-progress")
    raw = hits(run("search", "--embeddings", sdr_embeddings, "--id", ids[4], "--format", "jsonl",
                   "--rerank", str(len(ids)), "--no-sdr-normalize", "--include-self").stdout)[0]["hits"]
    check(raw[0]["id"] == ids[4] and abs(raw[0]["score"] - 1) < 1e-5, f"SDR, raw: {ids[4]} found {raw[0]} first")
    got = hits(run("search", "--embeddings", sdr_embeddings, "--id", ids[4], "--format", "jsonl",
                   "--rerank", str(len(ids)), "--include-self").stdout)[0]["hits"]
    expected = sdr_zscored_self_score(sdr_embeddings, 4)
    check(got[0]["id"] == ids[4] and abs(got[0]["score"] - expected) < 1e-4 * abs(expected),
          f"SDR, z-scored (the default): {ids[4]} found {got[0]} first, numpy's self score {expected}")
    check(all(a["score"] >= b["score"] for a, b in zip(got, got[1:])), "SDR hits in score order")
    # --ann gives SDR its candidates from the index; re-ranking all of them
    # must give exact search's list.
    run("index", "--embeddings", sdr_embeddings, "--no-progress")
    approximate = hits(run("search", "--embeddings", sdr_embeddings, "--id", ids[4], "--format", "jsonl",
                           "--rerank", str(len(ids)), "--ann", "--include-self").stdout)[0]["hits"]
    check([h["id"] for h in approximate] == [h["id"] for h in got] and
          max(abs(a["score"] - b["score"]) for a, b in zip(approximate, got)) < 1e-6,
          f"SDR --ann: {approximate} vs {got}")
    figures["sdr_zscored_self_score"] = round(expected, 4)

    # Errors name what is wrong.
    bad = run("search", "--embeddings", embeddings, "--id", "no-such-page", fail=True)
    check('no document "no-such-page"' in bad.stderr, f"unknown id: {bad.stderr}")
    with open(queries, "w") as f:
        f.write(json.dumps({"id": ids[1]}) + "\n" + json.dumps({"title": "x"}) + "\n")
    bad = run("search", "--embeddings", embeddings, "--queries", queries, fail=True)
    check(f"{queries}:2:" in bad.stderr, f"a bad query line: {bad.stderr}")
    # A training checkpoint carries its corpus's tokenizer: no --tokenizer needed.
    own = hits(run("search", "--embeddings", encoded_h5, "--text", by_id[ids[9]]["text"], "--format", "jsonl").stdout)
    given = hits(run("search", "--embeddings", encoded_h5, "--text", by_id[ids[9]]["text"], "--tokenizer", corpus,
                     "--format", "jsonl").stdout)
    check(own[0]["hits"][0]["id"] == ids[9] and own[0]["hits"] == given[0]["hits"],
          f"a text query with the checkpoint's own tokenizer: {own[0]['hits'][:2]} vs {given[0]['hits'][:2]}")
    bad = run("search", "--embeddings", embeddings, "--text", "man pages", "--tokenizer",
              os.path.join(scratch, "tiny.yaml"), fail=True)
    check("tiny.yaml" in bad.stderr, f"a file that is not a tokenizer is named: {bad.stderr}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
