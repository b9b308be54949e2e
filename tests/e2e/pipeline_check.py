#!/usr/bin/env python3
"""End to end on a tiny real corpus (tiny_manpages.py), at NP ranks under
mpirun: pretrain (SMITH-WP+SP) -> checkpoint -> finetune (from the encoder,
validation, best/) -> eval -> export, checking each product against an
independent computation:

  * the TensorBoard scalars, read back with the tensorboard package, equal
    the metrics.jsonl lines;
  * pre-training logs a validation loss on a held-out corpus at its interval
    and keeps the best step's model in best/;
  * a loss driven to NaN (learning rate 1e30) stops the run naming the step
    and documents, or with --on-nonfinite skip drops every later update, so
    the last checkpoint equals the one before the NaN;
  * a fine-tuning run killed with SIGKILL after a checkpoint and resumed ends
    with the same parameters, bit for bit, as one that never stopped;
  * resuming a run with another model config fails naming the tensors;
  * eval's classification metrics equal numpy's from the embeddings file, and
    its MRR equals a numpy ranking over the whole corpus;
  * evaluating on 1 rank and on NP ranks gives the same metrics;
  * the export loads with safetensors and scripts/reference_vector.py
    (numpy) reproduces the embedded vectors within 1e-5, for SMITH's
    combine modes too (mean_concat and attention, 2C-dimensional vectors);
  * --bucket-mb and --bf16-gradients reach the gradient synchronizer (its
    log line counts the buckets); small buckets log the same losses as one
    bucket, bit for bit, and bf16 gradients stay within 1e-2 of fp32;
  * --grad-cache (DocSplit with its LM term, contrastive fine-tuning with a
    hard negative), dropout off, logs the same losses step by step as the
    same run without it;
  * --step-buckets (wp+sp and wp padded to their step buckets), dropout
    off, logs the same losses step by step as the same run unpadded;
  * pre-training and fine-tuning (bce, contrastive, multipositive) log the
    same throughput figures, and docs/s times the step's time is the
    documents a step encodes.

usage: pipeline_check.py DOCMATCH FIXTURE NP MPIEXEC [MPIEXEC FLAGS...]
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
from safetensors.numpy import load_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = """model: {kind: smith, hidden: 32, heads: 2, intermediate: 64, sentence_layers: 1,
  document_layers: 1, block_length: 16, max_blocks: 8, dropout: 0.1, amplifier: 6.0}
