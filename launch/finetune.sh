#!/usr/bin/env bash
# docmatch finetune under mpirun: launch/finetune.sh --config FILE [--np N] [--hostfile F]
# [--device cpu|cuda] [--local] [--dry-run] [-- docmatch flags]. --help for all.
set -euo pipefail
source "$(dirname "$0")/common.sh"
launch_stage_main finetune "$@"
