#!/usr/bin/env python3
"""What a hostile user does to a run, on the tiny real corpus (tiny_manpages.py),
through the real commands; each case asserts what docs/RELIABILITY.md's
table promises:

  * a second run on a run folder in use is refused at once, naming the
    holder's pid and host; the first goes on, and once it ends the folder is
    free again;
  * a run resumed from an earlier checkpoint (a crash between a metrics line
    and its checkpoint) logs every step once, in metrics.jsonl and in
    TensorBoard (read back with the tensorboard package), and the lines before
    the checkpoint are the original ones; --fresh starts the logs over;
  * 1,000 random bytes in the middle of a checkpoint's model.pt: resume and
    embed refuse it naming the file, and resume offers the previous
    checkpoint; truncated trainer.json, optimizer.pt and rng.pt are named,
    with and without their checksums (a folder without checksums.json loads
    only with --allow-unverified);
  * prepare --overwrite with a bad new input (a duplicate id) leaves the old
    corpus whole; a good one replaces it;
  * a shard with a token id outside the vocabulary (written through h5py, so
    its checksums are right) and a shard with 4 KB overwritten in its token
    chunk: inspect --verify, inspect --index and embed fail naming the shard
    (and the document), with no glog check failure;
  * eval with an empty test-pair file and an empty relevance file fails;
  * prepare's report of repaired UTF-8 keeps its count apart from its name;
  * every error above (one rank, no mpirun) comes without MPI's abort banner;
  * a misspelt command ("pretrian") is named with the nearest one, exit 2,
    and every command's --help names --config and --dump-config;
  * SIGTERM to launch/pretrain.sh (2 ranks under mpirun): every rank
    checkpoints and the script exits 75, as a one-process run does;
  * a full disk (a small tmpfs; skipped where it cannot be mounted) during a
    checkpoint, prepare, embed, encode, eval and export: one line naming the
    file and "No space left on device", no crash, the partial step-N.tmp /
    staging folder / part files removed, the previous checkpoint intact and
    loadable;
  * round two (issue 38): an empty input does not replace a corpus; export
    refuses to write over a checkpoint, through `latest` or into a run;
    zero, NaN and infinite option values exit 2 naming the option; an edited
    config.json, NaN weights and NaN vector rows are named; a resume with
    another tokenizer or model shape is refused with advice that removes no
    checkpoint; stdout to /dev/full and `ulimit -f` are errors (a run starts
    under the limit and a checkpoint over it is named); a double
    SIGINT still checkpoints; memory exhaustion (ulimit -v) names the batch
    size and what makes it fit, without an abort;
  * round three (issue 64): --fresh on a folder holding a user's step-7/ or
    best/ and a file `latest`, and export --overwrite onto a plain folder,
    are refused naming the path, every file kept; a run beside a user's
    step-100/ resumes, prunes its own checkpoints and keeps it; a weight
    file its checksum record leaves out, related pairs that are all
    self-pairs, --drop-related on documents all related to each other, vectors of no dimension or of complex numbers, an all-zero
    query row, --queries naming the corpus itself, fuse weights whose sum
    overflows, a NUL in an id, an empty --text or --queries file, a corpus
    prepared again under a run that resumes: each refused or named;
  * a rank stopped with SIGSTOP under mpirun: rank 0 waits without spinning
    a core (its CPU time is measured while it waits) and, after
    --collective-timeout, ends the job naming the operation and the stopped
    rank (the one that does not answer rank 0's question).

usage: reliability_check.py DOCMATCH FIXTURE SCRATCH MPIEXEC [MPIEXEC FLAGS...]
"""
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import h5py
import numpy as np

TINY = """model: {kind: smith, hidden: 32, heads: 2, intermediate: 64, sentence_layers: 1,
  document_layers: 1, block_length: 16, max_blocks: 8, dropout: 0.1, amplifier: 6.0}
"""


def check(condition, message):
    if not condition:
        sys.exit("FAILED: " + message)


class Case:
    def __init__(self, docmatch, fixture, scratch):
        self.docmatch, self.fixture, self.scratch = docmatch, fixture, scratch
        shutil.rmtree(scratch, ignore_errors=True)
        os.makedirs(scratch)
        self.corpus = os.path.join(fixture, "corpus")
        self.model = self.path("tiny.yaml")
        with open(self.model, "w") as f:
            f.write(TINY)

    def path(self, *parts):
        return os.path.join(self.scratch, *parts)

    def run(self, args, fail=False, stdout=False):
        """stdout and stderr together, or stdout alone (JSON a command prints)."""
        result = subprocess.run([self.docmatch] + args, capture_output=True, text=True)
        output = result.stdout + result.stderr
        if fail:
            check(result.returncode != 0, f"{' '.join(args[:3])} should have failed:\n{output[-1500:]}")
            check("Check failed" not in output and "*** " not in output,
                  f"{args[0]} ended in a check failure or a crash instead of an error:\n{output[-1500:]}")
            check("MPI_ABORT" not in output and "ORTE_ERROR_LOG" not in output,
                  f"a one-rank {args[0]} error printed MPI's abort banner:\n{output[-1500:]}")
        else:
            check(result.returncode == 0, f"{' '.join(args)} failed:\n{output[-3000:]}")
        return result.stdout if stdout else output

    def pretrain(self, run, steps, *extra):
        return ["pretrain", "--corpus", self.corpus, "--model-config", self.model, "--run", run, "--steps", str(steps),
                "--batch-size", "4", "--lr", "1e-3", "--warmup-steps", "1", "--decay-steps", "20",
                "--checkpoint-every", "2", "--keep-last", "10", "--log-every", "1", "--no-progress", *extra]


