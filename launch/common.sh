# Shared by launch/*.sh (sourced, not run): parses the launch options, builds
# the mpirun command for one docmatch stage, prints it, and runs it unless
# --dry-run. See launch/README.md.

LAUNCH_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DOCMATCH_BIN="${DOCMATCH_BIN:-$LAUNCH_ROOT/build/src/docmatch}"

launch_usage() {
  cat <<USAGE
usage: $1 $2 [launch options] [-- docmatch flags...]

launch options:
  --np N             ranks in all (default: 1; with --device cuda, the GPUs of this host
                     that the job may use)
  --hostfile FILE    Open MPI hostfile (host slots=N lines) for several hosts
  --device D         auto (default: cuda when the job may use a GPU, else cpu), cpu, or
                     cuda: one rank per GPU
  --threads T        threads per rank (default: this host's cores / ranks per host)
  --oversubscribe    allow more ranks than slots (off unless asked)
  --nccl-host-per-rank
                     give each rank its own NCCL host identity (NCCL_HOSTID=docmatch-rank-R,
                     sockets on lo): ranks that share a GPU then run NCCL over its network
                     transport, the multi-node code path on one machine (--np 2 on one GPU)
  --local            laptop mode: 2 CPU ranks, oversubscribed, unbound, 1 thread each
  --dry-run          print the command, run nothing
  -h, --help         this text

Everything after -- goes to docmatch unchanged (flags override the config).
Environment: DOCMATCH_BIN (default build/src/docmatch), MPIRUN (default mpirun).
PATH, LD_LIBRARY_PATH, NCCL_* and GLOG_* reach every rank. CUDA_VISIBLE_DEVICES,
when set, names the GPUs the job may use on this host, which --np and auto count
(nvidia-smi lists every GPU of the host, whatever the job was given); with
--device cuda and no hostfile it reaches every rank.
USAGE
}

LAUNCH_NP="" LAUNCH_HOSTFILE="" LAUNCH_DEVICE=auto LAUNCH_THREADS="" LAUNCH_OVERSUBSCRIBE=0 LAUNCH_LOCAL=0
LAUNCH_DRY_RUN=0 LAUNCH_PASS=() LAUNCH_NCCL_HOSTS=0

# launch_option NAME VALUE...: consumes one launch option; returns the number
# of words taken (0 when NAME is not a launch option).
launch_option() {
  case "$1" in
    --np) LAUNCH_NP="$2"; return 2 ;;
    --hostfile) LAUNCH_HOSTFILE="$2"; return 2 ;;
    --device) LAUNCH_DEVICE="$2"; return 2 ;;
    --threads) LAUNCH_THREADS="$2"; return 2 ;;
    --oversubscribe) LAUNCH_OVERSUBSCRIBE=1; return 1 ;;
    --nccl-host-per-rank) LAUNCH_NCCL_HOSTS=1; return 1 ;;
    --local) LAUNCH_LOCAL=1; return 1 ;;
    --dry-run) LAUNCH_DRY_RUN=1; return 1 ;;
  esac
  return 0
}

launch_fail() { echo "launch: $*" >&2; exit 2; }

# The GPUs of this host that the job may use: CUDA_VISIBLE_DEVICES when set
# (a scheduler's or the user's share of the node), read as CUDA reads it: its
# entries up to the first that is not an index of a GPU nvidia-smi lists (any
# index where there is no nvidia-smi) or a GPU-/MIG- UUID, so "", "-1" and
# "NoDevFiles" give none; else every GPU nvidia-smi -L lists.
launch_gpus() {
  local listed=-1  # unknown without nvidia-smi (a container may lack it)
  if command -v nvidia-smi > /dev/null; then listed=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU') || listed=0; fi
  if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
    local entries entry count=0
    IFS=, read -ra entries <<< "$CUDA_VISIBLE_DEVICES"
    for entry in "${entries[@]}"; do
      entry="${entry// /}"
      if [[ "$entry" =~ ^[0-9]+$ ]]; then
        [ "$listed" -lt 0 ] || [ "$entry" -lt "$listed" ] || break
      elif ! [[ "$entry" =~ ^(GPU-[0-9a-fA-F-]+|MIG-[0-9a-zA-Z/-]+)$ ]]; then
        break
      fi
      count=$((count + 1))
    done
    echo "$count"
    return
  fi
  echo $((listed < 0 ? 0 : listed))
}

