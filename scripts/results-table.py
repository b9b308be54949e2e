#!/usr/bin/env python3
"""The docs/RESULTS.md table from the eval outputs of
scripts/results-wikispeedia.sh: one row per <dir>/<row>/metrics.json.

Accuracy carries a 95% Wilson interval over the test pairs, so that rows can
be told apart from noise. usage: results-table.py [runs/wikispeedia]
"""
import json
import math
import os
import sys

ROWS = [("smith-np", "SMITH-NP (no pre-training)"), ("smith-wp", "SMITH-WP"), ("smith-wp+sp", "SMITH-WP+SP"),
        ("docsplit", "SMITH, DocSplit pre-training"), ("smith-random", "SMITH, random weights (no training)"),
        ("smith-wp-encoder", "SMITH-WP encoder, no fine-tuning"),
        ("smith-wp+sp-encoder", "SMITH-WP+SP encoder, no fine-tuning"),
        ("docsplit-encoder", "SMITH DocSplit encoder, no fine-tuning"), ("match-bert", "MatchBERT (256 tokens)"),
        ("smash", "SMASH RNN (P+S+W)"), ("han", "HAN (SMASH's S depth)"), ("sdr", "SDR (self-supervised)"),
        ("sdr-raw", "SDR, raw score (no z-score, as the authors' code)"),
        ("smith-short", "SMITH-Short (4x128, MiniLM init)"), ("match-bert-minilm", "MatchBERT (256, MiniLM init)"),
        ("match-bert-minilm-zeroshot", "MatchBERT (256, MiniLM init), no fine-tuning"),
        ("match-bert-minilm-contrastive", "MatchBERT (256, MiniLM init), contrastive fine-tuning"),
        ("match-bert-minilm-contrastive-learned-temperature",
         "MatchBERT (256, MiniLM init), contrastive, learned temperature"),
        ("match-bert-minilm-contrastive-temperature-0.02", "MatchBERT (256, MiniLM init), contrastive, temperature 0.02"),
        ("match-bert-minilm-contrastive-temperature-0.1", "MatchBERT (256, MiniLM init), contrastive, temperature 0.1"),
        ("match-bert-minilm-contrastive-lr-5e-5", "MatchBERT (256, MiniLM init), contrastive, lr 5e-5"),
        ("match-bert-minilm-docsplit-nolabels", "MatchBERT (256, MiniLM init), DocSplit on the corpus, no labels"),
        ("match-bert-minilm-docsplit-contrastive", "MatchBERT (256, MiniLM init), DocSplit then contrastive"),
        ("match-bert-minilm-contrastive-hybrid", "hybrid: contrastive MatchBERT + TF-IDF (w 0.5)"),
        ("match-bert-minilm-docsplit-nolabels-hybrid", "hybrid, no labels: DocSplit MatchBERT + TF-IDF (w 0.5)"),
        ("match-bert-minilm-zeroshot-hybrid", "hybrid, no labels: MiniLM import + TF-IDF (w 0.5)"),
        ("sdr-minilm", "SDR from MiniLM (1,024 tokens), the paper's z-scored score, no labels"),
        ("sdr-minilm-zeroshot", "SDR's z-scored score over MiniLM's sentences, no training"),
        ("sdr-minilm-cosine", "SDR from MiniLM, cosine of its mean sentence vectors, no labels"),
        ("sdr-minilm-zeroshot-cosine", "MiniLM's mean sentence vectors (1,024 tokens), cosine, no training"),
        ("tfidf-wordpiece", "docmatch TF-IDF over WordPiece tokens (eval --lexical-weight 1)"),
        ("st-minilm", "sentence-transformers all-MiniLM-L6-v2 (reference)"), ("tfidf", "TF-IDF cosine (reference)")]


def wilson(successes, n, z=1.96):
    if n == 0:
        return 0.0, 0.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def row(folder, key, name):
    """Prints one table row; returns the test pairs' (majority accuracy, count), or None when not run."""
    path = os.path.join(folder, key, "metrics.json")
    if not os.path.exists(path):
        print(f"| {name} | not run | | | | | | | | | |")
        return None
    m = json.load(open(path))
    test, ranking = m["classification"]["test"], m["ranking"]
    right = test["true_positives"] + test["true_negatives"]
    low, high = wilson(right, test["pairs"])
    print(f"| {name} | {test['accuracy']:.3f} ({low:.2f}-{high:.2f}) | {test['precision']:.3f} | "
          f"{test['recall']:.3f} | {test['f1']:.3f} | {ranking['mrr']:.3f} | {ranking['recall@10']:.3f} | "
          f"{ranking['map']:.3f} | {ranking['p@1']:.3f} | {ranking['mpr']:.3f} | "
          f"{100 * (1 - ranking['mpr']):.1f} |")
    return test["majority_accuracy"], test["pairs"]


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "runs/wikispeedia"
    print("| method | accuracy (95% CI) | precision | recall | F1 | MRR | recall@10 | MAP | P@1 | MPR, 0 = top | "
          "MPR %, 100 = top (SDR paper) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    majority = None
    for key, name in ROWS:
        majority = row(folder, key, name) or majority
    known = {key for key, _ in ROWS}
    others = sorted(d for d in os.listdir(folder)
                    if d not in known and os.path.exists(os.path.join(folder, d, "metrics.json")))
    for key in others:  # a row the list above does not name (e.g. another temperature) is shown by its folder
        majority = row(folder, key, key) or majority
    if majority:
        print(f"\nMajority class on the {majority[1]} test pairs: accuracy {majority[0]:.3f}.")


if __name__ == "__main__":
    main()
