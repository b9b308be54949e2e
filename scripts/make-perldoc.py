#!/usr/bin/env python3
"""Builds a long-document corpus with its own link graph from Perl's manual.

The documents are the pods of Debian's `perl-doc` package (perlfunc, perlre,
perlsyn, ... and the perlNNNdelta release notes: 206 pods, median 2,400
words), downloaded with `apt-get download` (no root, nothing installed) or
read from --deb / --pod-dir, and rendered to text by pod2text (Perl's own
Pod::Text, from Debian's `perl`). A link L<perlsyn> or L<text|perlop/"Shift
Operators"> from one pod to another of the set is a relation: the corpus is
linked as Wikipedia is, its documents long as manual pages. Writes, into
--output:

  articles.jsonl   {"id": "perlsyn", "title": "perlsyn - Perl syntax", "text": ...};
                   pod2text's paragraphs as blank-line-separated paragraphs
  related.jsonl    {"source", "target"}: every link between two pods of the
                   set (not to itself), once per ordered pair
  relevance.jsonl  {"query", "relevant"}: each pod with links, against the
                   pods it links to (what `eval --relevance` reads: every
                   query, for rows that train on no labels)
  stats.json       counts and the words per document

scripts/make-pairs.py turns related.jsonl into labelled, split pairs.

usage: scripts/make-perldoc.py --output data/perldoc [--deb perl-doc_*.deb | --pod-dir DIR]
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

from linked_corpus import unpack_deb, write_linked_corpus

# L<...> in its forms: L<name>, L<name/"section">, L<text|name>, L<text|name/section>,
# and the multi-bracket L<< ... >>. The target is the part after | up to / or ".
LINK = re.compile(r"L<(<+\s)?(.*?)(?(1)\s>+|>)", re.S)


def link_target(body):
    target = body.split("|", 1)[1] if "|" in body else body
    target = target.split("/", 1)[0].strip().strip('"')
    return target


def pod_files(args, work):
    if args.pod_dir:
        return sorted(glob.glob(os.path.join(args.pod_dir, "*.pod")))
    root = unpack_deb("make-perldoc", "perl-doc", args.deb, work, "--pod-dir")
    files = sorted(glob.glob(os.path.join(root, "usr/share/perl/*/pod/*.pod")))
    if not files:
        sys.exit(f"make-perldoc: {args.deb or 'perl-doc'} holds no usr/share/perl/*/pod/*.pod")
    return files


def render(path):
    """The pod as text (pod2text), and its NAME line for the title."""
    try:
        text = subprocess.run(["pod2text", "--loose", "--width", "100000", path], check=True,
                              capture_output=True, text=True, errors="replace").stdout
    except FileNotFoundError:
        sys.exit("make-perldoc: pod2text is missing (Debian's `perl` package; scripts/install-deps.sh installs it)")
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text)]
    paragraphs = [p for p in paragraphs if p]
    title = os.path.basename(path)[:-4]
    for i, p in enumerate(paragraphs[:-1]):
        if p == "NAME":
            title = paragraphs[i + 1]
            break
    return "\n\n".join(paragraphs), title


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", required=True)
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--deb", help="a perl-doc .deb already downloaded")
    source.add_argument("--pod-dir", help="a folder of .pod files (tests)")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="make-perldoc-")
    try:
        files = pod_files(args, work)
        names = {os.path.basename(f)[:-4] for f in files}
        articles, related = [], []
        for path in files:
            name = os.path.basename(path)[:-4]
            text, title = render(path)
            if not text.strip():
                continue
            articles.append({"id": name, "title": title, "text": text})
            raw = open(path, encoding="utf-8", errors="replace").read()
            targets = []
            for m in LINK.finditer(raw):
                target = link_target(m.group(2))
                if target in names and target != name and target not in targets:
                    targets.append(target)
            related.extend({"source": name, "target": t} for t in targets)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    write_linked_corpus(args.output, articles, related)


if __name__ == "__main__":
    main()