# Resolves defaults once every option is read.
launch_finish_options() {
  case "$LAUNCH_DEVICE" in cpu | cuda | auto) ;; *) launch_fail "--device is auto, cpu or cuda, not '$LAUNCH_DEVICE'" ;; esac
  # This host's GPUs, for auto and for --np's default.
  local gpus
  gpus=$(launch_gpus)
  if [ "$LAUNCH_DEVICE" = auto ]; then
    LAUNCH_DEVICE=cpu
    [ "$gpus" -eq 0 ] || LAUNCH_DEVICE=cuda
  fi
  if [ "$LAUNCH_LOCAL" = 1 ]; then
    LAUNCH_NP="${LAUNCH_NP:-2}" LAUNCH_OVERSUBSCRIBE=1 LAUNCH_THREADS="${LAUNCH_THREADS:-1}" LAUNCH_DEVICE=cpu
  fi
  if [ -z "$LAUNCH_NP" ]; then
    LAUNCH_NP=1
    [ "$LAUNCH_DEVICE" != cuda ] || [ "$gpus" -eq 0 ] || LAUNCH_NP=$gpus
  fi
  [[ "$LAUNCH_NP" =~ ^[1-9][0-9]*$ ]] || launch_fail "--np must be a positive number, not '$LAUNCH_NP'"
  [ -z "$LAUNCH_HOSTFILE" ] || [ -f "$LAUNCH_HOSTFILE" ] || launch_fail "hostfile $LAUNCH_HOSTFILE does not exist"
  # Its sockets stay on lo: one machine only (across hosts NCCL finds them by itself).
  [ "$LAUNCH_NCCL_HOSTS" = 0 ] || [ -z "$LAUNCH_HOSTFILE" ] ||
    launch_fail "--nccl-host-per-rank runs ranks of one machine as NCCL's hosts; with --hostfile leave it out"
  # Ranks per host: all of them on one host; with a hostfile, spread evenly.
  local hosts=1
  [ -z "$LAUNCH_HOSTFILE" ] || hosts=$(grep -cv '^\s*\(#\|$\)' "$LAUNCH_HOSTFILE")
  LAUNCH_PER_HOST=$(((LAUNCH_NP + hosts - 1) / hosts))
  if [ -z "$LAUNCH_THREADS" ]; then
    local cores
    cores=$(nproc)
    LAUNCH_THREADS=$((cores / LAUNCH_PER_HOST))
    [ "$LAUNCH_THREADS" -ge 1 ] || LAUNCH_THREADS=1
  fi
}

