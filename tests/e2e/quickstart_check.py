#!/usr/bin/env python3
"""README command (1), scripts/quickstart.sh, end to end: import MiniLM,
render and prepare the manual pages, fine-tune, evaluate beside TF-IDF,
search, export and load the export in sentence-transformers (--recipe flat)
or in python/'s numpy encoder (--recipe smith, MiniLM read whole). Shortened
through the script's own variables (2 fine-tuning steps, the 300 pages
nearest printf(3), outputs in SCRATCH, the set-up the test command has just
done skipped); everything else is the script as users run it.

Checks the exit status, that every stage printed what it should (the table's
three rows, printf(3)'s hits, the Python reader's line with its
difference from docmatch's own vectors), and that the export needed no
--corpus (the checkpoint carries its tokenizer) and is the recipe's model.

usage: quickstart_check.py BUILD_DIR SCRATCH [flat|smith]
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def check(condition, message):
    if not condition:
        sys.exit("FAILED: " + message)


def main():
    build, scratch = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    recipe = sys.argv[3] if len(sys.argv) > 3 else "flat"
    if recipe == "flat":
        rows = ("TF-IDF (reference)", "MiniLM, contrastive fine-tuning", "hybrid: fine-tuned MiniLM + TF-IDF")
        reader, export, kind = r"SentenceTransformer\('models/manpages-minilm'\)", "manpages-minilm", "match_bert"
    else:
        rows = ("TF-IDF (reference)", "MiniLM read whole as SMITH, contrastive fine-tuning",
                "hybrid: fine-tuned SMITH + TF-IDF")
        reader, export, kind = r"Encoder\('models/manpages-smith'\)", "manpages-smith", "smith"
    shutil.rmtree(scratch, ignore_errors=True)
    env = dict(os.environ, DOCMATCH_QUICKSTART_DIR=scratch, DOCMATCH_QUICKSTART_STEPS="2",
               DOCMATCH_QUICKSTART_PAGES="300", DOCMATCH_QUICKSTART_SETUP="0", DOCMATCH_BUILD_DIR=build)
    started = time.time()
    result = subprocess.run(["bash", os.path.join(ROOT, "scripts", "quickstart.sh"), "--recipe", recipe], env=env,
                            capture_output=True, text=True)
    seconds = time.time() - started
    out = result.stdout
    check(result.returncode == 0, f"quickstart.sh exited {result.returncode} after {seconds:.0f} s\n--- stdout\n"
          f"{out[-4000:]}\n--- stderr\n{result.stderr[-4000:]}")
    for row in rows:
        check(re.search(rf"^{re.escape(row)}.*\s0\.\d{{3}}\s+0\.\d{{3}}", out, re.M), f"the table has no row '{row}'")
    check("query: printf.3" in out and re.search(r"^\s+1\s+\d\.\d{4}\s+\S+\s+\S+\(\d", out, re.M),
          "printf(3)'s hits with titles are missing")
    st = re.search(reader + r": 384-d unit vectors.*largest difference from docmatch encode's vectors (\S+)", out)
    check(st and float(st.group(1)) <= 1e-4, f"the Python reader's line: {st and st.group(0)}")
    check("[quickstart] done in" in out, "no closing line")
    # The closing lines say where each output is, and every path they name exists.
    where = out[out.index("[quickstart] where things are"):out.index("[quickstart] next, on your own")]
    named = {line[2:22].strip(): line[22:].split()[0].rstrip(";") for line in where.splitlines()[1:]}
    check(sorted(named) == sorted(["corpus", "pages and pairs", "checkpoints", "metrics and curves", "evaluation",
                                   "exported model"]) and
          all(os.path.exists(os.path.join(scratch, path)) for path in named.values()) and
          os.path.isdir(os.path.join(scratch, named["checkpoints"], "tensorboard")) and
          f"tensorboard --logdir {named['checkpoints'].rstrip('/')}/tensorboard" in where,
          f"the closing 'where things are' lines:\n{where}\n{named}")
    check("valid/loss scores each held-out pair against the documents of every validation" in out,
          "the validation lines are not explained")
    config = json.load(open(os.path.join(scratch, "models", export, "config.json")))
    got = (config.get("stage"), config.get("tokenizer"), config.get("model", {}).get("kind"))
    check(got == ("export", "tokenizer.wordpiece", kind), f"the export's config.json (stage, tokenizer, kind): {got}")
    pages = sum(1 for _ in open(os.path.join(scratch, "data", "manpages", "articles.jsonl")))
    check(pages == 300, f"DOCMATCH_QUICKSTART_PAGES=300 kept {pages} pages")
    print(json.dumps({"recipe": recipe, "seconds": round(seconds, 1), "pages": pages,
                      "python_max_abs_difference": float(st.group(1))}))


if __name__ == "__main__":
    main()
