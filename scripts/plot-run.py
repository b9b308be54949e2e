#!/usr/bin/env python3
"""A training run's curves as one PNG, from <run>/metrics.jsonl: above, the
training loss (and each of its logged parts, e.g. infonce and lm) and the
validation loss by step, with the learning rate on a second axis; below, the
shares between 0 and 1 (top-1 accuracy, MRR), with the gradient norm on a
second axis. Legends sit beside the panels, over no point.

  ~/.cache/docmatch/venv/bin/python scripts/plot-run.py checkpoints/quickstart/minilm-contrastive
  -> checkpoints/quickstart/minilm-contrastive/curves.png, and its panels as JSON

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

    # Losses on one panel, shares (top-1 accuracy, MRR: 0 to 1) on another,
    # each legend outside its panel so that no point hides under it.
    skipped = ("train/loss", "train/lr", "train/epoch", "train/grad_norm")
    share = [k for k in series if k.endswith(("top1", "accuracy", "mrr")) and k not in skipped]
    parts = [k for k in series if k.startswith("train/") and k not in skipped and k not in share
             and not k.startswith("train/time/") and not k.endswith("_per_s") and not k.endswith("_gib")
             and "tflops" not in k]
    figure, (loss_axis, share_axis) = plt.subplots(2, 1, figsize=(10, 7), dpi=100, sharex=True,
                                                    gridspec_kw={"height_ratios": [3, 2]})
    loss_axis.plot(*zip(*series["train/loss"]), label="train loss", color="tab:blue", linewidth=1.8)
    for key in parts:
        loss_axis.plot(*zip(*series[key]), label=key.replace("/", " "), linewidth=1, alpha=0.7)
    if "valid/loss" in series:
        loss_axis.plot(*zip(*series["valid/loss"]), "o-", label="valid loss", color="tab:red", linewidth=1.8,
                       markersize=7, zorder=5)
    loss_axis.set_ylabel("loss")
    loss_axis.grid(alpha=0.3)
    handles, labels = loss_axis.get_legend_handles_labels()
    if "train/lr" in series:
        lr_axis = loss_axis.twinx()
        lr_axis.plot(*zip(*series["train/lr"]), "--", color="gray", linewidth=1, label="learning rate")
        lr_axis.set_ylabel("learning rate")
        more_handles, more_labels = lr_axis.get_legend_handles_labels()
        handles, labels = handles + more_handles, labels + more_labels
    loss_axis.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.1, 1.0), fontsize=8)
    for key in share:
        style = "o-" if key.startswith("valid/") else "-"
        share_axis.plot(*zip(*series[key]), style, label=key.replace("/", " "), linewidth=1.2, markersize=7)
    share_axis.set_ylim(0, 1)
    share_axis.set_ylabel("share (top-1, MRR)")
    share_axis.set_xlabel("step")
    share_axis.grid(alpha=0.3)
    if "train/grad_norm" in series:
        norm_axis = share_axis.twinx()
        norm_axis.plot(*zip(*series["train/grad_norm"]), ":", color="black", linewidth=1, label="gradient norm")
        norm_axis.set_ylabel("gradient norm")
        extra_handles, extra_labels = norm_axis.get_legend_handles_labels()
    else:
        extra_handles, extra_labels = [], []
    handles, labels = share_axis.get_legend_handles_labels()
    if handles or extra_handles:
        share_axis.legend(handles + extra_handles, labels + extra_labels, loc="upper left",
                          bbox_to_anchor=(1.1, 1.0), fontsize=8)
    loss_axis.set_title(os.path.normpath(args.run))
    figure.tight_layout()
    output = args.output or os.path.join(args.run, "curves.png")
    figure.savefig(output)
    steps = [s for s, _ in series["train/loss"]]
    print(json.dumps({"png": output, "train_points": len(steps), "first_step": steps[0], "last_step": steps[-1],
                      "valid_points": len(series.get("valid/loss", [])), "loss_panel": ["train/loss"] + parts +
                      (["valid/loss"] if "valid/loss" in series else []), "share_panel": share,
                      "grad_norm": "train/grad_norm" in series}))


if __name__ == "__main__":
    main()
