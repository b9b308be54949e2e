#!/usr/bin/env python3
"""TF-IDF cosine, the lexical baseline: every article as an L2-normalised
TF-IDF vector (scikit-learn's TfidfVectorizer: lower-cased word unigrams,
English stop words removed, sublinear tf, smooth idf, terms in at least 2
articles, the --max-features most frequent kept), written in docmatch's
embedding format and scored by `docmatch eval --embeddings` (no --model:
cosine) on the same pairs and ranking lists as every model.

  ~/.cache/docmatch/venv/bin/python scripts/baselines/tfidf-embed.py \\
      --corpus corpora/wikispeedia --articles data/wikispeedia/articles.jsonl \\
      --output runs/baselines/tfidf/vectors.h5
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from docmatch_vectors import articles, corpus_ids, write_embeddings  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", required=True, help="prepared docmatch corpus: the document order")
    parser.add_argument("--articles", required=True, help="the JSONL the corpus was prepared from")
    parser.add_argument("--output", required=True, help="embeddings file to write (.h5)")
    parser.add_argument("--max-features", type=int, default=16384, help="vocabulary size kept")
    args = parser.parse_args()
    from sklearn.feature_extraction.text import TfidfVectorizer

    ids = corpus_ids(args.corpus)
    texts = articles(args.articles)
    start = time.perf_counter()
    vectorizer = TfidfVectorizer(lowercase=True, stop_words="english", sublinear_tf=True, min_df=2,
                                 max_features=args.max_features, dtype=np.float64)
    matrix = vectorizer.fit_transform([texts[i] for i in ids])  # rows are L2-normalised
    seconds = time.perf_counter() - start
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    write_embeddings(args.output, ids, matrix.toarray(), "tfidf", f"tfidf-{matrix.shape[1]}")
    print(json.dumps({"documents": len(ids), "terms": matrix.shape[1], "seconds": round(seconds, 2),
                      "output": args.output}))


if __name__ == "__main__":
    main()
