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

The formulation is the docmatch-encoder package's (python/docmatch_encoder/
model.py), which also encodes raw text; this script reads a document's ids
from a prepared corpus instead.
"""
import argparse
import json
import os
import sys

import h5py
import numpy as np
from safetensors.numpy import load_file

# The encoders in numpy are the docmatch-encoder package's (python/), which
# also tokenizes raw text; this script starts from a corpus's ids.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
from docmatch_encoder.model import (match_bert_vector, pack_blocks, smith_block_vectors,  # noqa: E402,F401
                                    smith_vector)


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
