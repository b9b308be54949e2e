#!/usr/bin/env python3
"""finetune --refresh-negatives (ANCE) on the tiny real corpus (tiny_manpages.py):

  * every 2 steps the mined negatives come again from the model's own
    vectors: the lists a checkpoint carries differ from the TF-IDF ones
    (a run whose refresh never comes keeps those), and every list holds no
    labelled-related document of its source;
  * a run stopped at step 2 and resumed to step 4 ends with the weights of
    the uninterrupted run, byte for byte, and the same lists;
  * --refresh-negatives without --mine-negatives is refused by name.

usage: refresh_negatives_check.py DOCMATCH FIXTURE SCRATCH
"""
import glob
import json
import os
import shutil
import subprocess
import sys

import h5py

TINY = """model: {kind: match_bert, hidden: 32, heads: 2, intermediate: 64, layers: 1, max_tokens: 64, dropout: 0.1}
"""


def check(condition, message):
    if not condition:
        sys.exit("FAILED: " + message)


def main():
    docmatch, fixture, scratch = sys.argv[1:4]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    config = os.path.join(scratch, "tiny.yaml")
    with open(config, "w") as f:
        f.write(TINY)
    pairs = os.path.join(fixture, "pairs.train.jsonl")

    def finetune(run, steps, *extra, fail=False):
        args = [docmatch, "finetune", "--corpus", os.path.join(fixture, "corpus"), "--model-config", config,
                "--train-pairs", pairs, "--loss", "contrastive", "--batch-size", "4", "--mine-negatives", "3",
                "--steps", str(steps), "--warmup-steps", "1", "--log-every", "1", "--checkpoint-every", "100",
                "--validate-every", "0", "--run", os.path.join(scratch, run), "--no-progress", *extra]
        result = subprocess.run(args, capture_output=True, text=True)
        if fail:
            check(result.returncode != 0, f"{' '.join(args[1:])} should have failed")
        elif result.returncode != 0:
            sys.exit(f"FAILED: {' '.join(args)}\n{result.stderr}")
        return result

    def state(run):
        latest = os.path.join(scratch, run, "latest")
        mined = {int(k): v for k, v in json.load(open(os.path.join(latest, "trainer.json")))["mined_negatives"]}
        return mined, open(os.path.join(latest, "model.pt"), "rb").read()

    said = finetune("straight", 4, "--refresh-negatives", "2").stderr
    check(said.count("negatives mined again from the model's vectors") == 2, f"two refreshes: {said}")
    finetune("stopped", 2, "--refresh-negatives", "2")
    finetune("stopped", 4, "--refresh-negatives", "2")
    finetune("never", 4, "--refresh-negatives", "1000")
    refreshed, weights = state("straight")
    resumed, resumed_weights = state("stopped")
    lexical, _ = state("never")
    check(refreshed == resumed, "the resumed run's lists differ from the uninterrupted run's")
    check(weights == resumed_weights, "the resumed run's weights differ from the uninterrupted run's")
    check(refreshed.keys() == lexical.keys() and refreshed != lexical,
          "the model's neighbours are the TF-IDF ones: the refresh changed nothing")
    related = {}
    for p in map(json.loads, open(pairs)):
        if p.get("label", 1) == 1:
            related.setdefault(p["source"], set()).add(p["target"])
            related.setdefault(p["target"], set()).add(p["source"])
    ids = []  # corpus order, from the shards
    for shard in sorted(glob.glob(os.path.join(fixture, "corpus", "shard-*.h5"))):
        with h5py.File(shard, "r") as f:
            ids += [i.decode().rstrip("\0") for i in f["document_ids"][:]]
    index = {i: n for n, i in enumerate(ids)}
    for source, negatives in refreshed.items():
        near = {index[t] for t in related.get(ids[source], ())}
        check(near and source not in negatives and not near & set(negatives), f"source {source} mined {negatives}")
    said = subprocess.run([docmatch, "finetune", "--corpus", os.path.join(fixture, "corpus"), "--model-config", config,
                           "--train-pairs", pairs, "--refresh-negatives", "2", "--steps", "1", "--run",
                           os.path.join(scratch, "bad"), "--no-progress"], capture_output=True, text=True)
    check(said.returncode != 0 and "--refresh-negatives mines --mine-negatives N again" in said.stderr, said.stderr)
    changed = sum(refreshed[s] != lexical[s] for s in refreshed)
    print(json.dumps({"sources": len(refreshed), "lists_changed_by_refresh": changed, "resumed_equal": True}))


if __name__ == "__main__":
    main()
