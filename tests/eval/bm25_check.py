#!/usr/bin/env python3
"""BM25 over words, held against references (eval/bm25.h, data/corpus/word_counts.h):

  * the words `prepare` keeps (words.h5) are what PyICU's word iterator gives
    for each sentence, lower-cased, the segments ICU marks as words (rule
    status >= 100), counted: a second reading of the same texts;
  * docmatch's BM25 scores of every document against every document equal
    bm25s's "lucene" method (a PyPI BM25) on the same words with the same k1
    and b, to float32 rounding (bm25s keeps float32), at two settings;
  * `eval --lexical bm25 --lexical-weight 1` ranks by those scores (the
    query left out, min-max per query keeping the order): its MRR equals the
    MRR computed here from them; `search --lexical bm25` gives the hits and
    normalised scores that follow from them; and a corpus
    prepared before words were kept is named, with what to do.

usage: bm25_check.py DOCMATCH BM25_SCORES SCRATCH
"""
import collections
import json
import os
import shutil
import subprocess
import sys

import bm25s
import h5py
import icu
import numpy as np

TEXTS = [
    "The cat sat on the mat. The cat is black.",
    "A dog chased the cat up a tree; the dog barked.",
    "Quantum mechanics describes particles. Quantum states superpose.",
    "Café au lait, NAÏVE résumé: it's 3.14 percent of 2,500 users.",
    "Dogs and cats: the U.S. Dept. of Pets counts 12 dogs per 100 households.",
    "Tree, tree, tree! Trees grow slowly.\n\nA second paragraph about trees and mats.",
    "東京 is a city. Tokyo has many trains; trains run on time.",
    "Nothing here shares much with the others except the word the.",
    "A blob " + "ab" * 150 + " is not a word: 300 letters, over the 255 bytes kept.",
]


def check(condition, message):
    if not condition:
        sys.exit("FAILED: " + message)


def icu_words(text):
    """Words of `text` as PyICU segments them, lower-cased (root locale)."""
    iterator = icu.BreakIterator.createWordInstance(icu.Locale("en"))
    iterator.setText(text)
    words, begin = [], iterator.first()
    for end in iterator:
        if iterator.getRuleStatus() >= 100:  # UBRK_WORD_NONE_LIMIT: letters, numbers, kana, ideographs
            word = str(icu.UnicodeString(text[begin:end]).toLower(icu.Locale.getRoot()))
            if len(word.encode()) <= 255:  # longer ones are left out, as Lucene bounds a token
                words.append(word)
        begin = end
    return words


