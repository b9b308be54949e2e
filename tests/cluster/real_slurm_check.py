#!/usr/bin/env python3
"""The cluster/ templates under a real Slurm (tests/cluster/slurm-cluster.sh:
munged, slurmctld and slurmd of Debian 12's Slurm 22.05, one CPU node):

  * cluster/single-node.sbatch, cluster/mpirun.sbatch and
    cluster/multi-node.sbatch, submitted with `sbatch --wait`, each run a
    2-rank pretrain on the tiny fixture to its last step (srun --mpi=pmix
    for the srun templates, Open MPI's mpirun inside the allocation for the
    other). Their CPU variants drop the `#SBATCH --gpus-*` lines and nothing
    else; multi-node runs on the one node (--nodes=1);
  * preemption through slurmctld: the warning signal a time limit sends
    (`scancel --signal=USR1 --batch`, what #SBATCH --signal=B:USR1@300
    does) makes the job checkpoint and `scontrol requeue` itself; the
    requeued job (Restarts=1) resumes from that checkpoint and ends with the
    same parameters, bit for bit, as a job never interrupted. Slurm holds a
    requeued job for about two minutes (its begin time), and the test waits
    for that: releasing it sooner raced slurmd and failed the job;
  * cluster/submit-pipeline.sh chains pretrain -> finetune -> eval as three
    jobs with afterok, and they run in order to an eval report; when a stage
    fails, the stages after it never run.

Exits 77 (skipped) where Slurm or munge is not installed or cannot run.

usage: real_slurm_check.py DOCMATCH FIXTURE SCRATCH
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors.numpy import load_file  # noqa: E402
from slurm_check import ROOT, TINY, check, write  # noqa: E402

CLUSTER = os.path.join(ROOT, "tests", "cluster", "slurm-cluster.sh")


def exported(docmatch, folder, corpus, output):
    """A checkpoint's weights through `docmatch export` (safetensors)."""
    subprocess.run([docmatch, "export", "--model", folder, "--corpus", corpus, "--output", output], check=True,
                   capture_output=True)
    return load_file(os.path.join(output, "model.safetensors"))


