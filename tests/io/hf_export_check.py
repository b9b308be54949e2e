#!/usr/bin/env python3
"""`docmatch export` of a flat encoder, loaded by the Python stack (the
packages in the project's venv), with no download:

- a small random BERT (`transformers`) with a WordPiece vocabulary trained by
  the `tokenizers` library is imported twice (mean pooling; [CLS] pooling
  with its dense layer), trained 3 DocSplit steps by `docmatch pretrain`
  (the [CLS] one) and exported; `export` picks the Hugging Face layout;
- `SentenceTransformer(export)` gives `docmatch embed`'s vectors for every
  article (some longer than one window: both truncate the same way), and
  so do `AutoTokenizer` + `AutoModel` with the pooling done by hand;
- `docmatch embed` reads the exported folder back (BERT layout) with the
  vectors of the checkpoint it came from;
- SDR's sentence encoder (imported --kind sdr, 2 steps of SDR pre-training)
  exports to the same layout by default: SentenceTransformer gives docmatch's
  vectors of one-sentence documents (SDR's document vector is then that
  sentence's), and `embed` reads the export back;
- SMITH's sentence encoder exports with --format hf only: SentenceTransformer
  gives the block vector of a one-block text as numpy computes it from the
  docmatch-layout export (scripts/reference_vector.py), docmatch refuses to
  load that folder as a model, --format auto writes docmatch's layout, and a
  SMITH without [SEP] (separator: false) is refused for hf;
- an existing output needs --overwrite; no file of the export is named
  tokenizer.model unless it is SentencePiece.

Prints one JSON line of figures.

usage: hf_export_check.py DOCMATCH SCRATCH_DIR
"""
import json
import os
import random
import shutil
import subprocess
import sys

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.disable_progress_bar()

TOLERANCE = 2e-5
WORDS = ("the river glacier valley Zürich café naïve mountain forest city music piano violin orchestra symphony "
         "planet orbit comet telescope galaxy protein enzyme cell membrane genome election parliament senate "
         "treaty empire bridge tunnel railway locomotive harbour ship sailor island volcano lava basalt "
         "granite cathedral painter fresco museum novel poet sonnet theatre comedy 1887 42 3.5").split()


def sentence(rng):
    words = [rng.choice(WORDS) for _ in range(rng.randint(4, 14))]
    words[0] = words[0].capitalize()
    if rng.random() < 0.3:
        words.insert(rng.randint(1, len(words) - 1), rng.choice(["(see", "—", "e.g.,", "well-known"]))
    return " ".join(words) + rng.choice([".", "!", "?", ";"])


def write_articles(path, count, seed=11):
    rng = random.Random(seed)
    texts = {}
    with open(path, "w", encoding="utf-8") as f:
        for i in range(count):
            # every fifth article runs past one 64-token window
            n = rng.randint(12, 18) if i % 5 == 0 else rng.randint(2, 4)
            text = " ".join(sentence(rng) for _ in range(n))
            texts[f"doc{i:02d}"] = text
            f.write(json.dumps({"id": f"doc{i:02d}", "title": f"Document {i}", "text": text},
                               ensure_ascii=False) + "\n")
    return texts


def write_one_sentence_articles(path, count, seed=23):
    """Articles of one plain sentence each (no abbreviations ICU might split at)."""
    rng = random.Random(seed)
    texts = {}
    plain = [w for w in WORDS if w.isalpha()]
    with open(path, "w", encoding="utf-8") as f:
        for i in range(count):
            words = [rng.choice(plain) for _ in range(rng.randint(4, 20))]
            text = " ".join(words).capitalize() + "."
            texts[f"one{i:02d}"] = text
            f.write(json.dumps({"id": f"one{i:02d}", "title": f"One {i}", "text": text}, ensure_ascii=False) + "\n")
    return texts


def random_bert(folder, texts):
    """A 2-layer BERT with random weights and a WordPiece vocabulary of `texts`."""
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertConfig, BertModel
    os.makedirs(folder)
    wordpiece = BertWordPieceTokenizer(lowercase=True)
    wordpiece.train_from_iterator(list(texts), vocab_size=300, min_frequency=1,
                                  special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    wordpiece.save_model(folder)
    with open(os.path.join(folder, "vocab.txt"), encoding="utf-8") as f:
        vocab_size = sum(1 for _ in f)
    torch.manual_seed(5)
    config = BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    BertModel(config).save_pretrained(folder, safe_serialization=True)
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"do_lower_case": True, "tokenizer_class": "BertTokenizer"}, f)


def read_vectors(path):
    with h5py.File(path, "r") as f:
        return [i.decode() for i in f["document_ids"][:]], f["vectors"][:].astype(np.float64)


