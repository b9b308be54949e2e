#!/usr/bin/env python3
"""Configuration that cannot go wrong silently, through the real binary:

- a misspelt key or section of a --config file fails before anything runs,
  naming the file, the line, the key and the nearest known name; a key
  given twice (in a --config file or a model config) names both lines;
- --model is a model folder everywhere: a YAML given to it names
  --model-config, a folder given to --model-config names --model;
- --dump-config prints a config whose paths do not exist yet, and a command
  run with --config checks its own section's paths, not the other sections';
- the learning-rate schedule follows --steps (warm-up 10% of it, zero at
  the last step), as the logged lr shows;
- the run keeps its resolved options in <run>/config.yaml, and a resume
  with other options warns naming each one, old and new value;
- export refuses to replace an existing folder without --overwrite.
- a mistyped flag gets the nearest option, and every command-line mistake
  exits 2 (an error while running exits 1);
- --fresh starts over: the earlier run's checkpoints and best/ go;
- a resumed run says it resumes, not that it starts from --init.

usage: config_check.py DOCMATCH E2E_FIXTURE SCRATCH_DIR
"""
import json
import os
import shutil
import subprocess
import sys

TINY = """model: {kind: smith, hidden: 32, heads: 2, intermediate: 64, sentence_layers: 1,
  document_layers: 1, block_length: 16, max_blocks: 8, dropout: 0.0, amplifier: 6.0}
"""


def check(condition, message):
    if not condition:
        sys.exit("FAILED: " + message)


