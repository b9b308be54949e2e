#!/usr/bin/env python3
"""Recomputes a document vector from an exported docmatch model with numpy.

A second, independent formulation of the encoders (SMITH and MatchBERT) from
the export's files alone: config.json for the sizes, model.safetensors for
the weights (read with the safetensors package), and the document's token ids
from a prepared corpus's HDF5 shards (read with h5py). Prints the vector as
JSON, or compares it with the row of an `docmatch embed` file.

  reference_vector.py --model models/smith --corpus corpora/manpages --doc printf.3
  reference_vector.py --model models/smith --corpus corpora/manpages --doc printf.3 \\
      --compare vectors.h5 --tolerance 1e-5

Tokenizing raw text needs ICU's sentence boundaries as docmatch applies them,
so this script starts from the prepared corpus's ids.
"""
import argparse
import json
import math
import os
import sys

import h5py
import numpy as np
from safetensors.numpy import load_file

PAD, CLS, SEP = 0, 2, 3
EPS = 1e-12
_erf = np.vectorize(math.erf)


def layer_norm(x, w, b):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + EPS) * w + b


def linear(x, weights, name):
    return x @ weights[name + ".weight"].T + weights[name + ".bias"]


def gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def normalize(x):
    return x / max(np.linalg.norm(x), 1e-12)


