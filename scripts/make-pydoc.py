#!/usr/bin/env python3
"""Builds a long-document corpus with its own link graph from Python's
standard library reference.

The documents are the pages of the library reference in Debian's
`python3.11-doc` package (library/os.html, library/re.html, ...: one page a
module or topic), downloaded with `apt-get download` (no root, nothing
installed) or read from --deb / --html-dir. A page's text is its main body
(Sphinx's <div class="body">), block elements as paragraphs, without the
pilcrow anchors, scripts or navigation. A link from one page's body to
another page of the set (io.html#io.open, ../library/re.html) is a relation:
like Perl's manual, long technical documentation linked by its own authors.
Writes, into --output (scripts/linked_corpus.py):

  articles.jsonl   {"id": "os", "title": "os — Miscellaneous operating system interfaces", "text": ...}
  related.jsonl    {"source", "target"}: every link between two pages of the
                   set (not to itself), once per ordered pair
  relevance.jsonl  {"query", "relevant"}: each page with links, against the
                   pages it links to
  stats.json       counts and the words per document

usage: scripts/make-pydoc.py --output data/pydoc [--deb python3.11-doc_*.deb | --html-dir DIR]
"""
import argparse
import glob
import html.parser
import os
import posixpath
import re
import shutil
import sys
import tempfile
import urllib.parse

from linked_corpus import unpack_deb, write_linked_corpus

BLOCKS = {"p", "div", "section", "pre", "li", "dt", "dd", "tr", "table", "blockquote",
          "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "dl", "figure", "br"}
VOID = {"br", "img", "hr", "meta", "link", "input", "wbr", "col", "area", "base", "source"}


class Page(html.parser.HTMLParser):
    """The title, the main body's paragraphs and the hrefs inside it."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.title, self.paragraphs, self.hrefs = "", [], []
        self._in_title = False
        self._depth = 0  # open elements inside the body div, the div included; 0 = outside
        self._skip = 0   # inside <script>, <style> or a pilcrow anchor (a.headerlink)
        self._line = []

    def _flush(self):
        text = " ".join("".join(self._line).split())
        if text:
            self.paragraphs.append(text)
        self._line = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "title":
            self._in_title = True
        if self._depth == 0:
            if tag == "div" and "body" in (a.get("class") or "").split() and a.get("role") == "main":
                self._depth = 1
            return
        if tag not in VOID:
            self._depth += 1
        if self._skip or tag in ("script", "style") or (tag == "a" and "headerlink" in (a.get("class") or "")):
            if tag not in VOID:
                self._skip += 1
            return
        if tag in BLOCKS:
            self._flush()
        if tag == "a" and a.get("href"):
            self.hrefs.append(a["href"])

    def handle_endtag(self, tag):
        if tag == "title":
            self._in_title = False
        if self._depth == 0 or tag in VOID:
            return
        self._depth -= 1
        if self._skip:
            self._skip -= 1
            return
        if tag in BLOCKS or self._depth == 0:
            self._flush()

    def handle_data(self, data):
        if self._in_title:
            self.title += data
        elif self._depth and not self._skip:
            self._line.append(data)


def html_files(args, work):
    if args.html_dir:
        return sorted(glob.glob(os.path.join(args.html_dir, "library", "*.html")))
    root = unpack_deb("make-pydoc", "python3.11-doc", args.deb, work, "--html-dir")
    # One of them: the package holds the folder under two names (python3.11, python3.11-doc).
    html = sorted(glob.glob(os.path.join(root, "usr/share/doc/python3*/html")))
    files = sorted(glob.glob(os.path.join(html[0], "library", "*.html"))) if html else []
    if not files:
        sys.exit(f"make-pydoc: {args.deb or 'python3.11-doc'} holds no usr/share/doc/python3*/html/library/*.html")
    return files


def link_target(href):
    """The library page (its id) an href from library/<page>.html points at, or None."""
    url = urllib.parse.urlsplit(href)
    if url.scheme or url.netloc or not url.path:
        return None  # another site, or an anchor on this page
    path = posixpath.normpath(posixpath.join("library", url.path))
    if posixpath.dirname(path) != "library" or not path.endswith(".html"):
        return None
    return posixpath.basename(path)[:-len(".html")]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", required=True)
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--deb", help="a python3.11-doc .deb already downloaded")
    source.add_argument("--html-dir", help="a folder with library/*.html (tests)")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="make-pydoc-")
    try:
        files = html_files(args, work)
        names = {os.path.basename(f)[:-len(".html")] for f in files}
        articles, related = [], []
        for path in files:
            name = os.path.basename(path)[:-len(".html")]
            page = Page()
            with open(path, encoding="utf-8", errors="replace") as f:
                page.feed(f.read())
            page.close()
            text = "\n\n".join(page.paragraphs)
            if not text.strip():
                continue
            title = re.sub(r"\s+[—-]+\s+Python [\d.]+ documentation\s*$", "", " ".join(page.title.split()))
            articles.append({"id": name, "title": title or name, "text": text})
            targets = []
            for href in page.hrefs:
                target = link_target(href)
                if target in names and target != name and target not in targets:
                    targets.append(target)
            related.extend({"source": name, "target": t} for t in targets)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    write_linked_corpus(args.output, articles, related)


if __name__ == "__main__":
    main()
