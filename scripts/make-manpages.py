#!/usr/bin/env python3
"""Builds docmatch's default corpus from Debian's manual pages.

The pages come from the `manpages` and `manpages-dev` packages (installed by
scripts/install-deps.sh), rendered to plain text with man(1) and col(1). Pages
that are only aliases (".so" redirects) are folded into their target. Writes,
into --output:

  articles.jsonl   {"id": "printf.3", "title": "printf(3)", "text": ...}; the
                   page's header and footer lines are dropped, sections and
                   paragraphs stay as blank-line-separated paragraphs.
  related.jsonl    {"source", "target"} for every SEE ALSO reference between
                   two pages of the set (aliases resolved): related-document
                   labels for matching and ranking.
  stats.json       counts.
"""
import argparse
import concurrent.futures
import gzip
import json
import os
import re
import subprocess
import sys

PACKAGES = ["manpages", "manpages-dev"]
REFERENCE = re.compile(r"([A-Za-z0-9_.:+-]+)\((\d[a-z]*)\)")


def page_files():
    try:
        listing = subprocess.run(["dpkg", "-L", *PACKAGES], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        sys.exit("make-manpages: the manpages and manpages-dev packages are not installed; "
                 "run scripts/install-deps.sh (or apt-get install manpages manpages-dev)")
    files = [f for f in listing.split("\n") if re.search(r"/man\d/[^/]+\.gz$", f) and os.path.isfile(f)]
    return sorted(set(files))


def page_id(path):
    """/usr/share/man/man3/printf.3.gz -> printf.3"""
    return os.path.basename(path)[: -len(".gz")]


def alias_target(path):
    """The page a symlink or a '.so man3/foo.3' redirect points to, or None."""
    if os.path.islink(path):
        return os.path.basename(os.path.realpath(path))
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
        source = f.read(8192)
    # Comment lines (licence headers) aside, an alias is a single ".so" line.
    lines = [l for l in source.split("\n") if l.strip() and not l.startswith(('.\\"', "'\\\"", '.\\\\"'))]
    if len(lines) == 1 and lines[0].startswith(".so "):
        return os.path.basename(lines[0][4:].strip())
    return None


def render(path):
    env = dict(os.environ, MANWIDTH="80", LC_ALL="C.UTF-8", MAN_DISABLE_SECCOMP="1")
    man = subprocess.run(["man", "--nj", "--nh", "-l", path], capture_output=True, env=env)
    text = subprocess.run(["col", "-bx"], input=man.stdout, capture_output=True, env=env).stdout
    lines = text.decode("utf-8", errors="replace").split("\n")
    # Drop the running header (first non-blank line) and footer (last one).
    content = [i for i, line in enumerate(lines) if line.strip()]
    if len(content) >= 2:
        lines = lines[content[0] + 1: content[-1]]
    return "\n".join(lines).strip("\n") + "\n"


def see_also(text):
    match = re.search(r"^SEE ALSO\s*$(.*?)(^\S|\Z)", text, flags=re.M | re.S)
    if not match:
        return []
    return [f"{name}.{section}" for name, section in REFERENCE.findall(match.group(1))]


def nearest_pages(around, count, rendered, related):
    """`around` and the pages nearest it over SEE ALSO links in either
    direction, breadth first (ties by id), then the rest by id: `count` ids."""
    if around not in rendered:
        sys.exit(f"make-manpages: --around {around} is not among the rendered pages")
    neighbours = {}
    for source, target in related:
        neighbours.setdefault(source, set()).add(target)
        neighbours.setdefault(target, set()).add(source)
    order, seen, frontier = [], {around}, [around]
    while frontier and len(order) < count:
        order.extend(frontier)
        following = sorted({n for page in frontier for n in neighbours.get(page, ()) if n not in seen})
        seen.update(following)
        frontier = following
    order.extend(pid for pid in sorted(rendered) if pid not in seen)
    return set(order[:count])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", default="data/manpages", help="where to write (default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--pages", type=int, default=0,
                        help="keep only this many pages: --around's page and the pages nearest it by SEE ALSO "
                             "links (breadth first), for a quick run (default: every page)")
    parser.add_argument("--around", default="printf.3", help="the page --pages keeps first (default: %(default)s)")
    args = parser.parse_args()
    os.makedirs(args.output, exist_ok=True)

    files = page_files()
    aliases, pages = {}, []
    for path in files:
        target = alias_target(path)
        if target:
            aliases[page_id(path)] = target[: -len(".gz")] if target.endswith(".gz") else target
        else:
            pages.append(path)
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        texts = list(pool.map(render, pages))

    rendered = {page_id(p): text for p, text in zip(pages, texts) if text.strip()}
    related = set()
    for pid, text in rendered.items():
        for ref in see_also(text):
            target = aliases.get(ref, ref)
            if target in rendered and target != pid:
                related.add((pid, target))
    if args.pages > 0:
        keep = nearest_pages(args.around, args.pages, rendered, related)
        rendered = {pid: text for pid, text in rendered.items() if pid in keep}
        related = {(s, t) for s, t in related if s in keep and t in keep}
    written = 0
    with open(os.path.join(args.output, "articles.jsonl"), "w", encoding="utf-8") as out:
        for pid, text in rendered.items():  # in file order, as always
            name, _, section = pid.rpartition(".")
            out.write(json.dumps({"id": pid, "title": f"{name}({section})", "text": text}, ensure_ascii=False) + "\n")
            written += 1
    with open(os.path.join(args.output, "related.jsonl"), "w", encoding="utf-8") as out:
        for source, target in sorted(related):
            out.write(json.dumps({"source": source, "target": target}) + "\n")
    stats = {"pages": written, "aliases": len(aliases), "see_also_links": len(related),
             "words": sum(len(t.split()) for t in rendered.values())}
    with open(os.path.join(args.output, "stats.json"), "w") as out:
        json.dump(stats, out, indent=2)
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
