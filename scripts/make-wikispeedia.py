#!/usr/bin/env python3
"""Builds docmatch's Wikipedia benchmark from the Wikispeedia data.

From ../shared/data/wikispeedia/ (or --data) it writes, into --output:

  articles.jsonl        one {"id", "title", "text"} a line; id = the URL-encoded
                        article name used by links.tsv; the "#copyright" /
                        title / "2007 Schools Wikipedia Selection. Related
                        subjects" header and the "Retrieved from" licence footer
                        are removed so a model cannot match on them.
  pairs.{train,valid,test}.jsonl
                        a Wiki65K-style matching set: {"source", "target",
                        "label", "jaccard"}. Positives: pairs whose outgoing-link
                        sets have Jaccard similarity above --threshold (0.5, as
                        in the SMITH and SMASH papers), source = the
                        lexicographically smaller id. Negatives, the papers'
                        rule: articles the source links to that are not
                        positives (Jaccard at most --threshold), drawn
                        without replacement, --negatives-per-positive per
                        positive. --negative-max-jaccard 0.1 keeps only link
                        targets that share few links with the source (easy
                        negatives; how docs/RESULTS.md's first table was
                        made). Split by source article, so no source appears
                        in two splits.
  relevance.jsonl       ranking lists from categories: {"query", "category",
                        "relevant": [...]}, relevant = the other articles of the
                        query's most specific category.
  stats.json            counts of everything above.

Data: Robert West and Jure Leskovec, "Human Wayfinding in Information
Networks", WWW 2012; West, Pineau and Precup, "Wikispeedia", IJCAI 2009.
Article text is Wikipedia's (CC BY-SA / GFDL).
"""
import argparse
import gzip
import io
import json
import os
import random
import sys
import tarfile
import urllib.parse

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATA = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "data", "wikispeedia"))