def metrics(run):
    return [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl")) if l.strip()]


def tensorboard_steps(run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(os.path.join(run, "tensorboard"), purge_orphaned_data=False)
    events.Reload()
    return {tag: [e.step for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def run_lock(c):
    run = c.path("locked")
    log = open(c.path("locked.log"), "w")
    first = subprocess.Popen([c.docmatch] + c.pretrain(run, 100000), stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    lock = os.path.join(run, ".lock")
    while time.time() < deadline and first.poll() is None and not (
            os.path.exists(lock) and open(lock).read().startswith("pid")):
        time.sleep(0.05)
    if first.poll() is not None:
        sys.exit("FAILED: the first run ended early:\n" + open(c.path("locked.log")).read()[-2000:])
    started = time.time()
    output = c.run(c.pretrain(run, 100000, "--seed", "7"), fail=True)
    refused_in = time.time() - started
    host = os.uname().nodename
    check(f"in use by another docmatch run (pid {first.pid} on host {host})" in output,
          "the refusal does not name the holder:\n" + output[-1500:])
    check(first.poll() is None, "the second run stopped the first")
    first.send_signal(signal.SIGTERM)  # checkpoints and stops (exit 75)
    code = first.wait(timeout=120)
    check(code == 75, f"the first run exited {code} on SIGTERM, not 75")
    step = int(os.path.basename(os.path.realpath(os.path.join(run, "latest"))).split("-")[1])
    c.run(c.pretrain(run, step + 1))  # the folder is free again: resumes
    return refused_in


def resumed_logs(c):
    run = c.path("resumed")
    output = c.run(c.pretrain(run, 6))
    before = metrics(run)
    # --no-progress (what cluster jobs pass): each metrics line also reaches
    # the console, with the loss metrics.jsonl holds.
    for line in before:
        check(re.search(rf"\[train\] step {line['step']}  loss {line['train/loss']:.5g}  ", output),
              f"no console line for step {line['step']} (loss {line['train/loss']}):\n{output[-1500:]}")
    # A crash after step 6's metrics line and before its checkpoint: the run
    # resumes from step 4 and logs steps 5 and 6 again.
    shutil.rmtree(os.path.join(run, "step-6"))
    os.remove(os.path.join(run, "latest"))
    c.run(c.pretrain(run, 8))
    after = metrics(run)
    steps = [l["step"] for l in after]
    check(steps == list(range(1, 9)), f"metrics.jsonl steps after resume: {steps}")
    check(after[:4] == before[:4], "the lines before the checkpoint changed")
    tags = tensorboard_steps(run)
    check(tags, "no TensorBoard scalars")
    for tag, tag_steps in tags.items():
        check(tag_steps == sorted(set(tag_steps)), f"TensorBoard {tag} steps twice or out of order: {tag_steps}")
    check(tags["train/loss"] == list(range(1, 9)), f"TensorBoard train/loss steps {tags['train/loss']}")
    fresh = c.path("fresh")
    shutil.copytree(run, fresh, symlinks=True)
    c.run(c.pretrain(fresh, 2, "--fresh"))
    check([l["step"] for l in metrics(fresh)] == [1, 2], "--fresh kept the old run's metrics")
    check(tensorboard_steps(fresh)["train/loss"] == [1, 2], "--fresh kept the old run's TensorBoard steps")
    return len(before) + 2


def damaged_checkpoints(c):
    run = c.path("resumed")
    cases = 0
    damaged = c.path("damaged")
    shutil.copytree(run, damaged, symlinks=True)
    model = os.path.join(damaged, "step-8", "model.pt")
    size = os.path.getsize(model)
    with open(model, "r+b") as f:
        f.seek(size // 2)
        f.write(random.Random(1).randbytes(1000))
    output = c.run(c.pretrain(damaged, 10), fail=True)
    check(re.search(r"step-8/model\.pt' is damaged: its CRC-32 is [0-9a-f]{8}, but it was written with", output),
          "resume did not name the damaged model.pt:\n" + output[-1500:])
    check("the previous checkpoint is " + os.path.join(damaged, "step-6") in output,
          "resume did not offer step-6:\n" + output[-1500:])
    output = c.run(["embed", "--model", os.path.join(damaged, "step-8"), "--corpus", c.corpus, "--output",
                    c.path("damaged.h5"), "--no-progress"], fail=True)
    check("step-8/model.pt' is damaged" in output, "embed loaded a damaged model.pt:\n" + output[-1500:])
    check(not os.path.exists(c.path("damaged.h5")), "embed left an output behind")
    cases += 2
    # Truncated files, with their checksums (the record names the size) and
    # without (a checkpoint written before checksums: the reader names it).
    for name, expected in (("trainer.json", "trainer.json' is unreadable"),
                           ("optimizer.pt", "optimizer.pt' is unreadable"), ("rng.pt", "rng.pt' is unreadable")):
        for checksums in (True, False):
            folder = c.path(f"truncated-{name}-{checksums}")
            shutil.copytree(run, folder, symlinks=True)
            path = os.path.join(folder, "step-8", name)
            with open(path, "r+b") as f:
                f.truncate(os.path.getsize(path) // 2)
            unverified = []
            if not checksums:
                os.remove(os.path.join(folder, "step-8", "checksums.json"))
                output = c.run(c.pretrain(folder, 10), fail=True)
                check("has no checksums.json" in output and "--allow-unverified" in output,
                      "a checkpoint without checksums.json was resumed without --allow-unverified:\n" + output[-1500:])
                unverified = ["--allow-unverified"]
            output = c.run(c.pretrain(folder, 10, *unverified), fail=True)
            want = f"step-8/{name}' is damaged: " if checksums else f"step-8/{expected}"
            check(want in output, f"truncated {name} (checksums {checksums}) not named:\n" + output[-1500:])
            cases += 1
    return cases


def prepare_overwrite(c):
    articles = [json.loads(l) for l in open(os.path.join(c.fixture, "articles.jsonl"))]
    good = c.path("good.jsonl")
    with open(good, "w") as f:
        for a in articles[:30]:
            f.write(json.dumps(a) + "\n")
    corpus = c.path("prepared")
    tokenizer = os.path.join(c.corpus, "tokenizer.model")
    prepare = ["prepare", "--tokenizer", tokenizer, "--output", corpus, "--no-progress"]
    c.run(prepare + ["--input", good])
    before = json.loads(c.run(["inspect", corpus]))
    bad = c.path("bad.jsonl")
    with open(bad, "w") as f:
        for a in articles[:20] + [articles[3]]:
            f.write(json.dumps(a) + "\n")
    output = c.run(prepare + ["--input", bad, "--overwrite"], fail=True)
    check("duplicate" in output.lower(), "prepare did not name the duplicate id:\n" + output[-1500:])
    kept = json.loads(c.run(["inspect", corpus]))
    check(kept["documents"] == before["documents"] == 30 and kept["shards"] == before["shards"],
          f"the old corpus changed: {before['documents']} -> {kept['documents']} documents")
    check(not os.path.exists(os.path.join(corpus, ".incoming")), "prepare left its staging folder")
    smaller = c.path("smaller.jsonl")
    with open(smaller, "w") as f:
        for a in articles[:12]:
            f.write(json.dumps(a) + "\n")
    output = c.run(prepare + ["--input", smaller, "--overwrite"])
    check(json.loads(c.run(["inspect", corpus]))["documents"] == 12, "a good --overwrite did not replace it")
    check("held 30 documents; the new corpus has 12" in output, "a smaller corpus replaced one silently:\n" + output)
    return kept["documents"]


def round_two(c):
    """Issue 38's cases: each returns what it measured, and fails on the
    behaviour the issue found (data loss, a crash, or silence)."""
    cases = {}
    run = c.path("resumed")  # a finished 8-step run (resumed_logs)
    # 1. An empty input does not replace a corpus.
    corpus = c.path("prepared")
    before = json.loads(c.run(["inspect", corpus]))["documents"]
    output = c.run(["prepare", "--input", "/dev/null", "--tokenizer", os.path.join(c.corpus, "tokenizer.model"),
                    "--output", corpus, "--overwrite", "--no-progress"], fail=True)
    check("gave no document to write" in output and json.loads(c.run(["inspect", corpus]))["documents"] == before,
          "prepare --input /dev/null replaced the corpus:\n" + output[-1500:])
    cases["empty_input_kept_documents"] = before
    # 2. Outputs never write over a checkpoint, through `latest`, or into a run.
    step = os.path.join(run, "step-8")
    files = sorted(os.listdir(step))
    for output_path, why in ((step, "reads"), (os.path.join(run, "latest"), "symbolic link"),
                             (os.path.join(run, "exported"), "lies in the training run")):
        output = c.run(["export", "--model", step, "--output", output_path, "--overwrite"], fail=True)
        check(why in output and "will not write" in output, f"export --output {output_path}:\n" + output[-1500:])
    check(sorted(os.listdir(step)) == files and os.path.islink(os.path.join(run, "latest")), "the run changed")
    c.run(["embed", "--model", step, "--corpus", c.corpus, "--output", c.path("still-good.h5"), "--no-progress"])
    # 3. Options: zero, NaN and out-of-range values name the option (exit 2).
    for flag, value in (("--checkpoint-every", "0"), ("--log-every", "0"), ("--collective-timeout", "nan"),
                        ("--accumulation", "0"), ("--lr", "inf"), ("--profile-steps", "3:2"),
                        ("--profile-steps", "0"), ("--profile-steps", "2:x"),
                        ("--steps", "99999999999999999999")):
        args = c.pretrain(c.path("never"), 2)
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
        result = subprocess.run([c.docmatch] + args, capture_output=True, text=True)
        check(result.returncode == 2 and flag in result.stderr and len(result.stderr) < 300,
              f"{flag} {value}: exit {result.returncode}, {result.stderr!r}")
    # finetune --mine-margin nan was taken as "keep all" (issue 64, row 12).
    result = subprocess.run([c.docmatch, "finetune", "--corpus", c.corpus, "--model-config", c.model, "--train-pairs",
                             os.path.join(c.fixture, "pairs.train.jsonl"), "--run", c.path("never"), "--steps", "2",
                             "--mine-negatives", "5", "--mine-margin", "nan"], capture_output=True, text=True)
    check(result.returncode == 2 and "--mine-margin" in result.stderr and len(result.stderr) < 300,
          f"--mine-margin nan: exit {result.returncode}, {result.stderr!r}")
    args = c.pretrain(c.path("never"), 2)
    args[args.index("--warmup-steps") + 1] = args[args.index("--decay-steps") + 1] = "0"
    result = subprocess.run([c.docmatch] + args, capture_output=True, text=True)
    check(result.returncode == 2 and "--decay-steps" in result.stderr, f"--decay-steps 0: {result.stderr!r}")
    check(not os.path.exists(os.path.join(c.path("never"), "step-1")), "a refused option still trained")
    # --profile-steps 2:3: the trace of those steps, named on the console, which bench/profile_table.py reads.
    profiled = c.path("profiled")
    output = c.run(c.pretrain(profiled, 3, "--profile-steps", "2:3"))
    trace = os.path.join(profiled, "profile", "steps-2-3.rank-0.json")
    check(os.path.exists(trace) and f"steps 2-3 profiled: {trace}" in output and "gpuGetDeviceCount" not in output,
          f"--profile-steps 2:3 (a trace, and no profiler noise about a missing GPU):\n{output[-1500:]}")
    table = subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                         "bench", "profile_table.py"), trace, "--top", "1000"],
                           capture_output=True, text=True)
    steps = re.findall(r"^docmatch step (\d+): [0-9.]+ ms, [1-9]\d* leaf ops$", table.stdout, re.M)
    check(table.returncode == 0 and steps == ["2", "3"] and "| aten::_fused_adamw_ |" in table.stdout,
          f"profile_table.py on {trace}:\n{table.stdout[:1500]}{table.stderr[-1500:]}")
    # 4. config.json edited with the same size: its checksum is checked.
    edited = c.path("edited")
    shutil.copytree(step, edited)
    config = open(os.path.join(edited, "config.json")).read()
    changed = config.replace('"dropout": 0.1', '"dropout": 0.2')
    check(changed != config and len(changed) == len(config), "no dropout key to edit")
    open(os.path.join(edited, "config.json"), "w").write(changed)
    output = c.run(["embed", "--model", edited, "--corpus", c.corpus, "--output", c.path("edited.h5"),
                    "--no-progress"], fail=True)
    check("config.json' is damaged" in output, "an edited config.json was used:\n" + output[-1500:])
    # 5. NaN: weights (checksums removed, so only the values can tell) and vectors.
    exported = c.path("nan-export")
    c.run(["export", "--model", step, "--output", exported])
    from safetensors.numpy import load_file, save_file
    tensors = load_file(os.path.join(exported, "model.safetensors"))
    name = sorted(tensors)[0]
    tensors[name] = tensors[name].copy()
    tensors[name].flat[0] = np.nan
    save_file(tensors, os.path.join(exported, "model.safetensors"))
    os.remove(os.path.join(exported, "checksums.json"))
    output = c.run(["embed", "--model", exported, "--corpus", c.corpus, "--output", c.path("nan.h5"),
                    "--no-progress"], fail=True)
    check("has no checksums.json" in output and "--allow-unverified" in output,
          "a folder without checksums.json was loaded without --allow-unverified:\n" + output[-1500:])
    output = c.run(["embed", "--model", exported, "--corpus", c.corpus, "--output", c.path("nan.h5"),
                    "--no-progress", "--allow-unverified"], fail=True)
    check(f"{name} holds NaN or Inf" in output and not os.path.exists(c.path("nan.h5")),
          "NaN weights were loaded:\n" + output[-1500:])
    vectors = c.path("nan-row.h5")
    shutil.copy(c.path("still-good.h5"), vectors)
    with h5py.File(vectors, "r+") as f:
        f["vectors"][5] = np.nan
        bad_id = f["document_ids"][5].decode()
    output = c.run(["search", "--embeddings", vectors, "--id", bad_id], fail=True)
    check(f"row 5 (document '{bad_id}') of vectors holds NaN or Inf" in output, "a NaN row was searched:\n" + output)
    # 6. Resuming with another tokenizer or another model shape is refused,
    # with advice that removes no checkpoint.
    articles = [json.loads(l) for l in open(os.path.join(c.fixture, "articles.jsonl"))]
    with open(c.path("half.jsonl"), "w") as f:
        f.writelines(json.dumps(a) + "\n" for a in articles[:150])
    other = c.path("other-tokenizer")
    c.run(["prepare", "--input", c.path("half.jsonl"), "--output", other, "--vocab-size", "1000", "--no-progress"])
    args = c.pretrain(run, 10)
    args[args.index("--corpus") + 1] = other
    output = c.run(args, fail=True)
    check("was trained on a corpus prepared with tokenizer" in output and "to resume from it" not in output,
          "resume with another tokenizer:\n" + output[-1500:])
    wider = c.path("wider.yaml")
    open(wider, "w").write(TINY.replace("hidden: 32", "hidden: 48"))
    args = c.pretrain(run, 10)
    args[args.index("--model-config") + 1] = wider
    output = c.run(args, fail=True)
    check("of another shape" in output and "hidden 32 -> 48" in output and "to resume from" not in output,
          "resume with another model config:\n" + output[-1500:])
    check(sorted(os.listdir(step)) == files, "a refused resume changed the checkpoint")
    # 7. Standard output that cannot be written, and a file size limit.
    with open("/dev/full", "w") as full:
        result = subprocess.run([c.docmatch, "search", "--embeddings", c.path("still-good.h5"), "--id", bad_id,
                                 "--format", "jsonl"], stdout=full, stderr=subprocess.PIPE, text=True)
    check(result.returncode == 1 and "writing to standard output failed: No space left on device" in result.stderr,
          f"search > /dev/full: exit {result.returncode}, {result.stderr!r}")
    limited = c.path("limited")
    result = subprocess.run(["bash", "-c", f"ulimit -f 200; exec {c.docmatch} prepare --input "
                             f"{os.path.join(c.fixture, 'articles.jsonl')} --tokenizer "
                             f"{os.path.join(c.corpus, 'tokenizer.model')} --output {limited} --no-progress"],
                            capture_output=True, text=True)
    check(result.returncode == 1 and "File too large" in result.stderr and not os.path.exists(
        os.path.join(limited, ".incoming")), f"prepare under ulimit -f: exit {result.returncode}, {result.stderr!r}")
    cases["ulimit_f_message"] = result.stderr.strip().splitlines()[-1][:160]
    # Under a file size limit a run starts (Open MPI's start-up outgrew it) and
    # a checkpoint that does not fit is named, the previous one kept.
    limited_run = c.path("limited-run")
    for limit, steps, ok in ((1500, 2, True), (300, 4, False)):
        result = subprocess.run(["bash", "-c", f"ulimit -f {limit}; exec {c.docmatch} " +
                                 " ".join(c.pretrain(limited_run, steps))], capture_output=True, text=True)
        if ok:
            check(result.returncode == 0, f"pretrain under ulimit -f {limit}: exit {result.returncode}, "
                  f"{result.stderr[-1500:]!r}")
        else:
            check(result.returncode == 1 and re.search(r"writing '[^']*step-4\.tmp/\w+\.pt' failed: File too large",
                                                       result.stderr) and "PMIX" not in result.stderr,
                  f"a checkpoint over ulimit -f {limit}: exit {result.returncode}, {result.stderr[-1500:]!r}")
    check(sorted(d for d in os.listdir(limited_run) if d.startswith("step-")) == ["step-2"],
          f"ulimit -f runs left {os.listdir(limited_run)}")
    # Memory exhaustion: one error naming the batch size and what makes it fit,
    # no abort (c10's allocator threw into a FATAL log before the link order
    # of SentencePiece and libtorch was fixed).
    big = c.path("big.yaml")
    with open(big, "w") as f:
        f.write(TINY.replace("hidden: 32", "hidden: 512").replace("intermediate: 64", "intermediate: 2048")
                .replace("block_length: 16, max_blocks: 8", "block_length: 64, max_blocks: 48"))
    args = c.pretrain(c.path("oom"), 2)
    args[args.index("--model-config") + 1] = big
    args[args.index("--batch-size") + 1] = "200"
    result = subprocess.run(["bash", "-c", "ulimit -v 4000000; exec " + " ".join([c.docmatch] + args)],
                            capture_output=True, text=True)
    check(result.returncode == 1 and "out of memory at --batch-size 200" in result.stderr and
          "--accumulation" in result.stderr and "*** " not in result.stderr,
          f"memory exhaustion: exit {result.returncode}, {result.stderr[-1500:]!r}")
    cases["out_of_memory_message"] = result.stderr.strip().splitlines()[-1][:200]
    # 8. A double Ctrl-C keeps the checkpoint of the step it stops at.
    doubled = c.path("double-sigint")
    args = c.pretrain(doubled, 100000)
    args[args.index("--checkpoint-every") + 1] = "1000"
    process = subprocess.Popen([c.docmatch] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and process.poll() is None and not os.path.exists(
            os.path.join(doubled, "metrics.jsonl")):
        time.sleep(0.05)
    if process.poll() is not None:
        sys.exit("FAILED: the run to interrupt ended early:\n" + process.communicate()[1][-1500:])
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    time.sleep(0.01)  # two deliveries, not one pending signal (the kernel merges those)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    saved = [n for n in os.listdir(doubled) if n.startswith("step-")]
    check(process.returncode == 75 and len(saved) == 1, f"double SIGINT: exit {process.returncode}, checkpoints "
          f"{saved}:\n{err[-1500:]}")
    # Where the two were delivered apart (a loaded machine may merge them), the second is acknowledged.
    cases["double_sigint"] = {"checkpoint": saved[0], "acknowledged": "a third signal stops at once" in err}
    return cases


def only_docmatchs_removed(c):
    """Round three, rows 1-2: --fresh and --overwrite remove only what carries
    docmatch's record; a user's folder where docmatch writes is refused,
    nothing removed, and the message names it."""
    def tree(root):
        return sorted((os.path.relpath(os.path.join(d, f), root), open(os.path.join(d, f)).read())
                      for d, _, names in os.walk(root) for f in names)
    refused = 0
    # 1. A step-7/ of notes beside nothing else.
    notes = c.path("notes")
    os.makedirs(os.path.join(notes, "step-7"))
    open(os.path.join(notes, "step-7", "my.txt"), "w").write("x")
    # 2. A plain folder: best/ with files, step-100/ with data, a file `latest`.
    plain = c.path("plain")
    os.makedirs(os.path.join(plain, "best"))
    os.makedirs(os.path.join(plain, "step-100"))
    for name, text in (("best/README.txt", "mine"), ("best/vectors.h5", "not hdf5"), ("step-100/data.txt", "1 2 3"),
                       ("latest", "a file")):  # step-100/ is checked first, then best/ and latest (unit-tested)
        open(os.path.join(plain, name), "w").write(text)
    for folder, named in ((notes, "step-7' has no trainer.json"), (plain, "step-100' has no trainer.json")):
        before = tree(folder)
        output = c.run(c.pretrain(folder, 2, "--fresh"), fail=True)
        check(named in output and "is kept" in output, f"--fresh on {folder} did not name what it keeps:\n" + output[-1500:])
        check(set(before) <= set(tree(folder)), f"--fresh on {folder} removed or changed a file of the user's")
        refused += 1
    # A step-100/ of someone else's beside a real run: the run resumes, saves
    # and prunes its own checkpoints around it (--keep-last 1), and keeps it.
    run = c.path("beside")
    c.run(c.pretrain(run, 2))
    os.makedirs(os.path.join(run, "step-100"))
    open(os.path.join(run, "step-100", "data.txt"), "w").write("kept")
    args = c.pretrain(run, 4)
    args[args.index("--keep-last") + 1] = "1"
    c.run(args)
    steps = sorted(n for n in os.listdir(run) if n.startswith("step-"))
    check(steps == ["step-100", "step-4"], f"beside a user's step-100/ the run left {steps}")
    check(os.path.realpath(os.path.join(run, "latest")).endswith("step-4"), "latest does not name step-4")
    check(open(os.path.join(run, "step-100", "data.txt")).read() == "kept", "the user's step-100/ changed")
    # 3. export and import-hf --overwrite onto a plain folder.
    target = c.path("plain-output")
    os.makedirs(target)
    open(os.path.join(target, "thesis.tex"), "w").write("mine")
    output = c.run(["export", "--model", os.path.join(run, "step-4"), "--output", target, "--overwrite"], fail=True)
    check("is not docmatch's model folder" in output and os.listdir(target) == ["thesis.tex"],
          "export --overwrite replaced a plain folder:\n" + output[-1500:])
    refused += 1
    exported = c.path("exported-twice")
    c.run(["export", "--model", os.path.join(run, "step-4"), "--output", exported])
    c.run(["export", "--model", os.path.join(run, "step-4"), "--output", exported, "--overwrite"])  # its own: replaced
    return refused


def round_three_inputs(c):
    """Round three: inputs that cannot mean what they say are refused or
    named (issue 64, rows 6-11, 13, 14, 17, 20, 24, 25)."""
    import numpy as np
    run, cases = c.path("resumed"), {}
    step, good = os.path.join(run, "step-8"), c.path("still-good.h5")
    # 6. A weight file the checksum record leaves out is not loaded unchecked.
    edited = c.path("unlisted")
    shutil.copytree(step, edited)
    record = json.load(open(os.path.join(edited, "checksums.json")))
    del record["files"]["model.pt"]
    json.dump(record, open(os.path.join(edited, "checksums.json"), "w"))
    output = c.run(["embed", "--model", edited, "--corpus", c.corpus, "--output", c.path("unlisted.h5"),
                    "--no-progress"], fail=True)
    check("model.pt' is not listed in" in output and not os.path.exists(c.path("unlisted.h5")),
          "a weight file without a checksum entry was loaded:\n" + output[-1500:])
    # 7. Related pairs that are all self-pairs teach nothing.
    ids = [json.loads(l)["id"] for l in open(os.path.join(c.fixture, "articles.jsonl"))]
    selfish = c.path("self-pairs.jsonl")
    with open(selfish, "w") as f:
        for i in range(20):
            f.write(json.dumps({"source": ids[i], "target": ids[i], "label": 1}) + "\n")
            f.write(json.dumps({"source": ids[i], "target": ids[i + 20], "label": 0}) + "\n")
    output = c.run(["finetune", "--init", step, "--corpus", c.corpus, "--train-pairs", selfish, "--run",
                    c.path("selfish"), "--steps", "2", "--no-progress"], fail=True)
    check("every related pair (label 1, 20 of them) pairs a document with itself" in output,
          "fine-tuning on self-pairs alone was accepted:\n" + output[-1500:])
    # 11. Twelve documents all related to each other: --drop-related would
    # leave no negative (loss 0, nothing learnt), so it is refused.
    clique = c.path("clique.jsonl")
    with open(clique, "w") as f:
        for i in range(12):
            for j in range(i + 1, 12):
                f.write(json.dumps({"source": ids[i], "target": ids[j], "label": 1}) + "\n")
    output = c.run(["finetune", "--init", step, "--corpus", c.corpus, "--train-pairs", clique, "--run",
                    c.path("clique"), "--steps", "2", "--drop-related", "--no-progress"], fail=True)
    check("--drop-related would leave no negative: each of the 12 documents" in output,
          "--drop-related on a clique was accepted:\n" + output[-1500:])
    # 8, 24. Vectors of no dimension, and complex numbers, are named as such.
    def rewritten(name, vectors, dimension):
        path = c.path(name)
        shutil.copy(good, path)
        with h5py.File(path, "r+") as f:
            kept = f["document_ids"][:len(vectors)]
            for dataset in ("vectors", "document_ids"):
                del f[dataset]
            f.create_dataset("document_ids", data=kept, dtype=h5py.string_dtype())
            f.create_dataset("vectors", data=vectors)
            f.attrs["dimension"] = dimension
            return path, kept[0].decode()
    empty, first = rewritten("no-dimension.h5", np.zeros((3, 0), np.float32), 0)
    output = c.run(["search", "--embeddings", empty, "--id", first], fail=True)
    check("vectors have 0 dimensions" in output, "vectors of no dimension were searched:\n" + output[-1500:])
    output = c.run(["index", "--embeddings", empty, "--no-progress"], fail=True)
    check("vectors have 0 dimensions" in output, "vectors of no dimension were indexed:\n" + output[-1500:])
    complex_file, first = rewritten("complex.h5", (np.ones((4, 8)) + 1j).astype(np.complex64), 8)
    output = c.run(["search", "--embeddings", complex_file, "--id", first], fail=True)
    check("does not hold floating-point numbers" in output and "damaged" not in output,
          "complex vectors were called damaged:\n" + output[-1500:])
    # 9. An all-zero row matches nothing: searching from it is refused.
    zero = c.path("zero-row.h5")
    shutil.copy(good, zero)
    with h5py.File(zero, "r+") as f:
        f["vectors"][3] = 0
        zero_id = f["document_ids"][3].decode()
    output = c.run(["search", "--embeddings", zero, "--id", zero_id], fail=True)
    check(f"document '{zero_id}' has an all-zero vector" in output, "an all-zero row was searched:\n" + output[-1500:])
    # 10. --queries naming the corpus itself ranks as without it, and says so.
    relevance = os.path.join(c.fixture, "relevance.test.jsonl")
    plain = c.run(["eval", "--embeddings", good, "--corpus", c.corpus, "--relevance", relevance, "--output",
                   c.path("eval-plain"), "--no-progress"])
    both = c.run(["eval", "--embeddings", good, "--corpus", c.corpus, "--queries", c.corpus, "--query-embeddings",
                  good, "--relevance", relevance, "--output", c.path("eval-self"), "--no-progress"])
    mrr = [json.load(open(c.path(d, "metrics.json")))["ranking"]["mrr"] for d in ("eval-plain", "eval-self")]
    check("is the corpus" in both and "leaving itself out" in both and mrr[0] == mrr[1],
          f"--queries equal to the corpus ranked queries against themselves (MRR {mrr}):\n" + both[-1500:])
    cases["queries_equal_corpus_mrr"] = mrr[1]
    # 13. Weights whose sum overflows are taken relative to each other.
    huge, unit = c.path("fused-huge.h5"), c.path("fused-unit.h5")
    for target, weight in ((huge, "1e308"), (unit, "1")):
        c.run(["fuse", "--embeddings", good, "--embeddings", good, "--weight", weight, "--weight", weight,
               "--output", target])
    with h5py.File(huge) as a, h5py.File(unit) as b:
        check(np.abs(a["vectors"][:]).min(axis=1).max() > 0 and np.allclose(a["vectors"][:], b["vectors"][:]),
              "fuse --weight 1e308 twice did not give the vectors of equal weights")
    # 14. A NUL inside an id is refused at prepare, not cut.
    nul = c.path("nul.jsonl")
    with open(nul, "w") as f:
        f.write(json.dumps({"id": "nul\u0000a", "text": "One sentence here."}) + "\n")
        f.write(json.dumps({"id": "nul\u0000b", "text": "Another sentence here."}) + "\n")
    output = c.run(["prepare", "--input", nul, "--output", c.path("nul-corpus"), "--tokenizer",
                    os.path.join(c.corpus, "tokenizer.model"), "--no-progress"], fail=True)
    check("nul.jsonl:1" in output and "holds a NUL character" in output, "a NUL in an id was kept:\n" + output[-1500:])
    # 17. A corpus prepared again with other texts under a run that resumes.
    articles = [json.loads(l) for l in open(os.path.join(c.fixture, "articles.jsonl"))][:60]
    for name, suffix in (("changing-a.jsonl", ""), ("changing-b.jsonl", " And one more sentence here.")):
        with open(c.path(name), "w") as f:
            f.writelines(json.dumps(dict(a, text=a["text"] + suffix)) + "\n" for a in articles)
    changing, tokenizer = c.path("changing"), os.path.join(c.corpus, "tokenizer.model")
    c.run(["prepare", "--input", c.path("changing-a.jsonl"), "--output", changing, "--tokenizer", tokenizer,
           "--no-progress"])
    args = c.pretrain(c.path("changing-run"), 2)
    args[args.index("--corpus") + 1] = changing
    c.run(args)
    c.run(["prepare", "--input", c.path("changing-b.jsonl"), "--output", changing, "--tokenizer", tokenizer,
           "--overwrite", "--no-progress"])
    args[args.index("--steps") + 1] = "4"
    output = c.run(args, fail=True)
    check("it was prepared again with other texts" in output and "--init" in output,
          "a run resumed on a corpus prepared again:\n" + output[-1500:])
    # 20. A shard of random bytes read by pre-training's loader thread: one
    # line, without HDF5's diagnostic stack (it printed 14-38 lines).
    noise = c.path("noise-corpus")
    shutil.copytree(c.corpus, noise)
    with open(os.path.join(noise, "shard-00000.h5"), "r+b") as f:
        size = f.seek(0, 2)
        f.seek(0)
        f.write(random.Random(5).randbytes(size))
    args = c.pretrain(c.path("noise-run"), 2)
    args[args.index("--corpus") + 1] = noise
    output = c.run(args, fail=True)
    check("HDF5-DIAG" not in output and "shard-00000.h5" in output,
          "a shard of random bytes printed HDF5's stack or did not name the shard:\n" + output[-2500:])
    # 25. An empty --text or --queries file is named, not taken for no query.
    blank = c.path("blank.jsonl")
    open(blank, "w").write("\n  \n")
    output = c.run(["search", "--embeddings", good, "--queries", blank], fail=True)
    check("holds no query (it is empty or blank)" in output, "an empty --queries file:\n" + output[-1500:])
    output = c.run(["search", "--embeddings", good, "--model", step, "--text", ""], fail=True)
    check("--text is empty" in output, "an empty --text:\n" + output[-1500:])
    return cases


def usage_error(c, args, named):
    """`args` exits 2 with one line naming `named`, before any work."""
    result = subprocess.run([c.docmatch] + args, capture_output=True, text=True)
    output = result.stdout + result.stderr
    check(result.returncode == 2 and named in output, f"{' '.join(args[:3])}: exit {result.returncode}, "
          f"expected 2 naming {named!r}:\n{output[-1500:]}")
    return output


def round_four(c):
    """Round three's smaller list: options that cannot mean what they say, raw
    bytes echoed, a dangling latest, SDR/MaxSim files without their data, a
    run folder over its inputs, and a user's files in a replaced folder."""
    run, cases = c.path("resumed"), {}
    step, good = os.path.join(run, "step-8"), c.path("still-good.h5")
    pairs = os.path.join(c.fixture, "pairs.train.jsonl")
    finetune = ["finetune", "--init", step, "--corpus", c.corpus, "--train-pairs", pairs, "--steps", "2",
                "--no-progress"]
    # Options checked where they are parsed: exit 2, the option named.
    usage_error(c, finetune + ["--run", c.path("margin"), "--mine-margin", "0.2"], "--mine-negatives")
    check(not os.path.exists(c.path("margin")), "a refused --mine-margin made the run folder")
    usage_error(c, finetune + ["--run", c.path("cold"), "--temperature", "1e-30"], "--temperature")
    usage_error(c, c.pretrain(c.path("cold"), 2, "--objective", "docsplit", "--temperature", "1e-30"),
                "--temperature")
    usage_error(c, ["eval", "--embeddings", good, "--corpus", c.corpus, "--relevance",
                    os.path.join(c.fixture, "relevance.test.jsonl"), "--output", c.path("eval-neg"),
                    "--max-queries", "-3"], "--max-queries")
    # Nothing to score, and a model YAML given as a command config (the
    # first hour's rows 9 and 10): exit 2, before anything is embedded.
    usage_error(c, ["eval", "--model", step, "--corpus", c.corpus, "--output", c.path("eval-nothing"),
                    "--no-progress"], "nothing to score")
    check(not os.path.exists(c.path("eval-nothing")), "an eval with nothing to score wrote its folder")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    usage_error(c, ["pretrain", "--config", os.path.join(root, "configs", "models", "bag.yaml"), "--corpus",
                    c.corpus, "--run", c.path("model-yaml")], "which --model-config reads")
    # Raw bytes a user gave are echoed escaped: no terminal control, no invalid UTF-8.
    odd = os.path.join(c.scratch.encode(), b"\x1b[2Jred\xff.h5")  # an escape sequence and a byte that is not UTF-8
    result = subprocess.run([c.docmatch.encode(), b"search", b"--embeddings", odd, b"--id", b"x"], capture_output=True)
    check(result.returncode == 2 and b"\x1b" not in result.stderr and b"\xff" not in result.stderr and
          b"\\x1B[2Jred\\xFF.h5" in result.stderr, f"a path's raw bytes were echoed: {result.stderr!r}")
    result = subprocess.run([c.docmatch, "inspect", c.corpus, "--doc", "\x1b[31mgone\x07"], capture_output=True)
    check(result.returncode == 1 and b"\x1b" not in result.stderr and b"\x07" not in result.stderr and
          b"\\x1B[31mgone\\x07" in result.stderr, f"an id's raw bytes were echoed: {result.stderr!r}")
    cases["escaped"] = result.stderr.decode().strip().splitlines()[-1][:120]
    # A dangling latest is named by inspect, with where a resume starts.
    dangling = c.path("dangling-run")
    shutil.copytree(run, dangling, symlinks=True)
    target = os.readlink(os.path.join(dangling, "latest"))
    shutil.rmtree(os.path.join(dangling, target))
    result = subprocess.run([c.docmatch, "inspect", dangling], capture_output=True, text=True)
    described = json.loads(result.stdout)
    check(result.returncode == 0 and described.get("latest_dangling") == target and
          "which does not exist; a resume starts from" in result.stderr,
          f"inspect of a dangling latest: {result.stdout[-800:]}{result.stderr[-800:]}")
    # A file marked SDR or MaxSim without its sentence or window vectors is
    # refused, not ranked by plain cosine.
    for name, attribute, value in (("sdr-nodata.h5", "kind", "sdr"), ("maxsim-nodata.h5", "score", "maxsim")):
        marked = c.path(name)
        shutil.copy(good, marked)
        with h5py.File(marked, "r+") as f:
            f.attrs[attribute] = value
            first = f["document_ids"][0].decode()
        output = c.run(["search", "--embeddings", marked, "--id", first], fail=True)
        check("without its" in output and "re-embed" in output,
              f"a {value} file without its data was searched:\n" + output[-1500:])
    # A run folder over its own inputs.
    output = c.run(finetune + ["--run", c.corpus], fail=True)
    check("lies inside it, which this run reads" in output, "--run at the corpus:\n" + output[-1500:])
    copy = c.path("fresh-over-init")
    shutil.copytree(run, copy, symlinks=True)
    own = os.path.join(copy, "step-8")
    output = c.run(["finetune", "--init", own, "--corpus", c.corpus, "--train-pairs", pairs, "--steps", "2",
                    "--run", copy, "--fresh", "--no-progress"], fail=True)
    check("--fresh would remove the checkpoints" in output and os.path.exists(os.path.join(own, "trainer.json")),
          "--fresh over the --init checkpoint:\n" + output[-1500:])
    # export --overwrite keeps what the user put in the folder.
    exported_to = c.path("export-kept")
    c.run(["export", "--model", step, "--corpus", c.corpus, "--output", exported_to])
    open(os.path.join(exported_to, "notes.md"), "w").write("mine\n")
    os.makedirs(os.path.join(exported_to, "plots"))
    open(os.path.join(exported_to, "plots", "a.txt"), "w").write("mine too\n")
    before = os.stat(os.path.join(exported_to, "config.json")).st_mtime_ns
    time.sleep(0.01)
    output = c.run(["export", "--model", step, "--corpus", c.corpus, "--output", exported_to, "--overwrite"])
    check(open(os.path.join(exported_to, "notes.md")).read() == "mine\n" and
          os.path.exists(os.path.join(exported_to, "plots", "a.txt")) and
          os.stat(os.path.join(exported_to, "config.json")).st_mtime_ns != before and "kept your 'notes.md'" in output,
          f"export --overwrite and a user's files: {sorted(os.listdir(exported_to))}\n{output[-1500:]}")
    cases["export_kept"] = sorted(n for n in os.listdir(exported_to) if n in ("notes.md", "plots"))
    # A replacement that stopped half-way leaves <output>.replaced with the
    # user's files: the next export refuses to run over it.
    os.makedirs(exported_to + ".replaced")
    open(os.path.join(exported_to + ".replaced", "notes.md"), "w").write("older\n")
    output = c.run(["export", "--model", step, "--corpus", c.corpus, "--output", exported_to, "--overwrite"],
                   fail=True)
    check("holds the model folder an earlier export was replacing" in output and
          open(os.path.join(exported_to + ".replaced", "notes.md")).read() == "older\n" and
          os.path.exists(os.path.join(exported_to, "notes.md")),
          "an export over a half-done replacement:\n" + output[-1500:])
    # Rows 4 and 21: an address-space limit just above what the libraries map
    # crashed HDF5 (SIGSEGV opening a shard) or aborted MPI's start-up with
    # its banner. One line now, before anything is made.
    for limit in (2750000, 2900000):
        limited = c.path(f"ulimit-v-{limit}")
        args = c.pretrain(limited, 2)
        args[args.index("--batch-size") + 1] = "140"
        result = subprocess.run(["bash", "-c", f"ulimit -v {limit}; exec " + " ".join([c.docmatch] + args)],
                                capture_output=True, text=True)
        # The schedule's warning (decay beyond --steps) may come first.
        lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("warning: [config]")]
        check(result.returncode == 1 and len(lines) == 1 and "out of memory before starting" in lines[0] and
              f"ulimit -v {limit}" in lines[0] and not os.path.exists(limited),
              f"ulimit -v {limit}: exit {result.returncode}, {result.stderr[-2000:]!r}")
        cases["address_space_message"] = lines[0][:160]
    return cases


def damaged_shards(c):
    # A token id outside the vocabulary, written through HDF5 (checksums right).
    out_of_range = c.path("corpus-token")
    shutil.copytree(c.corpus, out_of_range)
    shard = os.path.join(out_of_range, "shard-00001.h5")
    with h5py.File(shard, "r+") as h:
        check(h["tokens"].fletcher32, "shards are written without Fletcher-32 checksums")
        offsets = h["document_offsets"][:]
        paragraphs = h["paragraph_offsets"][:]
        sentences = h["sentence_offsets"][:]
        victim = 2
        token = sentences[paragraphs[offsets[victim]]] + 1
        vocab = int(h.attrs["vocab_size"])
        h["tokens"][token] = vocab + 5
        victim_id = h["document_ids"][victim].decode()
    named = f"shard-00001.h5': document \"{victim_id}\" (index {victim}) holds token id {vocab + 5}"
    output = c.run(["inspect", out_of_range, "--verify"], fail=True)
    check(named in output, "inspect --verify did not name the document:\n" + output[-1500:])
    output = c.run(["inspect", shard, "--index", str(victim)], fail=True)
    check(named in output, "inspect --index did not name the document:\n" + output[-1500:])
    output = c.run(["embed", "--model", os.path.join(c.path("resumed"), "latest"), "--corpus", out_of_range,
                    "--output", c.path("token.h5"), "--no-progress"], fail=True)
    check(named in output, "embed did not name the document:\n" + output[-1500:])

    # 4 KB overwritten inside the token chunk: Fletcher-32 fails the read.
    overwritten = c.path("corpus-bytes")
    shutil.copytree(c.corpus, overwritten)
    shard = os.path.join(overwritten, "shard-00000.h5")
    with h5py.File(shard, "r") as h:
        info = h["tokens"].id.get_chunk_info(0)
    check(info.size > 8192, f"the token chunk is only {info.size} bytes")
    with open(shard, "r+b") as f:
        f.seek(info.byte_offset + info.size // 2 - 2048)
        f.write(random.Random(2).randbytes(4096))
    output = c.run(["inspect", overwritten, "--verify"], fail=True)
    check("shard-00000.h5': reading 'tokens'" in output and "does not match its checksum" in output,
          "inspect --verify did not name the damaged chunk:\n" + output[-1500:])
    verified = json.loads(c.run(["inspect", c.corpus, "--verify"], stdout=True))
    check(verified["verified_documents"] == json.loads(c.run(["inspect", c.corpus]))["documents"],
          f"inspect --verify of the intact corpus: {verified}")
    return verified["verified_documents"]


def empty_inputs(c):
    empty = c.path("empty.jsonl")
    open(empty, "w").close()
    model = os.path.join(c.path("resumed"), "latest")
    output = c.run(["eval", "--model", model, "--corpus", c.corpus, "--test-pairs", empty, "--output",
                    c.path("eval-empty"), "--no-progress"], fail=True)
    check(f"pair file '{empty}' holds no pairs" in output, "eval on no pairs:\n" + output[-1500:])
    output = c.run(["eval", "--model", model, "--corpus", c.corpus, "--relevance", empty, "--output",
                    c.path("eval-empty"), "--no-progress"], fail=True)
    check(f"relevance file '{empty}' holds no query" in output, "eval on no queries:\n" + output[-1500:])
    check(not os.path.exists(c.path("eval-empty", "metrics.json")), "eval wrote metrics of nothing")
    # A misspelt command is named with the nearest one, exit 2.
    result = subprocess.run([c.docmatch, "pretrian", "--steps", "5"], capture_output=True, text=True)
    check(result.returncode == 2 and "unknown command 'pretrian'; did you mean 'pretrain'?" in result.stderr,
          f"a misspelt command: exit {result.returncode}, {result.stderr}")
    # Every command's --help teaches the config file (a parent option CLI11 leaves out).
    for command in ("prepare", "inspect", "pretrain", "finetune", "embed", "eval", "export", "import-hf",
                    "tokenize", "encode", "search", "choose"):
        text = subprocess.run([c.docmatch, command, "--help"], capture_output=True, text=True).stdout
        check(f"`{command}:` section" in text and "--dump-config" in text, f"{command} --help:\n{text[-600:]}")
    # docmatch --help fits a screen: every command on one line of its own.
    text = subprocess.run([c.docmatch, "--help"], capture_output=True, text=True).stdout
    lines = text.splitlines()
    listed = [line.split()[0] for line in lines[lines.index("Subcommands:") + 1:] if line.strip()]
    commands = ["prepare", "inspect", "info", "pretrain", "finetune", "embed", "eval", "export", "import-hf",
                "tokenize", "encode", "search", "index", "fuse", "choose"]
    check(len(lines) <= 45 and listed == commands and all(len(line) <= 120 for line in lines),
          f"docmatch --help: {len(lines)} lines, commands {listed}:\n{text}")


def repaired_report(c):
    raw = c.path("invalid.jsonl")
    with open(raw, "wb") as f:
        f.write(b'{"id": "a", "text": "Bad bytes \xff\xfe here. And a second sentence."}\n')
        f.write(b'{"id": "b", "text": "A clean document with words."}\n')
    output = c.run(["prepare", "--input", raw, "--tokenizer", os.path.join(c.corpus, "tokenizer.model"), "--output",
                    c.path("invalid-corpus"), "--no-progress"])
    check(re.search(r"repaired_utf8 +1 ", output), "the repaired count runs into its name:\n" + output)


def launch_sigterm(c):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    run = c.path("launched")
    config = c.path("launched.yaml")
    with open(config, "w") as f:
        f.write(f"pretrain:\n  corpus: {c.corpus}\n  model-config: {c.model}\n  run: {run}\n  batch-size: 4\n"
                "  steps: 100000\n  checkpoint-every: 100000\n  log-every: 1\n")
    log = open(c.path("launched.log"), "w")
    script = subprocess.Popen(["bash", os.path.join(root, "launch", "pretrain.sh"), "--local", "--config", config,
                               "--", "--no-progress"], stdout=log, stderr=subprocess.STDOUT,
                              env=dict(os.environ, DOCMATCH_BIN=c.docmatch))
    deadline = time.time() + 120
    metrics_file = os.path.join(run, "metrics.jsonl")
    while time.time() < deadline and script.poll() is None and not (
            os.path.exists(metrics_file) and os.path.getsize(metrics_file) > 0):
        time.sleep(0.05)
    check(script.poll() is None, "launch/pretrain.sh ended early:\n" + open(c.path("launched.log")).read()[-2000:])
    script.send_signal(signal.SIGTERM)
    code = script.wait(timeout=120)
    check(code == 75, f"launch/pretrain.sh exited {code} on SIGTERM, not 75:\n" +
          open(c.path("launched.log")).read()[-2000:])
    steps = [d for d in os.listdir(run) if d.startswith("step-")]
    check(len(steps) == 1 and not steps[0].endswith(".tmp"), f"no checkpoint after SIGTERM: {os.listdir(run)}")
    return code


def full_disk(c):
    """Needs root (or an unprivileged mount namespace) for a 1.2 MB tmpfs."""
    mount = c.path("small")
    os.makedirs(mount)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1200k", "tmpfs", mount],
                      capture_output=True).returncode != 0:
        print("full-disk cases skipped: cannot mount a tmpfs here (needs root)")
        return None
    try:
        run = os.path.join(mount, "run")
        c.run(c.pretrain(run, 2))  # step-2 fits, step-4 does not
        output = c.run(c.pretrain(run, 4), fail=True)
        check(re.search(r"writing '[^']*step-4\.tmp/\w+\.pt' failed: No space left on device", output),
              "a full disk during a checkpoint is not one clear line:\n" + output[-1500:])
        check(len([l for l in output.splitlines() if l.startswith("error:")]) == 1, "more than one error line")
        check(sorted(os.listdir(run)) == [".lock", "config.yaml", "latest", "metrics.jsonl", "step-2", "tensorboard"],
              f"the failed checkpoint left files: {sorted(os.listdir(run))}")
        c.run(["embed", "--model", os.path.join(run, "latest"), "--corpus", c.corpus, "--output",
               c.path("after-full.h5"), "--no-progress"])  # the previous checkpoint loads (checksums pass)
        shutil.rmtree(run)
        corpus = os.path.join(mount, "corpus")
        output = c.run(["prepare", "--input", os.path.join(c.fixture, "articles.jsonl"), "--tokenizer",
                        os.path.join(c.corpus, "tokenizer.model"), "--output", corpus, "--no-progress"], fail=True)
        check("No space left on device" in output and "shard-00000.h5" in output,
              "a full disk during prepare is not named:\n" + output[-1500:])
        check(os.listdir(corpus) == [], f"prepare left {os.listdir(corpus)} on the full disk")
        check("HDF5-DIAG" not in output, "HDF5's error stack printed without --verbose")
        output = c.run(["prepare", "--input", os.path.join(c.fixture, "articles.jsonl"), "--tokenizer",
                        os.path.join(c.corpus, "tokenizer.model"), "--output", corpus, "--no-progress",
                        "--verbose"], fail=True)
        check("HDF5-DIAG" in output, "--verbose did not show HDF5's error stack:\n" + output[-1500:])
        shutil.rmtree(corpus)
        return every_writer_on_full_disk(c, mount)
    finally:
        subprocess.run(["umount", mount])


def fill(mount, free_bytes):
    """Leaves about `free_bytes` free on `mount` (a file of zeros takes the rest)."""
    filler = os.path.join(mount, "filler")
    if os.path.exists(filler):
        os.remove(filler)
    stat = os.statvfs(mount)
    with open(filler, "wb") as f:
        try:
            f.write(b"\0" * max(0, stat.f_bavail * stat.f_frsize - free_bytes))
        except OSError:
            pass


def every_writer_on_full_disk(c, mount):
    """embed, encode, eval and export: one line naming the file and the OS's
    reason, exit 1, no crash, nothing left but empty folders."""
    model = os.path.join(c.path("resumed"), "step-8")
    three = c.path("three.jsonl")
    with open(os.path.join(c.fixture, "articles.jsonl")) as f, open(three, "w") as out:
        out.writelines(f.readlines()[:3])
    pairs = [arg for split in ("valid", "test") for arg in (f"--{split}-pairs",
                                                              os.path.join(c.fixture, f"pairs.{split}.jsonl"))]
    writers = {
        "embed": (48 << 10, ["embed", "--model", model, "--corpus", c.corpus, "--output", os.path.join(mount, "e.h5"),
                             "--no-progress"]),
        "encode": (48 << 10, ["encode", "--model", model, "--input", three, "--output", os.path.join(mount, "enc.h5")]),
        "export": (48 << 10, ["export", "--model", model, "--output", os.path.join(mount, "exp")]),
        # no byte at all (round three, row 19): the file HDF5 creates empty goes too
        "embed, 0 bytes free": (0, ["embed", "--model", model, "--corpus", c.corpus, "--output",
                                    os.path.join(mount, "e0.h5"), "--no-progress"]),
        "encode, 0 bytes free": (0, ["encode", "--model", model, "--input", three, "--output",
                                     os.path.join(mount, "enc0.h5")]),
        "fuse, 0 bytes free": (0, ["fuse", "--embeddings", c.path("still-good.h5"), "--embeddings",
                                   c.path("still-good.h5"), "--output", os.path.join(mount, "fused.h5")]),
        # eval of vectors written elsewhere: only metrics.json is written here
        "eval": (0, ["eval", "--embeddings", c.path("still-good.h5"), "--corpus", c.corpus, *pairs, "--output",
                     os.path.join(mount, "ev"), "--no-progress"]),
    }
    messages = {}
    for name, (free, args) in writers.items():
        fill(mount, free)
        output = c.run(args, fail=True)
        errors = [line for line in output.splitlines() if "error:" in line]
        check(len(errors) == 1 and "No space left on device" in errors[0] and mount in errors[0],
              f"{name} on a full disk is not one line naming the file and the reason:\n" + output[-1500:])
        left = [os.path.join(d, f) for d, _, fs in os.walk(mount) for f in fs if f != "filler"]
        check(left == [], f"{name} on a full disk left {left}")
        messages[name] = errors[0][:200]
    return messages


def rank_pids(marker):
    """{rank: pid} of the processes whose command line holds `marker`."""
    pids = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker not in open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace"):
                continue
            environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        for entry in environ:
            if entry.startswith(b"OMPI_COMM_WORLD_RANK="):
                pids[int(entry.split(b"=")[1])] = int(pid)
    return pids


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stalled_rank(c, mpiexec):
    run = c.path("stalled")
    timeout = 8
    job = subprocess.Popen(mpiexec + ["-np", "2", c.docmatch] +
                           c.pretrain(run, 100000, "--collective-timeout", str(timeout)),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and job.poll() is None and not os.path.isdir(os.path.join(run, "step-2")):
        time.sleep(0.05)
    pids = rank_pids(run)
    check(job.poll() is None and set(pids) == {0, 1}, f"the 2-rank run is not running: {pids}")
    os.kill(pids[1], signal.SIGSTOP)
    stopped = time.time()
    time.sleep(1.0)
    before = cpu_seconds(pids[0])
    time.sleep(3.0)
    busy = (cpu_seconds(pids[0]) - before) / 3.0
    try:
        output, _ = job.communicate(timeout=timeout + 60)
    finally:
        if job.poll() is None:
            job.kill()
        try:
            os.kill(pids[1], signal.SIGKILL)
        except ProcessLookupError:
            pass
    ended = time.time() - stopped
    check(job.returncode != 0, "the job with a stopped rank exited 0")
    check(re.search(rf"rank 0 \(host [^)]+\): \S.* did not complete within {timeout} s\. Rank 1 \(host [^)]+\) did not answer", output),
          "the timeout does not name the waiting rank, the operation and the stopped rank:\n" + output[-2000:])
    check(timeout <= ended <= timeout + 30, f"the job ended {ended:.1f} s after the stop, timeout {timeout} s")
    check(busy < 0.3, f"rank 0 used {busy:.0%} of a core while waiting")
    return busy, ended


def main():
    docmatch, fixture, scratch = sys.argv[1:4]
    mpiexec = sys.argv[4:]
    c = Case(docmatch, fixture, scratch)
    refused = run_lock(c)
    lines = resumed_logs(c)
    damaged = damaged_checkpoints(c)
    documents = prepare_overwrite(c)
    verified = damaged_shards(c)
    empty_inputs(c)
    repaired_report(c)
    second = round_two(c)
    own = only_docmatchs_removed(c)
    inputs = round_three_inputs(c)
    smaller = round_four(c)
    busy, ended = stalled_rank(c, mpiexec)
    disk = full_disk(c)
    launch_sigterm(c)
    print(json.dumps({"stalled_rank_waiter_cpu": round(busy, 3), "stalled_job_ended_after_s": round(ended, 1),
                      "lock_refused_seconds": round(refused, 2), "metrics_lines_before_resume": lines,
                      "damaged_checkpoint_cases": damaged, "corpus_kept_documents": documents,
                      "verified_documents": verified, "full_disk_cases": disk or "skipped",
                      "round_two": second, "user_folders_refused": own,
                      "round_three": inputs, "round_four": smaller}))
    print("OK")


if __name__ == "__main__":
    main()
