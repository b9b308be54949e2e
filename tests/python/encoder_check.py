#!/usr/bin/env python3
"""python/ (the docmatch-encoder package) against the docmatch binary:

  * `pip install --no-deps --target` installs it (the package and its
    `docmatch-encode` entry point) from the repository's python/ folder;
  * raw text -> ids: for every article of the tiny real corpus
    (tiny_manpages.py) the package's paragraphs, ICU sentences and
    SentencePiece ids equal the token ids and sentence offsets `prepare`
    stored; and so do its WordPiece ids on the same articles prepared with
    all-MiniLM-L6-v2's vocabulary (when scripts/fetch-models.py has it);
  * hand cases for the sentence filter docmatch applies on top of ICU:
    CLDR abbreviations ("Mr."), docmatch's English extras ("Dr.", "Fig."),
    partial ones completed by the text ("Ph.D."), non-BMP characters;
  * raw text -> vectors: a tiny SMITH (normal and attention combine, 2
    pre-training steps) and a tiny MatchBERT (mean pooling, 2 windows,
    [SEP]) exported with --format docmatch: `docmatch-encode` and
    `Encoder.encode` give `docmatch encode`'s vectors for every article,
    within 2e-5, while an article's vector differs from its nearest other
    article's by more than 10 times that (median); SMITH-Short from MiniLM (WordPiece) too;
  * a folder in Hugging Face layout and an SDR model are refused with a
    message that says what to do; a document without text is skipped with
    its line named.

Prints one JSON line of figures.

usage: encoder_check.py DOCMATCH FIXTURE SCRATCH
"""
import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOLERANCE = 2e-5
MINILM = os.path.join(os.environ.get("DOCMATCH_MODELS", os.path.expanduser("~/.cache/docmatch/models")),
                      "all-minilm-l6-v2")
SMITH = """model: {kind: smith, hidden: 32, heads: 2, intermediate: 64, sentence_layers: 2, document_layers: 1,
        block_length: 24, max_blocks: 12, separator: true, dropout: 0.1, combine: %s}
"""
MATCH_BERT = """model: {kind: match_bert, hidden: 32, heads: 2, intermediate: 64, layers: 1, max_tokens: 48,
        separator: true, chunks: 2, pooling: mean, dropout: 0.1}
"""


def check(condition, message):
    if not condition:
        sys.exit("FAILED: " + message)


def run(*command, stdin=None, fail=False):
    result = subprocess.run([str(c) for c in command], input=stdin, capture_output=True, text=True)
    if fail:
        check(result.returncode != 0, f"{' '.join(map(str, command[:3]))} should have failed")
    elif result.returncode != 0:
        sys.exit(f"FAILED: {' '.join(map(str, command))}\n{result.stdout}\n{result.stderr}")
    return result


def corpus_documents(corpus):
    """id -> (token ids, sentence offsets from 0) as the corpus's shards hold them."""
    with open(os.path.join(corpus, "manifest.json")) as f:
        manifest = json.load(f)
    documents = {}
    for shard in manifest["shards"]:
        with h5py.File(os.path.join(corpus, shard["file"]), "r") as h:
            ids = [i.decode() for i in h["document_ids"][:]]
            starts, paragraphs, sentences = h["document_offsets"][:], h["paragraph_offsets"][:], \
                h["sentence_offsets"][:]
            tokens = h["tokens"][:]
            for d, doc_id in enumerate(ids):
                offsets = sentences[paragraphs[starts[d]]:paragraphs[starts[d + 1]] + 1]
                documents[doc_id] = (tokens[offsets[0]:offsets[-1]].astype(np.int64), offsets - offsets[0])
    return documents


def same_ids(encoder, articles, corpus, what):
    """Every article's ids and sentence offsets from raw text equal the prepared corpus's."""
    stored = corpus_documents(corpus)
    compared = 0
    for doc_id, text in articles.items():
        if doc_id not in stored:
            continue
        tokens, offsets, _ = encoder.tokenize(text)
        want_tokens, want_offsets = stored[doc_id]
        if not (np.array_equal(tokens, want_tokens) and np.array_equal(offsets, want_offsets)):
            k = next((i for i in range(min(len(offsets), len(want_offsets))) if offsets[i] != want_offsets[i]),
                     min(len(offsets), len(want_offsets)))
            sys.exit(f"FAILED: {what}: {doc_id}: {len(offsets) - 1} sentences / {len(tokens)} tokens against "
                     f"prepare's {len(want_offsets) - 1} / {len(want_tokens)}; first difference at sentence {k}")
        compared += 1
    check(compared == len(stored), f"{what}: compared {compared} of the corpus's {len(stored)} documents")
    return compared


