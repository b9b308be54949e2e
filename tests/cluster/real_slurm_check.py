#!/usr/bin/env python3
"""The cluster/ templates under a real Slurm (tests/cluster/slurm-cluster.sh:
munged, slurmctld and a slurmd per node of Debian 12's Slurm 22.05; two CPU
nodes, each a network namespace with its own address and /tmp, or one node
where namespaces cannot be made):

  * cluster/single-node.sbatch, cluster/mpirun.sbatch and
    cluster/multi-node.sbatch, submitted with `sbatch --wait`, each run a
    2-rank pretrain on the tiny fixture to its last step (srun --mpi=pmix
    for the srun templates, Open MPI's mpirun inside the allocation for the
    other). Their CPU variants drop the `#SBATCH --gpus-*` lines and nothing
    else. multi-node and mpirun run one rank on each of the two nodes (each
    rank records its node and network namespace: two of each), and their
    weights equal the single-node job's (2 ranks on one node) bit for bit;
  * preemption through slurmctld: the warning signal a time limit sends
    (`scancel --signal=USR1 --batch`, what #SBATCH --signal=B:USR1@300
    does) makes the job checkpoint and `scontrol requeue` itself; the
    requeued job (Restarts=1) resumes from that checkpoint and ends with the
    same parameters, bit for bit, as a job never interrupted. Slurm holds a
    requeued job for about two minutes (its begin time), and the test waits
    for that: releasing it sooner raced slurmd and failed the job;
  * a node lost mid-job (every process of node2 killed: its slurmd, step
    daemon and rank): rank 0 ends the step after --collective-timeout naming
    rank 1 and its node, slurmctld marks node2 DOWN and requeues the job
    (--requeue); the node comes back (its slurmd restarted), and the requeued
    job resumes from the last checkpoint written before the loss and ends
    with the uninterrupted job's parameters, bit for bit. It runs while the
    preempted job is held, so the two holds overlap;
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

    def nodes(self):
        """[(name, namespace, address)] as slurm-cluster.sh made them."""
        return [tuple(line.split()) for line in open(os.path.join(self.dir, "nodes")) if line.strip()]

    def placed(self, tag):
        """A DOCMATCH_BIN that records each rank's node and network namespace in SCRATCH/TAG.where."""
        where = os.path.join(self.scratch, tag + ".where")
        wrapper = os.path.join(self.scratch, tag + "-docmatch")
        write(wrapper, f"""#!/usr/bin/env bash
echo "${{SLURMD_NODENAME:-?}} $(readlink /proc/self/ns/net)" >> {where}
exec {self.env["DOCMATCH_BIN"]} "$@"
""", 0o755)
        return wrapper, where

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


def templates(slurm, config, corpus):
    """Each template runs a short 2-rank pretrain to its last step; across
    two nodes where there are two, with the weights of the one-node job."""
    two = len(slurm.nodes()) == 2
    spread = ["--nodes=2", "--ntasks-per-node=1"] if two else ["--nodes=1", "--ntasks-per-node=2"]
    seconds, weights = {}, {}
    for template, placement in (("single-node.sbatch", ["--nodes=1", "--ntasks-per-node=2"]),
                                ("mpirun.sbatch", spread), ("multi-node.sbatch", spread)):
        tag = template.split(".")[0]
        run_dir = os.path.join(slurm.scratch, tag)
        log = run_dir + ".out"
        wrapper, where = slurm.placed(tag)
        started = time.time()
        slurm.command("sbatch", "--wait", *placement, "--cpus-per-task=1", "--output", log, "--export",
                      f"ALL,RUN_DIR={run_dir},DOCMATCH_BIN={wrapper}", slurm.cpu_variant(template), "pretrain",
                      config)
        seconds[template] = round(time.time() - started, 1)
        out = open(log).read()
        check("pretrain ended with status 0" in out and "[dist] 2 ranks" in out, f"{template}:\n{out[-2000:]}")
        check(os.path.basename(os.path.realpath(os.path.join(run_dir, "pretrain", "latest"))) == "step-6",
              f"{template}: the run did not reach step 6")
        ranks = [line.split() for line in open(where)]
        spread_out = placement == spread and two
        check(len(ranks) == 2 and len({r[0] for r in ranks}) == (2 if spread_out else 1) and
              len({r[1] for r in ranks}) == (2 if spread_out else 1), f"{template}: ranks ran on {ranks}")
        weights[template] = exported(slurm.env["DOCMATCH_BIN"], os.path.join(run_dir, "pretrain", "step-6"), corpus,
                                     os.path.join(slurm.scratch, "x-" + tag))
    one = weights["single-node.sbatch"]
    for template in ("mpirun.sbatch", "multi-node.sbatch"):
        check(weights[template].keys() == one.keys() and
              all((weights[template][k] == one[k]).all() for k in one),
              f"{template} on {'two nodes' if two else 'one node'} differs from single-node.sbatch")
    return {"template_seconds": seconds, "nodes": len(slurm.nodes()), "templates_equal_tensors": len(one)}


