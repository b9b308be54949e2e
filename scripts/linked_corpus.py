"""The files a linked long-document corpus is written as, shared by
scripts/make-perldoc.py and scripts/make-pydoc.py: articles.jsonl,
related.jsonl, relevance.jsonl and stats.json (the makers' docstrings say
what each holds)."""
import json
import os
import statistics


def write_linked_corpus(output, articles, related):
    """articles: [{"id", "title", "text"}]; related: [{"source", "target"}],
    kept where both ends are articles. Prints and returns the stats."""
    kept = {a["id"] for a in articles}
    related = [r for r in related if r["source"] in kept and r["target"] in kept]
    relevance = {}
    for r in related:
        relevance.setdefault(r["source"], []).append(r["target"])
    os.makedirs(output, exist_ok=True)
    with open(os.path.join(output, "articles.jsonl"), "w") as f:
        for a in articles:
            f.write(json.dumps(a, ensure_ascii=False) + "\n")
    with open(os.path.join(output, "related.jsonl"), "w") as f:
        for r in related:
            f.write(json.dumps(r) + "\n")
    with open(os.path.join(output, "relevance.jsonl"), "w") as f:
        for query, targets in relevance.items():
            f.write(json.dumps({"query": query, "relevant": targets}) + "\n")
    words = [len(a["text"].split()) for a in articles]
    stats = {"documents": len(articles), "links": len(related), "queries": len(relevance),
             "words_median": statistics.median(words) if words else 0,
             "words_p95": sorted(words)[int(0.95 * (len(words) - 1))] if words else 0}
    with open(os.path.join(output, "stats.json"), "w") as f:
        json.dump(stats, f, indent=1)
    print(json.dumps(stats))
    return stats
