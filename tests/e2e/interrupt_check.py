#!/usr/bin/env python3
"""Ctrl-C into the long commands that are not training runs (issue 64, row
18), and two of them writing one output (row 26): a SIGINT part-way through `prepare`, `embed`, `eval` and `index -j 1`
stops each within two seconds, with exit 130 and a line that says so, and
leaves no output, staging folder or part file behind; the corpus, vectors
and index a complete run writes afterwards are whole. A second Ctrl-C is not
needed, and the first is not ignored as it was (the commands ran to the end,
up to a minute later, and exited 0).

The work is the tiny man-pages corpus (tiny_manpages.py) copied 40 times
under new ids, large enough that each command is still running a second
after it starts; a command that ends before the signal fails the check.

A second `embed` to the output a first one is writing fails at once saying
so (it said "Resource temporarily unavailable"), and the first finishes
with a whole file.

Prints one JSON line: seconds from the signal to each command's exit.

usage: interrupt_check.py DOCMATCH FIXTURE SCRATCH
"""
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

TINY = """model: {kind: smith, hidden: 32, heads: 2, intermediate: 64, sentence_layers: 1,
        document_layers: 1, block_length: 32, max_blocks: 8, dropout: 0.0}
"""
COPIES = 40
SIGNAL_AFTER = 1.0  # seconds


def check(condition, message):
    if not condition:
        sys.exit("FAILED: " + message)


def interrupted(docmatch, args, leftovers, working=None):
    """Starts `args`; once it is working (the path `working` exists, or after
    SIGNAL_AFTER seconds) sends SIGINT, and returns the seconds from the
    signal to the exit, checking the exit and what is left."""
    process = subprocess.Popen([docmatch] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while working and not os.path.exists(working) and process.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    time.sleep(SIGNAL_AFTER)
    check(process.poll() is None, f"{args[0]} ended within {SIGNAL_AFTER} s: the check needs more work")
    sent = time.time()
    process.send_signal(signal.SIGINT)
    try:
        out, err = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        sys.exit(f"FAILED: {args[0]} still ran 30 s after Ctrl-C")
    took = time.time() - sent
    check(process.returncode == 130, f"{args[0]} exited {process.returncode} on Ctrl-C, not 130:\n{err[-1500:]}")
    check("interrupted by Ctrl-C" in err, f"{args[0]} did not say it was interrupted:\n{err[-1500:]}")
    check(took < 2.0, f"{args[0]} took {took:.1f} s to stop")
    left = [p for pattern in leftovers for p in glob.glob(pattern)]
    check(not left, f"{args[0]} left {left} behind after Ctrl-C")
    return round(took, 2)


def main():
    docmatch, fixture, scratch = sys.argv[1:4]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    path = lambda *p: os.path.join(scratch, *p)  # noqa: E731
    big = path("big.jsonl")
    articles = [json.loads(line) for line in open(os.path.join(fixture, "articles.jsonl"))]
    with open(big, "w") as out:
        for copy in range(COPIES):
            for a in articles:
                out.write(json.dumps(dict(a, id=f"{a['id']}~{copy}")) + "\n")
    tokenizer = os.path.join(fixture, "corpus", "tokenizer.model")
    figures = {}

    prepare = ["prepare", "--input", big, "--tokenizer", tokenizer, "--no-progress"]
    figures["prepare"] = interrupted(docmatch, prepare + ["--output", path("cut")],
                                     [path("cut", "manifest.json"), path("cut", "shard-*"), path("cut", ".incoming")],
                                     working=path("cut", ".incoming"))
    subprocess.run([docmatch] + prepare + ["--output", path("big")], check=True, capture_output=True)
    with open(path("tiny.yaml"), "w") as f:
        f.write(TINY)
    subprocess.run([docmatch, "pretrain", "--corpus", os.path.join(fixture, "corpus"), "--model-config",
                    path("tiny.yaml"), "--run", path("run"), "--steps", "1", "--batch-size", "2", "--no-progress"],
                   check=True, capture_output=True)
    model = path("run", "step-1")

    vectors = path("vectors.h5")
    embed = ["embed", "--model", model, "--corpus", path("big"), "--batch-size", "8", "--no-progress"]
    figures["embed"] = interrupted(docmatch, embed + ["--output", vectors], [vectors + "*"],
                                   working=vectors + ".part-0")
    # Two embeds to one output (row 26): the second is told another process
    # writes it; the first finishes whole.
    first = subprocess.Popen([docmatch] + embed + ["--output", vectors], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    while not os.path.exists(vectors + ".part-0") and first.poll() is None:
        time.sleep(0.02)
    check(first.poll() is None, "embed ended before it wrote: the check needs more work")
    second = subprocess.run([docmatch] + embed + ["--output", vectors], capture_output=True, text=True)
    check(second.returncode == 1 and "another process is writing it" in second.stderr,
          f"a second embed to the same output (exit {second.returncode}):\n{second.stderr[-1500:]}")
    out, err = first.communicate(timeout=600)
    check(first.returncode == 0, f"the first embed failed beside the second:\n{err[-1500:]}")
    shown = subprocess.run([docmatch, "search", "--embeddings", vectors, "--id", f"{articles[0]['id']}~0", "--top", "2"],
                           capture_output=True, text=True)
    check(shown.returncode == 0 and f"{articles[0]['id']}~" in shown.stdout, "the first embed's file:\n" + shown.stderr)

    pairs = path("pairs.jsonl")
    with open(pairs, "w") as out:
        for copy in range(COPIES):
            for i, (a, b) in enumerate(zip(articles[::2], articles[1::2])):
                out.write(json.dumps({"source": f"{a['id']}~{copy}", "target": f"{b['id']}~{(copy + i % 2) % COPIES}",
                                      "label": 1 - i % 2}) + "\n")
    report = path("eval")
    figures["eval"] = interrupted(docmatch, ["eval", "--model", model, "--corpus", path("big"), "--test-pairs", pairs,
                                             "--output", report, "--no-progress"], [os.path.join(report, "*")],
                                  working=os.path.join(report, "embeddings.h5.part-0"))
    index = path("vectors.hnsw")
    figures["index"] = interrupted(docmatch, ["index", "--embeddings", vectors, "--output", index, "-j", "1",
                                              "--ef-construction", "400", "--no-progress"], [index + "*"])
    print(json.dumps({"seconds_from_ctrl_c_to_exit": figures, "documents": COPIES * len(articles)}))
    print("OK")


if __name__ == "__main__":
    main()
