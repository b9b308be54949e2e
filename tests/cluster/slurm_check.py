#!/usr/bin/env python3
"""The launch/ scripts and cluster/ Slurm templates, run for real on CPU:

  * every script passes `bash -n`; each launch script's --dry-run prints the
    mpirun command expected for its options;
  * launch/pipeline.sh --local runs pretrain -> finetune -> eval on 2 ranks;
    --pretrain-flags reach pretrain alone, flags after -- every stage;
  * cluster/single-node.sbatch under a faked Slurm (SLURM_* variables, `srun`
    a shim that runs mpirun with SLURM_NTASKS ranks, `scontrol` a recorder):
    a warning signal to the job script (what --signal=B:USR1 sends) leaves a
    complete checkpoint between the scheduled ones, the job requeues itself,
    and the requeued job resumes there and ends with the same parameters, bit
    for bit, as a job never interrupted;
  * cluster/mpirun.sbatch runs a stage through its mpirun launcher;
  * cluster/submit-pipeline.sh chains three sbatch calls with afterok.

usage: slurm_check.py DOCMATCH FIXTURE SCRATCH
(FIXTURE: tests/e2e/tiny_manpages.py's folder.)
"""
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
from safetensors.numpy import load_file

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


def dry_runs(docmatch, configs):
    env = dict(os.environ, DOCMATCH_BIN=docmatch)
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
    line = run(["launch/eval.sh", "--config", configs["eval"], "--local", "--dry-run"], env).stdout
    checked += 1
    for part in ["-np 2", "--oversubscribe", "--bind-to none", "-x OMP_NUM_THREADS=1", "eval --config"]:
        check(part in line, f"'{part}' not in: {line}")
    bad = run(["launch/eval.sh", "--config", configs["eval"], "--bogus"], env, expect=2)
    check("unknown option '--bogus'" in bad.stderr, bad.stderr)
    return checked


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


def fake_slurm(scratch):
    """A bin/ folder with srun, scontrol and sbatch stand-ins."""
    bin_dir = os.path.join(scratch, "fake-slurm-bin")
    os.makedirs(bin_dir, exist_ok=True)
    log = os.path.join(scratch, "fake-slurm.log")
    # srun: drop its own options, run the program on SLURM_NTASKS local ranks
    # (Open MPI must not see the fake allocation, so SLURM_* goes).
    write(os.path.join(bin_dir, "srun"), f"""#!/usr/bin/env bash
echo "srun $*" >> {log}
while [ $# -gt 0 ] && [[ "$1" == -* ]]; do shift; done
ntasks="$SLURM_NTASKS"
for v in $(compgen -e | grep '^SLURM_'); do unset "$v"; done
exec mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$ntasks" "$@"
""", 0o755)
    write(os.path.join(bin_dir, "scontrol"), f'#!/usr/bin/env bash\necho "scontrol $*" >> {log}\n', 0o755)
    write(os.path.join(bin_dir, "sbatch"), f"""#!/usr/bin/env bash
echo "sbatch $*" >> {log}
n=$(grep -c '^sbatch' {log})
echo "$((1000 + n));fakecluster"
""", 0o755)
    write(os.path.join(bin_dir, "mpirun-shim"), f"""#!/usr/bin/env bash
echo "mpirun $*" >> {log}
for v in $(compgen -e | grep '^SLURM_'); do unset "$v"; done
exec mpirun --oversubscribe --allow-run-as-root --bind-to none "$@"
""", 0o755)
    return bin_dir, log


def slurm_env(docmatch, bin_dir, run_dir, job_id, restart=0):
    return dict(os.environ, PATH=bin_dir + os.pathsep + os.environ["PATH"], DOCMATCH_BIN=docmatch,
                DOCMATCH_DEVICE="cpu", RUN_DIR=run_dir, SLURM_JOB_ID=str(job_id), SLURM_JOB_NAME="fake",
                SLURM_NTASKS="2", SLURM_NTASKS_PER_NODE="2", SLURM_CPUS_PER_TASK="1", SLURM_JOB_NUM_NODES="1",
                SLURM_SUBMIT_DIR=ROOT, SLURM_RESTART_COUNT=str(restart))


def exported(docmatch, folder, corpus, output):
    """A checkpoint's weights through `docmatch export` (safetensors)."""
    subprocess.run([docmatch, "export", "--model", folder, "--corpus", corpus, "--output", output], check=True,
                   capture_output=True)
    return load_file(os.path.join(output, "model.safetensors"))