def main():
    docmatch, helper, scratch = sys.argv[1:4]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    source = os.path.join(scratch, "docs.jsonl")
    with open(source, "w") as f:
        for i, text in enumerate(TEXTS):
            f.write(json.dumps({"id": f"d{i}", "text": text}) + "\n")
    corpus = os.path.join(scratch, "corpus")
    subprocess.run([docmatch, "prepare", "--input", source, "--output", corpus, "--vocab-size", "120",
                    "--no-progress"], check=True, capture_output=True)

    with h5py.File(os.path.join(corpus, "words.h5")) as f:
        data, ends = f["vocabulary_bytes"][:].tobytes(), f["vocabulary_offsets"][:]
        vocabulary = [data[ends[w]:ends[w + 1]].decode() for w in range(len(ends) - 1)]
        offsets, terms, counts = f["document_offsets"][:], f["term_ids"][:], f["term_counts"][:]
    kept = [{vocabulary[t]: int(c) for t, c in zip(terms[offsets[d]:offsets[d + 1]], counts[offsets[d]:offsets[d + 1]])}
            for d in range(len(TEXTS))]
    # Sentence by sentence, as prepare reads them (ICU finds no word across a
    # sentence boundary, so the whole text's words are the same).
    for d, text in enumerate(TEXTS):
        expected = collections.Counter(icu_words(text))
        check(kept[d] == dict(expected), f"document {d}: words.h5 holds {kept[d]}, PyICU reads {dict(expected)}")
    check(kept[3].get("naïve") == 1 and kept[3].get("3.14") == 1 and kept[3].get("it's") == 1 and
          kept[5].get("tree") == 3 and "blob" in kept[8] and max(len(w) for w in kept[8]) < 255,
          f"lower-casing, numbers, counts or the length bound: {kept[3]} {kept[5]} {kept[8]}")

    tokens = [[w for w, c in bag.items() for _ in range(c)] for bag in kept]
    figures = {}
    for k1, b in ((1.2, 0.75), (0.9, 0.4)):
        result = subprocess.run([helper, corpus, str(k1), str(b)], check=True, capture_output=True, text=True)
        ours = json.loads(result.stdout)
        check(ours["ids"] == [f"d{i}" for i in range(len(TEXTS))], f"ids {ours['ids']}")
        ours = np.array(ours["scores"])
        reference = bm25s.BM25(method="lucene", k1=k1, b=b)
        reference.index([list(t) for t in tokens], show_progress=False)
        theirs = np.stack([reference.get_scores(list(t)) for t in tokens])
        worst = float(np.max(np.abs(ours - theirs) / np.maximum(1.0, np.abs(theirs))))
        check(worst < 1e-5, f"k1 {k1}, b {b}: BM25 differs from bm25s by {worst} (relative)\n{ours}\n{theirs}")
        check(np.array_equal(np.argsort(-ours, axis=1, kind="stable")[:, 0], np.arange(len(TEXTS))),
              "a document does not rank itself first")
        figures[f"k1={k1},b={b}"] = worst
        if (k1, b) == (1.2, 0.75):
            default = ours
    # eval ranks by BM25 alone at weight 1 (the vectors, random, weigh 0).
    ids = [f"d{i}" for i in range(len(TEXTS))]
    embeddings = os.path.join(scratch, "random.h5")
    with h5py.File(embeddings, "w") as f:
        f["document_ids"] = np.array(ids, dtype="S8")
        f["vectors"] = np.random.default_rng(3).standard_normal((len(TEXTS), 8)).astype(np.float32)
        f.attrs["docmatch_format"] = "docmatch-embeddings"
        f.attrs["format_version"] = 1
        f.attrs["dimension"] = 8
        f.attrs["kind"] = np.bytes_("match_bert")
        f.attrs["model"] = "elsewhere"
    relevant = {0: [1, 5], 1: [4], 2: [6, 7], 4: [1, 0], 5: [0], 6: [2]}
    relevance = os.path.join(scratch, "relevance.jsonl")
    with open(relevance, "w") as f:
        for q, rel in relevant.items():
            f.write(json.dumps({"query": ids[q], "relevant": [ids[r] for r in rel]}) + "\n")
    result = subprocess.run([docmatch, "eval", "--embeddings", embeddings, "--corpus", corpus, "--relevance",
                             relevance, "--lexical", "bm25", "--lexical-weight", "1", "--output",
                             os.path.join(scratch, "eval"), "--no-progress"], capture_output=True, text=True)
    check(result.returncode == 0, f"eval --lexical bm25: {result.stderr[-2000:]}")
    metrics = json.load(open(os.path.join(scratch, "eval", "metrics.json")))
    # The MRR of the BM25 scores checked above, the query left out and ties
    # broken against the relevant documents (eval/metrics.h).
    reciprocal = []
    for q, rel in relevant.items():
        s = default[q]
        ranks = [1 + sum(1 for c in range(len(TEXTS)) if c not in (q, r) and
                         (s[c] > s[r] or (s[c] == s[r] and c not in rel))) for r in rel]
        reciprocal.append(1.0 / min(ranks))
    ours_mrr = metrics["ranking"]["mrr"]
    check(abs(ours_mrr - float(np.mean(reciprocal))) < 1e-9 and "BM25" in metrics["score"],
          f"eval's BM25 MRR {ours_mrr} vs the scores' {np.mean(reciprocal)} ({metrics['score']})")
    figures["eval_mrr"] = ours_mrr
    # Pairs are scored by the same rule, one pair at a time (a merge of the
    # two documents' words, the source's range found once).
    pairs = os.path.join(scratch, "pairs.jsonl")
    with open(pairs, "w") as f:
        labelled = ((0, 1, 1), (0, 2, 0), (1, 4, 1), (2, 6, 1), (3, 7, 0), (5, 0, 1), (6, 3, 0), (7, 2, 0))
        for s, d, label in labelled:
            f.write(json.dumps({"source": ids[s], "target": ids[d], "label": label}) + "\n")
    result = subprocess.run([docmatch, "eval", "--embeddings", embeddings, "--corpus", corpus, "--valid-pairs", pairs,
                             "--test-pairs", pairs, "--lexical", "bm25", "--lexical-weight", "1", "--output",
                             os.path.join(scratch, "eval-pairs"), "--no-progress"], capture_output=True, text=True)
    check(result.returncode == 0, f"eval --lexical bm25 on pairs: {result.stderr[-1500:]}")
    classified = json.load(open(os.path.join(scratch, "eval-pairs", "metrics.json")))["classification"]

    def normalised(s, d):
        others = [default[s][c] for c in range(len(TEXTS)) if c != s]
        if max(others) == min(others):  # all alike (a document sharing no word): 0, as docmatch says
            return 0.0
        return (default[s][d] - min(others)) / (max(others) - min(others))
    scored = [(normalised(s, d), label) for s, d, label in labelled]
    cuts = sorted({x for x, _ in scored})
    thresholds = [cuts[0] - 1] + [(a + b) / 2 for a, b in zip(cuts, cuts[1:])] + [cuts[-1] + 1]
    best = max(sum((x >= th) == bool(label) for x, label in scored) / len(scored) for th in thresholds)
    check(abs(classified["test"]["accuracy"] - best) < 1e-12,
          f"pairs by BM25: accuracy {classified['test']['accuracy']}, the scores allow {best}")
    figures["pairs_test_accuracy"] = classified["test"]["accuracy"]
    # search ranks by the same scores, min-max normalised over the other
    # documents: the hits' order and scores follow from them.
    result = subprocess.run([docmatch, "search", "--embeddings", embeddings, "--corpus", corpus, "--id", "d0",
                             "--lexical", "bm25", "--lexical-weight", "1", "--exclude-self", "--top", "4",
                             "--format", "jsonl"], capture_output=True, text=True)
    check(result.returncode == 0, f"search --lexical bm25: {result.stderr[-1500:]}")
    hits = json.loads(result.stdout.splitlines()[0])["hits"]
    others = {d: default[0][d] for d in range(1, len(TEXTS))}
    low, high = min(others.values()), max(others.values())
    expected = sorted(others, key=lambda d: (-others[d], d))[:4]
    check([h["id"] for h in hits] == [ids[d] for d in expected] and
          all(abs(h["score"] - (others[d] - low) / (high - low)) < 1e-12 for h, d in zip(hits, expected)),
          f"search's BM25 hits {hits} vs {[(ids[d], others[d]) for d in expected]}")
    figures["search_hits"] = [h["id"] for h in hits]
    # A corpus prepared before words were kept.
    os.remove(os.path.join(corpus, "words.h5"))
    result = subprocess.run([docmatch, "eval", "--embeddings", embeddings, "--corpus", corpus, "--relevance",
                             relevance, "--lexical", "bm25", "--lexical-weight", "1", "--output",
                             os.path.join(scratch, "eval-old"), "--no-progress"], capture_output=True, text=True)
    check(result.returncode == 1 and "has no words.h5" in result.stderr and "--overwrite" in result.stderr,
          f"a corpus without words: exit {result.returncode}, {result.stderr[-1500:]}")
    print(json.dumps({"documents": len(TEXTS), "vocabulary": len(vocabulary), "max_relative_difference": figures}))


if __name__ == "__main__":
    main()
