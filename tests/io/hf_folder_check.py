#!/usr/bin/env python3
"""Hugging Face folders as users have them (io/import_hf.h, io/model_folder.cpp):

  * a sentence-transformers folder given where a docmatch model goes is named
    as one, in one line, with the import-hf command to run;
  * import-hf reads a hub id (org/name) from the local Hugging Face cache
    (HF_HUB_CACHE), a cache repository folder (models--org--name, its snapshot
    from refs/main) and a snapshot whose files are links into blobs/, and each
    writes the same weights, byte for byte, as the plain folder;
  * a hub id not in the cache, and a cache folder with two snapshots and no
    refs/main, are refused saying what to do (docmatch downloads nothing).

usage: hf_folder_check.py DOCMATCH SCRATCH  (MiniLM from $DOCMATCH_MODELS, as scripts/fetch-models.py puts it)
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys


def check(condition, message):
    if not condition:
        sys.exit("FAILED: " + message)


def run(docmatch, *args, env=None):
    return subprocess.run([docmatch, *args], capture_output=True, text=True, env=env)


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    docmatch, scratch = sys.argv[1:3]
    minilm = os.path.join(os.environ.get("DOCMATCH_MODELS", os.path.expanduser("~/.cache/docmatch/models")),
                          "all-minilm-l6-v2")
    check(os.path.exists(os.path.join(minilm, "model.safetensors")), f"{minilm} missing: run scripts/fetch-models.py")
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    figures = {}

    # A sentence-transformers folder where a docmatch model goes: one line.
    texts = os.path.join(scratch, "texts.jsonl")
    with open(texts, "w") as f:
        f.write(json.dumps({"id": "a", "text": "Format and print data."}) + "\n")
    result = run(docmatch, "encode", "--model", minilm, "--input", texts)
    lines = result.stderr.strip().splitlines()
    check(result.returncode == 1 and len(lines) == 1 and "is a Hugging Face / sentence-transformers folder" in lines[0]
          and f"docmatch import-hf {minilm} --output models/NAME" in lines[0] and "checksums" not in lines[0],
          f"encode --model <a sentence-transformers folder>: exit {result.returncode}\n{result.stderr}")
    figures["foreign_folder_message"] = lines[0]

    # A hub cache laid out as huggingface_hub does: blobs named by hash,
    # the snapshot's files links into them, refs/main naming the snapshot.
    hub = os.path.join(scratch, "hub")
    repository = os.path.join(hub, "models--sentence-transformers--all-MiniLM-L6-v2")
    snapshot = os.path.join(repository, "snapshots", "0123abcd")
    os.makedirs(os.path.join(repository, "blobs"))
    os.makedirs(os.path.join(repository, "refs"))
    for root, _, files in os.walk(minilm):
        for name in files:
            source = os.path.join(root, name)
            blob = os.path.join(repository, "blobs", digest(source))
            shutil.copyfile(source, blob)
            link = os.path.join(snapshot, os.path.relpath(source, minilm))
            os.makedirs(os.path.dirname(link), exist_ok=True)
            os.symlink(os.path.relpath(blob, os.path.dirname(link)), link)
    with open(os.path.join(repository, "refs", "main"), "w") as f:
        f.write("0123abcd")
    env = dict(os.environ, HF_HUB_CACHE=hub)
    outputs = {}
    for name, given in (("plain", minilm), ("hub-id", "sentence-transformers/all-MiniLM-L6-v2"),
                        ("repository", repository), ("snapshot", snapshot)):
        outputs[name] = os.path.join(scratch, name)
        result = run(docmatch, "import-hf", given, "--output", outputs[name], env=env)
        check(result.returncode == 0, f"import-hf {given}: {result.stderr[-1500:]}")
        if name in ("hub-id", "repository"):
            check(f"snapshot {snapshot}" in result.stdout, f"import-hf {given} says which snapshot:\n{result.stdout}")
        figures[name] = result.stdout.splitlines()[0][:160]
    # The same tensors, byte for byte (the files' metadata names each source).
    from safetensors.numpy import load_file
    plain = load_file(os.path.join(outputs["plain"], "model.safetensors"))
    for name, folder in outputs.items():
        tensors = load_file(os.path.join(folder, "model.safetensors"))
        check(tensors.keys() == plain.keys() and all(tensors[k].tobytes() == plain[k].tobytes() for k in plain),
              f"import-hf from the {name} gives other weights than from the folder itself")
    figures["tensors_equal"] = len(plain)

    # Not in the cache: docmatch downloads nothing, and says how to fetch it.
    result = run(docmatch, "import-hf", "someone/not-here", "--output", os.path.join(scratch, "missing"), env=env)
    check(result.returncode == 1 and "huggingface-cli download someone/not-here" in result.stderr and
          hub in result.stderr and not os.path.exists(os.path.join(scratch, "missing")),
          f"a hub id not in the cache: exit {result.returncode}\n{result.stderr}")
    # Two snapshots and no refs/main: which one is not guessed.
    os.remove(os.path.join(repository, "refs", "main"))
    shutil.copytree(snapshot, os.path.join(repository, "snapshots", "4567ef01"), symlinks=True)
    result = run(docmatch, "import-hf", repository, "--output", os.path.join(scratch, "two"), env=env)
    check(result.returncode == 1 and "2 snapshots and no refs/main" in result.stderr,
          f"two snapshots: exit {result.returncode}\n{result.stderr}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
