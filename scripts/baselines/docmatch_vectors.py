"""Reading a docmatch corpus's document order and writing vectors in docmatch's
embedding format (src/eval/embeddings.h), so that `docmatch eval
--embeddings FILE` (without --model) scores vectors made by any library on
the same pairs and ranking lists as docmatch's own models."""
import json
import os

import h5py
import numpy as np


def corpus_ids(corpus):
    """Document ids of a prepared corpus, in corpus order (manifest's shards)."""
    with open(os.path.join(corpus, "manifest.json")) as f:
        manifest = json.load(f)
    ids = []
    for shard in manifest["shards"]:
        with h5py.File(os.path.join(corpus, shard["file"]), "r") as h5:
            ids.extend(i.decode() if isinstance(i, bytes) else i for i in h5["document_ids"][:])
    return ids


def articles(path):
    """id -> text of a JSONL of {"id", "title", "text"} (what prepare reads)."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                record = json.loads(line)
                out[record["id"]] = record["text"]
    return out


def write_embeddings(path, ids, vectors, kind, model):
    """docmatch-embeddings v1: document_ids (vlen str), vectors float32 (N, D)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    assert vectors.shape[0] == len(ids), (vectors.shape, len(ids))
    tmp = path + ".tmp"
    with h5py.File(tmp, "w") as f:
        f.attrs["docmatch_format"] = np.bytes_("docmatch-embeddings")
        f.attrs["format_version"] = np.int64(1)
        f.attrs["dimension"] = np.int64(vectors.shape[1])
        f.attrs["kind"] = np.bytes_(kind)
        f.attrs["model"] = np.bytes_(model)
        f.attrs["tokenizer_hash"] = np.bytes_("")
        f.create_dataset("document_ids", data=ids, dtype=h5py.string_dtype())
        f.create_dataset("vectors", data=vectors)
    os.replace(tmp, path)
