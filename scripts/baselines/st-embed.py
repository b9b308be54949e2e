#!/usr/bin/env python3
"""The library docmatch users would reach for instead: every article embedded
with sentence-transformers, written in docmatch's embedding format for
`docmatch eval --embeddings` (no --model: cosine on the same pairs and lists).

A long article is read the way sentence-transformers users read long text:
its WordPiece ids are cut into windows of the model's max_seq_length
([CLS] + 254 ids + [SEP] for all-MiniLM-L6-v2), each window goes through the
model (Transformer -> mean pooling -> Normalize), and the document vector is
the normalised mean of its window vectors. --max-windows keeps the first K
windows (the CPU budget of docs/RESULTS.md); `docmatch import-hf --chunks K`
gives docmatch's MatchBERT the same reading, so the two can be compared
vector for vector (tests/io/st_parity_check.py).

  ~/.cache/docmatch/venv/bin/python scripts/baselines/st-embed.py \\
      --corpus corpora/wikispeedia --articles data/wikispeedia/articles.jsonl \\
      --max-windows 4 --output runs/baselines/st-minilm/vectors.h5

Prints one JSON line: documents, windows, seconds in the model, docs/s.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from docmatch_vectors import articles, corpus_ids, write_embeddings  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=os.path.expanduser("~/.cache/docmatch/models/all-minilm-l6-v2"),
                        help="sentence-transformers model folder (scripts/fetch-models.py)")
    parser.add_argument("--corpus", required=True, help="prepared docmatch corpus: the document order")
    parser.add_argument("--articles", required=True, help="the JSONL the corpus was prepared from")
    parser.add_argument("--output", required=True, help="embeddings file to write (.h5)")
    parser.add_argument("--max-windows", type=int, default=0, help="windows per article, 0 = all")
    parser.add_argument("--batch-size", type=int, default=32, help="windows per forward pass")
    parser.add_argument("--limit", type=int, default=0, help="only the first N documents (tests)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args()
    from sentence_transformers import SentenceTransformer

    if args.threads:
        torch.set_num_threads(args.threads)
    model = SentenceTransformer(args.model, device="cpu")
    model.eval()
    tokenizer = model.tokenizer
    window = model.max_seq_length - 2
    ids = corpus_ids(args.corpus)
    if args.limit:
        ids = ids[:args.limit]
    texts = articles(args.articles)
    missing = [i for i in ids if i not in texts]
    if missing:
        raise SystemExit(f"{args.articles} lacks {len(missing)} corpus documents, e.g. {missing[0]!r}")

    windows, owner = [], []
    for d, doc_id in enumerate(ids):
        tokens = tokenizer(texts[doc_id], add_special_tokens=False, truncation=False, verbose=False)["input_ids"]
        count = max(1, -(-len(tokens) // window))
        if args.max_windows:
            count = min(count, args.max_windows)
        for w in range(count):
            windows.append([tokenizer.cls_token_id] + tokens[w * window:(w + 1) * window] + [tokenizer.sep_token_id])
            owner.append(d)
    order = sorted(range(len(windows)), key=lambda i: len(windows[i]))  # similar lengths batch together
    sums = np.zeros((len(ids), model.get_embedding_dimension()), dtype=np.float64)
    start = time.perf_counter()
    with torch.inference_mode():
        for b in range(0, len(order), args.batch_size):
            batch = [windows[i] for i in order[b:b + args.batch_size]]
            T = max(map(len, batch))
            input_ids = torch.zeros((len(batch), T), dtype=torch.long)
            mask = torch.zeros((len(batch), T), dtype=torch.long)
            for r, w in enumerate(batch):
                input_ids[r, :len(w)] = torch.tensor(w)
                mask[r, :len(w)] = 1
            features = {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(mask)}
            vectors = model(features)["sentence_embedding"].double().numpy()
            for r, i in enumerate(order[b:b + args.batch_size]):
                sums[owner[i]] += vectors[r]
    seconds = time.perf_counter() - start
    vectors = sums / np.linalg.norm(sums, axis=1, keepdims=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    write_embeddings(args.output, ids, vectors, "sentence-transformers", os.path.basename(args.model.rstrip("/")))
    print(json.dumps({"documents": len(ids), "windows": len(windows), "model_seconds": round(seconds, 2),
                      "docs_per_s": round(len(ids) / seconds, 2), "output": args.output}))


if __name__ == "__main__":
    main()