class Slurm:
    def __init__(self, scratch, docmatch):
        self.dir = os.path.join(scratch, "slurm")
        self.scratch = scratch
        self.env = dict(os.environ, SLURM_CONF=os.path.join(self.dir, "etc", "slurm.conf"),
                        PATH=os.environ["PATH"] + os.pathsep + "/usr/sbin", DOCMATCH_BIN=docmatch,
                        DOCMATCH_DEVICE="cpu", DOCMATCH_ROOT=ROOT,
                        # the daemons run jobs as root here; mpirun refuses root without these
                        OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")

    def command(self, *args, expect=0):
        result = subprocess.run(list(args), capture_output=True, text=True, env=self.env, cwd=ROOT)
        check(result.returncode == expect, f"{' '.join(args)} exited {result.returncode}:\n{result.stderr[-2000:]}")
        return result.stdout

    def cpu_variant(self, template):
        """The template without its GPU requests (this node has none)."""
        text = open(os.path.join(ROOT, "cluster", template)).read()
        kept = [line for line in text.splitlines(keepends=True) if not line.startswith("#SBATCH --gpus")]
        check(len(kept) == len(text.splitlines()) - 1, f"{template}: expected one #SBATCH --gpus line")
        path = os.path.join(self.scratch, template.replace(".sbatch", "-cpu.sbatch"))
        write(path, "".join(kept))
        return path

    def job(self, job_id):
        fields = dict(re.findall(r"(\w+)=(\S*)", self.command("scontrol", "show", "job", str(job_id))))
        return fields

    def wait(self, job_id, until, timeout=300):
        deadline = time.time() + timeout
        while time.time() < deadline:
            fields = self.job(job_id)
            if until(fields):
                return fields
            time.sleep(0.5)
        check(False, f"job {job_id} still {self.job(job_id).get('JobState')} after {timeout} s")


def templates(slurm, config):
    """Each template runs a short 2-rank pretrain to its last step."""
    seconds = {}
    for template, nodes in (("single-node.sbatch", []), ("mpirun.sbatch", []),
                            ("multi-node.sbatch", ["--nodes=1"])):
        run_dir = os.path.join(slurm.scratch, template.split(".")[0])
        log = run_dir + ".out"
        started = time.time()
        slurm.command("sbatch", "--wait", *nodes, "--ntasks-per-node=2", "--cpus-per-task=1", "--output", log,
                      "--export", f"ALL,RUN_DIR={run_dir}", slurm.cpu_variant(template), "pretrain", config)
        seconds[template] = round(time.time() - started, 1)
        out = open(log).read()
        check("pretrain ended with status 0" in out and "[dist] 2 ranks" in out, f"{template}:\n{out[-2000:]}")
        check(os.path.basename(os.path.realpath(os.path.join(run_dir, "pretrain", "latest"))) == "step-6",
              f"{template}: the run did not reach step 6")
    return seconds


def preemption(slurm, config, corpus):
    template = slurm.cpu_variant("single-node.sbatch")
    common = ["--ntasks-per-node=2", "--cpus-per-task=1"]
    flags = ["--steps", "40", "--checkpoint-every", "100", "--log-every", "1"]
    straight = os.path.join(slurm.scratch, "straight")
    slurm.command("sbatch", "--wait", *common, "--output", straight + ".out", "--export", f"ALL,RUN_DIR={straight}",
                  template, "pretrain", config, *flags)
    check(os.path.basename(os.path.realpath(os.path.join(straight, "pretrain", "latest"))) == "step-40",
          "the uninterrupted job did not reach step 40:\n" + open(straight + ".out").read()[-2000:])

    interrupted = os.path.join(slurm.scratch, "preempted")
    log = interrupted + ".out"
    job = slurm.command("sbatch", "--parsable", *common, "--output", log, "--export", f"ALL,RUN_DIR={interrupted}",
                        template, "pretrain", config, *flags).strip().split(";")[0]
    metrics = os.path.join(interrupted, "pretrain", "metrics.jsonl")
    deadline = time.time() + 120
    while time.time() < deadline and not (os.path.exists(metrics) and sum(1 for _ in open(metrics)) >= 3):
        time.sleep(0.05)
    slurm.command("scancel", "--signal=USR1", "--batch", job)  # the time limit's warning
    pending = slurm.wait(job, lambda f: f.get("Restarts") == "1" and f.get("JobState") == "PENDING", 120)
    # Slurm holds a requeued job until its begin time (about 2 minutes);
    # `scontrol update StartTime=now` raced slurmd here ("Job 5 already
    # killed, do not launch batch job") and failed the job, so the test waits.
    held = time.time()
    done = slurm.wait(job, lambda f: f.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED"), 400)
    out = open(log).read()
    check(done["JobState"] == "COMPLETED" and done["Restarts"] == "1", f"job {job}: {done}\n{out[-2000:]}")
    stopped = re.search(r"resumed from \S+/step-(\d+) at step (\d+)", out)
    check(stopped and stopped.group(1) == stopped.group(2) and "requeueing job " + job in out,
          f"the requeued job did not resume from its checkpoint:\n{out[-3000:]}")
    step = int(stopped.group(1))
    check(0 < step < 40, f"checkpointed at step {step}")
    a = exported(slurm.env["DOCMATCH_BIN"], os.path.join(straight, "pretrain", "step-40"), corpus,
                 os.path.join(slurm.scratch, "x-straight"))
    b = exported(slurm.env["DOCMATCH_BIN"], os.path.join(interrupted, "pretrain", "step-40"), corpus,
                 os.path.join(slurm.scratch, "x-preempted"))
    check(a.keys() == b.keys() and len(a) > 0, "different tensors")
    for name in a:
        check((a[name] == b[name]).all(), f"{name} differs after a real requeue")
    return {"preempted_at_step": step, "tensors_equal": len(a), "held_reason": pending.get("Reason"),
            "requeued_job_waited_s": round(time.time() - held, 1)}


def chain(slurm, configs, name, finetune_config):
    out = slurm.command("cluster/submit-pipeline.sh", "--name", name, "--template",
                        slurm.cpu_variant("single-node.sbatch"), "--pretrain", configs["pretrain"], "--finetune",
                        finetune_config, "--eval", configs["eval"], "--", "--ntasks-per-node=2",
                        "--cpus-per-task=1", "--output", os.path.join(slurm.scratch, "%x-%j.out"))
    return re.findall(r"job (\d+)", out)


def pipeline(slurm, configs):
    name = f"slurm-test-{os.getpid()}"
    try:
        jobs = chain(slurm, configs, name, configs["finetune"])
        check(len(jobs) == 3, f"three jobs: {jobs}")
        states = [slurm.wait(j, lambda f: f.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED"), 300)
                  for j in jobs]
        check([s["JobState"] for s in states] == ["COMPLETED"] * 3, f"pipeline jobs: {states}")
        starts = [s["StartTime"] for s in states]
        check(starts == sorted(starts), f"the stages did not run in order: {starts}")
        metrics = json.load(open(os.path.join(ROOT, "runs", name, "eval", "metrics.json")))
        check(metrics["classification"]["test"]["pairs"] > 0, "no eval metrics")
        # A stage that fails: the one after it never runs.
        broken = os.path.join(slurm.scratch, "broken-finetune.yaml")
        write(broken, open(configs["finetune"]).read().replace("pairs.train.jsonl", "no-such-pairs.jsonl"))
        jobs = chain(slurm, configs, name + "-broken", broken)
        slurm.wait(jobs[1], lambda f: f.get("JobState") == "FAILED", 300)
        last = slurm.wait(jobs[2], lambda f: f.get("JobState") == "CANCELLED" or
                          f.get("Reason") == "DependencyNeverSatisfied", 60)
        check(last.get("RunTime") == "00:00:00", f"the eval after a failed stage ran: {last}")
        return metrics["classification"]["test"]["accuracy"]
    finally:
        for suffix in ("", "-broken"):
            shutil.rmtree(os.path.join(ROOT, "runs", name + suffix), ignore_errors=True)


def main():
    docmatch, fixture, scratch = sys.argv[1:4]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    slurm = Slurm(scratch, docmatch)
    started = subprocess.run(["bash", CLUSTER, "up", slurm.dir], capture_output=True, text=True)
    if started.returncode == 77:
        print(started.stderr.strip())
        sys.exit(77)
    check(started.returncode == 0, f"the test Slurm did not start:\n{started.stderr[-2000:]}")
    try:
        corpus = os.path.join(fixture, "corpus")
        write(os.path.join(scratch, "tiny.yaml"), TINY)
        configs = {s: os.path.join(scratch, f"{s}.yaml") for s in ("pretrain", "finetune", "eval")}
        write(configs["pretrain"], f"pretrain:\n  corpus: {corpus}\n  model-config: {scratch}/tiny.yaml\n"
              "  batch-size: 4\n  steps: 6\n  lr: 0.001\n  warmup-steps: 1\n  decay-steps: 40\n"
              "  checkpoint-every: 3\n")
        write(configs["finetune"], f"finetune:\n  corpus: {corpus}\n  train-pairs: {fixture}/pairs.train.jsonl\n"
              f"  valid-pairs: {fixture}/pairs.valid.jsonl\n  batch-size: 4\n  steps: 6\n  lr: 0.001\n"
              "  warmup-steps: 1\n  validate-every: 3\n")
        write(configs["eval"], f"eval:\n  corpus: {corpus}\n  valid-pairs: {fixture}/pairs.valid.jsonl\n"
              f"  test-pairs: {fixture}/pairs.test.jsonl\n  relevance: {fixture}/related.jsonl\n")
        begun = time.time()
        figures = {"template_seconds": templates(slurm, configs["pretrain"])}
        figures.update(preemption(slurm, configs["pretrain"], corpus))
        figures["pipeline_test_accuracy"] = pipeline(slurm, configs)
        figures["seconds"] = round(time.time() - begun, 1)
        print(json.dumps(figures))
    finally:
        subprocess.run(["bash", CLUSTER, "down", slurm.dir])


if __name__ == "__main__":
    main()