# launch_command STAGE CONFIG: fills LAUNCH_CMD with the mpirun command line.
launch_command() {
  local stage="$1" config="$2"
  LAUNCH_CMD=("${MPIRUN:-mpirun}" -np "$LAUNCH_NP")
  [ -z "$LAUNCH_HOSTFILE" ] || LAUNCH_CMD+=(--hostfile "$LAUNCH_HOSTFILE")
  [ "$LAUNCH_OVERSUBSCRIBE" = 0 ] || LAUNCH_CMD+=(--oversubscribe)
  [ "$(id -u)" != 0 ] || LAUNCH_CMD+=(--allow-run-as-root)
  if [ "$LAUNCH_LOCAL" = 1 ]; then
    LAUNCH_CMD+=(--bind-to none)  # a laptop: let the OS place the ranks
  elif [ "$LAUNCH_DEVICE" = cuda ]; then
    # One rank per GPU, each with its share of the host's cores next to it;
    # docmatch picks GPU = local rank (OMPI_COMM_WORLD_LOCAL_RANK).
    LAUNCH_CMD+=(--map-by "ppr:$LAUNCH_PER_HOST:node:PE=$LAUNCH_THREADS" --bind-to core)
  else
    LAUNCH_CMD+=(--map-by "slot:PE=$LAUNCH_THREADS" --bind-to core)
  fi
  LAUNCH_CMD+=(-x "OMP_NUM_THREADS=$LAUNCH_THREADS" -x PATH -x LD_LIBRARY_PATH)
  # docmatch sets NCCL_HOSTID per rank from its own rank (dist/communicator.h).
  [ "$LAUNCH_NCCL_HOSTS" = 0 ] || LAUNCH_CMD+=(-x DOCMATCH_NCCL_HOST_PER_RANK=1)
  if [ "$LAUNCH_DEVICE" = cuda ]; then
    LAUNCH_CMD+=(-x "NCCL_DEBUG=${NCCL_DEBUG:-WARN}")
    # On one host, this host's share reaches every rank. With a hostfile each
    # host keeps its own (a scheduler gives each node its own GPUs).
    [ -z "${CUDA_VISIBLE_DEVICES+set}" ] || [ -n "$LAUNCH_HOSTFILE" ] || LAUNCH_CMD+=(-x CUDA_VISIBLE_DEVICES)
  fi
  local name
  for name in $(compgen -e | grep -E '^(NCCL_|GLOG_)' | grep -v '^NCCL_DEBUG$'); do LAUNCH_CMD+=(-x "$name"); done
  LAUNCH_CMD+=("$DOCMATCH_BIN" "$stage")
  [ -z "$config" ] || LAUNCH_CMD+=(--config "$config")
  LAUNCH_CMD+=(--device "$LAUNCH_DEVICE" "${LAUNCH_PASS[@]}")
}

# launch_run STAGE CONFIG: prints the command (shell-quoted) and runs it.
launch_run() {
  launch_command "$1" "$2"
  echo "[launch] $(printf '%q ' "${LAUNCH_CMD[@]}")" | sed 's/ $//'
  [ "$LAUNCH_DRY_RUN" = 1 ] && return 0
  [ -x "$DOCMATCH_BIN" ] || launch_fail "$DOCMATCH_BIN is not built (scripts/build.sh, or set DOCMATCH_BIN)"
  # mpirun forwards SIGUSR1 to every rank, but answers SIGTERM by tearing the
  # job down and exiting 1. So TERM, INT (Ctrl-C) and USR1 sent to this script
  # reach mpirun as USR1: every rank finishes its step, checkpoints and exits
  # 75, and so does this script. (mpirun runs in the background, where a
  # script's Ctrl-C does not reach it directly.)
  "${LAUNCH_CMD[@]}" &
  local pid=$! status=0 last
  trap 'kill -USR1 "$pid" 2>/dev/null' TERM INT USR1
  while kill -0 "$pid" 2>/dev/null; do
    status=0
    wait "$pid" || status=$?  # 128+N when a trapped signal interrupts the wait
  done
  last=0
  wait "$pid" 2>/dev/null || last=$?
  [ "$last" = 127 ] || status=$last
  trap - TERM INT USR1
  return "$status"
}

# launch_stage_main STAGE "$@": the whole of pretrain.sh / finetune.sh / eval.sh.
launch_stage_main() {
  local stage="$1" config=""
  shift
  while [ $# -gt 0 ]; do
    case "$1" in
      -h | --help) launch_usage "launch/$stage.sh" "--config FILE"; exit 0 ;;
      --config) config="$2"; shift 2 ;;
      --) shift; LAUNCH_PASS=("$@"); break ;;
      *)
        launch_option "$@" && launch_fail "unknown option '$1' (launch/$stage.sh --help)"
        shift $?
        ;;
    esac
  done
  [ -n "$config" ] || launch_fail "--config FILE is required (e.g. configs/$stage-smith-tiny.yaml)"
  [ -f "$config" ] || launch_fail "config $config does not exist"
  launch_finish_options
  launch_run "$stage" "$config"
}
