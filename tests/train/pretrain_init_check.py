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
import shutil
import subprocess
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")))
from real_data import MINILM as MODEL, WIKISPEEDIA, skip_without, write_articles  # noqa: E402


def first_line(metrics, key):
    with open(metrics) as f:
        for line in f:
            record = json.loads(line)
            if key in record:
                return record
    raise AssertionError(f"no {key} in {metrics}")


def main():
    docmatch, scratch = sys.argv[1:3]
    skip_without(WIKISPEEDIA, MODEL)
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    articles = os.path.join(scratch, "articles.jsonl")
    write_articles(articles, 64, seed=7)

    def run(*args):
        proc = subprocess.run([docmatch, *args], capture_output=True, text=True)
        assert proc.returncode == 0, f"docmatch {' '.join(args)} failed:\n{proc.stderr[-3000:]}"
        return proc

    model, corpus = os.path.join(scratch, "minilm"), os.path.join(scratch, "corpus")
    run("import-hf", MODEL, "--output", model, "--max-tokens", "128", "--pooling", "mean")
    run("prepare", "--input", articles, "--output", corpus, "--tokenizer", model,
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
    run("pretrain", *common, "--model-config", random_yaml, "--run", runs["from-random"])
    pretrained = first_line(os.path.join(runs["from-minilm"], "metrics.jsonl"), "train/infonce")["train/infonce"]
    scratch_loss = first_line(os.path.join(runs["from-random"], "metrics.jsonl"), "train/infonce")["train/infonce"]
    # 32 views, 31 candidates each: chance is ln 31 = 3.43.
    assert scratch_loss > 2.0, f"random weights gave DocSplit loss {scratch_loss}, expected near ln 31"
    assert pretrained < 0.25 * scratch_loss, f"from MiniLM {pretrained} is not far below random {scratch_loss}"

    # The checkpoint is a model folder (`embed` gives a unit vector per article
    # that a step of training moved away from the import's); continuing from
    # it keeps the weights.
    checkpoint = os.path.join(runs["from-minilm"], "latest")
    vectors = {}
    for name, folder in (("import", model), ("checkpoint", checkpoint)):
        out = os.path.join(scratch, name + ".h5")
        run("embed", "--model", folder, "--corpus", corpus, "--output", out, "--no-progress")
        with h5py.File(out, "r") as f:
            vectors[name] = f["vectors"][:].astype(np.float64)
    v = vectors["checkpoint"]
    assert v.shape == (64, imported["model"]["hidden"]), v.shape
    assert np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)
    moved = float(np.abs(v - vectors["import"]).max())
    assert 0 < moved < 0.5, f"one step at lr 2e-5 moved the vectors by {moved}"
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
    for expected in (imported["tokenizer_hash"], other_hash, "prepare --tokenizer " + model + "/tokenizer.wordpiece"):
        assert expected in proc.stderr, f"'{expected}' not in: {proc.stderr[-2000:]}"
    proc = subprocess.run([docmatch, "pretrain", "--corpus", corpus, "--init", model, "--model-config", random_yaml,
                           "--run", os.path.join(scratch, "refused"), "--steps", "1", "--no-progress"],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "not both" in proc.stderr, proc.stderr[-2000:]

    print(json.dumps({"articles": 64, "docsplit_loss_from_minilm": pretrained, "docsplit_loss_from_random":
                      scratch_loss, "docsplit_loss_continued": continued, "max_vector_change_after_a_step": moved}))


if __name__ == "__main__":
    main()
