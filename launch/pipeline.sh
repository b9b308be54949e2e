#!/usr/bin/env bash
# Pre-training -> fine-tuning -> evaluation under mpirun, each stage from its
# own config (the fine-tuning config's `init` names the pre-training run):
#   launch/pipeline.sh --pretrain-config configs/pretrain-smith-tiny.yaml \
#       --finetune-config configs/finetune-smith-tiny.yaml \
#       --eval-config configs/eval-smith-tiny.yaml --local
# Launch options as for launch/pretrain.sh. Flags after -- go to every stage
# (--device, --log-dir, --no-progress: what all three accept); a stage's own
# flags go in --pretrain-flags, --finetune-flags or --eval-flags, one quoted
# string each, e.g. --pretrain-flags "--steps 5" (eval has no --steps).
# A stage that fails (or is interrupted: exit 75) ends the pipeline with its
# status; running the same command again resumes the unfinished stage.
set -euo pipefail
source "$(dirname "$0")/common.sh"
pretrain="" finetune="" evaluate="" pretrain_flags="" finetune_flags="" eval_flags=""
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help)
      launch_usage launch/pipeline.sh "--pretrain-config F --finetune-config F --eval-config F \\
    [--pretrain-flags 'FLAGS'] [--finetune-flags 'FLAGS'] [--eval-flags 'FLAGS']"
      exit 0
      ;;
    --pretrain-config) pretrain="$2"; shift 2 ;;
    --finetune-config) finetune="$2"; shift 2 ;;
    --eval-config) evaluate="$2"; shift 2 ;;
    --pretrain-flags) pretrain_flags="$2"; shift 2 ;;
    --finetune-flags) finetune_flags="$2"; shift 2 ;;
    --eval-flags) eval_flags="$2"; shift 2 ;;
    --) shift; LAUNCH_PASS=("$@"); break ;;
    *)
      launch_option "$@" && launch_fail "unknown option '$1' (launch/pipeline.sh --help)"
      shift $?
      ;;
  esac
done
for config in "$pretrain" "$finetune" "$evaluate"; do
  [ -n "$config" ] || launch_fail "--pretrain-config, --finetune-config and --eval-config are all required"
  [ -f "$config" ] || launch_fail "config $config does not exist"
done
launch_finish_options
common=("${LAUNCH_PASS[@]}")
for stage in pretrain finetune eval; do
  case "$stage" in
    pretrain) config="$pretrain" flags="$pretrain_flags" ;;
    finetune) config="$finetune" flags="$finetune_flags" ;;
    eval) config="$evaluate" flags="$eval_flags" ;;
  esac
  read -ra own <<< "$flags"
  LAUNCH_PASS=("${common[@]}" "${own[@]}")
  echo "[pipeline] $stage"
  launch_run "$stage" "$config"
done
echo "[pipeline] done"