def preemption(docmatch, configs, scratch, corpus):
    bin_dir, log = fake_slurm(scratch)
    args = ["bash", "cluster/single-node.sbatch", "pretrain", configs["pretrain"], "--steps", "40",
            "--checkpoint-every", "100", "--log-every", "1"]
    straight = os.path.join(scratch, "slurm-straight")
    out = run(args, slurm_env(docmatch, bin_dir, straight, 7001)).stdout
    check("[slurm]" in out and "ended with status 0" in out, out[-2000:])
    check(os.path.basename(os.path.realpath(os.path.join(straight, "pretrain", "latest"))) == "step-40",
          "the uninterrupted job did not reach step 40")

    interrupted = os.path.join(scratch, "slurm-preempted")
    job = subprocess.Popen(args, cwd=ROOT, env=slurm_env(docmatch, bin_dir, interrupted, 7002),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    metrics = os.path.join(interrupted, "pretrain", "metrics.jsonl")
    deadline = time.time() + 300
    while time.time() < deadline and job.poll() is None:
        if os.path.exists(metrics) and sum(1 for _ in open(metrics)) >= 5:
            break
        time.sleep(0.05)
    check(job.poll() is None, "the job ended before it could be signalled")
    job.send_signal(signal.SIGUSR1)  # what #SBATCH --signal=B:USR1@300 does
    output, _ = job.communicate(timeout=300)
    check(job.returncode == 0, f"the signalled job exited {job.returncode}:\n{output[-3000:]}")
    check("requeueing job 7002" in output, output[-3000:])
    check("scontrol requeue 7002" in open(log).read(), "no scontrol requeue recorded")
    stopped = os.path.realpath(os.path.join(interrupted, "pretrain", "latest"))
    step = int(os.path.basename(stopped).split("-")[1])
    check(5 <= step < 40, f"the interrupted job checkpointed at step {step}")
    for name in ("model.pt", "optimizer.pt", "trainer.json", "rng.pt", "config.json"):
        check(os.path.isfile(os.path.join(stopped, name)), f"{stopped} lacks {name}")
    check(json.load(open(os.path.join(stopped, "trainer.json")))["step"] == step, "trainer.json step")
    check(not glob.glob(os.path.join(interrupted, "pretrain", "*.tmp")), "a temporary checkpoint was left")

    out = run(args, slurm_env(docmatch, bin_dir, interrupted, 7002, restart=1)).stdout
    check("ended with status 0" in out, out[-2000:])
    rank0 = glob.glob(os.path.join(interrupted, "logs", "pretrain", "rank-0.log.*"))
    check(len(rank0) == 2, f"rank 0 logs of the two jobs: {rank0}")
    resumed = [l for f in rank0 for l in open(f) if "resumed from" in l]
    check(resumed and resumed[-1].rstrip().endswith(f"step-{step} at step {step}"),
          f"the requeued job did not resume from step {step}: {resumed}")
    a = exported(docmatch, os.path.join(straight, "pretrain", "step-40"), corpus, os.path.join(scratch, "x-a"))
    b = exported(docmatch, os.path.join(interrupted, "pretrain", "step-40"), corpus, os.path.join(scratch, "x-b"))
    check(a.keys() == b.keys() and len(a) > 0, "different tensors")
    for name in a:
        check(np.array_equal(a[name], b[name]), f"{name} differs after preemption and requeue")
    return step, len(a)


def mpirun_template(docmatch, configs, scratch):
    bin_dir, log = fake_slurm(scratch)
    env = slurm_env(docmatch, bin_dir, os.path.join(scratch, "slurm-mpirun"), 7003)
    env["MPIRUN"] = os.path.join(bin_dir, "mpirun-shim")
    out = run(["bash", "cluster/mpirun.sbatch", "eval", configs["eval"]], env).stdout
    check("ended with status 0" in out, out[-2000:])
    recorded = [l for l in open(log) if l.startswith("mpirun")][-1]
    check("-np 2 --map-by ppr:2:node:PE=1 --bind-to core" in recorded, recorded)
    check(os.path.isfile(os.path.join(scratch, "slurm-mpirun", "eval", "metrics.json")), "no eval output")


def submit(configs, scratch):
    bin_dir, log = fake_slurm(scratch)
    open(log, "w").close()
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ["PATH"])
    out = run(["cluster/submit-pipeline.sh", "--name", "chain", "--pretrain", configs["pretrain"], "--finetune",
               configs["finetune"], "--eval", configs["eval"], "--", "--partition", "gpu"], env).stdout
    calls = [l.split() for l in open(log) if l.startswith("sbatch")]
    check(len(calls) == 3, f"{len(calls)} sbatch calls")
    check("--dependency" not in calls[0], "pretrain should not wait")
    check(calls[1][calls[1].index("--dependency") + 1] == "afterok:1001", f"finetune: {calls[1]}")
    check(calls[2][calls[2].index("--dependency") + 1] == "afterok:1002", f"eval: {calls[2]}")
    check(calls[1][-2:] == ["--init", "runs/chain/pretrain/latest"], f"finetune init: {calls[1]}")
    check(calls[2][-2:] == ["--model", "runs/chain/finetune/best"], f"eval model: {calls[2]}")
    check(all("--partition" in c and "ALL,RUN_DIR=runs/chain" in c for c in calls), "sbatch options not passed")
    check("1001 -> finetune job 1002 -> eval job 1003" in out, out)


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
    dry = dry_runs(docmatch, configs)
    accuracy = pipeline(docmatch, configs, scratch)
    step, tensors = preemption(docmatch, configs, scratch, corpus)
    mpirun_template(docmatch, configs, scratch)
    submit(configs, scratch)
    print(json.dumps({"scripts_parsed": scripts, "dry_runs": dry, "pipeline_test_accuracy": accuracy,
                      "preempted_at_step": step, "tensors_equal_after_requeue": tensors,
                      "seconds": round(time.time() - started, 1)}))


if __name__ == "__main__":
    main()
