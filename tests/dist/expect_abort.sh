#!/usr/bin/env bash
# expect_abort.sh TEXT SECONDS COMMAND...: passes when COMMAND exits non-zero
# within SECONDS and its output contains TEXT (the failure-rule tests).
text=$1 limit=$2
shift 2
start=$(date +%s)
output=$(timeout "$((limit + 30))" "$@" 2>&1)
status=$?
elapsed=$(( $(date +%s) - start ))
printf '%s\n' "$output"
echo "[expect_abort] exit $status after ${elapsed}s"
[ "$status" -ne 0 ] || { echo "[expect_abort] FAIL: the job exited 0"; exit 1; }
[ "$elapsed" -le "$limit" ] || { echo "[expect_abort] FAIL: took ${elapsed}s, limit ${limit}s"; exit 1; }
grep -qF -- "$text" <<<"$output" || { echo "[expect_abort] FAIL: no '$text' in the output"; exit 1; }
echo "[expect_abort] ok"
