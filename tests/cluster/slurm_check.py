#!/usr/bin/env python3
"""The launch/ scripts, run for real on CPU (the cluster/ templates run
under a real Slurm: real_slurm_check.py):

  * every launch and cluster script passes `bash -n`; each launch script's
    --dry-run prints the mpirun command expected for its options, its
    ranks and device counted from the GPUs the job may use;
  * launch/pipeline.sh --local runs pretrain -> finetune -> eval on 2 ranks;
    --pretrain-flags reach pretrain alone, flags after -- every stage.

usage: slurm_check.py DOCMATCH FIXTURE SCRATCH
(FIXTURE: tests/e2e/tiny_manpages.py's folder.)
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import time


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = """model: {kind: smith, hidden: 32, heads: 2, intermediate: 64, sentence_layers: 1,
  document_layers: 1, block_length: 16, max_blocks: 8, dropout: 0.1, amplifier: 6.0}
"""


def check(condition, message):
    if not condition:
        sys.exit("FAILED: " + message)


def run(command, env=None, expect=0):
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    check(result.returncode == expect, f"{' '.join(command)} exited {result.returncode}, not {expect}:\n"
          f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def write(path, text, mode=0o644):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def syntax():
    scripts = glob.glob(os.path.join(ROOT, "launch", "*.sh")) + glob.glob(os.path.join(ROOT, "cluster", "*.s*"))
    for script in scripts:
        run(["bash", "-n", script])
    return len(scripts)


def stand_in_nvidia_smi(scratch, gpus):
    """A folder holding an nvidia-smi that lists `gpus` GPUs, for PATH."""
    bin_dir = os.path.join(scratch, f"nvidia-smi-{gpus}")
    os.makedirs(bin_dir, exist_ok=True)
    write(os.path.join(bin_dir, "nvidia-smi"),
          f"#!/bin/sh\nfor i in $(seq 0 {gpus - 1}); do echo \"GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-$i)\"; done\n",
          0o755)
    return bin_dir


def launch_env(docmatch, scratch, gpus, visible=None):
    """This environment, with a stand-in nvidia-smi listing `gpus` GPUs and
    CUDA_VISIBLE_DEVICES set to `visible` (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env.update(DOCMATCH_BIN=docmatch, PATH=stand_in_nvidia_smi(scratch, gpus) + os.pathsep + os.environ["PATH"])
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    return env


def dry_runs(docmatch, configs, scratch):
    env = launch_env(docmatch, scratch, gpus=0)  # the same on a machine with GPUs
    out = run(["launch/pretrain.sh", "--config", configs["pretrain"], "--np", "4", "--threads", "3", "--dry-run",
               "--", "--steps", "7"], env).stdout.strip().splitlines()
    check(len(out) == 1 and out[0].startswith("[launch] mpirun -np 4 "), f"pretrain dry run: {out}")
    line, checked = out[0], 1
    for part in ["--map-by slot:PE=3 --bind-to core", "-x OMP_NUM_THREADS=3",
                 f"{docmatch} pretrain --config {configs['pretrain']} --device cpu --steps 7"]:
        check(part in line, f"'{part}' not in: {line}")
    check("--oversubscribe" not in line, "oversubscribed without --oversubscribe")
    hostfile = os.path.join(os.path.dirname(configs["pretrain"]), "hosts")
    write(hostfile, "node1 slots=4\nnode2 slots=4\n")
    line = run(["launch/finetune.sh", "--config", configs["finetune"], "--device", "cuda", "--np", "8",
                "--hostfile", hostfile, "--threads", "2", "--dry-run"], env).stdout
    checked += 1
    for part in ["-np 8", f"--hostfile {hostfile}", "--map-by ppr:4:node:PE=2", "-x NCCL_DEBUG=WARN",
                 "finetune --config", "--device cuda"]:
        check(part in line, f"'{part}' not in: {line}")
    # Two ranks on one GPU as NCCL's two hosts (issue 61): the switch reaches every rank.
    line = run(["launch/pretrain.sh", "--config", configs["pretrain"], "--device", "cuda", "--np", "2",
                "--nccl-host-per-rank", "--dry-run"], env).stdout
    checked += 1
    for part in ["-np 2", "-x DOCMATCH_NCCL_HOST_PER_RANK=1", "--device cuda"]:
        check(part in line, f"'{part}' not in: {line}")
    bad = run(["launch/pretrain.sh", "--config", configs["pretrain"], "--device", "cuda", "--np", "2",
               "--nccl-host-per-rank", "--hostfile", hostfile, "--dry-run"], env, expect=2)
    check("one machine" in bad.stderr, bad.stderr)
    line = run(["launch/eval.sh", "--config", configs["eval"], "--local", "--dry-run"], env).stdout
    checked += 1
    for part in ["-np 2", "--oversubscribe", "--bind-to none", "-x OMP_NUM_THREADS=1", "eval --config"]:
        check(part in line, f"'{part}' not in: {line}")
    bad = run(["launch/eval.sh", "--config", configs["eval"], "--bogus"], env, expect=2)
    check("unknown option '--bogus'" in bad.stderr, bad.stderr)
    return checked


def gpu_counts(docmatch, configs, scratch):
    """--device auto and --np's default count the GPUs the job may use:
    CUDA_VISIBLE_DEVICES when set, read as CUDA reads it, else every GPU
    nvidia-smi lists (here a stand-in that lists four). On one host the
    variable reaches every rank; with a hostfile each host keeps its own."""
    # (CUDA_VISIBLE_DEVICES, expected ranks, device, whether it is passed on);
    # CUDA reads the list up to its first entry that is not a GPU of the host.
    cases = [(None, 4, "cuda", False), ("2,3", 2, "cuda", True), ("", 1, "cpu", False),
             ("NoDevFiles", 1, "cpu", False), ("0,-1,2", 1, "cuda", True), ("0,1,7", 2, "cuda", True)]
    for visible, ranks, device, passed in cases:
        line = run(["launch/pretrain.sh", "--config", configs["pretrain"], "--dry-run"],
                   launch_env(docmatch, scratch, 4, visible)).stdout
        check(f"mpirun -np {ranks} " in line and f"--device {device}" in line,
              f"CUDA_VISIBLE_DEVICES={visible!r}: expected {ranks} ranks on {device}: {line}")
        check(("-x CUDA_VISIBLE_DEVICES" in line) == passed, f"CUDA_VISIBLE_DEVICES={visible!r} passed on: {line}")
    hostfile = os.path.join(scratch, "hosts")
    line = run(["launch/pretrain.sh", "--config", configs["pretrain"], "--hostfile", hostfile, "--np", "4",
                "--device", "cuda", "--dry-run"], launch_env(docmatch, scratch, 4, "2,3")).stdout
    check("-x CUDA_VISIBLE_DEVICES" not in line and "--map-by ppr:2:node" in line,
          f"with a hostfile each host keeps its own CUDA_VISIBLE_DEVICES: {line}")
    return len(cases) + 1


def pipeline(docmatch, configs, scratch):
    env = dict(os.environ, DOCMATCH_BIN=docmatch)
    out = run(["launch/pipeline.sh", "--pretrain-config", configs["pretrain"], "--finetune-config",
               configs["finetune"], "--eval-config", configs["eval"], "--local", "--pretrain-flags", "--log-every 1",
               "--", "--no-progress"], env).stdout
    check(out.count("[launch] mpirun -np 2") == 3 and "[pipeline] done" in out, out[-2000:])
    # A stage's own flags reach that stage only (eval would refuse --log-every).
    lines = [l for l in out.splitlines() if l.startswith("[launch] mpirun")]
    check("--log-every 1" in lines[0] and all("--log-every" not in l for l in lines[1:]) and
          all("--no-progress" in l for l in lines), "per-stage flags:\n" + "\n".join(lines))
    metrics = json.load(open(os.path.join(scratch, "pipe", "eval", "metrics.json")))
    check(metrics["classification"]["test"]["pairs"] > 0 and "mrr" in metrics["ranking"], "no eval metrics")
    return metrics["classification"]["test"]["accuracy"]


def main():
    docmatch, fixture, scratch = sys.argv[1:4]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    corpus = os.path.join(fixture, "corpus")
    pairs = {s: os.path.join(fixture, f"pairs.{s}.jsonl") for s in ("train", "valid", "test")}
    write(os.path.join(scratch, "tiny.yaml"), TINY)
    configs = {s: os.path.join(scratch, f"{s}.yaml") for s in ("pretrain", "finetune", "eval")}
    write(configs["pretrain"], f"""pretrain:
  corpus: {corpus}
  model-config: {scratch}/tiny.yaml
  objective: wp+sp
  run: {scratch}/pipe/pretrain
  batch-size: 4
  steps: 8
  lr: 0.001
  warmup-steps: 2
  decay-steps: 40
  checkpoint-every: 4
""")
    write(configs["finetune"], f"""finetune:
  corpus: {corpus}
  init: {scratch}/pipe/pretrain/latest
  train-pairs: {pairs['train']}
  valid-pairs: {pairs['valid']}
  run: {scratch}/pipe/finetune
  batch-size: 4
  steps: 8
  lr: 0.001
  warmup-steps: 2
  validate-every: 4
""")
    write(configs["eval"], f"""eval:
  model: {scratch}/pipe/finetune/best
  corpus: {corpus}
  valid-pairs: {pairs['valid']}
  test-pairs: {pairs['test']}
  relevance: {fixture}/related.jsonl
  output: {scratch}/pipe/eval
""")
    started = time.time()
    scripts = syntax()
    dry = dry_runs(docmatch, configs, scratch) + gpu_counts(docmatch, configs, scratch)
    accuracy = pipeline(docmatch, configs, scratch)
    print(json.dumps({"scripts_parsed": scripts, "dry_runs": dry, "pipeline_test_accuracy": accuracy,
                      "seconds": round(time.time() - started, 1)}))


if __name__ == "__main__":
    main()
