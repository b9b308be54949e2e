"""The real data the Python checks read, found in one place: the Wikispeedia
plaintext articles in ../shared/data and the checkpoints
scripts/fetch-models.py installs. A check without them exits 77, which
CTest reports as skipped."""
import json
import os
import random
import sys
import tarfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
WIKISPEEDIA = os.path.normpath(os.path.join(ROOT, "..", "shared", "data", "wikispeedia",
                                            "plaintext_articles.tar.gz"))
MODELS = os.environ.get("DOCMATCH_MODELS", os.path.expanduser("~/.cache/docmatch/models"))
MINILM = os.path.join(MODELS, "all-minilm-l6-v2")


def skip_without(*paths):
    """Exits 77 (skipped) naming the first of `paths` that does not exist."""
    for path in paths:
        if not os.path.exists(path):
            print(f"skipped: {path} is missing")
            sys.exit(77)


def write_articles(path, count, seed):
    """Writes `count` Wikispeedia articles, drawn with `seed`, as docmatch's
    JSONL input ({"id", "title", "text"}, the file name as id and title)."""
    with tarfile.open(WIKISPEEDIA) as archive, open(path, "w", encoding="utf-8") as out:
        members = sorted((m for m in archive.getmembers() if m.name.endswith(".txt")), key=lambda m: m.name)
        for member in random.Random(seed).sample(members, count):
            text = archive.extractfile(member).read().decode("utf-8", errors="replace")
            name = os.path.basename(member.name)[:-4]
            out.write(json.dumps({"id": name, "title": name, "text": text}) + "\n")
