#!/usr/bin/env python3
"""launch/ across "hosts": two network namespaces on this machine, each with
its own address on a bridge made by the test, reached by Open MPI's rsh
launcher through an agent that enters the namespace (plm_rsh_agent), the
ranks talking over TCP only (btl tcp,self) as on separate machines:

  * launch/pretrain.sh --hostfile (2 hosts x 1 rank) trains, one rank in
    each namespace (the agent's log names both addresses), and its weights
    equal a 2-rank run on one host bit for bit; the same with 3 hosts x 1
    rank (the agent's log names all three) against 3 ranks on one host;
  * a node lost mid-run (every process of one namespace killed): the job
    ends promptly, Open MPI naming the lost host (its ranks are stopped
    before docmatch could say more), the last checkpoint is whole, and the
    run resumes from it on one rank.

Exits 77 (skipped) where namespaces cannot be made (not root, no `ip`).
Everything made is removed afterwards, also when a case fails.

usage: netns_check.py DOCMATCH FIXTURE SCRATCH
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from real_slurm_check import exported  # noqa: E402
from slurm_check import ROOT, TINY, check, write  # noqa: E402


def ip(*args, namespace=None, check_rc=True):
    command = (["ip", "netns", "exec", namespace] if namespace else []) + ["ip", *args]
    result = subprocess.run(command, capture_output=True, text=True)
    if check_rc and result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {result.stderr.strip()}")
    return result


class Hosts:
    """A bridge and one namespace per host, with addresses 10.77.N.11, .12, ..."""

    def __init__(self, count):
        tag = os.getpid()  # names of at most 15 characters (Linux's limit for links)
        self.bridge, self.net = f"dmb{tag}", f"10.77.{os.getpid() % 250}"
        self.names = [f"dm{tag}h{i}" for i in range(count)]
        self.addresses = [f"{self.net}.{11 + i}" for i in range(count)]

    @staticmethod
    def remove_stale():
        """Namespaces and bridges of an earlier run of this test that was killed."""
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        for tag in set(re.findall(r"^dm(\d+)h\d+", listed, re.M)):
            if not os.path.exists(f"/proc/{tag}") or int(tag) == os.getpid():
                for name in re.findall(rf"^(dm{tag}h\d+)", listed, re.M):
                    for pid in subprocess.run(["ip", "netns", "pids", name], capture_output=True,
                                              text=True).stdout.split():
                        subprocess.run(["kill", "-9", pid], capture_output=True)
                    subprocess.run(["ip", "netns", "del", name], capture_output=True)
                ip("link", "del", f"dmb{tag}", check_rc=False)

    def up(self):
        self.remove_stale()
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.net}.1/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        for i, (name, address) in enumerate(zip(self.names, self.addresses)):
            subprocess.run(["ip", "netns", "add", name], check=True)
            ip("link", "add", f"{self.bridge}v{i}", "type", "veth", "peer", "name", "eth0", "netns", name)
            ip("link", "set", f"{self.bridge}v{i}", "master", self.bridge, "up")
            ip("addr", "add", f"{address}/24", "dev", "eth0", namespace=name)
            ip("link", "set", "eth0", "up", namespace=name)
            ip("link", "set", "lo", "up", namespace=name)

    def kill(self, name):
        pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), 9)
            except ProcessLookupError:
                pass
        return len(pids)

    def down(self):
        for name in self.names:
            self.kill(name)
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        ip("link", "del", self.bridge, check_rc=False)


def launch(hosts, scratch, docmatch, config, run_dir, extra, hostfile=True, np=2):
    env = dict(os.environ, DOCMATCH_BIN=docmatch)
    args = ["launch/pretrain.sh", "--config", config, "--np", str(np), "--threads", "1"]
    if hostfile:
        # Open MPI reads MCA parameters from the environment: the agent, and
        # TCP on the bridge's subnet only (no shared memory between "hosts").
        env.update(OMPI_MCA_plm_rsh_agent=os.path.join(scratch, "netns-rsh"),
                   OMPI_MCA_btl="tcp,self", OMPI_MCA_btl_tcp_if_include=f"{hosts.net}.0/24",
                   OMPI_MCA_oob_tcp_if_include=f"{hosts.net}.0/24", OMPI_MCA_routed="direct",
                   # the daemons share one machine: no shared-memory copy of the topology between them
                   OMPI_MCA_rtc_hwloc_vmhole="none")
        args += ["--hostfile", os.path.join(scratch, f"hostfile-{np}")]
    else:
        args += ["--local"]
    return subprocess.Popen(args + ["--", "--run", run_dir, "--no-progress", *extra], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def across_equals_one_host(hosts, scratch, docmatch, config, corpus, agent_log, n, figures):
    """n hosts x 1 rank trains to the weights of n ranks on one host, bit for
    bit; the agent is asked for each of the n hosts."""
    if os.path.exists(agent_log):
        os.remove(agent_log)
    started = time.time()
    across = launch(hosts, scratch, docmatch, config, os.path.join(scratch, f"across-{n}"),
                    ["--steps", "8", "--checkpoint-every", "4"], np=n)
    out, _ = across.communicate(timeout=300)
    figures[f"hosts_{n}_seconds"] = round(time.time() - started, 1)
    check(across.returncode == 0 and f"[dist] {n} ranks" in out, f"{n} hosts: exit {across.returncode}\n{out[-3000:]}")
    reached = sorted(set(open(agent_log).read().split()))
    # mpirun runs outside every namespace: every host is remote.
    check(reached == sorted(hosts.addresses[:n]), f"the agent was not asked for each of {n} hosts: {reached}")
    single = launch(hosts, scratch, docmatch, config, os.path.join(scratch, f"single-{n}"),
                    ["--steps", "8", "--checkpoint-every", "4"], hostfile=False, np=n)
    out, _ = single.communicate(timeout=300)
    check(single.returncode == 0, f"1 host, {n} ranks: exit {single.returncode}\n{out[-3000:]}")
    a = exported(docmatch, os.path.join(scratch, f"across-{n}", "step-8"), corpus, os.path.join(scratch, f"x-across-{n}"))
    b = exported(docmatch, os.path.join(scratch, f"single-{n}", "step-8"), corpus, os.path.join(scratch, f"x-single-{n}"))
    check(a.keys() == b.keys() and len(a) > 0, "different tensors")
    for name in a:
        check((a[name] == b[name]).all(), f"{name}: {n} hosts differ from 1 host")
    figures[f"hosts_{n}_tensors_equal"] = len(a)


def main():
    docmatch, fixture, scratch = sys.argv[1:4]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    if os.getuid() != 0 or shutil.which("ip") is None:
        print("netns cases skipped: making network namespaces needs root and iproute2")
        sys.exit(77)
    hosts = Hosts(3)
    try:
        try:
            hosts.up()
        except (RuntimeError, subprocess.CalledProcessError) as e:
            print(f"netns cases skipped: {e}")
            sys.exit(77)
        # The agent: `netns-rsh [ssh options] HOST COMMAND...` runs COMMAND in HOST's namespace.
        mapping = " ".join(f"[{a}]={n}" for a, n in zip(hosts.addresses, hosts.names))
        agent_log = os.path.join(scratch, "agent.log")
        write(os.path.join(scratch, "netns-rsh"), f"""#!/usr/bin/env bash
