"""An embeddings file as docmatch reads it (ids and vectors only), for the
script checks here."""
import h5py
import numpy as np


def write(path, ids, vectors):
    with h5py.File(path, "w") as h:
        h["document_ids"] = np.array(ids, dtype=h5py.string_dtype())
        h["vectors"] = np.array(vectors, dtype=np.float32)