"""
WIDER = TINY.replace("hidden: 32", "hidden: 48")
NO_DROPOUT = TINY.replace("dropout: 0.1", "dropout: 0.0")


def check(condition, message):
    if not condition:
        sys.exit("FAILED: " + message)


class Pipeline:
    def __init__(self, docmatch, fixture, ranks, mpiexec):
        self.docmatch, self.fixture, self.ranks, self.mpiexec = docmatch, fixture, ranks, mpiexec
        self.dir = os.path.join(fixture, f"np{ranks}")
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        self.corpus = os.path.join(fixture, "corpus")
        for name, text in (("tiny.yaml", TINY), ("wider.yaml", WIDER), ("no-dropout.yaml", NO_DROPOUT)):
            with open(os.path.join(self.dir, name), "w") as f:
                f.write(text)

    def command(self, args, ranks=None):
        quiet = [] if args[0] == "export" else ["--no-progress"]
        return self.mpiexec + ["-np", str(ranks or self.ranks), self.docmatch] + args + quiet

    def run(self, args, ranks=None, expect_failure=False, env=None):
        result = subprocess.run(self.command(args, ranks), capture_output=True, text=True, env=env)
        if expect_failure:
            check(result.returncode != 0, f"{args[0]} should have failed")
        elif result.returncode != 0:
            sys.exit(f"FAILED: {' '.join(args)}\n{result.stdout}\n{result.stderr}")
        return result

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def finetune_args(self, run, steps=16):
        return ["finetune", "--corpus", self.corpus, "--init", self.path("pretrain", "latest"),
                "--train-pairs", os.path.join(self.fixture, "pairs.train.jsonl"),
                "--valid-pairs", os.path.join(self.fixture, "pairs.valid.jsonl"), "--run", self.path(run),
                "--steps", str(steps), "--batch-size", "4", "--lr", "1e-3", "--warmup-steps", "2",
                "--decay-steps", "16", "--checkpoint-every", "4", "--validate-every", "8", "--log-every", "1"]


def read_jsonl(path):
    return [json.loads(l) for l in open(path) if l.strip()]


def check_tensorboard(run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(os.path.join(run, "tensorboard"))
    events.Reload()
    logged = {}
    for line in read_jsonl(os.path.join(run, "metrics.jsonl")):
        for key, value in line.items():
            if key != "step":
                logged[(key, line["step"])] = value
    read = {}
    for tag in events.Tags()["scalars"]:
        for e in events.Scalars(tag):
            read[(tag, e.step)] = e.value
    check(set(read) == set(logged), f"tensorboard tags/steps {sorted(read)[:5]} differ from metrics.jsonl")
    for key, value in logged.items():
        check(abs(read[key] - value) <= 1e-6 * max(1.0, abs(value)), f"{key}: tensorboard {read[key]} != {value}")
    return len(read)


def export_tensors(p, folder, name):
    out = p.path(name)
    p.run(["export", "--model", folder, "--corpus", p.corpus, "--output", out], ranks=1)
    return load_file(os.path.join(out, "model.safetensors"))


def kill_and_resume(p):
    # With a learned temperature: its value and Adam state must come back too.
    learned = ["--learn-temperature", "--temperature-lr", "0.05"]
    straight = p.finetune_args("ft-straight") + learned
    p.run(straight + ["--fresh"])
    killed = p.finetune_args("ft-killed") + learned
    process = subprocess.Popen(p.command(killed + ["--fresh"]), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    while not os.path.isdir(p.path("ft-killed", "step-8")) and process.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    check(process.poll() is None, "the run to kill ended before its step-8 checkpoint")
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    stopped_at = os.path.realpath(p.path("ft-killed", "latest"))
    check(not os.path.isdir(p.path("ft-killed", "step-16")), "the killed run had already finished")
    p.run(killed)  # the same command: resumes from latest
    a = export_tensors(p, p.path("ft-straight", "latest"), "export-straight")
    b = export_tensors(p, p.path("ft-killed", "latest"), "export-killed")
    check(a.keys() == b.keys(), "exports hold different tensors")
    for name in a:
        check(np.array_equal(a[name], b[name]), f"{name} differs after kill -9 and resume")
    temperatures = [{l["step"]: l["train/temperature"] for l in read_jsonl(p.path(run, "metrics.jsonl"))
                     if "train/temperature" in l} for run in ("ft-straight", "ft-killed")]
    check(temperatures[0] == temperatures[1] and len(temperatures[0]) == 16 and
          len(set(temperatures[0].values())) > 8, f"learned temperatures straight vs resumed: {temperatures}")
    # Resuming with the other choice of temperature is refused, saying which.
    forgot = p.run(p.finetune_args("ft-straight", steps=20), expect_failure=True)
    check("learns its temperature: resume with --learn-temperature" in forgot.stderr,
          "resuming a learned-temperature run without the flag: " + forgot.stderr[-1500:])
    # Profiled (--profile-steps 3:9 on a 4-step run): each rank traces steps 3
    # and 4, files named by the steps traced, rank 0 naming its own.
    profiled = p.run(p.finetune_args("ft-fixed", steps=4) + ["--fresh", "--profile-steps", "3:9"])
    for rank in range(p.ranks):
        trace = p.path("ft-fixed", "profile", f"steps-3-4.rank-{rank}.json")
        spans = sorted(e["name"] for e in json.load(open(trace))["traceEvents"]
                       if e.get("cat") == "user_annotation") if os.path.exists(trace) else None
        check(spans == ["docmatch step 3", "docmatch step 4"], f"{trace}: the steps' spans {spans}")
    check(f"[finetune] steps 3-4 profiled: {p.path('ft-fixed', 'profile', 'steps-3-4.rank-0.json')}" in
          profiled.stderr + profiled.stdout, "finetune --profile-steps: rank 0's line\n" + profiled.stderr[-1500:])
    added = p.run(p.finetune_args("ft-fixed", steps=8) + learned, expect_failure=True)
    check("fixed temperature: resume without --learn-temperature" in added.stderr,
          "resuming a fixed-temperature run with the flag: " + added.stderr[-1500:])
    return os.path.basename(stopped_at), len(a)


def check_nonfinite(p):
    """Learning rate 1e30 makes step 1's update overflow the weights: the loss
    of step 2 is NaN, a real one, not injected."""
    args = ["finetune", "--corpus", p.corpus, "--init", p.path("pretrain", "latest"),
            "--train-pairs", os.path.join(p.fixture, "pairs.train.jsonl"), "--loss", "bce", "--steps", "5",
            "--batch-size", "4",
            "--lr", "1e30", "--warmup-steps", "1", "--decay-steps", "5", "--checkpoint-every", "1",
            "--keep-last", "10", "--log-every", "1", "--validate-every", "0", "--fresh"]
    stopped = p.run(args + ["--run", p.path("nan-stop")], expect_failure=True)
    message = [l for l in stopped.stderr.splitlines() if "loss is" in l and "at step 2" in l]
    check(message, "no 'loss is ... at step 2' in: " + stopped.stderr[-2000:])
    named = message[0].split("documents: ")[1].split(" (")[0].split(", ")
    ids = {json.loads(l)["id"] for l in open(os.path.join(p.fixture, "articles.jsonl"))}
    check(len(named) == 8 and set(named) <= ids, f"the documents named are not 4 pairs of the corpus: {named}")
    check(not os.path.isdir(p.path("nan-stop", "step-2")), "a checkpoint was written after the NaN")

    p.run(args + ["--run", p.path("nan-skip"), "--on-nonfinite", "skip"])
    losses = {l["step"]: l["train/loss"] for l in read_jsonl(p.path("nan-skip", "metrics.jsonl"))}
    check(losses[1] is not None and all(losses[s] is None for s in range(2, 6)), f"logged losses {losses}")
    first = export_tensors(p, p.path("nan-skip", "step-1"), "export-nan-1")
    last = export_tensors(p, p.path("nan-skip", "step-5"), "export-nan-5")
    for name in first:
        check(np.array_equal(first[name], last[name]), f"{name} changed in a skipped step")
    return len(named)


def check_grad_cache(p):
    """Gradient caching through the real commands: with dropout off, runs in
    chunks of one document (pair) log the losses of the same runs without
    chunks, at every step (after updates too); with --learn-temperature the
    logged temperatures agree too and move. Returns the largest relative
    difference."""
    pairs = os.path.join(p.fixture, "pairs.train.jsonl")
    runs = {
        "pretrain": ["pretrain", "--corpus", p.corpus, "--model-config", p.path("no-dropout.yaml"), "--objective",
                     "docsplit", "--lm-weight", "0.1", "--batch-size", "3"],
        "finetune": ["finetune", "--corpus", p.corpus, "--model-config", p.path("no-dropout.yaml"), "--train-pairs", pairs,
                     "--loss", "contrastive", "--hard-negatives", "1", "--batch-size", "3"],
    }
    runs["finetune-learned-temperature"] = runs["finetune"] + ["--learn-temperature", "--temperature-lr", "0.05"]
    worst = 0.0
    for stage, args in runs.items():
        losses = {}
        for chunk in ("0", "1"):
            run = p.path(f"{stage}-grad-cache-{chunk}")
            p.run(args + ["--grad-cache", chunk, "--run", run, "--steps", "3", "--lr", "1e-3", "--warmup-steps", "1",
                          "--decay-steps", "3", "--log-every", "1", "--checkpoint-every", "3", "--fresh"])
            logged = [l for l in read_jsonl(os.path.join(run, "metrics.jsonl")) if "train/loss" in l]
            losses[chunk] = [l["train/loss"] for l in logged]
            if "learned" in stage:
                temperatures = [l["train/temperature"] for l in logged]
                losses[chunk + "-temperature"] = temperatures
                check(abs(temperatures[0] - 0.05) < 1e-6 and len(set(temperatures)) == 3,
                      f"{stage}: the temperature should start at 0.05 and move: {temperatures}")
        if "learned" in stage:
            # Adam divides the temperature's one gradient by its running size, so
            # float32 summation differences (1e-6 in the loss) come out near 1e-4
            # in the step after; a lost gradient would leave it at 0.05 or off by
            # a whole step (5%). float64 equality: tests/dist/invariance_test.cpp.
            for a, b in zip(losses["0-temperature"], losses["1-temperature"]):
                check(abs(a - b) <= 1e-3 * a, f"{stage}: temperatures {losses}")
        plain, cached = losses["0"], losses["1"]
        check(len(plain) == 3 and len(cached) == 3, f"{stage}: logged losses {losses}")
        check(len(set(plain)) == 3, f"{stage}: the updates do not move the loss: {plain}")
        for step, (a, b) in enumerate(zip(plain, cached), 1):
            difference = abs(a - b) / max(1e-12, abs(a))
            worst = max(worst, difference)
            check(difference <= 1e-4, f"{stage} step {step}: loss {b} with --grad-cache 1, {a} without")
    return worst


def logged_steps(run):
    """The training rows a run logged."""
    return [l for l in read_jsonl(os.path.join(run, "metrics.jsonl")) if "train/loss" in l]


def largest_difference(label, reference, other, keys, tolerance):
    """Checks two runs' logged rows step by step, each key relative to the
    reference's, to `tolerance`. Returns the largest difference."""
    check(len(other) == len(reference), f"{label}: {len(reference)} and {len(other)} logged steps")
    worst = 0.0
    for a, b in zip(reference, other):
        for key in keys:
            difference = abs(a[key] - b[key]) / max(1e-12, abs(a[key]))
            worst = max(worst, difference)
            check(difference <= tolerance, f"{label} step {a['step']}: {key} {b[key]}, {a[key]} in the reference")
    return worst


