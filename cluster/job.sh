# The body every sbatch template in cluster/ shares (sourced after their
# #SBATCH lines). Usage inside a template:
#   LAUNCHER=(srun --mpi=pmix ...)   # or (mpirun ...)
#   source "$DOCMATCH_ROOT/cluster/job.sh" STAGE CONFIG [docmatch flags...]
#
# It runs `docmatch STAGE --config CONFIG` on every task with the run's paths
# under $RUN_DIR (default runs/<job name>):
#   pretrain, finetune   checkpoints in $RUN_DIR/<stage>/ (resumed from latest)
#   eval, embed          results in $RUN_DIR/<stage>/
#   every stage          per-rank logs in $RUN_DIR/logs/<stage>/
# Preemption and time limits: Slurm's warning signal (#SBATCH
# --signal=B:USR1@300) or a SIGTERM reaches this script, which passes SIGUSR1
# on to the ranks; they finish the step, write a checkpoint and exit 75. The
# job then requeues itself (scontrol requeue) and the requeued job resumes
# from latest. Any other failure ends the job with the stage's exit status.

set -euo pipefail
stage="$1" config="$2"
shift 2
RUN_DIR="${RUN_DIR:-runs/${SLURM_JOB_NAME:-docmatch}}"
DOCMATCH_BIN="${DOCMATCH_BIN:-$DOCMATCH_ROOT/build/src/docmatch}"
mkdir -p "$RUN_DIR/logs/$stage"
case "$stage" in
  pretrain | finetune) paths=(--run "$RUN_DIR/$stage") ;;
  eval) paths=(--output "$RUN_DIR/eval") ;;
  embed) mkdir -p "$RUN_DIR/embed" && paths=(--output "$RUN_DIR/embed/vectors.h5" --overwrite) ;;  # a requeued job redoes it
  *) echo "[slurm] unknown stage '$stage' (pretrain, finetune, eval, embed)" >&2; exit 2 ;;
esac
export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK:-1}"
export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"

command=("${LAUNCHER[@]}" "$DOCMATCH_BIN" "$stage" --config "$config" "${paths[@]}"
         --log-dir "$RUN_DIR/logs/$stage" --no-progress "$@")
echo "[slurm] $(date '+%F %T') job ${SLURM_JOB_ID:-?} (restart ${SLURM_RESTART_COUNT:-0}), ${SLURM_NTASKS:-?} tasks on" \
     "${SLURM_JOB_NUM_NODES:-?} node(s): $stage"
echo "[slurm] $(printf '%q ' "${command[@]}")"
"${command[@]}" &
child=$!
forward() {
  echo "[slurm] $(date '+%T') $1: asking the ranks to checkpoint and stop"
  kill -USR1 "$child" 2> /dev/null || true
}
trap 'forward USR1' USR1
trap 'forward TERM' TERM

# `wait` returns early (status > 128) when a trapped signal arrives: wait
# again while the launcher lives.
status=0
while true; do
  wait "$child" && status=0 || status=$?
  if [ "$status" -gt 128 ] && kill -0 "$child" 2> /dev/null; then continue; fi
  break
done
trap - USR1 TERM

if [ "$status" -eq 75 ]; then
  echo "[slurm] $(date '+%T') checkpoint written; requeueing job $SLURM_JOB_ID to resume from $RUN_DIR/$stage/latest"
  scontrol requeue "$SLURM_JOB_ID"
  exit 0
fi
echo "[slurm] $(date '+%T') $stage ended with status $status"
exit "$status"
