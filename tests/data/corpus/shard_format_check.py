#!/usr/bin/env python3
"""Reads a corpus made by `docmatch prepare` with independent clients: h5py for
the shards, the sentencepiece Python package for the tokenizer, h5ls for the
command-line view. Checks the documented format (shard_format.h) from outside:
attributes equal array sizes, offsets tile the arrays, the manifest's totals
equal the shards', and every paragraph decodes back to its source text.

usage: shard_format_check.py DOCMATCH_BINARY SCRATCH_DIR
"""
import json
import os
import random
import shutil
import subprocess
import sys

import h5py
import numpy as np
import sentencepiece as spm

WORDS = ("alpha river stone light north garden silver window harbor market quiet engine "
         "forest letter summer castle bridge winter mirror valley").split()


def make_input(path, documents=40, seed=3):
    """Documents of paragraphs of sentences; returns {id: [paragraph text, ...]}."""
    rng = random.Random(seed)
    expected = {}
    with open(path, "w", encoding="utf-8") as out:
        for d in range(documents):
            paragraphs = []
            for _ in range(rng.randint(1, 4)):
                sentences = []
                for _ in range(rng.randint(1, 5)):
                    words = [rng.choice(WORDS) for _ in range(rng.randint(3, 12))]
                    sentences.append(" ".join(words).capitalize() + ".")
                paragraphs.append(" ".join(sentences))
            doc_id = f"doc-{d:03d}"
            expected[doc_id] = paragraphs
            # Wrap paragraphs over lines as files do; blank lines separate them.
            text = "\n\n".join(p.replace(". ", ".\n   ", 1) for p in paragraphs)
            out.write(json.dumps({"id": doc_id, "text": text}) + "\n")
    return expected


def main():
    binary, scratch = sys.argv[1], sys.argv[2]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    expected = make_input(os.path.join(scratch, "in.jsonl"))
    corpus = os.path.join(scratch, "corpus")
    subprocess.run([binary, "prepare", "--input", os.path.join(scratch, "in.jsonl"), "--output", corpus,
                    "--vocab-size", "80", "--documents-per-shard", "16", "--no-progress"], check=True,
                   stdout=subprocess.DEVNULL)

    with open(os.path.join(corpus, "manifest.json")) as f:
        manifest = json.load(f)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(corpus, manifest["tokenizer"]["file"]))
    assert [sp.id_to_piece(i) for i in range(5)] == ["[PAD]", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
    assert sp.get_piece_size() == manifest["tokenizer"]["vocab_size"]

    totals = {"documents": 0, "paragraphs": 0, "sentences": 0, "tokens": 0}
    seen = []
    for entry in manifest["shards"]:
        path = os.path.join(corpus, entry["file"])
        listing = subprocess.run(["h5ls", path], check=True, capture_output=True, text=True).stdout
        for name in ("tokens", "sentence_offsets", "paragraph_offsets", "document_offsets", "document_ids"):
            assert name in listing, f"h5ls does not show {name}: {listing}"
        with h5py.File(path, "r") as h5:
            attrs = h5.attrs
            assert attrs["docmatch_format"] in (b"docmatch-shard", "docmatch-shard")
            tokens = h5["tokens"][:]
            sent = h5["sentence_offsets"][:]
            para = h5["paragraph_offsets"][:]
            docs = h5["document_offsets"][:]
            ids = [x.decode() if isinstance(x, bytes) else x for x in h5["document_ids"][:]]
            assert tokens.dtype == np.int32 and sent.dtype == np.int64
            assert len(tokens) == attrs["num_tokens"] == sent[-1]
            assert len(sent) == attrs["num_sentences"] + 1 == para[-1] + 1
            assert len(para) == attrs["num_paragraphs"] + 1 == docs[-1] + 1
            assert len(docs) == attrs["num_documents"] + 1 == len(ids) + 1 == entry["documents"] + 1
            assert sent[0] == para[0] == docs[0] == 0
            assert (np.diff(sent) > 0).all() and (np.diff(para) > 0).all() and (np.diff(docs) > 0).all()
            assert tokens.min() > 4 and tokens.max() < sp.get_piece_size()
            for d, doc_id in enumerate(ids):
                decoded = []
                for p in range(docs[d], docs[d + 1]):
                    sentences = [sp.decode(tokens[sent[s]:sent[s + 1]].tolist()) for s in range(para[p], para[p + 1])]
                    decoded.append(" ".join(sentences))
                assert decoded == expected[doc_id], (doc_id, decoded, expected[doc_id])
            for key in totals:
                totals[key] += int(attrs[f"num_{key}"])
            seen += ids
    assert totals == manifest["totals"], (totals, manifest["totals"])
    assert seen == sorted(expected), "documents missing, duplicated or out of input order"
    print(f"ok: {len(seen)} documents in {len(manifest['shards'])} shards read back with h5py and sentencepiece")


if __name__ == "__main__":
    main()