FLAGS = ["--steps", "40", "--log-every", "1"]


def steps_logged(metrics):
    return sum(1 for _ in open(metrics)) if os.path.exists(metrics) else 0


def finished(slurm, job, log, after, straight, corpus, tag):
    """Waits for a requeued job to end; it resumed from step `after` and its
    step-40 weights equal the uninterrupted job's."""
    done = slurm.wait(job, lambda f: f.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED"), 500)
    out = open(log).read()
    check(done["JobState"] == "COMPLETED" and done["Restarts"] == "1", f"job {job}: {done}\n{out[-2000:]}")
    resumed = re.search(r"resumed from \S+/step-(\d+) at step (\d+)", out)
    check(resumed and int(resumed.group(1)) == int(resumed.group(2)) == after,
          f"job {job} did not resume from step {after}:\n{out[-3000:]}")
    run_dir = os.path.dirname(re.search(r"resumed from (\S+)/step-", out).group(1))  # RUN_DIR/pretrain
    a = exported(slurm.env["DOCMATCH_BIN"], os.path.join(straight, "pretrain", "step-40"), corpus,
                 os.path.join(slurm.scratch, "x-straight-" + tag))
    b = exported(slurm.env["DOCMATCH_BIN"], os.path.join(run_dir, "pretrain", "step-40"), corpus,
                 os.path.join(slurm.scratch, "x-" + tag))
    check(a.keys() == b.keys() and len(a) > 0, "different tensors")
    for name in a:
        check((a[name] == b[name]).all(), f"{name} differs from the uninterrupted job's after {tag}")
    return len(a)


def preempt(slurm, config):
    """The uninterrupted job, then one signalled as a time limit does, which
    checkpoints and requeues itself. Returns what `finished` needs."""
    template = slurm.cpu_variant("single-node.sbatch")
    common = ["--ntasks-per-node=2", "--cpus-per-task=1"]
    straight = os.path.join(slurm.scratch, "straight")
    slurm.command("sbatch", "--wait", *common, "--output", straight + ".out", "--export", f"ALL,RUN_DIR={straight}",
                  template, "pretrain", config, *FLAGS, "--checkpoint-every", "100")
    check(os.path.basename(os.path.realpath(os.path.join(straight, "pretrain", "latest"))) == "step-40",
          "the uninterrupted job did not reach step 40:\n" + open(straight + ".out").read()[-2000:])

    interrupted = os.path.join(slurm.scratch, "preempted")
    log = interrupted + ".out"
    job = slurm.command("sbatch", "--parsable", *common, "--output", log, "--export", f"ALL,RUN_DIR={interrupted}",
                        template, "pretrain", config, *FLAGS, "--checkpoint-every", "100").strip().split(";")[0]
    metrics = os.path.join(interrupted, "pretrain", "metrics.jsonl")
    deadline = time.time() + 120
    while time.time() < deadline and steps_logged(metrics) < 3:
        time.sleep(0.05)
    slurm.command("scancel", "--signal=USR1", "--batch", job)  # the time limit's warning
    pending = slurm.wait(job, lambda f: f.get("Restarts") == "1" and f.get("JobState") == "PENDING", 120)
    out = open(log).read()
    stopped = re.search(r"saved \S+/step-(\d+)", out)
    check("requeueing job " + job in out and stopped, f"job {job} did not checkpoint and requeue:\n{out[-2000:]}")
    step = int(stopped.group(1))
    check(0 < step < 40, f"checkpointed at step {step}")
    # Slurm holds a requeued job until its begin time (about 2 minutes);
    # `scontrol update StartTime=now` raced slurmd here ("Job 5 already
    # killed, do not launch batch job") and failed the job, so the test waits.
    return {"job": job, "log": log, "step": step, "straight": straight, "held_reason": pending.get("Reason"),
            "held_at": time.time()}


def lose_node(slurm, config):
    """A 2-node job loses node2 (every process in it killed) at step 7+."""
    template = slurm.cpu_variant("multi-node.sbatch")
    lost = os.path.join(slurm.scratch, "lost")
    log = lost + ".out"
    timeout = 4  # rank 0 names the lost rank before slurmctld notices the node (SlurmdTimeout=15)
    job = slurm.command("sbatch", "--parsable", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=1",
                        "--output", log, "--export", f"ALL,RUN_DIR={lost}", template, "pretrain", config, *FLAGS,
                        "--checkpoint-every", "3", "--collective-timeout", str(timeout)).strip().split(";")[0]
    metrics = os.path.join(lost, "pretrain", "metrics.jsonl")
    slurm.wait(job, lambda f: f.get("JobState") != "PENDING", 300)
    deadline = time.time() + 120
    while time.time() < deadline and steps_logged(metrics) < 7:
        time.sleep(0.05)
    check(steps_logged(metrics) >= 7 and steps_logged(metrics) < 39, f"the 2-node job: {steps_logged(metrics)} steps")
    subprocess.run(["bash", CLUSTER, "node-down", slurm.dir, "node2"], check=True)
    killed = time.time()
    requeued = slurm.wait(job, lambda f: f.get("Restarts") == "1", 120)
    noticed = round(time.time() - killed, 1)
    # the checkpoint `latest` names (rank 0 may have finished one after the kill: it is whole too)
    last = int(os.path.basename(os.path.realpath(os.path.join(lost, "pretrain", "latest"))).split("-")[1])
    # slurmstepd on node1 writes its line once slurmctld has requeued the job.
    deadline = time.time() + 30
    while "DUE TO NODE FAILURE" not in open(log).read() and time.time() < deadline:
        time.sleep(0.2)
    out = open(log).read()
    check(re.search(r"Rank 1 \(host node2\) did not answer", out),
          f"the job does not name the lost rank and its node:\n{out[-3000:]}")
    check("DUE TO NODE FAILURE" in out and "node2" in slurm.command("sinfo", "-h", "-N", "-t", "down", "-o", "%N"),
          f"slurmctld did not mark node2 down and end the job for it:\n{out[-2000:]}")
    subprocess.run(["bash", CLUSTER, "node-up", slurm.dir, "node2"], check=True)  # the node rebooted
    return {"job": job, "log": log, "step": last, "reason": requeued.get("Reason"), "requeued_after_s": noticed}


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
        figures = templates(slurm, configs["pretrain"], corpus)
        preempted = preempt(slurm, configs["pretrain"])
        lost = lose_node(slurm, configs["pretrain"]) if len(slurm.nodes()) == 2 else None
        figures.update(preempted_at_step=preempted["step"], held_reason=preempted["held_reason"],
                       preempted_equal_tensors=finished(slurm, preempted["job"], preempted["log"], preempted["step"],
                                                        preempted["straight"], corpus, "preempted"),
                       requeued_job_waited_s=round(time.time() - preempted["held_at"], 1))
        if lost:
            figures.update(node_lost_checkpoint=lost["step"], node_lost_requeued_after_s=lost["requeued_after_s"],
                           node_lost_equal_tensors=finished(slurm, lost["job"], lost["log"], lost["step"],
                                                            preempted["straight"], corpus, "node-lost"))
        else:
            print("one Slurm node (no network namespaces here): the node-lost case needs two")
        figures["pipeline_test_accuracy"] = pipeline(slurm, configs)
        figures["seconds"] = round(time.time() - begun, 1)
        print(json.dumps(figures))
    finally:
        subprocess.run(["bash", CLUSTER, "down", slurm.dir])


if __name__ == "__main__":
    main()
