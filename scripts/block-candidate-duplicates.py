#!/usr/bin/env python3
"""How often a masked sentence block has a (near-)duplicate among the other
candidates of its batch, drawn as `pretrain --objective wp+sp` draws them:
8 documents a batch, 2 distinct real blocks each, SMITH's greedy packing
(reference_vector.pack_blocks, 32 blocks x 32 tokens). Issue 16 item 2 asks
whether duplicates make the block task ill-posed; docs/RESULTS.md cites the
figures.

    ~/.cache/docmatch/venv/bin/python scripts/block-candidate-duplicates.py [corpus]
"""
import glob
import os
import random
import sys

import h5py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_vector import pack_blocks  # noqa: E402

corpus = sys.argv[1] if len(sys.argv) > 1 else "corpora/wikispeedia"
docs = []
for path in sorted(glob.glob(os.path.join(corpus, "shard-*.h5"))):
    f = h5py.File(path)
    tok, so, po, do = (f[k][:] for k in ("tokens", "sentence_offsets", "paragraph_offsets", "document_offsets"))
    for d in range(len(do) - 1):
        s0, s1 = po[do[d]], po[do[d + 1]]
        offs = so[s0:s1 + 1] - so[s0]
        docs.append(pack_blocks(tok[so[s0]:so[s1]], offs, 32, 32, True))
rng = random.Random(1)
exact = near = total = 0
for _ in range(2000):
    cands = []
    for blocks in rng.sample(docs, 8):
        for b in rng.sample(range(len(blocks)), min(2, len(blocks))):
            cands.append(blocks[b][1:])
    sets = [set(c) for c in cands]
    for i in range(len(cands)):
        others = [j for j in range(len(cands)) if j != i]
        exact += any(cands[i] == cands[j] for j in others)
        near += any(len(sets[i] & sets[j]) / max(1, len(sets[i] | sets[j])) >= 0.5 for j in others)
        total += 1
print(f"documents {len(docs)}, candidates {total}: exact duplicate {exact / total:.4f}, "
      f"token-set Jaccard >= 0.5 with another {near / total:.4f}")