declare -A namespace=({mapping})
while [[ "$1" == -* ]]; do shift; done
host="$1"; shift
echo "$host" >> {agent_log}
exec ip netns exec "${{namespace[$host]}}" /bin/bash -c "$*"
""", 0o755)
        # hostfile-N: the first N hosts, one slot each.
        for n in (2, 3):
            write(os.path.join(scratch, f"hostfile-{n}"), "".join(f"{a} slots=1\n" for a in hosts.addresses[:n]))
        corpus = os.path.join(fixture, "corpus")
        write(os.path.join(scratch, "tiny.yaml"), TINY)
        config = os.path.join(scratch, "pretrain.yaml")
        write(config, f"pretrain:\n  corpus: {corpus}\n  model-config: {scratch}/tiny.yaml\n  batch-size: 4\n"
              "  lr: 0.001\n  warmup-steps: 1\n  decay-steps: 40\n  log-every: 1\n")
        figures = {}

        # 2, then 3 hosts x 1 rank against as many ranks on one host.
        for n in (2, 3):
            across_equals_one_host(hosts, scratch, docmatch, config, corpus, agent_log, n, figures)

        # A node lost: every process of the second host killed mid-run.
        lost = os.path.join(scratch, "lost")
        job = launch(hosts, scratch, docmatch, config, lost, ["--steps", "100000", "--checkpoint-every", "3"])
        metrics = os.path.join(lost, "metrics.jsonl")
        deadline = time.time() + 180
        while time.time() < deadline and job.poll() is None and not (
                os.path.exists(metrics) and sum(1 for _ in open(metrics)) >= 7):  # step-6 is written
            time.sleep(0.05)
        if job.poll() is not None:  # (communicate only then: it waits for the end)
            check(False, "the 2-host run ended early:\n" + job.communicate()[0][-2000:])
        killed = hosts.kill(hosts.names[1])
        stopped = time.time()
        try:
            out, _ = job.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            job.kill()
            check(False, "the job did not end within 120 s of losing a host")
        figures["ended_after_host_lost_s"] = round(time.time() - stopped, 1)
        check(job.returncode != 0, "the job that lost a host exited 0")
        # Open MPI ends the job when a host's daemon goes, naming the host
        # ("ORTE has lost communication with a remote daemon ... on node H");
        # the ranks are stopped before any of them could say more.
        check(re.search(rf"lost communication.*on node {re.escape(hosts.addresses[1])}", out, re.S) is not None,
              f"the lost host is not named:\n{out[-3000:]}")
        steps = sorted(int(d.split("-")[1]) for d in os.listdir(lost) if re.fullmatch(r"step-\d+", d))
        check(steps and steps[-1] >= 6, f"checkpoints after losing a host: {os.listdir(lost)}")
        last = steps[-1]
        # Resume on fewer ranks: one process on this host, from the last checkpoint.
        resumed = subprocess.run([docmatch, "pretrain", "--config", config, "--run", lost, "--steps", str(last + 2),
                                  "--checkpoint-every", "3", "--no-progress"], capture_output=True, text=True)
        check(resumed.returncode == 0 and f"resumed from {lost}/step-{last} at step {last}" in resumed.stdout +
              resumed.stderr, f"resume on one rank after a lost host:\n{(resumed.stdout + resumed.stderr)[-2000:]}")
        figures.update(killed_processes=killed, last_checkpoint=last)
        print(json.dumps(figures))
    finally:
        hosts.down()


if __name__ == "__main__":
    main()
