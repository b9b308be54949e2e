"""What scripts/make-perldoc.py and scripts/make-pydoc.py share: a Debian
documentation package unpacked, and the files a linked long-document corpus
is written as (articles.jsonl, related.jsonl, relevance.jsonl and
stats.json; the makers' docstrings say what each holds)."""
import glob
import json
import os
import statistics
import subprocess
import sys


def unpack_deb(tool, package, deb, work, local_flag):
    """The folder `package`'s .deb is unpacked into (under `work`): `deb` if
    given, else downloaded with `apt-get download` (no root, nothing
    installed). On a failed download, exits naming `tool` and `local_flag`."""
    if not deb:
        try:
            subprocess.run(["apt-get", "download", "-q", package], cwd=work, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        except (OSError, subprocess.CalledProcessError) as e:
            sys.exit(f"{tool}: `apt-get download {package}` failed ({getattr(e, 'stderr', e)}); "
                     f"give --deb or {local_flag}")
        deb = glob.glob(os.path.join(work, f"{package}_*.deb"))[0]
    root = os.path.join(work, "root")
    subprocess.run(["dpkg-deb", "-x", deb, root], check=True)
    return root


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
