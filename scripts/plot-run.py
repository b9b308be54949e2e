#!/usr/bin/env python3
"""A training run's curves as one PNG: the training loss (and each of its
logged parts, e.g. infonce and lm) and the validation loss by step, with the
learning rate on a second axis, from <run>/metrics.jsonl.

  ~/.cache/docmatch/venv/bin/python scripts/plot-run.py checkpoints/quickstart/minilm-contrastive
  -> checkpoints/quickstart/minilm-contrastive/curves.png

`docmatch inspect <run>` prints the same run's figures as JSON.
"""
import argparse
import json
import math
import os
import sys


def read_metrics(run):
    path = os.path.join(run, "metrics.jsonl")
    if not os.path.exists(path):
        sys.exit(f"plot-run: {path} does not exist: is '{run}' a training run's folder (--run)?")
    series = {}
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"plot-run: {path}:{number}: not JSON ({e})")
            step = record.get("step")
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)) and math.isfinite(value):
                    series.setdefault(key, []).append((step, value))
    return series


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="a run folder (--run of pretrain or finetune)")
    parser.add_argument("--output", help="PNG to write (default: <run>/curves.png)")
    args = parser.parse_args()
    series = read_metrics(args.run)
    if "train/loss" not in series:
        sys.exit(f"plot-run: {args.run}/metrics.jsonl holds no training loss yet")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, loss_axis = plt.subplots(figsize=(8, 4.5), dpi=100)
    parts = [k for k in series if k.startswith("train/") and k not in ("train/loss", "train/lr", "train/epoch")
             and not k.startswith("train/time/") and not k.endswith("_per_s") and not k.endswith("_gib")
             and "tflops" not in k]
    loss_axis.plot(*zip(*series["train/loss"]), label="train loss", color="tab:blue", linewidth=1.8)
    for key in parts:
        loss_axis.plot(*zip(*series[key]), label=key.replace("/", " "), linewidth=1, alpha=0.7)
    if "valid/loss" in series:
        loss_axis.plot(*zip(*series["valid/loss"]), "o-", label="valid loss", color="tab:red", linewidth=1.8)
    loss_axis.set_xlabel("step")
    loss_axis.set_ylabel("loss")
    loss_axis.grid(alpha=0.3)
    handles, labels = loss_axis.get_legend_handles_labels()
    if "train/lr" in series:
        lr_axis = loss_axis.twinx()
        lr_axis.plot(*zip(*series["train/lr"]), "--", color="gray", linewidth=1, label="learning rate")
        lr_axis.set_ylabel("learning rate")
        more_handles, more_labels = lr_axis.get_legend_handles_labels()
        handles, labels = handles + more_handles, labels + more_labels
    loss_axis.legend(handles, labels, loc="upper right", fontsize=8)
    loss_axis.set_title(os.path.normpath(args.run))
    figure.tight_layout()
    output = args.output or os.path.join(args.run, "curves.png")
    figure.savefig(output)
    steps = [s for s, _ in series["train/loss"]]
    print(json.dumps({"png": output, "train_points": len(steps), "first_step": steps[0], "last_step": steps[-1],
                      "valid_points": len(series.get("valid/loss", []))}))


if __name__ == "__main__":
    main()
