#!/usr/bin/env python3
"""The sentence-transformers peer of `docmatch finetune --loss contrastive`:
MultipleNegativesRankingLoss (in-batch negatives, scale 20 = 1 / 0.05) on
the related pairs of a pair file, B pairs a step, every text cut at the same
number of tokens, AdamW, on the CPU threads given. Prints one JSON line:
steps, seconds per step after the first, and the process's peak RSS
(getrusage, which is what /usr/bin/time reports for the docmatch side).

usage: mnrl_peer.py MODEL ARTICLES PAIRS [--batch-size 16] [--steps 4]
                    [--max-tokens 256] [--threads 2]
"""
import argparse
import json
import resource
import time

import torch
from sentence_transformers import SentenceTransformer, losses


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("articles")
    parser.add_argument("pairs")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1234)
    text = {}
    for line in open(args.articles):
        a = json.loads(line)
        text[a["id"]] = a["text"]
    pairs = [p for p in map(json.loads, open(args.pairs)) if p.get("label", 1) == 1]
    model = SentenceTransformer(args.model, device="cpu")
    model.max_seq_length = args.max_tokens
    loss = losses.MultipleNegativesRankingLoss(model, scale=20.0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01)
    model.train()
    times = []
    for step in range(args.steps):
        batch = pairs[step * args.batch_size:(step + 1) * args.batch_size]
        features = [model.tokenize([text[p["source"]] for p in batch]),
                    model.tokenize([text[p["target"]] for p in batch])]
        start = time.perf_counter()
        value = loss(features, torch.empty(0))
        value.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        times.append(time.perf_counter() - start)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"side": "sentence-transformers MNRL", "steps": args.steps, "batch_size": args.batch_size,
                      "max_tokens": args.max_tokens, "last_loss": round(value.item(), 4),
                      "s_per_step": round(sum(times[1:]) / max(1, len(times) - 1), 3),
                      "peak_rss_mib": round(peak_mib), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