def padded_against_plain(p, label, command):
    """`command` (3 logged steps, --fresh) with and without --step-buckets:
    the same losses (fp32: to 1e-5). Returns the largest relative difference."""
    rows = {}
    for name, extra in (("plain", []), ("bucketed", ["--step-buckets"])):
        run = p.path(f"step-buckets-{label}-{name}")
        p.run(command + ["--run", run] + extra)
        rows[name] = logged_steps(run)
    check(len({l["train/loss"] for l in rows["plain"]}) == 3, f"{label}: logged {rows['plain']}")
    return largest_difference(f"{label} --step-buckets", rows["plain"], rows["bucketed"], ("train/loss",), 1e-5)


def graph_path_against_buckets(p, label, command, keys, tolerance, environment):
    """`command` (5 steps, a checkpoint every 2, no --fresh) at one rank with
    --cuda-graphs' code path on CPU (`environment` sets the hook: static
    inputs, the update's body with FusedAdamW's device-side step counts and
    the gradients zeroed in place, nothing captured) logs the --step-buckets
    run's `keys`, and so does a run stopped at its step-2 checkpoint and
    resumed (the optimizer's step counts synced back for the checkpoint).
    Returns the largest relative difference."""
    rows = {}
    for name, extra in (("buckets", ["--step-buckets"]), ("graphs", ["--cuda-graphs"])):
        run = p.path(f"graph-path-{label}-{name}")
        ran = p.run(command + ["--run", run] + extra, ranks=1, env=environment)
        if name == "graphs":
            check("the graphs' code path, nothing captured" in ran.stderr, ran.stderr[-2000:])
        rows[name] = logged_steps(run)
    run = p.path(f"graph-path-{label}-resumed")
    stopped = list(command)
    stopped[stopped.index("--steps") + 1] = "2"
    p.run(stopped + ["--run", run, "--cuda-graphs"], ranks=1, env=environment)
    p.run(command + ["--run", run, "--cuda-graphs"], ranks=1, env=environment)
    rows["resumed"] = logged_steps(run)
    check(len({l["train/loss"] for l in rows["buckets"]}) == 5, f"{label}: logged {rows['buckets']}")
    return max(largest_difference(f"{label} {name}", rows["buckets"], rows[name], keys, tolerance)
               for name in ("graphs", "resumed"))


