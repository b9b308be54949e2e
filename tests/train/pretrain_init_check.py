#!/usr/bin/env python3
"""`pretrain --init`: continued self-supervised training from a pretrained
encoder, on real articles.

- all-MiniLM-L6-v2 imported (`import-hf`, MatchBERT, mean pooling) and 64
  Wikispeedia articles prepared with its WordPiece tokenizer: the first
  DocSplit loss of `pretrain --init <import>` is far below that of the same
  architecture from random weights (the pretrained encoder already tells a
  document's halves from the others');
- the run's checkpoint is a model folder that `embed` reads, and a second
  `pretrain --init` from that checkpoint (a pre-training folder: heads
  included) starts where the first one ended;
- a corpus prepared with another tokenizer is refused, naming both tokenizers
  and the `prepare --tokenizer` command that fixes it; --model with --init is
  refused.

Prints one JSON line of figures; exit 77 (skip) without the Wikispeedia
plaintext or the MiniLM checkpoint (scripts/fetch-models.py).

usage: pretrain_init_check.py DOCMATCH SCRATCH_DIR
"""
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
DATA = os.path.normpath(os.path.join(ROOT, "..", "shared", "data", "wikispeedia", "plaintext_articles.tar.gz"))
MODEL = os.path.join(os.environ.get("DOCMATCH_MODELS", os.path.expanduser("~/.cache/docmatch/models")),
                     "all-minilm-l6-v2")


def first_line(metrics, key):
    with open(metrics) as f:
        for line in f:
            record = json.loads(line)
            if key in record:
                return record
    raise AssertionError(f"no {key} in {metrics}")


def main():
    docmatch, scratch = sys.argv[1:3]
    for need in (DATA, MODEL):
        if not os.path.exists(need):
            print(f"skipped: {need} is missing")
            sys.exit(77)
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    articles = os.path.join(scratch, "articles.jsonl")
    with tarfile.open(DATA) as archive, open(articles, "w", encoding="utf-8") as out:
        members = sorted((m for m in archive.getmembers() if m.name.endswith(".txt")), key=lambda m: m.name)
        for member in random.Random(7).sample(members, 64):
            text = archive.extractfile(member).read().decode("utf-8", errors="replace")
            name = os.path.basename(member.name)[:-4]
            out.write(json.dumps({"id": name, "title": name, "text": text}) + "\n")

    def run(*args):
        proc = subprocess.run([docmatch, *args], capture_output=True, text=True)
        assert proc.returncode == 0, f"docmatch {' '.join(args)} failed:\n{proc.stderr[-3000:]}"
        return proc

    model, corpus = os.path.join(scratch, "minilm"), os.path.join(scratch, "corpus")
    run("import-hf", MODEL, "--output", model, "--max-tokens", "128", "--pooling", "mean")
    run("prepare", "--input", articles, "--output", corpus, "--tokenizer", os.path.join(model, "tokenizer.model"),
        "--no-progress")
    with open(os.path.join(model, "config.json")) as f:
        imported = json.load(f)
    random_yaml = os.path.join(scratch, "random.yaml")
    with open(random_yaml, "w") as f:
        f.write("model: " + json.dumps(imported["model"]) + "\n")

    common = ["--corpus", corpus, "--objective", "docsplit", "--lm-weight", "0", "--steps", "1", "--batch-size", "16",
              "--lr", "2e-5", "--warmup-steps", "0", "--log-every", "1", "--seed", "1", "--fresh", "--no-progress"]
    runs = {name: os.path.join(scratch, name) for name in ("from-minilm", "from-random", "continued")}
    run("pretrain", *common, "--init", model, "--run", runs["from-minilm"])
    run("pretrain", *common, "--model", random_yaml, "--run", runs["from-random"])
    pretrained = first_line(os.path.join(runs["from-minilm"], "metrics.jsonl"), "train/infonce")["train/infonce"]
    scratch_loss = first_line(os.path.join(runs["from-random"], "metrics.jsonl"), "train/infonce")["train/infonce"]
    # 32 views, 31 candidates each: chance is ln 31 = 3.43.
    assert scratch_loss > 2.0, f"random weights gave DocSplit loss {scratch_loss}, expected near ln 31"
    assert pretrained < 0.25 * scratch_loss, f"from MiniLM {pretrained} is not far below random {scratch_loss}"

    # The checkpoint is a model folder; continuing from it keeps the weights.
    checkpoint = os.path.join(runs["from-minilm"], "latest")
    run("embed", "--model", checkpoint, "--corpus", corpus, "--output", os.path.join(scratch, "v.h5"),
        "--no-progress")
    run("pretrain", *common, "--init", checkpoint, "--run", runs["continued"])
    continued = first_line(os.path.join(runs["continued"], "metrics.jsonl"), "train/infonce")["train/infonce"]
    assert continued < 0.25 * scratch_loss, (continued, scratch_loss)

    # Another tokenizer: refused naming both, with the fix.
    other = os.path.join(scratch, "other-corpus")
    run("prepare", "--input", articles, "--output", other, "--vocab-size", "500", "--no-progress")
    with open(os.path.join(other, "manifest.json")) as f:
        other_hash = json.load(f)["tokenizer"]["hash"]
    proc = subprocess.run([docmatch, "pretrain", "--corpus", other, "--init", model, "--objective", "docsplit",
                           "--run", os.path.join(scratch, "refused"), "--steps", "1", "--no-progress"],
                          capture_output=True, text=True)
    assert proc.returncode != 0, "a corpus with another tokenizer was accepted"
    for expected in (imported["tokenizer_hash"], other_hash, "prepare --tokenizer " + model + "/tokenizer.model"):
        assert expected in proc.stderr, f"'{expected}' not in: {proc.stderr[-2000:]}"
    proc = subprocess.run([docmatch, "pretrain", "--corpus", corpus, "--init", model, "--model", random_yaml,
                           "--run", os.path.join(scratch, "refused"), "--steps", "1", "--no-progress"],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "not both" in proc.stderr, proc.stderr[-2000:]

    print(json.dumps({"articles": 64, "docsplit_loss_from_minilm": pretrained, "docsplit_loss_from_random":
                      scratch_loss, "docsplit_loss_continued": continued}))


if __name__ == "__main__":
    main()