def attention(x, mask, w, prefix, heads):
    """x (B, T, C), mask (B, T) bool: BERT's multi-head self-attention."""
    B, T, C = x.shape
    d = C // heads

    def split(t):
        return t.reshape(B, T, heads, d).transpose(0, 2, 1, 3)

    q, k, v = (split(linear(x, w, f"{prefix}.{n}")) for n in ("query", "key", "value"))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)
    scores = np.where(mask[:, None, None, :], scores, -np.inf)
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    probabilities = scores / scores.sum(-1, keepdims=True)
    context = (probabilities @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
    return linear(context, w, f"{prefix}.output")


def encoder(x, mask, w, prefix, layers, heads):
    """The post-LN transformer stack (model/transformer.h)."""
    for l in range(layers):
        p = f"{prefix}.layers.{l}"
        a = layer_norm(x + attention(x, mask, w, p + ".attention", heads), w[p + ".attention_norm.weight"],
                       w[p + ".attention_norm.bias"])
        h = linear(gelu(linear(a, w, p + ".intermediate")), w, p + ".output")
        x = layer_norm(a + h, w[p + ".output_norm.weight"], w[p + ".output_norm.bias"])
    return x


def embed_tokens(ids, w):
    x = w["embeddings.tokens.weight"][ids] + w["embeddings.positions.weight"][np.arange(ids.shape[1])][None]
    return layer_norm(x, w["embeddings.norm.weight"], w["embeddings.norm.bias"])


def pack_blocks(tokens, sentence_offsets, block_length, max_blocks, separator):
    """SMITH's greedy sentence filling (data/batches/blocks.h): [CLS] sentences (+ [SEP])."""
    room, blocks, current = block_length - 1 - int(separator), [], [CLS]
    end = [SEP] if separator else []
    for s in range(len(sentence_offsets) - 1):
        sentence = list(tokens[sentence_offsets[s]:sentence_offsets[s + 1]][:room])
        if not sentence:
            continue
        if len(current) - 1 + len(sentence) > room:
            blocks.append(current + end)
            if len(blocks) == max_blocks:
                return blocks
            current = [CLS]
        current += sentence
    if len(current) > 1 and len(blocks) < max_blocks:
        blocks.append(current + end)
    return blocks


def smith_block_vectors(tokens, sentence_offsets, c, w):
    """SMITH's block vectors h_i = L2(ReLU(block_dense([CLS]))), one row a block."""
    blocks = pack_blocks(tokens, sentence_offsets, c["block_length"], c["max_blocks"], c.get("separator", False))
    T = max(len(b) for b in blocks)
    ids = np.array([b + [PAD] * (T - len(b)) for b in blocks])
    states = encoder(embed_tokens(ids, w), ids != PAD, w, "sentence_encoder", c["sentence_layers"], c["heads"])
    block_vectors = np.maximum(linear(states[:, 0], w, "block_dense"), 0)
    return np.stack([normalize(v) for v in block_vectors])


def smith_vector(tokens, sentence_offsets, c, w):
    block_vectors = smith_block_vectors(tokens, sentence_offsets, c, w)
    S = len(block_vectors)
    x = layer_norm(block_vectors + w["block_positions.weight"][:S], w["document_embedding_norm.weight"],
                   w["document_embedding_norm.bias"])[None]
    states = encoder(x, np.ones((1, S), bool), w, "document_encoder", c["document_layers"], c["heads"])[0]
    document = normalize(linear(states[0], w, "document_dense"))
    if c["combine"] == "normal":
        return document
    # The concat modes pool the block vectors h_i, not the document
    # transformer's outputs, and put the pool first (SMITH §4.1.4).
    if c["combine"] == "sum_concat":
        pooled = block_vectors.sum(0)
    elif c["combine"] == "mean_concat":
        pooled = block_vectors.mean(0)
    else:
        scores = np.tanh(linear(block_vectors, w, "attention_projection")) @ w["attention_context"]
        scores = np.exp(scores - scores.max())
        pooled = ((scores / scores.sum())[:, None] * block_vectors).sum(0)
    return normalize(np.concatenate([pooled, document]))


def match_bert_vector(tokens, c, w):
    ids = np.array([[CLS] + list(tokens[: c["max_tokens"] - 1])])
    states = encoder(embed_tokens(ids, w), ids != PAD, w, "encoder", c["layers"], c["heads"])
    return normalize(linear(states[0, 0], w, "dense"))


def read_document(corpus, doc_id):
    """Token ids and document-relative sentence offsets of `doc_id`."""
    with open(os.path.join(corpus, "manifest.json")) as f:
        manifest = json.load(f)
    for shard in manifest["shards"]:
        with h5py.File(os.path.join(corpus, shard["file"]), "r") as h:
            ids = [i.decode() if isinstance(i, bytes) else i for i in h["document_ids"][:]]
            if doc_id not in ids:
                continue
            d = ids.index(doc_id)
            documents = h["document_offsets"][:]
            paragraphs = h["paragraph_offsets"][:]
            sentences = h["sentence_offsets"][:]
            s0, s1 = paragraphs[documents[d]], paragraphs[documents[d + 1]]
            offsets = sentences[s0:s1 + 1]
            tokens = h["tokens"][offsets[0]:offsets[-1]]
            return tokens.astype(np.int64), (offsets - offsets[0]).astype(np.int64)
    sys.exit(f"reference_vector: no document {doc_id!r} in {corpus}")


def vector(model, corpus, doc_id):
    with open(os.path.join(model, "config.json")) as f:
        info = json.load(f)
    c = info["model"]
    w = {k: v.astype(np.float64) for k, v in load_file(os.path.join(model, info["weights"])).items()}
    tokens, offsets = read_document(corpus, doc_id)
    if c["kind"] == "smith":
        return smith_vector(tokens, offsets, c, w)
    if c["kind"] == "match_bert":
        return match_bert_vector(tokens, c, w)
    sys.exit(f"reference_vector: kind {c['kind']!r} has no numpy reference here (smith, match_bert)")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="an exported model folder")
    parser.add_argument("--corpus", required=True, help="the prepared corpus holding the document")
    parser.add_argument("--doc", required=True, action="append", help="document id (repeatable)")
    parser.add_argument("--compare", help="an embed file: fail unless its vectors match")
    parser.add_argument("--tolerance", type=float, default=1e-5)
    args = parser.parse_args()
    worst = 0.0
    for doc_id in args.doc:
        v = vector(args.model, args.corpus, doc_id)
        if not args.compare:
            print(json.dumps({"id": doc_id, "vector": v.tolist()}))
            continue
        with h5py.File(args.compare, "r") as h:
            ids = [i.decode() if isinstance(i, bytes) else i for i in h["document_ids"][:]]
            stored = h["vectors"][ids.index(doc_id)].astype(np.float64)
        difference = float(np.abs(stored - v).max())
        worst = max(worst, difference)
        print(json.dumps({"id": doc_id, "max_abs_difference": difference, "norm": float(np.linalg.norm(v))}))
    if args.compare and worst > args.tolerance:
        sys.exit(f"reference_vector: vectors differ by {worst:.3g} > {args.tolerance}")


if __name__ == "__main__":
    main()