def check_step_buckets(p):
    """--step-buckets through the real command: with dropout off, wp+sp, wp
    and docsplit runs whose batches are padded to their step buckets, and a
    contrastive fine-tuning run whose passes are, log the losses of the same
    runs unpadded, step by step (fp32: to 1e-5); at one rank, --cuda-graphs'
    code path on CPU logs the --step-buckets values, resumed or not
    (pre-training's losses to 1e-5; fine-tuning's losses, top-1 and learned
    temperatures to 1e-4: Adam normalises the temperature's one gradient);
    refused: --step-buckets with --grad-cache, --cuda-graphs on a CPU run,
    and fine-tuning's --cuda-graphs with --drop-related.
    Returns the largest relative difference."""
    args = ["pretrain", "--corpus", p.corpus, "--model-config", p.path("no-dropout.yaml"), "--batch-size", "3",
            "--steps", "3", "--lr", "1e-3", "--warmup-steps", "1", "--decay-steps", "3", "--log-every", "1",
            "--checkpoint-every", "3", "--fresh"]
    pairs = os.path.join(p.fixture, "pairs.train.jsonl")
    finetune = ["finetune", "--corpus", p.corpus, "--model-config", p.path("no-dropout.yaml"), "--train-pairs", pairs,
                "--loss", "contrastive", "--hard-negatives", "1", "--learn-temperature", "--batch-size", "3",
                "--steps", "3", "--lr", "1e-3", "--warmup-steps", "1", "--decay-steps", "3", "--log-every", "1",
                "--checkpoint-every", "3", "--fresh"]
    worst = 0.0
    for objective in ("wp+sp", "wp", "docsplit"):
        worst = max(worst, padded_against_plain(p, objective, args + ["--objective", objective]))
    worst = max(worst, padded_against_plain(p, "finetune", finetune))

    def five_steps(command):  # a checkpoint at step 2 to resume from
        longer = [a for a in command if a != "--fresh"]
        for flag, value in (("--steps", "5"), ("--decay-steps", "5"), ("--checkpoint-every", "2")):
            longer[longer.index(flag) + 1] = value
        return longer

    environment = dict(os.environ, DOCMATCH_GRAPH_PATH_ON_CPU="1")
    without_hook = {k: v for k, v in os.environ.items() if k != "DOCMATCH_GRAPH_PATH_ON_CPU"}
    if p.ranks == 1:  # one rank, as graphs run
        for objective in ("wp+sp", "wp"):
            worst = max(worst, graph_path_against_buckets(p, objective, five_steps(args + ["--objective", objective]),
                                                          ("train/loss",), 1e-5, environment))
        worst = max(worst, graph_path_against_buckets(p, "finetune", five_steps(finetune),
                                                      ("train/loss", "train/top1", "train/temperature"), 1e-4,
                                                      environment))
    refused = p.run(args + ["--objective", "docsplit", "--step-buckets", "--grad-cache", "1",
                            "--run", p.path("step-buckets-grad-cache")], expect_failure=True)
    check("--step-buckets pads the whole batch; it does not take --grad-cache's chunks" in refused.stderr,
          refused.stderr[-2000:])
    # CUDA graphs on a CPU run: refused before any step, naming the device.
    refused = p.run(args + ["--objective", "wp+sp", "--cuda-graphs", "--device", "cpu",
                            "--run", p.path("cuda-graphs-cpu")], expect_failure=True, env=without_hook)
    check("--cuda-graphs needs a CUDA device; this run is on cpu" in refused.stderr, refused.stderr[-2000:])
    check(not os.path.exists(os.path.join(p.path("cuda-graphs-cpu"), "metrics.jsonl")), "a refused run trained")
    refused = p.run(finetune + ["--run", p.path("ft-graphs-cpu"), "--cuda-graphs"], expect_failure=True,
                    env=without_hook)
    check("--cuda-graphs needs a CUDA device; this run is on cpu" in refused.stderr, refused.stderr[-2000:])
    refused = p.run(finetune + ["--run", p.path("ft-graphs-drop"), "--cuda-graphs", "--drop-related"],
                    ranks=1, expect_failure=True, env=environment)
    check("--cuda-graphs cannot take --drop-related" in refused.stderr, refused.stderr[-2000:])
    return worst