CASES = [
    # CLDR's "Mr.", docmatch's English extras "Dr." and "Fig.": one sentence each side
    ("Mr. Smith went to Washington. He saw Dr. Who there.", 2),
    ("See Fig. 3 for the map. It is old.", 2),
    # a partial suppression ("Ph." of "Ph.D.") and an initialism
    ("She is a Ph.D. Student now. The U.S. Army left.", None),
    # a non-BMP character before a break (ICU counts UTF-16 units, Python code points)
    ("Rain \U0001F327. Snow follows. Dr. No", 3),
    ("One.  Two!   Three?\n\nA new paragraph,\n wrapped.", 4),
]


def sentence_cases(docmatch, text_module, tokenizer_source, scratch):
    """The cases above prepared by docmatch and cut by the package: the same ids and offsets."""
    path = os.path.join(scratch, "cases.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for i, (text, _) in enumerate(CASES):
            f.write(json.dumps({"id": f"case{i}", "text": text}) + "\n")
    corpus = os.path.join(scratch, "cases-corpus")
    run(docmatch, "prepare", "--input", path, "--output", corpus, "--tokenizer", tokenizer_source, "--no-progress")
    segmenter = text_module.SentenceSegmenter("en")
    for text, count in CASES:
        sentences = [s for p in text_module.split_paragraphs(text) for s in segmenter.split(p)]
        check(count is None or len(sentences) == count, f"sentences of {text!r}: {sentences}")
    paragraphs = text_module.split_paragraphs("a  b\n c\n\n \t\nd\te\n")
    check(paragraphs == ["a b c", "d e"], f"paragraphs: {paragraphs}")
    return corpus


def encode_both(docmatch, site, export, articles_path, scratch, name):
    """(ids, vectors) from `docmatch encode` and from the installed docmatch-encode, as JSON lines."""
    ours = run(docmatch, "encode", "--model", export, "--input", articles_path, "--device", "cpu")
    env = dict(os.environ, PYTHONPATH=site)
    package = subprocess.run([sys.executable, os.path.join(site, "bin", "docmatch-encode"), "--model", export,
                              "--input", articles_path], capture_output=True, text=True, env=env)
    check(package.returncode == 0, f"docmatch-encode ({name}): {package.stderr}")
    a = [json.loads(line) for line in ours.stdout.splitlines() if line.strip()]
    b = [json.loads(line) for line in package.stdout.splitlines() if line.strip()]
    check([x["id"] for x in a] == [x["id"] for x in b], f"{name}: the two encoders wrote different ids")
    return [x["id"] for x in a], np.array([x["vector"] for x in a]), np.array([x["vector"] for x in b])


def compare(name, ids, ours, package, api_vectors):
    difference = float(np.abs(ours - package).max())
    api_difference = float(np.abs(ours - api_vectors).max())
    # The check must be able to fail: a document's vector differs from its
    # nearest other document's by far more (median over documents).
    nearest = [min(float(np.abs(ours[i] - ours[j]).max()) for j in range(len(ids)) if j != i)
               for i in range(len(ids))]
    spread = float(np.median(nearest))
    check(difference <= TOLERANCE, f"{name}: docmatch-encode differs from docmatch encode by {difference:.3g}")
    check(api_difference <= TOLERANCE, f"{name}: Encoder.encode differs from docmatch encode by {api_difference:.3g}")
    check(spread > 10 * TOLERANCE, f"{name}: documents' vectors are too alike ({spread:.3g}) to tell anything")
    return {f"{name}_max_abs": difference, f"{name}_api_max_abs": api_difference, f"{name}_median_nearest_other": spread}


def main():
    docmatch, fixture, scratch = sys.argv[1:4]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    site = os.path.join(scratch, "site")
    # From a copy, so that the build leaves nothing in the source tree.
    source = os.path.join(scratch, "package")
    shutil.copytree(os.path.join(ROOT, "python"), source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    installed = run(sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
                    site, source)
    check(os.path.exists(os.path.join(site, "docmatch_encoder", "__init__.py")),
          "pip did not install docmatch_encoder: " + installed.stdout + installed.stderr)
    check(os.path.exists(os.path.join(site, "bin", "docmatch-encode")), "no docmatch-encode entry point")
    sys.path.insert(0, site)
    from docmatch_encoder import Encoder, text  # noqa: E402

    corpus = os.path.join(fixture, "corpus")
    cases_corpus = sentence_cases(docmatch, text, corpus, scratch)
    figures = {}
    articles_path = os.path.join(fixture, "articles.jsonl")
    articles = {}
    with open(articles_path, encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            articles[record["id"]] = record["text"]

    # Tiny models on the fixture's SentencePiece corpus, 2 steps each, exported.
    # DocSplit trains the vector path: SMITH's residual dense layer and the
    # windows' attention layer move off their zero start.
    for name, config, objective in (("smith", SMITH % "normal", "wp+sp"), ("smith_attention", SMITH % "attention",
                                                                           "wp"),
                                    ("smith_residual", SMITH % "residual, block_pooling: mean", "docsplit"),
                                    ("match_bert", MATCH_BERT, "wp"),
                                    ("match_bert_max", MATCH_BERT.replace("chunks: 2", "chunks: 3, window_pooling: max"),
                                     "docsplit"),
                                    ("match_bert_attention",
                                     MATCH_BERT.replace("chunks: 2", "chunks: 3, window_pooling: attention"),
                                     "docsplit")):
        yaml = os.path.join(scratch, name + ".yaml")
        with open(yaml, "w") as f:
            f.write(config)
        run_dir, export = os.path.join(scratch, name + "-run"), os.path.join(scratch, name + "-export")
        run(docmatch, "pretrain", "--corpus", corpus, "--model-config", yaml, "--objective", objective, "--run",
            run_dir, "--steps", 2, "--batch-size", 4, "--lr", "1e-3", "--seed", 3, "--no-progress", "--device", "cpu")
        run(docmatch, "export", "--model", os.path.join(run_dir, "latest"), "--corpus", corpus, "--output", export,
            "--format", "docmatch")
        encoder = Encoder(export)
        if name == "smith":
            figures["sentencepiece_documents_equal"] = same_ids(encoder, articles, corpus, "SentencePiece ids")
            figures["sentence_cases_equal"] = same_ids(
                encoder, {f"case{i}": text for i, (text, _) in enumerate(CASES)}, cases_corpus, "sentence cases")
        ids, ours, package = encode_both(docmatch, site, export, articles_path, scratch, name)
        api = encoder.encode([articles[i] for i in ids])
        figures.update(compare(name, ids, ours, package, api))

    # WordPiece: SMITH-Short's import of all-MiniLM-L6-v2 on the same articles.
    if os.path.exists(os.path.join(MINILM, "config.json")):
        short = os.path.join(scratch, "smith-short")
        run(docmatch, "import-hf", MINILM, "--kind", "smith", "--block-length", 64, "--max-blocks", 3,
            "--document-layers", 1, "--seed", 1, "--output", short)
        wp_corpus = os.path.join(scratch, "corpus-wordpiece")
        run(docmatch, "prepare", "--input", articles_path, "--output", wp_corpus, "--tokenizer", short,
            "--no-progress")
        export = os.path.join(scratch, "smith-short-export")
        run(docmatch, "export", "--model", short, "--output", export, "--format", "docmatch")
        encoder = Encoder(export, dtype=np.float64)
        figures["wordpiece_documents_equal"] = same_ids(encoder, articles, wp_corpus, "WordPiece ids")
        few = os.path.join(scratch, "few.jsonl")
        with open(few, "w", encoding="utf-8") as f:
            for doc_id in list(articles)[:24]:
                f.write(json.dumps({"id": doc_id, "text": articles[doc_id]}) + "\n")
        ids, ours, package = encode_both(docmatch, site, export, few, scratch, "smith_short")
        figures.update(compare("smith_short", ids, ours, package, encoder.encode([articles[i] for i in ids])))
    else:
        figures["wordpiece"] = "skipped: no all-minilm-l6-v2 (scripts/fetch-models.py)"

    # Refusals and skips.
    def edited_export(name, edit):  # a copy of the SMITH export whose config.json `edit` changes
        folder = os.path.join(scratch, name)
        shutil.copytree(os.path.join(scratch, "smith-export"), folder)
        with open(os.path.join(folder, "config.json")) as f:
            info = json.load(f)
        edit(info)
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(info, f)
        return folder

    def refused(folder, what, hint):
        try:
            Encoder(folder)
            check(False, f"{what} was accepted")
        except ValueError as e:
            check(hint in str(e), f"the refusal of {what} says what to do: {e}")

    hf = os.path.join(scratch, "smith-short-hf")
    if os.path.exists(os.path.join(scratch, "smith-short")):
        run(docmatch, "export", "--model", os.path.join(scratch, "smith-short"), "--output", hf, "--format", "hf")
    else:  # what such an export's config.json says
        hf = edited_export("smith-short-hf", lambda info: info.update(layout="bert_sentence_encoder"))
    refused(hf, "an hf-layout export", "--format docmatch")
    refused(edited_export("sdr-like", lambda info: info["model"].update(kind="sdr")), "an SDR folder", "--format hf")
    empty = os.path.join(scratch, "empty.jsonl")
    with open(empty, "w") as f:
        f.write(json.dumps({"id": "blank", "text": "  \n\n "}) + "\n")
        f.write(json.dumps({"id": "one", "text": "A single sentence."}) + "\n")
    result = subprocess.run([sys.executable, os.path.join(site, "bin", "docmatch-encode"), "--model",
                             os.path.join(scratch, "smith-export"), "--input", empty], capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=site))
    check(result.returncode == 0 and [json.loads(l)["id"] for l in result.stdout.splitlines()] == ["one"],
          f"a document without text is skipped: {result.stdout} {result.stderr}")
    check(f"{empty}:1" in result.stderr and "no text" in result.stderr, f"the skip names its line: {result.stderr}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
