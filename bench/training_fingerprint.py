#!/usr/bin/env python3
"""Fingerprints of training runs, to hold a refactor of the training code to
every number: each objective, kind and loss on a fixed seed, its logged
losses step by step and a hash of its final weights and optimizer state.

  training_fingerprint.py run DOCMATCH SCRATCH OUT.json [--mpirun MPIRUN] [--only NAME ...]
  training_fingerprint.py compare BEFORE.json AFTER.json

`run` builds the tiny man-pages corpus of the end-to-end tests in SCRATCH
(tests/e2e/tiny_manpages.py) unless it is there, then trains each case for
20 steps (--log-every 1) and writes one JSON object: per case, the metrics
of every step as logged (losses and their parts, learning rate, epoch,
validation; not timings or throughput, which vary run to run) and the
SHA-256 of the final checkpoint's model.pt and optimizer.pt tensors
(archive_hash).

`compare` prints each case's differences, and exits 1 when any value of
BEFORE differs or is missing in AFTER (keys only AFTER has are listed, not
counted as differences).
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 20
# Logged values that measure the machine, not the training.
UNSTABLE = ("time/", "docs_per_s", "tokens_per_s", "gpu_peak_gib", "model_tflops_per_s")


def cases(scratch):
    corpus = os.path.join(scratch, "corpus")
    models = os.path.join(ROOT, "configs", "models")
    smith, flat = os.path.join(models, "smith-tiny.yaml"), os.path.join(models, "match-bert-tiny.yaml")
    sdr, smash = os.path.join(models, "sdr-tiny.yaml"), os.path.join(models, "smash-tiny.yaml")
    bag = os.path.join(models, "bag.yaml")
    common = ["--steps", str(STEPS), "--log-every", "1", "--checkpoint-every", str(STEPS), "--no-progress",
              "--seed", "7", "--lr", "1e-3", "--warmup-steps", "3"]
    pre = ["pretrain", "--corpus", corpus, "--batch-size", "4"] + common
    pairs = [os.path.join(scratch, f"pairs.{s}.jsonl") for s in ("train", "valid")]
    fine = ["finetune", "--corpus", corpus, "--train-pairs", pairs[0], "--batch-size", "4"] + common
    valid = ["--valid-corpus", os.path.join(scratch, "valid-corpus"), "--valid-documents", "8",
             "--validate-every", "10"]
    return {
        "pretrain-smith-wp": (1, pre + ["--model-config", smith, "--objective", "wp"]),
        "pretrain-smith-wp+sp": (1, pre + ["--model-config", smith, "--objective", "wp+sp"] + valid),
        "pretrain-smith-wp+sp-detached": (1, pre + ["--model-config", smith, "--objective", "wp+sp",
                                                    "--detach-block-targets", "--accumulation", "2"]),
        "pretrain-smith-wp+sp-levels": (1, pre + ["--model-config", smith, "--objective", "wp+sp",
                                                  "--sentence-lr-scale", "0.5", "--freeze-sentence-steps", "5"]),
        "pretrain-smith-docsplit": (1, pre + ["--model-config", smith, "--objective", "docsplit"] + valid),
        "pretrain-smith-docsplit-gradcache": (1, pre + ["--model-config", smith, "--objective", "docsplit",
                                                        "--grad-cache", "2", "--lm-weight", "0"]),
        "pretrain-flat-wp": (1, pre + ["--model-config", flat, "--objective", "wp"]),
        "pretrain-flat-docsplit": (1, pre + ["--model-config", flat, "--objective", "docsplit",
                                             "--accumulation", "2"]),
        "pretrain-sdr": (1, pre + ["--model-config", sdr, "--objective", "sdr"]),
        "pretrain-smith-wp+sp-np2": (2, pre + ["--model-config", smith, "--objective", "wp+sp"]),
        "pretrain-smith-docsplit-np2": (2, pre + ["--model-config", smith, "--objective", "docsplit",
                                                  "--grad-cache", "2"]),
        "finetune-smith-contrastive": (1, fine + ["--model-config", smith, "--valid-pairs", pairs[1],
                                                  "--validate-every", "10"]),
        "finetune-smith-bce": (1, fine + ["--model-config", smith, "--loss", "bce", "--valid-pairs", pairs[1],
                                          "--validate-every", "10"]),
        "finetune-smith-levels": (1, fine + ["--model-config", smith, "--sentence-lr-scale", "0.5",
                                             "--freeze-sentence-steps", "5"]),
        "finetune-smith-mined": (1, fine + ["--model-config", smith, "--mine-negatives", "3",
                                            "--refresh-negatives", "7", "--hard-negatives", "2",
                                            "--drop-related"]),
        "finetune-smith-multipositive": (1, fine + ["--model-config", smith, "--loss", "multipositive",
                                                    "--valid-pairs", pairs[1], "--validate-every", "10"]),
        "finetune-flat-contrastive": (1, fine + ["--model-config", flat, "--grad-cache", "2",
                                                 "--learn-temperature", "--temperature-lr", "0.05"]),
        "finetune-flat-bce": (1, fine + ["--model-config", flat, "--loss", "bce", "--accumulation", "2"]),
        "finetune-sdr-contrastive": (1, fine + ["--model-config", sdr]),
        "finetune-smash-bce": (1, fine + ["--model-config", smash, "--loss", "bce"]),
        "finetune-smash-contrastive": (1, fine + ["--model-config", smash]),
        "finetune-bag-contrastive": (1, fine + ["--model-config", bag, "--valid-pairs", pairs[1],
                                                "--validate-every", "10"]),
        "finetune-bag-bce": (1, fine + ["--model-config", bag, "--loss", "bce"]),
        "finetune-smith-contrastive-np2": (2, fine + ["--model-config", smith, "--grad-cache", "2"]),
        "finetune-flat-bce-np2": (2, fine + ["--model-config", flat, "--loss", "bce"]),
    }


def archive_hash(path):
    """SHA-256 of the tensors' bytes in a libtorch archive, as a multiset:
    libtorch writes an optimizer's state in an order keyed by the tensors'
    addresses, which differs run to run, so each tensor is hashed alone and
    the sorted hashes are hashed together."""
    with zipfile.ZipFile(path) as archive:
        tensors = sorted(hashlib.sha256(archive.read(n)).hexdigest() for n in archive.namelist() if "/data/" in n)
    return hashlib.sha256("".join(tensors).encode()).hexdigest()


def fingerprint(run):
    steps = {}
    for line in open(os.path.join(run, "metrics.jsonl")):
        record = json.loads(line)
        kept = {k: v for k, v in record.items() if k != "step" and not any(u in k for u in UNSTABLE)}
        steps.setdefault(str(record["step"]), {}).update(kept)
    final = os.path.join(run, "latest")
    return {"metrics": steps, "model.pt": archive_hash(os.path.join(final, "model.pt")),
            "optimizer.pt": archive_hash(os.path.join(final, "optimizer.pt"))}


def run(args):
    scratch = os.path.abspath(args.scratch)
    if not os.path.isdir(os.path.join(scratch, "corpus")):
        subprocess.run([sys.executable, os.path.join(ROOT, "tests/e2e/tiny_manpages.py"), args.docmatch, scratch],
                       check=True)
    results = {}
    for name, (ranks, command) in cases(scratch).items():
        if args.only and name not in args.only:
            continue
        folder = os.path.join(scratch, "fingerprint", name)
        command = [args.docmatch] + command + ["--run", folder, "--fresh"]
        if ranks > 1:
            command = args.mpirun.split() + ["--oversubscribe", "--allow-run-as-root", "--bind-to", "none", "-np", str(ranks)] + command
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"{name}: exit {done.returncode}\n{done.stderr[-3000:]}")
        results[name] = fingerprint(folder)
        print(f"{name}: final loss {results[name]['metrics'][str(STEPS)].get('train/loss')}", flush=True)
    with open(args.output, "w") as out:
        json.dump(results, out, indent=1, sort_keys=True)


def compare(args):
    before, after = json.load(open(args.before)), json.load(open(args.after))
    differing = 0
    for name, old in before.items():
        new = after.get(name)
        if new is None:
            print(f"{name}: missing")
            differing += 1
            continue
        problems, added = [], set()
        for key in ("model.pt", "optimizer.pt"):
            if old[key] != new[key]:
                problems.append(f"{key} differs")
        for step, values in old["metrics"].items():
            now = new["metrics"].get(step, {})
            for key, value in values.items():
                if key not in now:
                    problems.append(f"step {step} {key} missing")
                elif now[key] != value:
                    problems.append(f"step {step} {key}: {value!r} -> {now[key]!r}")
            added |= set(now) - set(values)
        steps = len(old["metrics"])
        print(f"{name}: {'identical' if not problems else 'DIFFERS'} ({steps} steps"
              f"{', new keys ' + ', '.join(sorted(added)) if added else ''})")
        for p in problems[:10]:
            print("   ", p)
        differing += bool(problems)
    print(f"{len(before) - differing} identical, {differing} differing")
    return 1 if differing else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("docmatch")
    r.add_argument("scratch")
    r.add_argument("output")
    r.add_argument("--mpirun", default="mpirun")
    r.add_argument("--only", nargs="*")
    c = sub.add_parser("compare")
    c.add_argument("before")
    c.add_argument("after")
    args = parser.parse_args()
    sys.exit(run(args) if args.command == "run" else compare(args))


if __name__ == "__main__":
    main()