def main():
    docmatch, scratch = sys.argv[1:3]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    path = lambda *parts: os.path.join(scratch, *parts)  # noqa: E731

    def run(*args, fail=False):
        proc = subprocess.run([docmatch, *args], capture_output=True, text=True)
        if (proc.returncode != 0) != fail:
            sys.exit(f"docmatch {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
        return proc

    texts = write_articles(path("articles.jsonl"), 30)
    random_bert(path("bert"), texts.values())
    figures = {"articles": len(texts)}

    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer
    for pooling in ("mean", "cls"):
        imported = path(f"import-{pooling}")
        run("import-hf", path("bert"), "--output", imported, "--pooling", pooling, "--max-tokens", "64",
            "--dropout", "0")
        corpus = path(f"corpus-{pooling}")
        if not os.path.exists(path("corpus")):
            run("prepare", "--input", path("articles.jsonl"), "--output", path("corpus"), "--tokenizer",
                os.path.join(imported, "tokenizer.wordpiece"), "--no-progress")
        corpus = path("corpus")
        model = imported
        if pooling == "cls":  # a trained checkpoint, [CLS] dense layer included
            run("pretrain", "--corpus", corpus, "--init", imported, "--objective", "docsplit", "--lm-weight", "0",
                "--steps", "3", "--batch-size", "6", "--lr", "1e-3", "--run", path("run"), "--no-progress")
            model = path("run", "latest")
        exported = path(f"export-{pooling}")
        out = run("export", "--model", model, "--corpus", corpus, "--output", exported)
        assert "hf layout" in out.stdout + out.stderr, out.stdout + out.stderr
        files = sorted(os.listdir(exported))
        assert "tokenizer.model" not in files and "tokenizer.wordpiece" in files and "vocab.txt" in files, files
        assert ("2_Dense" in files) == (pooling == "cls"), files

        run("embed", "--model", model, "--corpus", corpus, "--output", path(f"model-{pooling}.h5"), "--no-progress")
        run("embed", "--model", exported, "--corpus", corpus, "--output", path(f"export-{pooling}.h5"),
            "--no-progress")
        ids, mine = read_vectors(path(f"model-{pooling}.h5"))
        ids_back, back = read_vectors(path(f"export-{pooling}.h5"))
        assert ids == ids_back
        figures[f"{pooling}_export_read_back_max_abs"] = float(np.abs(mine - back).max())
        assert figures[f"{pooling}_export_read_back_max_abs"] < 1e-6, figures

        st = SentenceTransformer(exported, device="cpu")
        theirs = st.encode([texts[i] for i in ids], convert_to_numpy=True, batch_size=8).astype(np.float64)
        diff = np.abs(theirs - mine).max(axis=1)
        figures[f"{pooling}_sentence_transformers_max_abs"] = float(diff.max())
        assert diff.max() < TOLERANCE, f"{ids[int(diff.argmax())]}: |ST - docmatch| = {diff.max():.2e}"

        tokenizer = AutoTokenizer.from_pretrained(exported)
        bert = AutoModel.from_pretrained(exported).eval()
        batch = tokenizer([texts[i] for i in ids], padding=True, truncation=True, max_length=64,
                          return_tensors="pt")
        with torch.no_grad():
            states = bert(**batch).last_hidden_state
            if pooling == "mean":
                mask = batch["attention_mask"].unsqueeze(-1).float()
                pooled = (states * mask).sum(1) / mask.sum(1)
            else:
                from safetensors.torch import load_file
                dense = load_file(os.path.join(exported, "2_Dense", "model.safetensors"))
                pooled = states[:, 0] @ dense["linear.weight"].T + dense["linear.bias"]
            vectors = torch.nn.functional.normalize(pooled, dim=-1).double().numpy()
        figures[f"{pooling}_transformers_max_abs"] = float(np.abs(vectors - mine).max())
        assert figures[f"{pooling}_transformers_max_abs"] < TOLERANCE, figures
        figures["windows_truncated"] = int((batch["attention_mask"].sum(1) == 64).sum())

    assert figures["windows_truncated"] >= 3, figures  # the long articles did run past one window
    out = run("export", "--model", path("run", "latest"), "--corpus", path("corpus"), "--output",
              path("export-cls"), fail=True)
    assert "exists; pass --overwrite" in out.stderr, out.stderr

    # One-sentence documents: SDR's document vector is its one sentence's,
    # and for SMITH they are one block each.
    one = write_one_sentence_articles(path("one.jsonl"), 12)
    run("prepare", "--input", path("one.jsonl"), "--output", path("corpus-one"), "--tokenizer",
        os.path.join(path("import-mean"), "tokenizer.wordpiece"), "--no-progress")

    # SDR's sentence encoder.
    run("import-hf", path("bert"), "--output", path("import-sdr"), "--kind", "sdr", "--max-tokens", "64",
        "--dropout", "0")
    run("pretrain", "--corpus", path("corpus"), "--init", path("import-sdr"), "--objective", "sdr", "--steps", "2",
        "--batch-size", "4", "--lr", "1e-3", "--run", path("sdr-run"), "--no-progress")
    out = run("export", "--model", path("sdr-run", "latest"), "--corpus", path("corpus"), "--output",
              path("export-sdr"))
    assert "hf layout" in out.stdout + out.stderr, out.stdout + out.stderr
    files = sorted(os.listdir(path("export-sdr")))
    assert "1_Pooling" in files and "2_Dense" not in files and "vocab.txt" in files, files
    with open(path("export-sdr", "1_Pooling", "config.json")) as f:
        assert json.load(f)["pooling_mode_mean_tokens"] is True
    run("embed", "--model", path("sdr-run", "latest"), "--corpus", path("corpus-one"), "--output", path("sdr.h5"),
        "--no-progress")
    run("embed", "--model", path("export-sdr"), "--corpus", path("corpus-one"), "--output", path("sdr-back.h5"),
        "--no-progress")
    ids, mine = read_vectors(path("sdr.h5"))
    ids_back, back = read_vectors(path("sdr-back.h5"))
    assert ids == ids_back
    figures["sdr_export_read_back_max_abs"] = float(np.abs(mine - back).max())
    assert figures["sdr_export_read_back_max_abs"] < 1e-6, figures
    theirs = SentenceTransformer(path("export-sdr"), device="cpu").encode([one[i] for i in ids],
                                                                          convert_to_numpy=True).astype(np.float64)
    figures["sdr_sentence_transformers_max_abs"] = float(np.abs(theirs - mine).max())
    assert figures["sdr_sentence_transformers_max_abs"] < TOLERANCE, figures

    # SMITH's sentence encoder: block vectors.
    vocab_size = json.load(open(path("bert", "config.json")))["vocab_size"]
    for name, separator in (("smith", "true"), ("smith-nosep", "false")):
        with open(path(f"{name}.yaml"), "w") as f:
            f.write("model:\n  kind: smith\n  vocab_size: %d\n  hidden: 16\n  heads: 2\n  intermediate: 32\n"
                    "  sentence_layers: 1\n  document_layers: 1\n  block_length: 32\n  max_blocks: 4\n"
                    "  dropout: 0.0\n  separator: %s\n" % (vocab_size, separator))
        run("pretrain", "--corpus", path("corpus"), "--model-config", path(f"{name}.yaml"), "--objective", "wp",
            "--steps", "2", "--batch-size", "2", "--lr", "1e-3", "--run", path(name), "--no-progress")
    out = run("export", "--model", path("smith-nosep", "latest"), "--corpus", path("corpus"), "--output",
              path("smith-nosep-hf"), "--format", "hf", fail=True)
    assert "without [SEP]" in out.stderr, out.stderr
    out = run("export", "--model", path("smith", "latest"), "--corpus", path("corpus"), "--output",
              path("smith-export"))
    assert "docmatch layout" in out.stdout + out.stderr and not os.path.exists(path("smith-export", "vocab.txt"))
    out = run("export", "--model", path("smith", "latest"), "--corpus", path("corpus"), "--output",
              path("smith-hf"), "--format", "hf")
    assert "hf layout" in out.stdout + out.stderr and "sentence encoder" in out.stderr, out.stdout + out.stderr
    with open(path("smith-hf", "2_Dense", "config.json")) as f:
        assert json.load(f)["activation_function"] == "torch.nn.modules.activation.ReLU"
    out = run("embed", "--model", path("smith-hf"), "--corpus", path("corpus-one"), "--output", path("x.h5"),
              "--no-progress", fail=True)
    assert "sentence encoder alone" in out.stderr, out.stderr
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
    import reference_vector  # noqa: E402
    from safetensors.numpy import load_file
    with open(path("smith-export", "config.json")) as f:
        c = json.load(f)["model"]
    w = {k: v.astype(np.float64) for k, v in load_file(path("smith-export", "model.safetensors")).items()}
    order = sorted(one)
    reference = np.stack([reference_vector.smith_block_vectors(*reference_vector.read_document(
        path("corpus-one"), i), c, w)[0] for i in order])
    theirs = SentenceTransformer(path("smith-hf"), device="cpu").encode([one[i] for i in order],
                                                                       convert_to_numpy=True).astype(np.float64)
    figures["smith_block_sentence_transformers_max_abs"] = float(np.abs(theirs - reference).max())
    assert figures["smith_block_sentence_transformers_max_abs"] < TOLERANCE, figures
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
