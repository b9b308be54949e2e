#!/usr/bin/env bash
# A real Slurm on this machine for the cluster tests: munged, slurmctld and
# slurmd (Debian 12's Slurm 22.05) with a minimal slurm.conf for one CPU node,
# every file under one folder, ports of their own, nothing in /etc touched.
#
#   tests/cluster/slurm-cluster.sh up DIR     start, wait until the node is idle,
#                                             print the environment to use it
#   tests/cluster/slurm-cluster.sh down DIR   stop the daemons (idempotent)
#
# After `up`, `source DIR/env.sh` points sbatch, squeue, scontrol and srun at
# it (SLURM_CONF). Needs root (the daemons run as root: SlurmUser=root) and the
# packages slurmctld, slurmd, slurm-client and munge (scripts/install-deps.sh
# installs them). Exit 77 (the tests' skip code) when they are missing or this
# is not root; a daemon that is installed but does not start is a failure.
set -euo pipefail

action=${1:?usage: slurm-cluster.sh up|down DIR}
dir=$(realpath -m "${2:?usage: slurm-cluster.sh up|down DIR}")
skip() {
  echo "slurm-cluster: $*; the real-Slurm cases are skipped" >&2
  exit 77
}

fail() {
  echo "slurm-cluster: $*" >&2
  stop
  exit 1
}

stop() {
  for daemon in slurmd slurmctld munged; do
    local pidfile="$dir/run/$daemon.pid" pid
    pid=$(cat "$pidfile" 2>/dev/null || true)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
  done
}

if [ "$action" = down ]; then
  stop
  exit 0
fi
[ "$action" = up ] || { echo "usage: slurm-cluster.sh up|down DIR" >&2; exit 2; }

for tool in munged mungekey slurmctld slurmd sbatch sinfo; do
  command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] || skip "no $tool (scripts/install-deps.sh installs it)"
done
[ "$(id -u)" = 0 ] || skip "the daemons run as root here, and this is uid $(id -u)"
export PATH="$PATH:/usr/sbin"

stop
rm -rf "$dir"
mkdir -p "$dir"/{etc,run,log,state,spool,munge}
chmod 700 "$dir/munge"
host=$(hostname -s)
cpus=$(nproc)
memory=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
# Ports of our own, so a site's Slurm (or a second test run) does not answer.
ctld_port=${DOCMATCH_SLURMCTLD_PORT:-16817}
slurmd_port=$((ctld_port + 1))

mungekey --create --keyfile "$dir/munge/munge.key" --force >/dev/null
munged --socket "$dir/munge/munge.socket" --key-file "$dir/munge/munge.key" \
  --pid-file "$dir/run/munged.pid" --log-file "$dir/log/munged.log" --seed-file "$dir/munge/seed" --force \
  || fail "munged does not start: $(tail -3 "$dir/log/munged.log" 2>/dev/null)"

cat > "$dir/etc/slurm.conf" <<EOF
# Written by tests/cluster/slurm-cluster.sh: one CPU node, no cgroups (a
# container usually cannot delegate them), root daemons, state under $dir.
ClusterName=docmatch-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=10
MinJobAge=600
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
cat > "$dir/env.sh" <<EOF
export SLURM_CONF=$dir/etc/slurm.conf
export PATH=\$PATH:/usr/sbin
EOF
export SLURM_CONF="$dir/etc/slurm.conf"

slurmctld -f "$SLURM_CONF" || fail "slurmctld does not start: $(tail -3 "$dir/log/slurmctld.log")"
slurmd -f "$SLURM_CONF" || fail "slurmd does not start: $(tail -3 "$dir/log/slurmd.log")"
for _ in $(seq 150); do
  state=$(sinfo -h -N -o %t 2>/dev/null | head -1 || true)
  [ "$state" = idle ] && break
  sleep 0.2
done
if [ "$state" != idle ]; then
  echo "slurm-cluster: the node is '${state:-unreachable}', not idle, after 30 s:" >&2
  tail -5 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2
  stop
  exit 1
fi
echo "slurm-cluster: node $host idle ($cpus CPUs); source $dir/env.sh"