def check_buckets(p):
    """The gradient synchronizer's flags through the real command (NP >= 2).
    Returns the bucket counts logged."""
    args = ["pretrain", "--corpus", p.corpus, "--model-config", p.path("no-dropout.yaml"), "--batch-size", "3",
            "--steps", "3", "--lr", "1e-3", "--warmup-steps", "1", "--decay-steps", "3", "--log-every", "1",
            "--checkpoint-every", "3", "--fresh"]
    losses, buckets = {}, {}
    for name, extra in (("default", []), ("small", ["--bucket-mb", "0.02"]), ("bf16", ["--bf16-gradients"])):
        run = p.path(f"buckets-{name}")
        result = p.run(args + ["--run", run] + extra)
        line = [l for l in result.stderr.splitlines() if "gradient sync:" in l]
        check(len(line) == 1, f"{name}: no gradient sync line in:\n{result.stderr[-2000:]}")
        buckets[name] = int(line[0].split("gradient sync: ")[1].split()[0])
        check(("bf16" in line[0]) == (name == "bf16"), f"{name}: {line[0]}")
        losses[name] = [l["train/loss"] for l in read_jsonl(os.path.join(run, "metrics.jsonl"))]
    check(buckets["default"] == 1 and buckets["small"] > 3, f"buckets logged: {buckets}")
    check(losses["small"] == losses["default"], f"smaller buckets changed the losses: {losses}")
    check(losses["bf16"] != losses["default"], f"bf16 gradients changed nothing: {losses}")
    for a, b in zip(losses["default"], losses["bf16"]):
        check(abs(a - b) <= 1e-2 * abs(a), f"bf16 gradients moved the loss too far: {losses}")
    return buckets


