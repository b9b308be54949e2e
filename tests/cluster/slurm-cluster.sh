#!/usr/bin/env bash
# A real Slurm on this machine for the cluster tests: munged, slurmctld and
# one slurmd per node (Debian 12's Slurm 22.05) with a minimal slurm.conf,
# every file under one folder, ports of their own, nothing in /etc touched.
# Two CPU nodes, each a network namespace with its own address on a bridge
# made here (10.78.P.11, .12; P from the port) and its own /tmp: their ranks
# talk over TCP as on two machines. Where namespaces cannot be made, one node
# on this host, and `up` says why.
#
#   tests/cluster/slurm-cluster.sh up DIR         start, wait until every node is idle
#   tests/cluster/slurm-cluster.sh down DIR       stop the daemons, remove the namespaces (idempotent)
#   tests/cluster/slurm-cluster.sh node-down DIR NODE
#                                                 a node lost: kill every process in it (slurmd, steps, ranks)
#   tests/cluster/slurm-cluster.sh node-up DIR NODE
#                                                 the node back: its slurmd started again
#
# After `up`, `source DIR/env.sh` points sbatch, squeue, scontrol and srun at
# it (SLURM_CONF); DIR/nodes lists the nodes. Needs root (the daemons run as
# root: SlurmUser=root) and the packages slurmctld, slurmd, slurm-client and
# munge (scripts/install-deps.sh installs them). Exit 77 (the tests' skip
# code) when they are missing or this is not root; a daemon that is installed
# but does not start is a failure.
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

# The nodes: "NAME NAMESPACE ADDRESS" per line (NAMESPACE "-": this host).
nodes() { cat "$dir/nodes" 2>/dev/null || true; }

kill_pidfile() {
  local pid
  pid=$(cat "$1" 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$1"
}

# Every process of a namespace node (its slurmd, slurmstepd and ranks).
kill_node() {
  local name=$1 namespace=$2
  if [ "$namespace" != - ]; then
    ip netns pids "$namespace" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
  fi
  kill_pidfile "$dir/run/slurmd-$name.pid"
}

start_node() {
  local name=$1 namespace=$2
  if [ "$namespace" = - ]; then
    slurmd -f "$SLURM_CONF" -N "$name"
  else
    # Its own network (the address) and its own /tmp (Slurm's PMIx plugin and
    # Open MPI keep per-job folders there, named alike on every node).
    nsenter --net="/run/netns/$namespace" unshare --mount --propagation private \
      bash -c "mount --bind '$dir/nodes.d/$name/tmp' /tmp && exec slurmd -f '$SLURM_CONF' -N '$name'"
  fi || fail "slurmd of $name does not start: $(tail -3 "$dir/log/slurmd-$name.log" 2>/dev/null)"
}

stop() {
  local name namespace address
  while read -r name namespace address; do kill_node "$name" "$namespace"; done < <(nodes)
  kill_pidfile "$dir/run/slurmctld.pid"
  kill_pidfile "$dir/run/munged.pid"
  while read -r name namespace address; do
    [ "$namespace" = - ] || ip netns del "$namespace" 2>/dev/null || true
  done < <(nodes)
  if [ -f "$dir/bridge" ]; then ip link del "$(cat "$dir/bridge")" 2>/dev/null || true; fi
  rm -f "$dir/nodes" "$dir/bridge"
}

case "$action" in
  down) stop; exit 0 ;;
  node-down | node-up)
    node=${3:?usage: slurm-cluster.sh $action DIR NODE}
    line=$(nodes | awk -v n="$node" '$1 == n')
    [ -n "$line" ] || { echo "slurm-cluster: no node '$node' in $dir/nodes" >&2; exit 2; }
    export SLURM_CONF="$dir/etc/slurm.conf" PATH="$PATH:/usr/sbin"
    # shellcheck disable=SC2086  # NAME NAMESPACE ADDRESS
    if [ "$action" = node-down ]; then
      kill_node $line
    else
      # The node's /tmp, and what its killed step daemons left in the spool:
      # Slurm 22.05's PMIx plugin neither replaces nor removes them, and the
      # requeued job (same job and step id) then failed its step on this node
      # ("Cannot bind() UNIX socket .../stepd.slurm.pmix.6.0: Address already
      # in use", then "Cannot create directory .../pmix.6.0/: File exists").
      find "$dir/spool/$node" -mindepth 1 -maxdepth 1 \( -name 'pmix.*' -o -name 'stepd.slurm.pmix.*' \) \
        -exec rm -rf {} + 2>/dev/null || true
      find "$dir/nodes.d/$node/tmp" -mindepth 1 -delete 2>/dev/null || true
      start_node $line
    fi
    exit 0 ;;
  up) ;;
  *) echo "usage: slurm-cluster.sh up|down DIR, node-down|node-up DIR NODE" >&2; exit 2 ;;
