#!/usr/bin/env python3
"""docmatch against sentence-transformers, like for like, on real articles:

- all-MiniLM-L6-v2 imported (`import-hf --chunks 3`), a corpus of 40
  Wikispeedia articles prepared with the imported WordPiece tokenizer, and
  `docmatch embed` give the vectors that sentence-transformers gives
  (scripts/baselines/st-embed.py --max-windows 3: windows of 254 ids between
  [CLS] and [SEP], mean pooling, normalised, averaged, normalised) within
  1e-4 for every article;
- `docmatch eval --embeddings` without --model scores those vectors by
  cosine: its MRR equals one recomputed here with numpy;
- vectors out of corpus order are refused naming the row;
- `search --id` returns numpy's top 10 over the embed file (the article
  itself first), and `encode` of the raw articles equals `embed`.

Prints one JSON line of figures; exit 77 (skip) without the Wikispeedia
plaintext (../shared/data/wikispeedia).

usage: st_parity_check.py DOCMATCH SCRATCH_DIR
"""
import json
import os
import random
import shutil
import subprocess
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")))
from real_data import MINILM as MODEL, ROOT, WIKISPEEDIA, skip_without, write_articles  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "scripts", "baselines"))
from docmatch_vectors import write_embeddings  # noqa: E402


def read_vectors(path):
    with h5py.File(path, "r") as f:
        return [i.decode() for i in f["document_ids"][:]], f["vectors"][:].astype(np.float64)


def main():
    docmatch, scratch = sys.argv[1:3]
    skip_without(WIKISPEEDIA)
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    articles = os.path.join(scratch, "articles.jsonl")
    write_articles(articles, 40, seed=3)

    model, corpus = os.path.join(scratch, "minilm"), os.path.join(scratch, "corpus")
    run = lambda *args: subprocess.run([docmatch, *args], check=True, stdout=subprocess.DEVNULL)  # noqa: E731
    run("import-hf", MODEL, "--output", model, "--chunks", "3")
    run("prepare", "--input", articles, "--output", corpus, "--tokenizer", model,
        "--no-progress")
    mine = os.path.join(scratch, "docmatch.h5")
    run("embed", "--model", model, "--corpus", corpus, "--output", mine, "--no-progress")
    theirs = os.path.join(scratch, "st.h5")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "baselines", "st-embed.py"), "--model", MODEL,
                    "--corpus", corpus, "--articles", articles, "--max-windows", "3", "--output", theirs],
                   check=True, stdout=subprocess.DEVNULL)
    ids, a = read_vectors(mine)
    st_ids, b = read_vectors(theirs)
    assert ids == st_ids, "document order differs"
    diff = np.abs(a - b).max(axis=1)
    worst = int(diff.argmax())
    assert diff.max() <= 1e-4, f"{ids[worst]}: max |docmatch - sentence-transformers| = {diff.max():.2e}"

    # Cosine scoring of vectors made elsewhere, against numpy.
    relevance = os.path.join(scratch, "relevance.jsonl")
    rng = random.Random(5)
    lists = {q: rng.sample([i for i in range(len(ids)) if i != q], 3) for q in range(0, len(ids), 4)}
    with open(relevance, "w") as f:
        for q, rel in lists.items():
            f.write(json.dumps({"query": ids[q], "relevant": [ids[r] for r in rel]}) + "\n")
    out = os.path.join(scratch, "eval")
    run("eval", "--embeddings", theirs, "--corpus", corpus, "--relevance", relevance, "--output", out,
        "--no-progress")
    with open(os.path.join(out, "metrics.json")) as f:
        mrr = json.load(f)["ranking"]["mrr"]
    unit = b / np.linalg.norm(b, axis=1, keepdims=True)
    cosine = unit @ unit.T
    reciprocal = []
    for q, rel in lists.items():
        order = [i for i in np.argsort(-cosine[q], kind="stable") if i != q]
        reciprocal.append(1.0 / (1 + min(order.index(r) for r in rel)))
    assert abs(mrr - np.mean(reciprocal)) <= 1e-9, (mrr, np.mean(reciprocal))

    swapped = os.path.join(scratch, "swapped.h5")
    write_embeddings(swapped, [ids[1], ids[0]] + ids[2:], b[[1, 0] + list(range(2, len(ids)))], "test", "swapped")
    proc = subprocess.run([docmatch, "eval", "--embeddings", swapped, "--corpus", corpus, "--relevance", relevance,
                           "--output", out], capture_output=True, text=True)
    assert proc.returncode != 0 and "row 0 is document" in proc.stderr, proc.stderr

    # search and encode on the Wikispeedia articles: the imported model carries
    # its tokenizer, the embed file names the corpus (titles) and the model.
    mine_unit = a / np.linalg.norm(a, axis=1, keepdims=True)
    for q in (0, 13, 27):
        proc = subprocess.run([docmatch, "search", "--embeddings", mine, "--id", ids[q], "--format", "jsonl",
                               "--include-self"],
                              check=True, capture_output=True, text=True)
        hits = json.loads(proc.stdout)["hits"]
        scores = mine_unit @ mine_unit[q]
        order = np.argsort(-scores, kind="stable")[:10]
        assert [h["id"] for h in hits] == [ids[i] for i in order], (ids[q], hits, [ids[i] for i in order])
        assert max(abs(h["score"] - scores[i]) for h, i in zip(hits, order)) < 1e-9
        assert hits[0]["id"] == ids[q] and all(h["title"] for h in hits)
    proc = subprocess.run([docmatch, "encode", "--model", model, "--input", articles], check=True,
                          capture_output=True, text=True)
    encoded = {line["id"]: np.array(line["vector"]) for line in map(json.loads, proc.stdout.splitlines())}
    encode_diff = max(float(np.abs(encoded[i] - a[r]).max()) for r, i in enumerate(ids))
    assert sorted(encoded) == sorted(ids) and encode_diff < 1e-6, encode_diff
    print(json.dumps({"articles": len(ids), "max_abs_vs_sentence_transformers": float(diff.max()),
                      "mrr": mrr, "mrr_numpy": float(np.mean(reciprocal)), "encode_max_abs_vs_embed": encode_diff}))


if __name__ == "__main__":
    main()
