#!/usr/bin/env python3
"""scripts/make-pydoc.py on three library pages written here, as Sphinx
writes them: the text is the main body's (no navigation, script, or pilcrow
anchor), block elements as paragraphs, entities decoded; the title loses its
" — Python 3.11 documentation"; a link to another page of the set is a
relation in every form Sphinx writes one (same folder with an anchor,
../library/page.html, a second link to one target), and not a link to
itself, to an anchor on the page, to a page outside library/ or to another
site. Relations worked out by hand.

  make_pydoc_check.py WORKDIR
"""
import json
import os
import shutil
import subprocess
import sys

work = sys.argv[1]
shutil.rmtree(work, ignore_errors=True)
library = os.path.join(work, "html", "library")
os.makedirs(library)


def page(title, body):
    return f"""<!DOCTYPE html>
<html><head><title>{title} &#8212; Python 3.11.2 documentation</title>
<script>var nav = "script text";</script></head>
<body><div class="related" role="navigation"><a href="beta.html">next: beta</a></div>
<div class="bodywrapper"><div class="body" role="main">
{body}
</div></div>
<div class="sphinxsidebar" role="navigation"><a href="gamma.html">sidebar link</a> Sidebar text</div>
</body></html>"""


PAGES = {
    "alpha": page("alpha — The first module", """<section id="alpha"><h1>alpha — The first module<a class="headerlink" href="#alpha">¶</a></h1>
<p>Use <a class="reference internal" href="beta.html#beta.open"><code class="xref">beta.open()</code></a> &amp; friends,
then <a href="../library/gamma.html">gamma</a>, <a href="beta.html">beta again</a>, <a href="#alpha.f">this page</a>,
<a href="alpha.html#x">itself</a>, <a href="../glossary.html#term-x">the glossary</a>
and <a href="https://www.python.org/">the site</a>.</p>
<div class="highlight"><pre>x = 1
y = 2</pre></div>
<script>var inside = "not text";</script>
</section>"""),
    "beta": page("beta — The second module", "<p>Links nowhere: &lt;tag&gt;.</p>"),
    "gamma": page("gamma — The third", """<h2>Shift</h2><ul><li>One <a href="alpha.html">back</a></li><li>Two</li></ul>"""),
}
for name, text in PAGES.items():
    with open(os.path.join(library, name + ".html"), "w") as f:
        f.write(text)
out = os.path.join(work, "out")
script = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "make-pydoc.py")
subprocess.run([sys.executable, script, "--html-dir", os.path.join(work, "html"), "--output", out], check=True)

articles = {a["id"]: a for a in map(json.loads, open(os.path.join(out, "articles.jsonl")))}
related = [(r["source"], r["target"]) for r in map(json.loads, open(os.path.join(out, "related.jsonl")))]
relevance = {r["query"]: r["relevant"] for r in map(json.loads, open(os.path.join(out, "relevance.jsonl")))}
stats = json.load(open(os.path.join(out, "stats.json")))

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)


check(sorted(articles) == ["alpha", "beta", "gamma"], f"articles {sorted(articles)}")
check(related == [("alpha", "beta"), ("alpha", "gamma"), ("gamma", "alpha")], f"related {related}")
check(relevance == {"alpha": ["beta", "gamma"], "gamma": ["alpha"]}, f"relevance {relevance}")
check(articles["alpha"]["title"] == "alpha — The first module", f"title {articles['alpha']['title']!r}")
paragraphs = articles["alpha"]["text"].split("\n\n")
check(paragraphs[0] == "alpha — The first module", f"heading {paragraphs[0]!r}")
check(paragraphs[1].startswith("Use beta.open() & friends, then gamma, beta again,"), f"paragraph {paragraphs[1]!r}")
check(paragraphs[2] == "x = 1 y = 2", f"code {paragraphs[2:]!r}")
check(len(paragraphs) == 3, f"paragraphs {paragraphs!r}")
check(articles["beta"]["text"] == "Links nowhere: <tag>.", f"beta {articles['beta']['text']!r}")
check(articles["gamma"]["text"] == "Shift\n\nOne back\n\nTwo", f"gamma {articles['gamma']['text']!r}")
for a in articles.values():
    for leak in ("¶", "script text", "not text", "Sidebar", "next: beta", "Python 3.11.2 documentation"):
        check(leak not in a["text"], f"{a['id']} holds {leak!r}")
check(stats == {"documents": 3, "links": 3, "queries": 2, "words_median": 4, "words_p95": stats["words_p95"]},
      f"stats {stats}")
if failures:
    print("\n".join(failures))
    sys.exit(1)
print(json.dumps({"articles": len(articles), "related": related, "stats": stats}))