esac

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

# Two namespace nodes on a bridge, or one node on this host.
bridge="dmsb$ctld_port" net="10.78.$((ctld_port % 250))"
for stale in $(ip netns list 2>/dev/null | awk -v p="dms${ctld_port}n" 'index($1, p) == 1 {print $1}'); do
  ip netns pids "$stale" | xargs -r kill -9 2>/dev/null || true
  ip netns del "$stale" 2>/dev/null || true
done
ip link del "$bridge" 2>/dev/null || true
why_one=""
root=$(realpath "$(dirname "$0")/../..")
if [[ "$dir/" == /tmp/* || "$root/" == /tmp/* ]]; then
  why_one="$dir or the repository is under /tmp, which each namespace node replaces with its own"
elif ! command -v nsenter >/dev/null || ! command -v unshare >/dev/null; then
  why_one="no nsenter/unshare (util-linux)"
elif ! { ip link add "$bridge" type bridge && echo "$bridge" > "$dir/bridge" &&
         ip addr add "$net.1/24" dev "$bridge" && ip link set "$bridge" up; } 2> "$dir/log/netns.err"; then
  why_one="network namespaces cannot be made here ($(head -1 "$dir/log/netns.err"))"
else
  for i in 1 2; do
    namespace="dms${ctld_port}n$i"
    if ! { ip netns add "$namespace" &&
           echo "node$i $namespace $net.1$i" >> "$dir/nodes" &&
           ip link add "${bridge}v$i" type veth peer name eth0 netns "$namespace" &&
           ip link set "${bridge}v$i" master "$bridge" up &&
           ip netns exec "$namespace" ip addr add "$net.1$i/24" dev eth0 &&
           ip netns exec "$namespace" ip link set eth0 up &&
           ip netns exec "$namespace" ip link set lo up; } 2> "$dir/log/netns.err"; then
      why_one="network namespaces cannot be made here ($(head -1 "$dir/log/netns.err"))"
      break
    fi
    mkdir -p "$dir/nodes.d/node$i/tmp" && chmod 1777 "$dir/nodes.d/node$i/tmp"
  done
fi
if [ -n "$why_one" ]; then
  stop  # whatever part of the namespaces was made
  echo "$host - 127.0.0.1" > "$dir/nodes"
  control=127.0.0.1
  echo "slurm-cluster: one node on this host: $why_one" >&2
else
  control="$net.1"
fi

mungekey --create --keyfile "$dir/munge/munge.key" --force >/dev/null
munged --socket "$dir/munge/munge.socket" --key-file "$dir/munge/munge.key" \
  --pid-file "$dir/run/munged.pid" --log-file "$dir/log/munged.log" --seed-file "$dir/munge/seed" --force \
  || fail "munged does not start: $(tail -3 "$dir/log/munged.log" 2>/dev/null)"

names=$(nodes | awk '{print $1}' | paste -sd, -)
{
  cat <<CONF
# Written by tests/cluster/slurm-cluster.sh: CPU nodes ($names), no cgroups (a
# container usually cannot delegate them), root daemons, state under $dir.
ClusterName=docmatch-test
SlurmctldHost=$host($control)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# A lost node: DOWN after SlurmdTimeout without an answer, its jobs requeued
# (--requeue) or ended; back in service as soon as its slurmd registers.
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=15
InactiveLimit=0
KillWait=10
MinJobAge=600
CONF
  while read -r name namespace address; do
    echo "NodeName=$name NodeAddr=$address CPUs=$cpus RealMemory=$memory State=UNKNOWN"
  done < <(nodes)
  echo "PartitionName=debug Nodes=$names Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
} > "$dir/etc/slurm.conf"
# shellcheck disable=SC2016  # $PATH expands where env.sh is sourced
printf 'export SLURM_CONF=%s\nexport PATH=$PATH:/usr/sbin\n' "$dir/etc/slurm.conf" > "$dir/env.sh"
export SLURM_CONF="$dir/etc/slurm.conf"

slurmctld -f "$SLURM_CONF" || fail "slurmctld does not start: $(tail -3 "$dir/log/slurmctld.log")"
while read -r name namespace address; do start_node "$name" "$namespace"; done < <(nodes)
count=$(nodes | wc -l)
for _ in $(seq 150); do
  states=$(sinfo -h -N -o %t 2>/dev/null | sort | uniq -c | awk '{print $1, $2}' || true)
  [ "$states" = "$count idle" ] && break
  sleep 0.2
done
if [ "$states" != "$count idle" ]; then
  echo "slurm-cluster: nodes not all idle after 30 s: ${states:-unreachable}" >&2
  tail -5 "$dir"/log/slurm*.log >&2
  stop
  exit 1
fi
echo "slurm-cluster: $count node(s) idle ($names, $cpus CPUs each); source $dir/env.sh"