def check_combine_modes(p, some):
    """A model in each concat combine mode, trained two steps, exported and
    embedded; numpy's reference_vector.py computes the same vectors."""
    worst = 0.0
    for mode in ("mean_concat", "attention"):
        config = p.path(f"{mode}.yaml")
        with open(config, "w") as f:
            f.write(TINY.replace("amplifier: 6.0", f"amplifier: 6.0, combine: {mode}"))
        run = p.path(f"combine-{mode}")
        p.run(["finetune", "--corpus", p.corpus, "--model-config", config, "--run", run, "--steps", "2", "--batch-size", "4",
               "--train-pairs", os.path.join(p.fixture, "pairs.train.jsonl"), "--checkpoint-every", "2"], ranks=1)
        export, vectors = p.path(f"combine-{mode}-export"), p.path(f"combine-{mode}.h5")
        p.run(["export", "--model", os.path.join(run, "latest"), "--corpus", p.corpus, "--output", export], ranks=1)
        p.run(["embed", "--model", export, "--corpus", p.corpus, "--output", vectors], ranks=1)
        with h5py.File(vectors, "r") as h:
            check(h["vectors"].shape[1] == 64, f"{mode}: vectors of {h['vectors'].shape[1]} dimensions, not 2 x 32")
        reference = subprocess.run([sys.executable, os.path.join(ROOT, "scripts/reference_vector.py"), "--model",
                                    export, "--corpus", p.corpus, "--compare", vectors, "--tolerance", "1e-5"]
                                   + sum((["--doc", d] for d in some), []), capture_output=True, text=True)
        check(reference.returncode == 0, f"reference_vector.py ({mode}): " + reference.stdout + reference.stderr)
        worst = max([worst] + [json.loads(l)["max_abs_difference"] for l in reference.stdout.splitlines()])
    return worst


def numpy_metrics(p, embeddings, metrics):
    """Classification and MRR recomputed from the vectors alone."""
    with h5py.File(embeddings, "r") as h:
        ids = [i.decode() if isinstance(i, bytes) else i for i in h["document_ids"][:]]
        vectors = h["vectors"][:].astype(np.float64)
    index = {d: i for i, d in enumerate(ids)}
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)

    def scores(split):
        pairs = read_jsonl(os.path.join(p.fixture, f"pairs.{split}.jsonl"))
        s = np.array([6.0 * vectors[index[x["source"]]] @ vectors[index[x["target"]]] for x in pairs])
        return s, np.array([x["label"] for x in pairs])

    test = metrics["classification"]["test"]
    s, y = scores("test")
    predicted = s >= test["threshold"]
    accuracy = float((predicted == (y == 1)).mean())
    check(abs(accuracy - test["accuracy"]) < 1e-9, f"test accuracy {test['accuracy']} != numpy {accuracy}")
    tp = int((predicted & (y == 1)).sum())
    check(tp == test["true_positives"], f"true positives {test['true_positives']} != numpy {tp}")

    relevant = {}
    for l in read_jsonl(os.path.join(p.fixture, "related.jsonl")):
        relevant.setdefault(index[l["source"]], set()).add(index[l["target"]])
    reciprocal = []
    for q, targets in sorted(relevant.items()):
        s = vectors @ vectors[q]
        others = [j for j in range(len(ids)) if j != q]
        # Pessimistic ties: a relevant document ranks below every equal score.
        best = min(sum(1 for k in others if s[k] >= s[t]) for t in targets)
        reciprocal.append(1.0 / best)
    mrr = float(np.mean(reciprocal))
    ranking = metrics["ranking"]
    check(abs(mrr - ranking["mrr"]) < 1e-6, f"MRR {ranking['mrr']} != numpy {mrr}")
    return accuracy, mrr