def read_tsv(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line and not line.startswith("#"):
                yield line.split("\t")


def strip_boilerplate(raw):
    """Drops the header (up to the 'Related subjects' line) and the footer."""
    lines = raw.split("\n")
    start = 0
    for i, line in enumerate(lines[:12]):
        if line.strip().startswith("2007 Schools Wikipedia Selection"):
            start = i + 1
            while start < len(lines) and lines[start].strip():  # the subject list wraps
                start += 1
            break
    end = len(lines)
    for i in range(len(lines) - 1, start - 1, -1):
        if lines[i].strip().startswith("Retrieved from"):
            end = i
            break
    return "\n".join(lines[start:end]).strip("\n") + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=os.environ.get("DOCMATCH_WIKISPEEDIA", DEFAULT_DATA),
                        help="folder with plaintext_articles.tar.gz, links.tsv.gz, categories.tsv.gz")
    parser.add_argument("--output", default="data/wikispeedia", help="where to write (default: %(default)s)")
    parser.add_argument("--threshold", type=float, default=0.5, help="Jaccard above which a pair is positive")
    parser.add_argument("--negative-max-jaccard", type=float, default=None,
                        help="keep only negatives whose Jaccard with their source is at most this "
                             "(default: none, the papers' rule: any linked article that is not a positive)")
    parser.add_argument("--negatives-per-positive", type=int, default=1)
    parser.add_argument("--split", default="0.8,0.1,0.1", help="train,valid,test fractions of source articles")
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args()

    needed = ["plaintext_articles.tar.gz", "links.tsv.gz", "categories.tsv.gz"]
    missing = [n for n in needed if not os.path.exists(os.path.join(args.data, n))]
    if missing:
        sys.exit(f"make-wikispeedia: the Wikispeedia data is not at {args.data} (missing {', '.join(missing)}).\n"
                 f"Point --data (or DOCMATCH_WIKISPEEDIA) at the folder that holds {', '.join(needed)}.")
    os.makedirs(args.output, exist_ok=True)

    # (a) Articles.
    articles = {}
    with tarfile.open(os.path.join(args.data, "plaintext_articles.tar.gz")) as tar:
        for member in tar:
            if not member.isfile() or not member.name.endswith(".txt"):
                continue
            name = os.path.basename(member.name)[: -len(".txt")]
            raw = tar.extractfile(member).read().decode("utf-8", errors="replace")
            articles[name] = strip_boilerplate(raw)
    ids = sorted(articles)
    with open(os.path.join(args.output, "articles.jsonl"), "w", encoding="utf-8") as out:
        for name in ids:
            title = urllib.parse.unquote(name).replace("_", " ")
            out.write(json.dumps({"id": name, "title": title, "text": articles[name]}, ensure_ascii=False) + "\n")

    # (b) Matching pairs from outgoing-link Jaccard similarity.
    index = {name: i for i, name in enumerate(ids)}
    outgoing = [set() for _ in ids]
    for source, target in read_tsv(os.path.join(args.data, "links.tsv.gz")):
        if source in index and target in index:
            outgoing[index[source]].add(index[target])
    links = np.zeros((len(ids), len(ids)), dtype=np.float32)
    for i, targets in enumerate(outgoing):
        links[i, list(targets)] = 1.0
    intersection = links @ links.T  # (N, N) shared outgoing links
    sizes = links.sum(axis=1)
    union = sizes[:, None] + sizes[None, :] - intersection
    with np.errstate(divide="ignore", invalid="ignore"):
        jaccard = np.where(union > 0, intersection / union, 0.0)
    upper = np.triu(jaccard > args.threshold, k=1)  # i < j: source = smaller id (ids are sorted)
    positives = [(int(i), int(j)) for i, j in zip(*np.nonzero(upper))]

    # Negatives are drawn per source without replacement, so a source with
    # several positives never repeats a negative (a repeated test pair would
    # count twice in every metric).
    rng = random.Random(args.seed)
    positives_of = {}
    for i, j in positives:
        positives_of.setdefault(i, []).append(j)
    pairs = []
    for i, targets in sorted(positives_of.items()):
        pairs.extend((i, j, 1) for j in targets)
        # Not a positive: Jaccard at most the threshold, whichever id is the source.
        ceiling = args.threshold if args.negative_max_jaccard is None else min(args.threshold, args.negative_max_jaccard)
        candidates = sorted(t for t in outgoing[i] if t != i and jaccard[i, t] <= ceiling)
        wanted = min(args.negatives_per_positive * len(targets), len(candidates))
        pairs.extend((i, t, 0) for t in rng.sample(candidates, wanted))

    sources = sorted({i for i, _, _ in pairs})
    rng.shuffle(sources)
    fractions = [float(x) for x in args.split.split(",")]
    cut1 = int(round(fractions[0] * len(sources)))
    cut2 = cut1 + int(round(fractions[1] * len(sources)))
    split_of = {}
    for k, s in enumerate(sources):
        split_of[s] = "train" if k < cut1 else "valid" if k < cut2 else "test"
    counts = {}
    for split in ("train", "valid", "test"):
        rows = [p for p in pairs if split_of[p[0]] == split]
        rows.sort()
        with open(os.path.join(args.output, f"pairs.{split}.jsonl"), "w", encoding="utf-8") as out:
            for i, j, label in rows:
                out.write(json.dumps({"source": ids[i], "target": ids[j], "label": label,
                                      "jaccard": round(float(jaccard[i, j]), 4)}) + "\n")
        counts[split] = {"pairs": len(rows), "positives": sum(r[2] for r in rows),
                         "sources": len({r[0] for r in rows})}

    # (c) Category relevance lists: the most specific category of each article.
    categories = {}
    for name, category in read_tsv(os.path.join(args.data, "categories.tsv.gz")):
        if name in index:
            categories.setdefault(name, []).append(category)
    members = {}
    for name, cats in categories.items():
        for c in cats:
            members.setdefault(c, set()).add(name)
    queries = 0
    with open(os.path.join(args.output, "relevance.jsonl"), "w", encoding="utf-8") as out:
        for name in ids:
            if name not in categories:
                continue
            # Deepest category first; ties broken by the smaller member set.
            best = max(categories[name], key=lambda c: (c.count("."), -len(members[c]), c))
            relevant = sorted(members[best] - {name})
            if relevant:
                out.write(json.dumps({"query": name, "category": best, "relevant": relevant}) + "\n")
                queries += 1

    negative_jaccard = np.array([jaccard[i, j] for i, j, label in pairs if label == 0])
    stats = {"articles": len(ids), "links": int(links.sum()), "threshold": args.threshold,
             "negative_rule": ("papers: linked, not positive" if args.negative_max_jaccard is None
                               else f"linked, Jaccard <= {args.negative_max_jaccard}"),
             "negative_jaccard": {"mean": round(float(negative_jaccard.mean()), 4),
                                  "median": round(float(np.median(negative_jaccard)), 4),
                                  "share_above_0.1": round(float((negative_jaccard > 0.1).mean()), 4),
                                  "max": round(float(negative_jaccard.max()), 4)} if len(negative_jaccard) else {},
             "positive_pairs": len(positives), "pairs": len(pairs), "splits": counts,
             "relevance_queries": queries}
    with open(os.path.join(args.output, "stats.json"), "w") as out:
        json.dump(stats, out, indent=2)
    print(json.dumps(stats, indent=2))


if __name__ == "__main__":
    main()
