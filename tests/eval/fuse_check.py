#!/usr/bin/env python3
"""`docmatch fuse` on the tiny real corpus (tiny_manpages.py): two models'
vectors (different seeds and widths, each embedded by `docmatch embed`) fused
with weights 1 and 3, against numpy:

  * the file holds each input's rows at unit length times sqrt(w / sum w),
    side by side, in the first file's order, kind "fused", the first file's
    corpus, and the weights it was made with;
  * so its cosine is the weighted mean of the inputs' cosines (float64);
  * a second input whose rows are in another order (rewritten here with
    h5py, reversed) fuses to the same file;
  * eval reads it without --model: MRR and P@1 over every query equal
    numpy's ranking by the weighted mean cosine, and with --lexical-weight
    0.5 numpy's ranking by (mean cosine + TF-IDF cosine) / 2;
  * search --id returns numpy's top 5 with its scores; search --text and
    --model, and eval --model, are refused, naming the fused file;
  * mistakes are named and leave no output: one file, a weight count that
    does not match, a weight of 0, files of different documents (a row
    dropped; an id renamed), SMASH vectors, an existing output without
    --overwrite, an output that is an input, and while writing a NaN or a
    zero row (the temporary file goes too).

usage: fuse_check.py DOCMATCH FIXTURE SCRATCH
"""
import json
import os
import shutil
import sys
from collections import Counter

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from queries_check import check, documents, ranking, run, tfidf_rows  # noqa: E402

MODEL = """model: {{kind: match_bert, hidden: {hidden}, heads: 2, intermediate: 64, layers: 1, max_tokens: 128,
        dropout: 0.1}}
"""


def read(path):
    with h5py.File(path, "r") as f:
        ids = [i.decode() if isinstance(i, bytes) else i for i in f["document_ids"][:]]
        attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
        return ids, f["vectors"][:].astype(np.float64), attrs


def rewrite(source, target, order=None, rename=None):
    """A copy of an embeddings file, attributes included, its rows in `order`
    (a list of row numbers) and one id renamed (old, new)."""
    ids, vectors, attrs = read(source)
    order = list(range(len(ids))) if order is None else order
    ids = [ids[i] for i in order]
    if rename:
        ids = [rename[1] if i == rename[0] else i for i in ids]
    with h5py.File(target, "w") as f:
        f["document_ids"] = np.array(ids, dtype=h5py.string_dtype())
        f["vectors"] = vectors[order].astype(np.float32)
        for k, v in attrs.items():
            f.attrs[k] = v


def unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def main():
    docmatch, fixture, scratch = sys.argv[1:4]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    corpus = os.path.join(fixture, "corpus")
    relevance_file = os.path.join(fixture, "relevance.test.jsonl")
    files = []
    for seed, hidden in ((1, 32), (2, 48)):
        config = os.path.join(scratch, f"model-{hidden}.yaml")
        with open(config, "w") as f:
            f.write(MODEL.format(hidden=hidden))
        run_dir = os.path.join(scratch, f"run-{hidden}")
        run(docmatch, "pretrain", "--corpus", corpus, "--model-config", config, "--objective", "wp", "--run", run_dir,
            "--steps", "2", "--batch-size", "4", "--warmup-steps", "1", "--decay-steps", "2", "--seed", str(seed),
            "--no-progress")
        files.append(os.path.join(scratch, f"vectors-{hidden}.h5"))
        run(docmatch, "embed", "--model", os.path.join(run_dir, "latest"), "--corpus", corpus, "--output", files[-1],
            "--no-progress")
    fused = os.path.join(scratch, "fused.h5")
    said = run(docmatch, "fuse", "--embeddings", files[0], "--embeddings", files[1], "--weight", "1", "--weight", "3",
               "--output", fused).stdout
    ids_a, a, attrs_a = read(files[0])
    ids_b, b, _ = read(files[1])
    ids, v, attrs = read(fused)
    check(f"[fuse] {len(ids_a)} documents, 2 files -> {fused}" in said, said)
    check(ids == ids_a == ids_b and v.shape == (len(ids_a), 80), f"ids and shape {v.shape}")
    expected = np.concatenate([unit(a) * np.sqrt(0.25), unit(b) * np.sqrt(0.75)], axis=1)
    check(np.abs(v - expected).max() < 1e-6, f"the rows differ from numpy's by {np.abs(v - expected).max():.2e}")
    check(attrs["kind"] == "fused" and attrs["dimension"] == 80 and attrs["model"] == "" and
          attrs["corpus"] == attrs_a["corpus"], f"attributes {attrs}")
    # Each input's share, file and the model that made it.
    models = [os.path.realpath(os.path.join(scratch, f"run-{hidden}", "latest")) for hidden in (32, 48)]
    check(attrs["fused_from"].startswith("0.250000 ") and "; 0.750000 " in attrs["fused_from"] and
          f"vectors-32.h5 ({attrs_a['kind']} model {attrs_a['model']}); " in attrs["fused_from"] and
          attrs["fused_from"].endswith(f"vectors-48.h5 ({attrs_a['kind']} model {read(files[1])[2]['model']})") and
          all(m in attrs["fused_from"] for m in models), f"fused_from {attrs['fused_from']} (models {models})")
    mean_cosine = 0.25 * unit(a) @ unit(a).T + 0.75 * unit(b) @ unit(b).T
    check(np.abs(v @ v.T - mean_cosine).max() < 1e-6, "the fused cosine is not the weighted mean of the inputs'")
    cosine = unit(v) @ unit(v).T  # what eval and search rank by: the file's float32 rows, in float64

    # The second file in another order fuses to the same rows.
    reversed_b = os.path.join(scratch, "reversed.h5")
    rewrite(files[1], reversed_b, order=list(range(len(ids_b)))[::-1])
    again = os.path.join(scratch, "fused-reordered.h5")
    run(docmatch, "fuse", "--embeddings", files[0], "--embeddings", reversed_b, "--weight", "1", "--weight", "3",
        "--output", again)
    ids_again, v_again, _ = read(again)
    check(ids_again == ids and np.array_equal(v_again, v), "a reordered input changes the fused rows")

    # eval without --model: dense, then hybrid with TF-IDF.
    lists = [json.loads(line) for line in open(relevance_file)]
    row = {i: n for n, i in enumerate(ids)}
    rows = [row[r["query"]] for r in lists]
    relevant = [{row[t] for t in r["relevant"]} for r in lists]
    dense = cosine[rows]
    dense[np.arange(len(rows)), rows] = -np.inf  # a query is not its own candidate
    mrr, p1 = ranking(dense, relevant)
    out = os.path.join(scratch, "eval")
    run(docmatch, "eval", "--embeddings", fused, "--corpus", corpus, "--relevance", relevance_file, "--max-queries",
        "0", "--output", out, "--no-progress")
    report = json.load(open(os.path.join(out, "metrics.json")))
    check(report["model"] == "fused: " + attrs["fused_from"], f"eval names the fused models: {report['model']}")
    metrics = report["ranking"]
    check(metrics["queries"] == len(lists), f"{metrics['queries']} queries ranked, expected {len(lists)}")
    check(abs(metrics["mrr"] - mrr) < 1e-9 and abs(metrics["p@1"] - p1) < 1e-9,
          f"MRR {metrics['mrr']} / P@1 {metrics['p@1']} against numpy {mrr} / {p1}")
    docs = documents(corpus)
    df = Counter(t for d in docs for t in set(d))
    weights = tfidf_rows(docs, df, len(docs))
    lexical = np.array([[sum(w * c.get(t, 0.0) for t, w in weights[q].items()) for c in weights] for q in rows])
    hybrid_scores = 0.5 * cosine[rows] + 0.5 * lexical
    hybrid_scores[np.arange(len(rows)), rows] = -np.inf
    hybrid_mrr, _ = ranking(hybrid_scores, relevant)
    out = os.path.join(scratch, "eval-hybrid")
    run(docmatch, "eval", "--embeddings", fused, "--corpus", corpus, "--relevance", relevance_file, "--max-queries",
        "0", "--lexical-weight", "0.5", "--output", out, "--no-progress")
    got = json.load(open(os.path.join(out, "metrics.json")))["ranking"]["mrr"]
    check(abs(got - hybrid_mrr) < 1e-9, f"hybrid MRR {got} against numpy {hybrid_mrr}")
    check(abs(hybrid_mrr - mrr) > 1e-6, "TF-IDF changed no ranking: the hybrid check could not fail")

    # search by id: numpy's top 5; a text has no one model to embed it.
    query = ids[rows[0]]
    hits = run(docmatch, "search", "--embeddings", fused, "--id", query, "--top", "5", "--exclude-self",
               "--format", "jsonl").stdout
    hits = [json.loads(line) for line in hits.splitlines() if line.strip()]
    hits = hits[0]["hits"] if len(hits) == 1 and "hits" in hits[0] else hits
    scores = cosine[rows[0]].copy()
    scores[rows[0]] = -np.inf
    top = np.argsort(-scores, kind="stable")[:5]
    check([h["id"] for h in hits] == [ids[i] for i in top], f"search --id {query}: {hits}")
    check(all(abs(h["score"] - scores[i]) < 1e-5 for h, i in zip(hits, top)), f"search scores {hits}")
    said = run(docmatch, "search", "--embeddings", fused, "--text", "format and print", fail=True).stderr
    check("fuses several models' vectors" in said and "fused.h5" in said, said)
    said = run(docmatch, "search", "--embeddings", fused, "--id", query, "--model",
               os.path.join(scratch, "run-32", "latest"), fail=True).stderr
    check("is searched without a model" in said, said)
    said = run(docmatch, "eval", "--model", os.path.join(scratch, "run-32", "latest"), "--embeddings", fused,
               "--corpus", corpus, "--relevance", relevance_file, "--output", os.path.join(scratch, "e1"),
               "--no-progress", fail=True).stderr
    check("evaluate it without --model" in said, said)

    # Mistakes, named; no output left behind.
    def refused(args, needle):
        target = os.path.join(scratch, "refused.h5")
        said = run(docmatch, "fuse", *args, "--output", target, fail=True).stderr
        check(needle in said, f"fuse {args}: expected '{needle}' in\n{said}")
        check(not os.path.exists(target) and not os.path.exists(target + ".tmp"), f"fuse {args} left a file")

    refused(["--embeddings", files[0]], "needs two or more --embeddings files, got 1")
    refused(["--embeddings", files[0], "--embeddings", files[1], "--weight", "1"],
            "1 --weight values for 2 --embeddings files")
    refused(["--embeddings", files[0], "--embeddings", files[1], "--weight", "1", "--weight", "0"],
            "weights are positive")
    short = os.path.join(scratch, "short.h5")
    rewrite(files[1], short, order=list(range(len(ids_b) - 1)))
    refused(["--embeddings", files[0], "--embeddings", short], f"holds {len(ids_a)} documents and '{short}' "
            f"{len(ids_a) - 1}")
    renamed = os.path.join(scratch, "renamed.h5")
    rewrite(files[1], renamed, rename=(ids_b[3], "not-a-page"))
    refused(["--embeddings", files[0], "--embeddings", renamed], f"document '{ids_b[3]}' of '{files[0]}' is not in")
    smash = os.path.join(scratch, "smash.h5")
    rewrite(files[1], smash)
    with h5py.File(smash, "a") as f:
        f.attrs["kind"] = "smash"
    refused(["--embeddings", files[0], "--embeddings", smash], "holds SMASH vectors")
    said = run(docmatch, "fuse", "--embeddings", files[0], "--embeddings", files[1], "--output", fused,
               fail=True).stderr
    check("exists; pass --overwrite" in said, said)
    said = run(docmatch, "fuse", "--embeddings", files[0], "--embeddings", files[1], "--output", files[0],
               "--overwrite", fail=True).stderr
    check("[fuse] will not write" in said and read(files[0])[1].shape == a.shape, f"an input as the output: {said}")
    # Refusals found while writing (a row past the first block would be the
    # same): the temporary file goes too.
    for name, value, needle in (("nan", np.nan, "holds NaN or Inf"), ("zero", 0.0, "a zero vector")):
        bad = os.path.join(scratch, f"{name}.h5")
        rewrite(files[1], bad)
        with h5py.File(bad, "a") as f:
            f["vectors"][5] = value
        refused(["--embeddings", files[0], "--embeddings", bad], needle)

    print(json.dumps({"documents": len(ids), "queries": len(lists), "mrr": round(mrr, 6),
                      "hybrid_mrr": round(hybrid_mrr, 6)}))


if __name__ == "__main__":
    main()