def check_throughput(p):
    """Both stages log the same throughput figures at every logged step:
    docs_per_s and tokens_per_s. Over one step (--log-every 1), docs/s times
    the step's time (--time-split) is the documents the step encoded on all
    ranks: pre-training 4 a rank, bce fine-tuning 8 (4 pairs), contrastive
    with one hard negative 12; and a document's tokens are between 1 and the
    model's 8 blocks of 16. Returns the largest relative error of the count."""
    pairs = os.path.join(p.fixture, "pairs.train.jsonl")
    common = ["--steps", "3", "--batch-size", "4", "--log-every", "1", "--time-split", "--fresh",
              "--checkpoint-every", "10"]
    runs = {
        "pretrain": (["pretrain", "--corpus", p.corpus, "--model-config", p.path("tiny.yaml"), "--objective", "wp"], 4),
        "finetune-bce": (["finetune", "--corpus", p.corpus, "--model-config", p.path("tiny.yaml"), "--train-pairs",
                          pairs, "--loss", "bce"], 8),
        "finetune-contrastive": (["finetune", "--corpus", p.corpus, "--model-config", p.path("tiny.yaml"),
                                  "--train-pairs", pairs, "--hard-negatives", "1"], None),
        "finetune-multipositive": (["finetune", "--corpus", p.corpus, "--model-config", p.path("tiny.yaml"),
                                    "--train-pairs", pairs, "--hard-negatives", "1", "--loss", "multipositive"], None),
    }
    worst = 0.0
    for name, (args, per_rank) in runs.items():
        p.run(args + common + ["--run", p.path("throughput-" + name)])
        lines = [l for l in read_jsonl(p.path("throughput-" + name, "metrics.jsonl")) if "train/loss" in l]
        check(len(lines) == 3, f"{name}: {len(lines)} logged steps")
        for l in lines:
            check(l.get("train/docs_per_s", 0) > 0 and l.get("train/tokens_per_s", 0) > 0,
                  f"{name} step {l['step']}: no throughput figures in {sorted(l)}")
            per_doc = l["train/tokens_per_s"] / l["train/docs_per_s"]
            check(1 <= per_doc <= 8 * 16, f"{name} step {l['step']}: {per_doc} tokens a document")
            documents = l["train/docs_per_s"] * l["train/time/step_ms"] / 1000
            if per_rank is None:  # 4 sources, 4 targets, and a negative for each source that has one
                # docs/s comes from the wall time between two logged steps and
                # step_ms from the step's own phases: under a loaded machine the
                # two clocks part by up to a quarter (seen: 14.1 of at most 12).
                check(8 * p.ranks * 0.75 <= documents <= 12 * p.ranks * 1.25,
                      f"{name} step {l['step']}: {documents} documents")
                continue
            error = abs(documents / (per_rank * p.ranks) - 1)
            check(error < 0.15, f"{name} step {l['step']}: {documents} documents, not {per_rank * p.ranks}")
            worst = max(worst, error)
    refused = p.run(runs["finetune-multipositive"][0] + common + ["--run", p.path("throughput-refused"),
                                                                  "--drop-related"], expect_failure=True)
    check("counts them as positives" in refused.stderr, "multipositive with --drop-related: " + refused.stderr[-800:])
    return round(worst, 4)