def main():
    docmatch, fixture, scratch = sys.argv[1:4]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    corpus = os.path.join(fixture, "corpus")
    path = lambda *parts: os.path.join(scratch, *parts)  # noqa: E731

    def run(*args, fail=False):
        proc = subprocess.run([docmatch, *args], capture_output=True, text=True)
        check((proc.returncode != 0) == fail, f"docmatch {' '.join(args)} exited {proc.returncode}:\n"
              f"{proc.stdout[-1500:]}\n{proc.stderr[-1500:]}")
        return proc

    with open(path("tiny.yaml"), "w") as f:
        f.write(TINY)
    def refused(name, text, *args):
        """stderr of a command that `name` (written with `text`) must make fail."""
        with open(path(name), "w") as f:
            f.write(text)
        return run(*[path(name) if a == name else a for a in args], fail=True).stderr

    err = refused("typo.yaml", f"pretrain:\n  corpus: {corpus}\n  bach_size: 4\n", "pretrain", "--config", "typo.yaml")
    check(f"{path('typo.yaml')}:3: unknown option of pretrain 'bach_size'; did you mean 'batch-size'?" in err, err)
    err = refused("section.yaml", "pretran:\n  steps: 5\n", "pretrain", "--config", "section.yaml", "--corpus", corpus)
    check("section.yaml:1: unknown section 'pretran'; did you mean 'pretrain'?" in err, err)
    err = refused("synonym.yaml", "finetune:\n  learning_rate: 1e-4\n", "finetune", "--config", "synonym.yaml")
    check("unknown option of finetune 'learning_rate'; did you mean 'lr'?" in err, err)
    # A key given twice (yaml-cpp keeps the first silently): both lines named,
    # in a --config file and in a model config.
    err = refused("twice.yaml", f"pretrain:\n  corpus: {corpus}\n  lr: 1e-3\n  steps: 4\n  lr: 5e-4\n", "pretrain",
                  "--config", "twice.yaml")
    check(f"{path('twice.yaml')}:5: key 'lr' is given twice in 'pretrain' (first on line 3)" in err, err)
    err = refused("twice-model.yaml", "model:\n  kind: smith\n  hidden: 32\n  heads: 2\n  hidden: 48\n", "pretrain",
                  "--corpus", corpus, "--model-config", "twice-model.yaml", "--run", path("twice"))
    check("twice-model.yaml:5: key 'hidden' is given twice in 'model' (first on line 3)" in err, err)

    err = run("finetune", "--corpus", corpus, "--model", path("tiny.yaml"), "--train-pairs",
              os.path.join(fixture, "pairs.train.jsonl"), fail=True).stderr
    check("is a file" in err and "--model-config" in err, err)
    err = run("pretrain", "--corpus", corpus, "--model-config", scratch, fail=True).stderr
    check("is a folder" in err and "--model" in err, err)

    dumped = run("pretrain", "--corpus", path("not-yet"), "--model-config", path("tiny.yaml"), "--steps", "40",
                 "--dump-config").stdout
    check("corpus: " + path("not-yet") in dumped and "warmup-steps: auto" in dumped, dumped)

    run_dir = path("run")
    common = ["pretrain", "--corpus", corpus, "--model-config", path("tiny.yaml"), "--objective", "wp",
              "--batch-size", "2", "--log-every", "1", "--checkpoint-every", "10", "--lr", "1e-3",
              "--run", run_dir, "--device", "cpu", "--no-progress"]
    run(*common, "--steps", "20")
    lrs = {line["step"]: line["train/lr"] for line in map(json.loads, open(os.path.join(run_dir, "metrics.jsonl")))
           if "train/lr" in line}
    # warm-up 2 steps (10% of 20), linear decay to 0 at step 20; step s logs the lr of update s - 1.
    expected = {1: 1e-3 / 2, 2: 1e-3, 11: 1e-3 * 10 / 18, 20: 1e-3 / 18}
    check(all(abs(lrs[s] - v) < 1e-9 for s, v in expected.items()), f"lr {[(s, lrs[s]) for s in expected]}")
    # The epoch is fractional (2 documents a step over the corpus's), and each
    # logged step has the gradient norm before clipping.
    logged = [line for line in map(json.loads, open(os.path.join(run_dir, "metrics.jsonl"))) if "train/lr" in line]
    documents = json.loads(run("inspect", corpus).stdout)["documents"]
    check(all(abs(line["train/epoch"] - 2 * line["step"] / documents) < 1e-12 for line in logged) and
          all(0 < line["train/grad_norm"] < 1e6 for line in logged) and len(logged) == 20,
          f"epoch and grad norm of {documents} documents: {[(l['step'], l['train/epoch'], l.get('train/grad_norm')) for l in logged]}")
    config = open(os.path.join(run_dir, "config.yaml")).read()
    check(config.startswith("pretrain:\n") and "  steps: 20\n" in config and "  lr: 1e-3\n" in config, config)

    # --steps typed over a config file's schedule: the schedule follows the
    # steps typed (warm-up 1, decay to 0 at step 6), said once; typed warm-up
    # is kept, with a warning that the run never reaches --lr.
    with open(path("schedule.yaml"), "w") as f:
        f.write("pretrain:\n  steps: 200\n  warmup-steps: 20\n  decay-steps: 200\n")

    def schedule(name, *extra):
        result = run(*common[:-5], "--run", path(name), *common[-3:], "--config", path("schedule.yaml"), "--steps", "6",
                     *extra)
        metrics = map(json.loads, open(path(name, "metrics.jsonl")))
        return {line["step"]: line["train/lr"] for line in metrics if "train/lr" in line}, result.stderr

    followed, said_err = schedule("follows")
    said = [line for line in said_err.splitlines() if "the schedule follows it" in line]
    check(len(said) == 1 and "(warm-up 1, decay to 0 at step 6) instead of the config's --warmup-steps 20 and "
          "--decay-steps 200" in said[0] and abs(followed[1] - 1e-3) < 1e-12 and abs(followed[6] - 1e-3 / 5) < 1e-12,
          f"--steps 6 over the config's schedule: lr {followed}\n{said_err[-1500:]}")
    followed, said_err = schedule("typed", "--warmup-steps", "20")
    said = [line for line in said_err.splitlines() if "warms up over 20 steps of a run of 6" in line]
    check(len(said) == 1 and "decay to 0 at step 6" in said[0] and abs(followed[6] - 1e-3 * 6 / 20) < 1e-12,
          f"--warmup-steps 20 typed with --steps 6: lr {followed}\n{said_err[-1500:]}")

    err = run(*common[:-7], "--lr", "5e-4", *common[-5:], "--steps", "22").stderr
    warning = [line for line in err.splitlines() if "differ from its config.yaml" in line]
    check(len(warning) == 1 and "lr 1e-3 -> 5e-4" in warning[0] and "steps 20 -> 22" in warning[0]
          and warning[0].startswith("warning: "), err[-2000:])
    check("  steps: 22\n" in open(os.path.join(run_dir, "config.yaml")).read(), "config.yaml not updated")

    run("export", "--model", os.path.join(run_dir, "latest"), "--corpus", corpus, "--output", path("export"))
    err = run("export", "--model", os.path.join(run_dir, "latest"), "--corpus", corpus, "--output",
              path("export"), fail=True).stderr
    check("exists; pass --overwrite" in err, err)
    run("export", "--model", os.path.join(run_dir, "latest"), "--corpus", corpus, "--output", path("export"),
        "--overwrite")

    # One config for a whole job: the sections of the commands not run are
    # not checked (eval before finetune's --init exists), the run one's are.
    job = (f"finetune:\n  init: {path('import-not-made-yet')}\n  corpus: {corpus}\n"
           f"eval:\n  corpus: {corpus}\n  test-pairs: {os.path.join(fixture, 'pairs.test.jsonl')}\n")
    with open(path("job.yaml"), "w") as f:
        f.write(job)
    run("eval", "--config", path("job.yaml"), "--model", os.path.join(run_dir, "latest"), "--output", path("eval"),
        "--no-progress")
    check(os.path.exists(path("eval", "metrics.json")), "eval --config wrote no metrics.json")
    with open(path("job-missing.yaml"), "w") as f:
        f.write(job.replace(f"eval:\n  corpus: {corpus}", f"eval:\n  corpus: {path('corpus-not-made-yet')}"))
    err = run("eval", "--config", path("job-missing.yaml"), "--model", os.path.join(run_dir, "latest"), "--output",
              path("eval-missing"), fail=True).stderr
    check("--corpus" in err and "corpus-not-made-yet" in err, err)

    # Command-line mistakes: one line, the nearest option, exit 2.
    codes = {}
    for name, args, expected_text in (
            ("typo", ["search", "--embeddings", path("tiny.yaml"), "--topp", "3"],
             "docmatch search: error: unknown option '--topp', did you mean '--top'?"),
            ("missing", ["embed", "--corpus", corpus], "--model is required"),
            ("range", ["search", "--embeddings", path("tiny.yaml"), "--id", "x", "--lexical-weight", "2"],
             "--lexical-weight")):
        proc = subprocess.run([docmatch, *args], capture_output=True, text=True)
        codes[name] = proc.returncode
        check(proc.returncode == 2 and expected_text in proc.stderr and len(proc.stderr.strip().splitlines()) == 1,
              f"{name}: exit {proc.returncode}, {proc.stderr!r}")
    proc = subprocess.run([docmatch, "export", "--model", path("no-such-model")], capture_output=True, text=True)
    check(proc.returncode == 2, f"a missing model folder is a command-line mistake: {proc.returncode}")
    err = run("pretrain", "--corpus", corpus, "--model-config", "/etc/passwd", "--run", path("passwd"), fail=True).stderr
    check("'/etc/passwd' is not a model config" in err and "model:" in err, f"a model config of another kind: {err}")
    help_text = run("finetune", "--help").stdout
    check("from scratch with --model-config" in help_text, "finetune --help: from scratch is --model-config")

    # --fresh: nothing of the earlier run stays (it had step-10, step-20 and step-22).
    err = run(*common, "--steps", "2", "--fresh").stderr
    steps = sorted(n for n in os.listdir(run_dir) if n.startswith("step-"))
    check(steps == ["step-2"] and "--fresh: removed 3 checkpoints" in err, f"after --fresh: {steps}\n{err[-1500:]}")
    logged = [json.loads(line)["step"] for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    check(max(logged) == 2, f"metrics.jsonl still holds the earlier run's steps: {logged}")
    # A run started from --init and resumed says it resumes.
    init_run = path("from-init")
    first = run("pretrain", "--corpus", corpus, "--init", os.path.join(run_dir, "latest"), "--objective", "wp",
                "--batch-size", "2", "--steps", "1", "--run", init_run, "--device", "cpu", "--no-progress").stderr
    again = run("pretrain", "--corpus", corpus, "--init", os.path.join(run_dir, "latest"), "--objective", "wp",
                "--batch-size", "2", "--steps", "2", "--run", init_run, "--device", "cpu", "--no-progress").stderr
    check("weights from" in first and "weights from" not in again and "has checkpoints: resuming it" in again
          and "resumed from" in again, f"resume messages:\n{again[-1500:]}")
    print(json.dumps({"logged_lr": {s: lrs[s] for s in expected}, "resume_warning": warning[0],
                      "usage_exit_codes": codes}))


if __name__ == "__main__":
    main()
