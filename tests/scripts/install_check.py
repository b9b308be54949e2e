#!/usr/bin/env python3
"""`cmake --install` puts docmatch on a prefix without root: <prefix>/bin/docmatch
runs from any directory with no LD_LIBRARY_PATH (its rpath finds libtorch),
reports the same build as build/src/docmatch, and prepares a corpus.

usage: install_check.py BUILD_DIR SCRATCH
"""
import json
import os
import shutil
import subprocess
import sys


def check(condition, message):
    if not condition:
        sys.exit("FAILED: " + message)


def main():
    build, scratch = sys.argv[1:3]
    shutil.rmtree(scratch, ignore_errors=True)
    prefix = os.path.join(scratch, "prefix")
    result = subprocess.run(["cmake", "--install", build, "--prefix", prefix], capture_output=True, text=True)
    check(result.returncode == 0, f"cmake --install: {result.stdout[-1500:]}{result.stderr[-1500:]}")
    installed = os.path.join(prefix, "bin", "docmatch")
    check(os.access(installed, os.X_OK), f"no {installed}")
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    env["PATH"] = os.path.join(prefix, "bin") + os.pathsep + env.get("PATH", "")
    ours = subprocess.run(["docmatch", "info"], capture_output=True, text=True, env=env, cwd="/")
    built = subprocess.run([os.path.join(build, "src", "docmatch"), "info"], capture_output=True, text=True)
    check(ours.returncode == 0 and json.loads(ours.stdout) == json.loads(built.stdout),
          f"the installed docmatch's info differs or failed: {ours.stderr[-1500:]}")
    with open(os.path.join(scratch, "docs.jsonl"), "w") as f:
        for i in range(6):
            f.write(json.dumps({"id": f"d{i}", "text": f"Document {i} has a sentence. And another one here."}) + "\n")
    prepared = subprocess.run(["docmatch", "prepare", "--input", "docs.jsonl", "--output", "corpus", "--vocab-size",
                               "64", "--no-progress"], capture_output=True, text=True, env=env, cwd=scratch)
    check(prepared.returncode == 0 and os.path.exists(os.path.join(scratch, "corpus", "manifest.json")),
          f"the installed docmatch's prepare: {prepared.stderr[-1500:]}")
    print(json.dumps({"installed": installed, "version": json.loads(ours.stdout).get("docmatch_version")}))


if __name__ == "__main__":
    main()
