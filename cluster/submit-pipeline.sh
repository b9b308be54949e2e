#!/usr/bin/env bash
# Submits pre-training -> fine-tuning -> evaluation as three jobs, each
# starting when the one before ended well (--dependency=afterok), all under one
# run folder runs/<name>/: finetune starts from runs/<name>/pretrain/latest and
# eval reads runs/<name>/finetune/best.
#   cluster/submit-pipeline.sh --name smith-wiki --template cluster/single-node.sbatch \
#       --pretrain configs/pretrain-smith-paper.yaml --finetune configs/finetune-smith-paper.yaml \
#       --eval configs/eval-smith-paper.yaml [-- sbatch options for every job]
set -euo pipefail
cd "$(dirname "$0")/.."
name="" template=cluster/single-node.sbatch pretrain="" finetune="" evaluate="" extra=()
usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --name) name="$2"; shift 2 ;;
    --template) template="$2"; shift 2 ;;
    --pretrain) pretrain="$2"; shift 2 ;;
    --finetune) finetune="$2"; shift 2 ;;
    --eval) evaluate="$2"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "submit-pipeline: unknown option '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
[ -n "$name" ] && [ -n "$pretrain" ] && [ -n "$finetune" ] && [ -n "$evaluate" ] || {
  echo "submit-pipeline: --name, --pretrain, --finetune and --eval are required" >&2; exit 2; }
for f in "$template" "$pretrain" "$finetune" "$evaluate"; do
  [ -f "$f" ] || { echo "submit-pipeline: $f does not exist" >&2; exit 2; }
done
mkdir -p logs
run="runs/$name"
submit() {  # dependency stage config flags...
  local dependency="$1" stage="$2" config="$3"
  shift 3
  local options=(--parsable --job-name "$name-$stage" --export "ALL,RUN_DIR=$run" "${extra[@]}")
  [ -z "$dependency" ] || options+=(--dependency "afterok:$dependency")
  sbatch "${options[@]}" "$template" "$stage" "$config" "$@" | cut -d';' -f1
}
first=$(submit "" pretrain "$pretrain")
second=$(submit "$first" finetune "$finetune" --init "$run/pretrain/latest")
third=$(submit "$second" eval "$evaluate" --model "$run/finetune/best")
echo "[submit] $name: pretrain job $first -> finetune job $second -> eval job $third (runs/$name, logs/)"
