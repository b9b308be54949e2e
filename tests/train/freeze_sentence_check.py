#!/usr/bin/env python3
"""finetune and pretrain --freeze-sentence-steps N, through the real binary:
SMITH's sentence level (token embeddings and sentence transformer) is not
updated in the first N steps, while the document level is; from step N on
both are, also in a run resumed across step N (finetune), and pretrain's
label-free DocSplit continues the document layers alone the same way. A
model without two levels, or a run begun without them resumed with the flag,
is refused with what to do. Frozen, the sentence level runs without autograd
(no graph, no backward through it), which is what makes the flag cheap: the
step's time split is printed beside, not asserted.

The weights are read back from `docmatch export` folders (model.safetensors,
with the safetensors package).

usage: freeze_sentence_check.py DOCMATCH E2E_FIXTURE SCRATCH_DIR
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
from safetensors.numpy import load_file

TINY = """model: {kind: smith, hidden: 32, heads: 2, intermediate: 64, sentence_layers: 2,
  document_layers: 1, block_length: 16, max_blocks: 8, dropout: 0.1, amplifier: 6.0}
"""


def check(condition, message):
    if not condition:
        sys.exit("FAILED: " + message)


def sentence_level(name):
    """The names finetune freezes (model::SmithSentenceLevel)."""
    return any(name.startswith(level) or "." + level in name for level in ("embeddings.", "sentence_encoder."))


def main():
    docmatch, fixture, scratch = sys.argv[1:4]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    config = os.path.join(scratch, "tiny.yaml")
    with open(config, "w") as f:
        f.write(TINY)

    def run(*args):
        proc = subprocess.run([docmatch, *args], capture_output=True, text=True)
        check(proc.returncode == 0, f"docmatch {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
        return proc

    def finetune(name, steps, *extra):
        return run("finetune", "--corpus", os.path.join(fixture, "corpus"), "--model-config", config,
                   "--train-pairs", os.path.join(fixture, "pairs.train.jsonl"), "--loss", "contrastive",
                   "--batch-size", "4", "--steps", str(steps), "--warmup-steps", "0", "--lr", "1e-3",
                   "--checkpoint-every", "1", "--keep-last", "10", "--validate-every", "0", "--log-every", "1",
                   "--time-split", "--seed", "3", "--run", os.path.join(scratch, name), "--no-progress", *extra)

    def pretrain(name, steps, *extra, model=config):
        return subprocess.run([docmatch, "pretrain", "--corpus", os.path.join(fixture, "corpus"), "--model-config",
                               model, "--objective", "docsplit", "--lm-weight", "0", "--batch-size", "4",
                               "--steps", str(steps), "--warmup-steps", "0", "--lr", "1e-3", "--checkpoint-every",
                               "1", "--keep-last", "10", "--log-every", "1", "--seed", "3",
                               "--run", os.path.join(scratch, name), "--no-progress", *extra],
                              capture_output=True, text=True)

    def weights(name, step):
        out = os.path.join(scratch, f"{name}-{step}")
        run("export", "--model", os.path.join(scratch, name, f"step-{step}"), "--format", "docmatch", "--output", out)
        return load_file(os.path.join(out, "model.safetensors"))

    def moved(a, b, lower):
        """Names of the (sentence level if `lower`, else document level) tensors that differ."""
        return [k for k in a if sentence_level(k) == lower and not np.array_equal(a[k], b[k])]

    finetune("frozen", 2, "--freeze-sentence-steps", "2")
    finetune("frozen", 4, "--freeze-sentence-steps", "2")  # resumed across the unfreezing
    finetune("plain", 2)
    frozen = {s: weights("frozen", s) for s in (1, 2, 3)}
    plain = {s: weights("plain", s) for s in (1, 2)}
    lower = [k for k in frozen[1] if sentence_level(k)]
    check(len(lower) > 4 and len(lower) < len(frozen[1]), f"sentence level: {lower}")
    check(not moved(frozen[1], frozen[2], lower=True),
          f"frozen, step 1 -> 2: the sentence level moved: {moved(frozen[1], frozen[2], True)}")
    check(moved(frozen[1], frozen[2], lower=False), "frozen, step 1 -> 2: the document level did not move")
    check(len(moved(frozen[2], frozen[3], lower=True)) == len(lower),
          f"unfrozen, step 2 -> 3: only {moved(frozen[2], frozen[3], True)} of the sentence level moved")
    check(len(moved(plain[1], plain[2], lower=True)) == len(lower), "without the flag the sentence level moves")
    # Same seed, same initial weights: the plain run's first step updated its
    # sentence level, the frozen run's did not.
    check(moved(frozen[1], plain[1], lower=True), "the frozen run's step 1 equals the plain run's")

    # pretrain: DocSplit over the document layers alone, then both.
    proc = pretrain("docsplit", 3, "--freeze-sentence-steps", "2")
    check(proc.returncode == 0, f"pretrain --freeze-sentence-steps exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    docsplit = {s: weights("docsplit", s) for s in (1, 2, 3)}
    check(sorted(docsplit[1]) == sorted(frozen[1]), "pretrain's encoder tensors are not finetune's")
    check(not moved(docsplit[1], docsplit[2], lower=True),
          f"pretrain frozen, step 1 -> 2: the sentence level moved: {moved(docsplit[1], docsplit[2], True)}")
    check(moved(docsplit[1], docsplit[2], lower=False), "pretrain frozen, step 1 -> 2: the document level did not move")
    check(len(moved(docsplit[2], docsplit[3], lower=True)) == len(lower),
          f"pretrain unfrozen, step 2 -> 3: only {moved(docsplit[2], docsplit[3], True)} of the sentence level moved")
    # Refused, with what to do: a flat model has no sentence level, and a run
    # begun with one optimizer group for everything cannot gain a second.
    flat = os.path.join(scratch, "flat.yaml")
    with open(flat, "w") as f:
        f.write("model: {kind: match_bert, hidden: 32, heads: 2, intermediate: 64, layers: 1, max_tokens: 64}\n")
    proc = pretrain("flat", 1, "--freeze-sentence-steps", "1", model=flat)
    check(proc.returncode != 0 and "a match_bert model has no such levels" in proc.stderr,
          f"pretrain --freeze-sentence-steps on match_bert: exit {proc.returncode}, {proc.stderr[-600:]}")
    check(pretrain("one-group", 1).returncode == 0, "pretrain without the flag failed")
    proc = pretrain("one-group", 2, "--freeze-sentence-steps", "2")
    check(proc.returncode != 0 and "resume without --sentence-lr-scale" in proc.stderr,
          f"resumed with a second group: exit {proc.returncode}, {proc.stderr[-600:]}")

    def split(name):
        lines = [json.loads(l) for l in open(os.path.join(scratch, name, "metrics.jsonl"))]
        prefix = "train/time/"
        return {l["step"]: {k[len(prefix):-3]: round(v, 1) for k, v in l.items() if k.startswith(prefix)}
                for l in lines if any(k.startswith(prefix) for k in l)}

    print(json.dumps({"sentence_level_tensors": len(lower), "tensors": len(frozen[1]),
                      "time_split_ms_frozen_run": split("frozen"), "time_split_ms_plain_run": split("plain")}))


if __name__ == "__main__":
    main()
