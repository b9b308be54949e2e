#!/usr/bin/env python3
"""scripts/make-perldoc.py on three pods written here: every link form Perl's
POD has (L<name>, L<text|name/"section">, L<< name >>, a section of a pod
outside the set, a link to itself) gives exactly the relations worked out by
hand; the text is pod2text's (formatting codes resolved); the title is the
NAME line; relevance lists each linking pod's targets.

  make_perldoc_check.py WORKDIR
"""
import json
import os
import shutil
import subprocess
import sys

work = sys.argv[1]
shutil.rmtree(work, ignore_errors=True)
pods = os.path.join(work, "pods")
os.makedirs(pods)
PODS = {
    "alpha": """=head1 NAME

alpha - the first pod

=head1 DESCRIPTION

B<Bold> words and C<code> and I<italics>; see L<beta>, L<the gamma operators|gamma/"Shift Operators">,
L<< beta >> again, L<perlfunc/open> (not in the set) and L<alpha> itself.

=cut
""",
    "beta": """=head1 NAME

beta - the second pod

=head1 DESCRIPTION

Links nowhere: E<lt>tagE<gt>.

=cut
""",
    "gamma": """=head1 NAME

gamma - the third pod

=head2 Shift Operators

Shifts, and back to L<alpha/NAME>.

=cut
""",
}
for name, text in PODS.items():
    with open(os.path.join(pods, name + ".pod"), "w") as f:
        f.write(text)
out = os.path.join(work, "out")
script = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "make-perldoc.py")
subprocess.run([sys.executable, script, "--pod-dir", pods, "--output", out], check=True)

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
check(articles["alpha"]["title"] == "alpha - the first pod", f"title {articles['alpha']['title']!r}")
text = articles["alpha"]["text"]
check("Bold words" in text and "B<" not in text and "L<" not in text, f"formatting codes left: {text!r}")
check("<tag>" in articles["beta"]["text"], f"escapes: {articles['beta']['text']!r}")
check("\n\n" in text, "no paragraphs")
check(stats == {"documents": 3, "links": 3, "queries": 2, "words_median": stats["words_median"],
                "words_p95": stats["words_p95"]}, f"stats {stats}")
if failures:
    print("\n".join(failures))
    sys.exit(1)
print(json.dumps({"articles": len(articles), "related": related, "stats": stats}))