def main():
    docmatch, fixture, ranks, mpiexec = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    p = Pipeline(docmatch, fixture, ranks, mpiexec)
    started = time.time()
    p.run(["pretrain", "--corpus", p.corpus, "--model-config", p.path("tiny.yaml"), "--objective", "wp+sp",
           "--run", p.path("pretrain"), "--steps", "12", "--batch-size", "4", "--lr", "1e-3", "--warmup-steps", "2",
           "--decay-steps", "12", "--checkpoint-every", "6", "--log-every", "1", "--fresh",
           "--valid-corpus", os.path.join(fixture, "valid-corpus"), "--validate-every", "4"])
    info = json.load(open(p.path("pretrain", "latest", "config.json")))
    check(info["stage"] == "pretrain" and info["prefix"] == "encoder.", f"pretrain config.json: {info}")
    scalars = check_tensorboard(p.path("pretrain"))
    valid = {l["step"]: l["valid/loss"] for l in read_jsonl(p.path("pretrain", "metrics.jsonl")) if "valid/loss" in l}
    check(sorted(valid) == [4, 8, 12] and all(np.isfinite(v) and v > 0 for v in valid.values()),
          f"pretrain validations: {valid}")
    validations = len(valid)
    # The block task's figures on every logged step: top-1 from the loss's
    # scores, the targets' spread from the diagnostics run only when logging.
    train = [l for l in read_jsonl(p.path("pretrain", "metrics.jsonl")) if "train/loss" in l]
    check(len(train) == 12 and all(0 <= l["train/block_top1"] <= 1 and -1 - 1e-9 <= l["train/block_cosine"] <= 1 + 1e-9
                                   and 1 - 1e-9 <= l["train/block_rank"] for l in train),
          f"pretrain block figures: {[{k: v for k, v in l.items() if 'block' in k} for l in train[:2]]}")
    best = json.load(open(p.path("pretrain", "latest", "trainer.json")))["validation"]["best_step"]
    check(best == min(valid, key=valid.get) and os.path.isfile(p.path("pretrain", "best", "model.pt")),
          f"best step {best}, validation losses {valid}")
    nonfinite = check_nonfinite(p)
    grad_cache = check_grad_cache(p)
    buckets = check_buckets(p) if ranks > 1 else {}
    step_buckets = check_step_buckets(p)
    throughput = check_throughput(p)

    stopped_at, tensors = kill_and_resume(p)
    check(os.path.isfile(p.path("ft-straight", "best", "model.pt")), "finetune kept no best/")
    valid = [l for l in read_jsonl(p.path("ft-straight", "metrics.jsonl")) if "valid/loss" in l]
    check([l["step"] for l in valid] == [8, 16], f"validations at {[l['step'] for l in valid]}")
    scalars += check_tensorboard(p.path("ft-straight"))

    wrong = p.run(["finetune", "--corpus", p.corpus, "--model-config", p.path("wider.yaml"),
                   "--train-pairs", os.path.join(fixture, "pairs.train.jsonl"), "--run", p.path("ft-straight"),
                   "--steps", "20", "--learn-temperature"], expect_failure=True)
    # Refused before anything loads, naming the differing keys, with advice
    # that removes no checkpoint (the weights' mismatch list: io_tests).
    check("of another shape" in wrong.stderr and "hidden 32 -> 48" in wrong.stderr and
          "config.yaml" in wrong.stderr and "to resume from it" not in wrong.stderr,
          "resume with another model config: " + wrong.stderr[-2000:])

    eval_args = ["eval", "--model", p.path("ft-straight", "best"), "--corpus", p.corpus,
                 "--valid-pairs", os.path.join(fixture, "pairs.valid.jsonl"),
                 "--test-pairs", os.path.join(fixture, "pairs.test.jsonl"),
                 "--relevance", os.path.join(fixture, "related.jsonl")]
    p.run(eval_args + ["--output", p.path("eval")])
    metrics = json.load(open(p.path("eval", "metrics.json")))
    accuracy, mrr = numpy_metrics(p, p.path("eval", "embeddings.h5"), metrics)
    p.run(eval_args + ["--output", p.path("eval-1")], ranks=1)
    single = json.load(open(p.path("eval-1", "metrics.json")))
    for section in ("classification", "ranking"):
        for split, values in metrics[section].items():
            other = single[section][split]
            if isinstance(values, dict):
                check(values == other, f"{section}/{split} on {ranks} ranks differs from 1 rank: {values} {other}")
            else:  # ranking means: sums over ranks, equal up to summation order
                check(abs(values - other) <= 1e-12, f"{section}/{split}: {values} on {ranks} ranks, {other} on 1")

    export = p.path("export")
    p.run(["export", "--model", p.path("ft-straight", "best"), "--corpus", p.corpus, "--output", export], ranks=1)
    with h5py.File(p.path("eval", "embeddings.h5"), "r") as h:
        some = [i.decode() if isinstance(i, bytes) else i for i in h["document_ids"][:3]]
    p.run(["embed", "--model", export, "--corpus", p.corpus, "--output", p.path("export-vectors.h5")])
    reference = subprocess.run([sys.executable, os.path.join(ROOT, "scripts/reference_vector.py"), "--model", export,
                                "--corpus", p.corpus, "--compare", p.path("export-vectors.h5"), "--tolerance", "1e-5"]
                               + sum((["--doc", d] for d in some), []), capture_output=True, text=True)
    check(reference.returncode == 0, "reference_vector.py: " + reference.stdout + reference.stderr)
    # best/ carries its corpus's tokenizer: exported without --corpus, the same folder.
    alone = p.path("export-alone")
    p.run(["export", "--model", p.path("ft-straight", "best"), "--output", alone], ranks=1)
    for name in ("model.safetensors", "tokenizer.model"):
        with open(os.path.join(export, name), "rb") as a, open(os.path.join(alone, name), "rb") as b:
            check(a.read() == b.read(), f"export without --corpus: {name} differs from the export with it")
    with open(os.path.join(p.corpus, "tokenizer.model"), "rb") as a, open(os.path.join(alone, "tokenizer.model"),
                                                                          "rb") as b:
        check(a.read() == b.read(), "the checkpoint's tokenizer is not the corpus's")
    worst = max(json.loads(l)["max_abs_difference"] for l in reference.stdout.splitlines())
    if ranks == 1:
        worst = max(worst, check_combine_modes(p, some))

    print(json.dumps({"ranks": ranks, "seconds": round(time.time() - started, 1), "tensorboard_scalars": scalars,
                      "killed_at": stopped_at, "pretrain_validations": validations, "nan_named_documents": nonfinite, "grad_cache_loss_max_rel_difference": grad_cache, "step_buckets_loss_max_rel_difference": step_buckets, "buckets": buckets,
                      "throughput_count_max_rel_error": throughput,
                      "tensors_equal_after_resume": tensors,
                      "test_accuracy": accuracy, "mrr": mrr, "numpy_vector_max_abs_difference": worst}))


if __name__ == "__main__":
    main()
