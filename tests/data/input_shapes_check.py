#!/usr/bin/env python3
"""prepare takes a BEIR dataset folder and sentence-transformers text pairs as
they come (data/text/input_shapes.h):

  * a BEIR folder written here (corpus.jsonl with _id/title/text,
    queries.jsonl, graded qrels/test.tsv) gives a corpus whose documents open
    with their titles, a query corpus with the corpus's tokenizer, and eval
    --queries ranks exactly the qrels' queries with them;
  * a document with no text is skipped and listed in skipped.jsonl; the test
    qrels that judge it still evaluate, and every metric equals trec_eval's
    (pytrec-eval-terrier) on eval's run with it counted as never retrieved;
  * qrels/train.tsv and dev.tsv become pairs.train/valid.jsonl in
    <output>-train (query:<id> beside the judged documents, grade 0 as label
    0, a judgement of the empty document left out), pairs eval reads there;
  * a pairs file (anchor, positive, some negatives, texts repeated) gives one
    document per distinct text and pairs.jsonl with the ids a second reading
    here assigns, labels 1 and 0; eval --test-pairs reads that file;
  * a pair line without "positive", and a folder with queries but no
    corpus.jsonl, are refused naming the line or the file.

usage: input_shapes_check.py DOCMATCH SCRATCH
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "baselines"))
from docmatch_vectors import write_embeddings  # noqa: E402  (the format's one writer in Python)


def check(condition, message):
    if not condition:
        sys.exit("FAILED: " + message)


def run(docmatch, *args, fail=False):
    result = subprocess.run([docmatch, *args], capture_output=True, text=True)
    if fail:
        check(result.returncode != 0, f"{args[:4]} should have failed")
    elif result.returncode != 0:
        sys.exit(f"FAILED: docmatch {' '.join(args)}\n{result.stdout}\n{result.stderr[-2000:]}")
    return result


def random_vectors(path, ids, rng):
    write_embeddings(path, ids, rng.standard_normal((len(ids), 8)), "match_bert", "elsewhere")


def main():
    docmatch, scratch = sys.argv[1:3]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    rng = np.random.default_rng(11)
    words = ["river", "mountain", "glacier", "valley", "ocean", "desert", "forest", "island", "canyon", "plateau"]
    figures = {}

    # BEIR: corpus.jsonl (_id, title, text), queries.jsonl, qrels/test.tsv.
    beir = os.path.join(scratch, "beir")
    os.makedirs(os.path.join(beir, "qrels"))
    titles = {}
    with open(os.path.join(beir, "corpus.jsonl"), "w") as f:
        for d in range(24):
            titles[f"doc{d}"] = f"Title {words[d % 10].capitalize()} {d}"
            text = " ".join(rng.choice(words, 12)) + ". " + " ".join(rng.choice(words, 9)) + "."
            f.write(json.dumps({"_id": f"doc{d}", "title": titles[f"doc{d}"], "text": text}) + "\n")
        f.write(json.dumps({"_id": "docEmpty", "title": "", "text": " "}) + "\n")  # prepare skips it
    with open(os.path.join(beir, "queries.jsonl"), "w") as f:
        for q in range(6):
            f.write(json.dumps({"_id": f"q{q}", "text": f"where is the {words[q]}?", "metadata": {}}) + "\n")
    with open(os.path.join(beir, "qrels", "test.tsv"), "w") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for q in range(5):  # q5 has no judgement: not ranked
            f.write(f"q{q}\tdoc{q}\t2\nq{q}\tdoc{q + 10}\t1\n")
        f.write("q0\tdocEmpty\t1\n")  # relevant and never found, as trec_eval counts it
    # The training split (the hint must still evaluate on test.tsv): pairs in
    # a corpus of their own, a judgement of the empty document left out.
    with open(os.path.join(beir, "qrels", "train.tsv"), "w") as f:
        f.write("query-id\tcorpus-id\tscore\nq5\tdoc5\t1\nq5\tdoc6\t0\nq4\tdoc7\t1\nq4\tdocEmpty\t1\n")
    with open(os.path.join(beir, "qrels", "dev.tsv"), "w") as f:
        f.write("query-id\tcorpus-id\tscore\nq3\tdoc8\t1\n")
    corpus = os.path.join(scratch, "scifact")
    said = run(docmatch, "prepare", "--input", beir, "--output", corpus + "/", "--vocab-size", "120",
               "--no-progress").stdout  # a trailing slash: the queries still go beside the corpus
    check("is a BEIR dataset" in said and f"--relevance {os.path.join(beir, 'qrels', 'test.tsv')} " in said and
          f"--queries {corpus}-queries" in said, f"prepare of a BEIR folder says what it made:\n{said}")
    skipped = [json.loads(line) for line in open(os.path.join(corpus, "skipped.jsonl"))]
    check(skipped == [{"id": "docEmpty", "reason": "empty"}], f"skipped.jsonl {skipped}")
    inspected = json.loads(run(docmatch, "inspect", corpus).stdout)
    queries_inspected = json.loads(run(docmatch, "inspect", corpus + "-queries").stdout)
    check(inspected["documents"] == 24 and queries_inspected["documents"] == 6,
          f"documents {inspected['documents']} and queries {queries_inspected['documents']}")
    shown = run(docmatch, "inspect", corpus, "--doc", "doc3").stdout.splitlines()
    first = shown[shown.index("  ¶1") + 1].strip()  # the first paragraph's one sentence, decoded
    check(first == "[0] " + titles["doc3"] and shown[shown.index("  ¶1") + 2].strip() == "",
          f"doc3's first paragraph is its title '{titles['doc3']}':\n" + "\n".join(shown))
    random_vectors(os.path.join(scratch, "docs.h5"), [f"doc{d}" for d in range(24)], rng)
    random_vectors(os.path.join(scratch, "queries.h5"), [f"q{q}" for q in range(6)], rng)
    out = os.path.join(scratch, "eval")
    said = run(docmatch, "eval", "--embeddings", os.path.join(scratch, "docs.h5"), "--corpus", corpus, "--queries",
               corpus + "-queries", "--query-embeddings", os.path.join(scratch, "queries.h5"), "--relevance",
               os.path.join(beir, "qrels", "test.tsv"), "--output", out, "--write-rankings", "24",
               "--no-progress").stderr
    check("judges 1 document that prepare skipped" in said, f"eval says the skipped document:\n{said}")
    ranking = json.load(open(os.path.join(out, "metrics.json")))["ranking"]
    check(ranking["queries"] == 5 and ranking["candidates"] == 24, f"eval of the BEIR set: {ranking}")
    # Every metric as trec_eval gives it on eval's own run, with the skipped
    # document in the qrels: relevant, never retrieved.
    import pytrec_eval
    qrels = {}
    for line in open(os.path.join(beir, "qrels", "test.tsv")).read().splitlines()[1:]:
        q, d, g = line.split("\t")
        qrels.setdefault(q, {})[d] = int(g)
    trec_run = {}
    for line in open(os.path.join(out, "run.trec")):
        q, _, d, _, score, _ = line.split()
        trec_run.setdefault(q, {})[d] = float(score)
    measures = {"recip_rank", "map", "ndcg_cut.10", "recall.10", "recall.100", "P.1"}
    per_query = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(trec_run)
    mean = lambda key: float(np.mean([v[key] for v in per_query.values()]))  # noqa: E731
    for ours, theirs in (("mrr", "recip_rank"), ("map", "map"), ("ndcg@10", "ndcg_cut_10"), ("recall@10", "recall_10"),
                         ("recall@100", "recall_100"), ("p@1", "P_1")):
        check(abs(ranking[ours] - mean(theirs)) < 1e-9, f"{ours} {ranking[ours]} against trec_eval's {mean(theirs)}")
    check(per_query["q0"]["recall_100"] == 2 / 3, f"q0 finds 2 of its 3 relevant: {per_query['q0']}")
    figures["beir"] = {"documents": 24, "queries": 6, "ranked": ranking["queries"], "map": ranking["map"]}

    # The training split: query:<id> beside the documents they judge.
    train = corpus + "-train"
    train_pairs = [json.loads(line) for line in open(os.path.join(train, "pairs.train.jsonl"))]
    valid_pairs = [json.loads(line) for line in open(os.path.join(train, "pairs.valid.jsonl"))]
    check(train_pairs == [{"source": "query:q5", "target": "doc5", "label": 1},
                          {"source": "query:q5", "target": "doc6", "label": 0},
                          {"source": "query:q4", "target": "doc7", "label": 1}] and
          valid_pairs == [{"source": "query:q3", "target": "doc8", "label": 1}],
          f"pairs.train.jsonl {train_pairs}, pairs.valid.jsonl {valid_pairs}")
    prepared_said = run(docmatch, "prepare", "--input", beir, "--output", corpus, "--overwrite", "--vocab-size", "120",
                        "--no-progress").stdout
    check(f"finetune --init MODEL --corpus {train} --train-pairs {train}/pairs.train.jsonl --valid-pairs "
          f"{train}/pairs.valid.jsonl --loss contrastive --hard-negatives 1" in prepared_said and
          "1 relevant and 0 unrelated pairs" in prepared_said,
          f"prepare names the finetune command:\n{prepared_said}")
    check(json.loads(run(docmatch, "inspect", train).stdout)["documents"] == 7, "3 queries and 4 documents")
    shown = run(docmatch, "inspect", train, "--doc", "doc7").stdout.splitlines()
    check(shown[shown.index("  ¶1") + 1].strip() == "[0] " + titles["doc7"], "doc7 opens with its title")
    train_ids = ["query:q5", "doc5", "doc6", "query:q4", "doc7", "query:q3", "doc8"]
    random_vectors(os.path.join(scratch, "train.h5"), train_ids, rng)
    run(docmatch, "eval", "--embeddings", os.path.join(scratch, "train.h5"), "--corpus", train, "--test-pairs",
        os.path.join(train, "pairs.train.jsonl"), "--output", os.path.join(scratch, "eval-train"), "--no-progress")
    test = json.load(open(os.path.join(scratch, "eval-train", "metrics.json")))["classification"]["test"]
    check(test["pairs"] == 3, f"eval reads the 3 training pairs: {test}")
    figures["beir_train"] = {"pairs": len(train_pairs), "valid_pairs": len(valid_pairs)}

    # sentence-transformers pairs: anchor, positive, optional negative.
    lines = [("how do I print", "printf formats output", "malloc allocates memory"),
             ("allocate memory", "malloc allocates memory", None),
             ("how do I print", "puts writes a line", "free releases memory"),
             ("copy a string", "strcpy copies", "printf formats output")]
    pairs_in = os.path.join(scratch, "pairs.jsonl")
    with open(pairs_in, "w") as f:
        for anchor, positive, negative in lines:
            record = {"anchor": anchor, "positive": positive}
            if negative:
                record["negative"] = negative
            f.write(json.dumps(record) + "\n")
    ids, expected = {}, []
    for anchor, positive, negative in lines:  # ids in order of first appearance
        for text in (anchor, positive, negative):
            if text and text not in ids:
                ids[text] = f"t{len(ids) + 1}"
        expected.append({"source": ids[anchor], "target": ids[positive], "label": 1})
        if negative:
            expected.append({"source": ids[anchor], "target": ids[negative], "label": 0})
    pairs_corpus = os.path.join(scratch, "pairs-corpus")
    said = run(docmatch, "prepare", "--input", pairs_in, "--output", pairs_corpus, "--vocab-size", "64",
               "--no-progress").stdout
    written = [json.loads(line) for line in open(os.path.join(pairs_corpus, "pairs.jsonl"))]
    check(written == expected, f"pairs.jsonl {written}\nexpected {expected}")
    check(json.loads(run(docmatch, "inspect", pairs_corpus).stdout)["documents"] == len(ids) and
          f"4 lines, 4 related and 3 unrelated pairs over {len(ids)} distinct texts" in said and
          "--hard-negatives 1" in said,
          f"one document per distinct text ({len(ids)}):\n{said}")
    check(not os.path.exists(pairs_corpus + ".pairs-import"), "the staged texts were left behind")
    random_vectors(os.path.join(scratch, "texts.h5"), [f"t{i + 1}" for i in range(len(ids))], rng)
    run(docmatch, "eval", "--embeddings", os.path.join(scratch, "texts.h5"), "--corpus", pairs_corpus,
        "--test-pairs", os.path.join(pairs_corpus, "pairs.jsonl"), "--output", os.path.join(scratch, "eval-pairs"),
        "--no-progress")
    test = json.load(open(os.path.join(scratch, "eval-pairs", "metrics.json")))["classification"]["test"]
    check(test["pairs"] == 7, f"eval reads the 7 pairs: {test}")
    figures["pairs"] = {"texts": len(ids), "pairs": len(written)}

    # Mistakes are named.
    with open(os.path.join(scratch, "bad-pairs.jsonl"), "w") as f:
        f.write(json.dumps({"anchor": "a", "positive": "b"}) + "\n" + json.dumps({"anchor": "c"}) + "\n")
    err = run(docmatch, "prepare", "--input", os.path.join(scratch, "bad-pairs.jsonl"), "--output",
              os.path.join(scratch, "bad"), fail=True).stderr
    check("bad-pairs.jsonl:2: a pair line needs string \"anchor\" and \"positive\"" in err, err)
    with open(os.path.join(scratch, "empty-pairs.jsonl"), "w") as f:
        f.write(json.dumps({"anchor": "a", "positive": "b"}) + "\n" + json.dumps({"anchor": "c", "positive": " "}) + "\n")
    err = run(docmatch, "prepare", "--input", os.path.join(scratch, "empty-pairs.jsonl"), "--output",
              os.path.join(scratch, "empty"), fail=True).stderr
    check("empty-pairs.jsonl:2: \"positive\" is empty" in err, err)
    half = os.path.join(scratch, "half-beir")
    os.makedirs(half)
    shutil.copy(os.path.join(beir, "queries.jsonl"), half)
    err = run(docmatch, "prepare", "--input", half, "--output", os.path.join(scratch, "half"), fail=True).stderr
    check("looks like a BEIR dataset" in err and "no corpus.jsonl" in err, err)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
