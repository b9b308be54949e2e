#!/usr/bin/env bash
# Run ON the lent GPU machine (device tool, carry [".device"]):
#   bash scripts/device/gpu-checks.sh [all | STAGE ...]   STAGE: build test train bench large finetune ab attention graphs profile curve
# (default all; a device call runs at most 10 minutes, so the stages can also
# go a few per call, e.g. `build test train`, then `bench large`.)
# The build: where scripts/device/pack-build.sh left .device/build.tar.xz
# (this machine's build, stripped; with `fetch-debs.py --runtime`'s packages)
# it is unpacked as build/ in seconds; else docmatch is built into build-gpu/
# against that machine's PyTorch (CUDA, NCCL) and the Debian packages carried
# in .device/debs, minutes on a cold machine. Then the GPU checks, each logged to $OUT:
#   build.log      the build (build-gpu/), when built there
#   ctest-cuda.log the tests with CUDA cases (run first)
#   ctest.log      every other test but the e2e ones (they render manual pages with
#                  groff, which the machine lacks) and the network one (it
#                  downloads Debian packages); the CUDA tests run here
#   nccl.log       1 rank, NCCL backend: a short pre-training on the GPU
#   shared.log     2 ranks sharing the GPU, MPI backend
#   backends.txt   fp32, 30 steps: NCCL's losses against the MPI backend's,
#                  the NCCL run's checkpoint resumed on the CPU, and the host
#                  synchronisations of a paper-config step (DOCMATCH_CUDA_SYNC_DEBUG)
#   paper.jsonl    SMITH paper config (L1=6, L2=3, H=256, 48x32 blocks,
#                  batch 32) with bf16 autocast: metrics with docs/s,
#                  tokens/s and the allocator's peak GPU memory
#   fp32.jsonl     the same in fp32, for the ratio
#   epoch.txt      both rates as the time of SMITH's 714,800-document epoch
#   peer-bf16.txt  docmatch vs the Python peer (eager and torch.compile) on
#   peer-fp32.txt  the paper config's step, one invocation per precision
#   train_step.txt the train-step benchmark (time split, MFU vs 989 TFLOP/s)
#   syncs.txt      smith_step --sync-debug --profile: one bf16 paper-config
#                  step's host synchronisations by operation, its GPU busy and
#                  idle time, its operators (profile.json.gz: the Kineto trace)
#   pipeline.jsonl ShardStream + block batches, to set against the step
#   large.txt      (stage large) configs/models/smith-h768.yaml: the largest
#                  batch of 256..16 whose bf16 step fits, then the train-step
#                  benchmark and the peer comparison at that batch
#   ab.txt         (stage ab) the pre-training step's docs/s, this build against
#                  .device/base.tar.xz (an earlier pack), interleaved in one call
#   attention.txt  (stage attention) attention without padding against the
#                  padded grid (--attention unpadded / padded), in one call: smith_step
#                  alternating the two step by step (paper config, bf16 and
#                  fp32, batch 32, 128, 256; attention.jsonl), then the
#                  trainer's docs/s both ways at batch 32 and 128, A B A B
#   graphs.txt     (stage graphs) CUDA graphs: the captured step's and the
#                  captured update's CUDA tests (replays against eager
#                  steps), the trainer's losses with
#                  --cuda-graphs against --step-buckets (fp32, dropout off,
#                  --accumulation 2, 8 steps), then the trainer's docs/s
#                  with --cuda-graphs, with --step-buckets alone (the same
#                  padding, eager) and plain, paper config bf16, batch 32 and
#                  128, interleaved in two rounds; the graphs captured and
#                  the micro-steps replayed, docs/s of steps 51-60, the loss
#                  at step 60, the epoch time at each rate; contrastive
#                  fine-tuning with --cuda-graphs against --step-buckets
#                  (fp32, 8 steps, losses and learned temperatures), then
#                  graphs / buckets / plain at batch 32, 2 hard negatives,
#                  bf16, in two rounds; the input pipeline over 30 epochs
#                  at 2, 4 and 8 builders
#   profile.txt    (stage profile) this build's trainer profiled over steps 31-33
#                  at batch 32 and 256 (each step's GPU busy time, its operators;
#                  trainer-profile-B.json.gz: the traces) and smith_step's host
#                  synchronisations
#   curve.txt      (stage curve, issue 41) MRR against the global batch on the GPU;
#                  scripts/device/prepare-curve.py says which two calls it takes
#   finetune.txt   (stage finetune) contrastive fine-tuning, paper config, bf16,
#                  batch 32, plain and --grad-cache 8: the step's time split,
#                  "data" being the wait for the loader thread
# (a call returns at most 8 files: the logs and JSON lines come back packed
# in logs-<stages>.tar.gz, the .txt summaries as they are)
set -uo pipefail
cd "$(dirname "$0")/../.."
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(all)
[ "${stages[*]}" = all ] && stages=(build test train bench large finetune)
for stage in "${stages[@]}"; do
  case "$stage" in build|test|train|bench|large|finetune|ab|attention|graphs|profile|curve) ;;
    *) echo "usage: $0 [all | build|test|train|bench|large|finetune|ab|attention|graphs|profile|curve ...]" >&2; exit 2 ;; esac
done
OUT="${OUT:-/tmp/gpu-checks}"
mkdir -p "$OUT"
source scripts/device/env.sh || exit 1
export DOCMATCH_VENV="${DOCMATCH_VENV:-$(python3 -c 'import sys; print(sys.prefix)')}"
export DOCMATCH_BUILD_DIR=build-gpu
bin=build-gpu/src/docmatch
# Every run ends within 3 minutes, and the whole test stage within 4 (GPU_CHECKS_CTEST_LIMIT):
# a hang costs a stage, not the call and its minutes of device time.
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none --timeout 180)
corpus=/tmp/docmatch-device-corpus
common=(--corpus $corpus --objective wp+sp --lr 1e-4 --warmup-steps 10 --log-every 10 --fresh --no-progress)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
# scripts/device/prepare.sh carries the corpus compressed (the shard itself
# would not fit in a call beside the packages); it is unpacked outside the
# tree, so nothing here grows what a later call carries.
# Only the curve stage does without it (its own corpus comes in two calls).
needs_corpus=false
for stage in "${stages[@]}"; do [ "$stage" = build ] || [ "$stage" = curve ] || needs_corpus=true; done
if $needs_corpus && [ ! -f $corpus/manifest.json ]; then
  [ -f .device/corpus.tar.xz ] || { echo "[gpu-checks] no .device/corpus.tar.xz: run scripts/device/prepare.sh here" \
                                         "first and carry .device" >&2; exit 1; }
  mkdir -p $corpus
  tar -C $corpus -xJf .device/corpus.tar.xz 2> /dev/null ||
    python3 -c 'import sys, tarfile; tarfile.open(".device/corpus.tar.xz").extractall(sys.argv[1])' $corpus || exit 1
fi

use_pack() {
  # scripts/device/pack-build.sh's build, made on the CPU machine against the
  # same PyPI torch: unpacked as build/, and the paths it was made with
  # pointed at this machine's (the checkout, the venv's torch and Python, mpiexec).
  echo "[gpu-checks] the carried build (.device/build.tar.xz)"
  rm -rf build && tar -xJf .device/build.tar.xz || exit 1
  local root venv site mpiexec here dev_site
  root=$(sed -n 's/^root=//p' build/device-pack.env); venv=$(sed -n 's/^venv=//p' build/device-pack.env)
  site=$(sed -n 's/^site=//p' build/device-pack.env); mpiexec=$(sed -n 's/^mpiexec=//p' build/device-pack.env)
  here=$(pwd -P)
  dev_site=$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))') || {
    echo "[gpu-checks] python3 here has no torch" >&2; exit 1; }
  if [ "$here" != "$root" ]; then
    [ -e "$root" ] && [ "$(readlink -f "$root")" != "$here" ] && {
      echo "[gpu-checks] $root exists here and is not this checkout: the carried build's tests name it" >&2; exit 1; }
    mkdir -p "$(dirname "$root")" && ln -sfn "$here" "$root"
  fi
  mkdir -p "$venv/bin" "$(dirname "$site")"
  [ -e "$site" ] || ln -sfn "$dev_site" "$site"
  rm -f "$venv/bin/python"  # a fresh file: never write through a link
  printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v python3)" > "$venv/bin/python" && chmod +x "$venv/bin/python"
  [ -e "$mpiexec" ] || ln -sfn "$(command -v mpiexec)" "$mpiexec"
  # libnccl.so.2 and libcudart.so.13, which docmatch names itself: the wheels' copies beside torch.
  local d
  for d in "$dev_site"/nvidia/*/lib "$dev_site"/nvidia/cu13/lib; do
    [ -d "$d" ] && LD_LIBRARY_PATH="$d:$LD_LIBRARY_PATH"
  done
  export LD_LIBRARY_PATH
  bin=build/src/docmatch
  export DOCMATCH_BUILD_DIR=build
  if ldd $bin build/bench/smith_step | grep "not found"; then
    echo "[gpu-checks] the carried build lacks the libraries above" >&2; exit 1
  fi
}

build() {
  if [ -f .device/build.tar.xz ]; then
    use_pack
  else
    # Without the test stage, only what the runs use (76 of the 141 compile
    # commands), which matters when a cold machine builds again in a later call.
    [[ " ${stages[*]} " == *" test "* ]] || export DOCMATCH_BUILD_TARGETS="docmatch smith_step stream_bench"
    echo "[gpu-checks] build ${DOCMATCH_BUILD_TARGETS:-(everything)}" && scripts/build.sh "${DOCMATCH_CMAKE_ARGS[@]}" > "$OUT/build.log" 2>&1 || {
      tail -n 40 "$OUT/build.log"; exit 1; }
  fi
  $bin info | tee "$OUT/info.txt"
}

tests() {
  # Two torch threads a test, eight tests at once: the 16 cores without oversubscription.
  # The tests with CUDA cases first (they skip without a GPU; here they run):
  # Torch.Cuda*, CudaTest.*, and the mpirun-launched dist suite, which holds
  # the CUDA bit-exact resume and GradCache's CUDA replay. Then the rest, in
  # what is left of GPU_CHECKS_CTEST_LIMIT.
  local first='Cuda|Dist\.Mpi' limit=${GPU_CHECKS_CTEST_LIMIT:-240} start=$SECONDS
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=2
  echo "[gpu-checks] tests with CUDA cases" && timeout "$limit" ctest --test-dir $DOCMATCH_BUILD_DIR -j 8 \
    -R "$first" --timeout 300 --output-on-failure > "$OUT/ctest-cuda.log" 2>&1
  tail -n 8 "$OUT/ctest-cuda.log"
  # ctest shows the mpirun-launched suite as one test: its CUDA cases by name,
  # so that a skip (no GPU seen) cannot pass for a run.
  "${mpi[@]}" -np 1 $DOCMATCH_BUILD_DIR/tests/dist_mpi_tests --gtest_filter='*Cuda*' --gtest_color=no > "$OUT/gtest-cuda.log" 2>&1
  grep -E "^\[ +(OK|SKIPPED|FAILED|PASSED) +\]" "$OUT/gtest-cuda.log"
  local left=$((limit - (SECONDS - start)))
  [ $left -ge 10 ] || { echo "[gpu-checks] no time left for the other tests"; return; }  # (timeout 0 never stops)
  echo "[gpu-checks] the other tests" && timeout $left ctest --test-dir $DOCMATCH_BUILD_DIR \
    -j 8 -E "$first" -LE 'e2e|network' --timeout 300 --output-on-failure > "$OUT/ctest.log" 2>&1
  tail -n 15 "$OUT/ctest.log"
}

train() {
  echo "[gpu-checks] NCCL, 1 rank" && "${mpi[@]}" -np 1 $bin pretrain "${common[@]}" \
    --model-config configs/models/smith-tiny.yaml --device cuda --backend nccl --precision bf16 --steps 30 --batch-size 16 \
    --run /tmp/gpu-nccl > "$OUT/nccl.log" 2>&1
  tail -n 3 "$OUT/nccl.log"
  echo "[gpu-checks] 2 ranks sharing the GPU (MPI backend)" && "${mpi[@]}" -np 2 $bin pretrain "${common[@]}" \
    --model-config configs/models/smith-tiny.yaml --device cuda --backend mpi --steps 30 --batch-size 8 --run /tmp/gpu-shared \
    > "$OUT/shared.log" 2>&1
  tail -n 3 "$OUT/shared.log"
  # Issue 37: fp32 under NCCL against the MPI backend, same seed, 30 steps
  # (losses equal to ~1e-6); then the NCCL run's checkpoint resumed on the CPU
  # (optimizer state written on the GPU, loaded onto the host).
  local tiny=(--corpus $corpus --objective wp+sp --lr 1e-4 --warmup-steps 10 --log-every 1 --no-progress
              --model-config configs/models/smith-tiny.yaml --precision fp32 --batch-size 16 --deterministic)
  for backend in nccl mpi; do
    echo "[gpu-checks] fp32, $backend backend, 30 steps" && "${mpi[@]}" -np 1 $bin pretrain "${tiny[@]}" --fresh \
      --device cuda --backend $backend --steps 30 --checkpoint-every 30 --run /tmp/gpu-fp32-$backend \
      > "$OUT/fp32-$backend.log" 2>&1
    tail -n 2 "$OUT/fp32-$backend.log"
  done
  python3 - <<'PYEOF' | tee "$OUT/backends.txt"
import json
def losses(run):
    return {j["step"]: j["train/loss"] for j in map(json.loads, open(f"/tmp/gpu-fp32-{run}/metrics.jsonl"))
            if "train/loss" in j}
try:
    a, b = losses("nccl"), losses("mpi")
    steps = sorted(set(a) & set(b))
    print(json.dumps({"steps": len(steps), "max_abs_loss_diff": max(abs(a[s] - b[s]) for s in steps),
                      "loss_step_30": [a.get(30), b.get(30)]}))
except Exception as e:  # a run that failed shows in its log
    print(json.dumps({"error": str(e)}))
PYEOF
  echo "[gpu-checks] the NCCL run's checkpoint resumed on the CPU, 2 more steps" && CUDA_VISIBLE_DEVICES= \
    "${mpi[@]}" -np 1 $bin pretrain "${tiny[@]}" --device cpu --steps 32 --checkpoint-every 32 \
    --run /tmp/gpu-fp32-nccl > "$OUT/resume-on-cpu.log" 2>&1
  echo "resume on CPU: exit $?" | tee -a "$OUT/backends.txt"
  grep -m 1 "resumed from" "$OUT/resume-on-cpu.log" | tee -a "$OUT/backends.txt"
  # bf16-cudnn: bf16 with cuDNN's attention kernels (DOCMATCH_SDPA_CUDNN=1,
  # PyTorch's default on an H100), to set against the flash kernels docmatch picks.
  for variant in bf16 fp32 bf16-cudnn; do
    precision=${variant%-cudnn}
    echo "[gpu-checks] SMITH paper config, $variant"
    DOCMATCH_SDPA_CUDNN=$([ $variant = bf16-cudnn ] && echo 1 || echo 0) "${mpi[@]}" -np 1 -x DOCMATCH_SDPA_CUDNN \
      $bin pretrain "${common[@]}" --model-config configs/models/smith-paper.yaml --device cuda \
      --backend nccl --precision $precision --steps 60 --batch-size 32 --checkpoint-every 1000 \
      --run /tmp/gpu-$variant > "$OUT/$variant.log" 2>&1
    tail -n 2 "$OUT/$variant.log"
    cp /tmp/gpu-$variant/metrics.jsonl "$OUT/$(case $variant in bf16) echo paper ;; *) echo $variant ;; esac).jsonl"
    tail -n 1 /tmp/gpu-$variant/metrics.jsonl
  done
  # Issue 37, item 6: the host synchronisations of a pre-training step, as
  # PyTorch reports them (DOCMATCH_CUDA_SYNC_DEBUG=warn): 15 steps less 5, over 10.
  for steps in 5 15; do
    DOCMATCH_CUDA_SYNC_DEBUG=warn "${mpi[@]}" -np 1 -x DOCMATCH_CUDA_SYNC_DEBUG $bin pretrain "${common[@]}" \
      --model-config configs/models/smith-paper.yaml --device cuda --backend nccl --precision bf16 --steps $steps \
      --batch-size 32 --checkpoint-every 1000 --run /tmp/gpu-syncs > "$OUT/syncs-$steps.log" 2>&1
  done
  python3 - "$OUT" <<'PYEOF' | tee -a "$OUT/backends.txt"
import collections, re, sys
count = {}
where = collections.Counter()
for steps in (5, 15):
    lines = [l for l in open(f"{sys.argv[1]}/syncs-{steps}.log", errors="replace") if "synchronizing CUDA operation" in l]
    count[steps] = len(lines)
    if steps == 15:
        where.update(re.sub(r"^.*?\] ", "", l).strip()[:120] for l in lines)
print(f"host synchronisations per pre-training step (paper config, bf16, NCCL): {(count[15] - count[5]) / 10:.1f} "
      f"({count[5]} in 5 steps, {count[15]} in 15)")
for text, n in where.most_common(8):
    print(f"  {n} x {text}")
PYEOF
  # Issue 19's epoch: SMITH's 714,800 pre-training documents at the last
  # logged interval's rate (steps 51-60, past warm-up).
  python3 - "$OUT" <<'PYEOF' | tee "$OUT/epoch.txt"
import json, os, sys
print("| paper config | docs/s | tokens/s | GPU peak GiB | 714,800-document epoch, min |")
print("|---|---|---|---|---|")
for name, label in (("paper.jsonl", "bf16"), ("fp32.jsonl", "fp32"), ("bf16-cudnn.jsonl", "bf16, cuDNN attention")):
    path = os.path.join(sys.argv[1], name)
    rows = [json.loads(l) for l in open(path) if '"train/docs_per_s"' in l] if os.path.exists(path) else []
    if not rows:
        print(f"| {label} | no metrics in {path} | | | |")
        continue
    m = rows[-1]
    peak = next((v for k, v in m.items() if k.endswith("gpu_peak_gib")), float("nan"))
    print(f"| {label} (step {m['step']}) | {m['train/docs_per_s']:.1f} | {m['train/tokens_per_s']:.0f} | "
          f"{peak:.2f} | {714800 / m['train/docs_per_s'] / 60:.1f} |")
PYEOF
}

bench() {
  for precision in bf16 fp32; do
    echo "[gpu-checks] docmatch vs the Python peer, paper config, $precision"
    bench/peers/smith_vs_peer.sh --corpus $corpus --device cuda --precision $precision --steps 20 \
      smith-paper=32 > "$OUT/peer-$precision.txt" 2>&1
    tail -n 5 "$OUT/peer-$precision.txt"
  done
  echo "[gpu-checks] train step, paper config, bf16"
  bench/train_step.sh --corpus $corpus --device cuda --precision bf16 --peak-tflops 989 --steps 20 \
    smith-paper=32 > "$OUT/train_step.txt" 2>&1
  tail -n 4 "$OUT/train_step.txt"
  echo "[gpu-checks] one profiled step and its host synchronisations, paper config, bf16"
  $DOCMATCH_BUILD_DIR/bench/smith_step --model configs/models/smith-paper.yaml --corpus $corpus --batch 32 --steps 3 \
    --device cuda --precision bf16 --sync-debug --profile "$OUT/profile.json" > "$OUT/syncs.txt" 2>&1
  python3 bench/profile_table.py "$OUT/profile.json" --top 20 >> "$OUT/syncs.txt" 2>&1
  gzip -f "$OUT/profile.json"
  grep -o '"host_syncs":{[^}]*}' "$OUT/syncs.txt"; grep -m 1 "^GPU:" "$OUT/syncs.txt"
  echo "[gpu-checks] input pipeline (stream + block batches), 1 to 8 builders"
  for builders in 1 2 4 8; do
    $DOCMATCH_BUILD_DIR/bench/stream_bench --corpus $corpus --epochs 3 --batch-size 32 --block-length 32 \
      --max-blocks 48 --builders $builders | tee -a "$OUT/pipeline.jsonl"
  done
}

large() {
  local batch=""
  for b in 256 192 128 96 64 48 32 16; do
    echo "[gpu-checks] H=768: batch $b?"
    if "${mpi[@]}" -np 1 $bin pretrain "${common[@]}" --model-config configs/models/smith-h768.yaml --device cuda \
         --backend nccl --precision bf16 --steps 3 --batch-size $b --checkpoint-every 1000 --run /tmp/gpu-h768 \
         > "$OUT/h768-probe-$b.log" 2>&1; then
      batch=$b
      break
    fi
    # Only out-of-memory means "try a smaller batch"; any other failure (a
    # crash, a refused tensor, a hang) is the finding, printed, and the search stops.
    if ! grep -m 1 -i "out of memory" "$OUT/h768-probe-$b.log"; then
      echo "[gpu-checks] H=768 at batch $b failed, and not for memory:" | tee "$OUT/large.txt"
      tail -n 20 "$OUT/h768-probe-$b.log" | tee -a "$OUT/large.txt"
      rm -rf /tmp/gpu-h768
      return
    fi
  done
  rm -rf /tmp/gpu-h768
  [ -n "$batch" ] || { echo "[gpu-checks] H=768: no batch from 256 down to 16 fits" | tee "$OUT/large.txt"; return; }
  echo "[gpu-checks] H=768 fits batch $batch: train step and peer, bf16" | tee "$OUT/large.txt"
  bench/train_step.sh --corpus $corpus --device cuda --precision bf16 --peak-tflops 989 --steps 10 \
    smith-h768=$batch 2>&1 | tee -a "$OUT/large.txt" | tail -n 3
  bench/peers/smith_vs_peer.sh --corpus $corpus --device cuda --precision bf16 --steps 10 \
    smith-h768=$batch 2>&1 | tee -a "$OUT/large.txt" | tail -n 5
}

ab() {
  # A change's effect on the pre-training step, measured in one call: the
  # carried build (B) against .device/base.tar.xz (A, an earlier pack-build.sh
  # pack, unpacked as build-base/), SMITH paper config, bf16, NCCL, 1 rank,
  # batch 32 and 128, runs interleaved A B A B; docs/s of steps 31-40.
  [ -f .device/base.tar.xz ] || { echo "[gpu-checks] ab: no .device/base.tar.xz" | tee "$OUT/ab.txt"; return; }
  rm -rf build-base && mkdir build-base && tar -C build-base --strip-components=1 -xJf .device/base.tar.xz || return
  echo "base $(sed -n 's/^commit=//p' build-base/device-pack.env), this $(sed -n 's/^commit=//p' build/device-pack.env)" |
    tee "$OUT/ab.txt"
  local batch round side
  for batch in 32 128; do
    for round in 1 2; do
      for side in base this; do
        local b=build/src/docmatch
        [ $side = base ] && b=build-base/src/docmatch
        "${mpi[@]}" -np 1 $b pretrain "${common[@]}" --model-config configs/models/smith-paper.yaml --device cuda \
          --backend nccl --precision bf16 --steps 40 --batch-size $batch --checkpoint-every 1000 \
          --run /tmp/gpu-ab > "$OUT/ab-$side-$batch-$round.log" 2>&1
        python3 -c 'import json, sys
rows = [json.loads(l) for l in open("/tmp/gpu-ab/metrics.jsonl") if "train/docs_per_s" in l]
print(sys.argv[1], "batch", sys.argv[2], "round", sys.argv[3], "step", rows[-1]["step"],
      "docs/s %.1f" % rows[-1]["train/docs_per_s"], "GPU peak GiB %.2f" % rows[-1]["train/gpu_peak_gib"])' \
          $side $batch $round 2>&1 | tee -a "$OUT/ab.txt"
      done
    done
  done
  rm -rf /tmp/gpu-ab
}

attention() {
  # The sentence blocks' attention without padding (the variable-length
  # kernels) against the padded grid, in this one build: smith_step alternates
  # them step by step (step_ms_unpadded / step_ms_padded, padding_fraction),
  # then the trainer runs both ways, interleaved A B A B; docs/s of steps 31-40.
  local batch precision round side
  for precision in bf16 fp32; do
    for batch in 32 128 256; do
      $DOCMATCH_BUILD_DIR/bench/smith_step --model configs/models/smith-paper.yaml --corpus $corpus --batch $batch \
        --steps 20 --warmup 3 --device cuda --precision $precision --attention ab > /tmp/gpu-attention.json 2>&1
      tail -n 1 /tmp/gpu-attention.json >> "$OUT/attention.jsonl"
      python3 -c 'import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print("smith_step", r["precision"], "batch", r["batch"], "padding %.3f" % r["padding_fraction"],
      "step ms unpadded %.2f padded %.2f" % (r["step_ms_unpadded"], r["step_ms_padded"]),
      "ratio %.3f" % (r["step_ms_padded"] / r["step_ms_unpadded"]))' /tmp/gpu-attention.json 2>&1 |
        tee -a "$OUT/attention.txt"
    done
  done
  for batch in 32 128; do
    for round in 1 2; do
      for side in unpadded padded; do
        "${mpi[@]}" -np 1 $bin pretrain "${common[@]}" --model-config configs/models/smith-paper.yaml --device cuda \
          --backend nccl --precision bf16 --steps 40 --batch-size $batch --checkpoint-every 1000 --attention $side \
          --run /tmp/gpu-attention > "$OUT/attention-$side-$batch-$round.log" 2>&1
        python3 -c 'import json, sys
rows = [json.loads(l) for l in open("/tmp/gpu-attention/metrics.jsonl") if "train/docs_per_s" in l]
print("trainer", sys.argv[1], "batch", sys.argv[2], "round", sys.argv[3], "step", rows[-1]["step"],
      "docs/s %.1f" % rows[-1]["train/docs_per_s"], "loss %.4f" % rows[-1]["train/loss"])' \
          $side $batch $round 2>&1 | tee -a "$OUT/attention.txt"
      done
    done
  done
  rm -rf /tmp/gpu-attention /tmp/gpu-attention.json
}

# Two runs' logged training rows step by step: the largest relative
# difference of each KEY, on one line of graphs.txt.
compare_logged() {  # LABEL RUN_A RUN_B KEY...
  python3 - "$@" <<'PY' 2>&1 | tee -a "$OUT/graphs.txt"
import json, sys
label, a_run, b_run, keys = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
def logged(run):
    return [j for j in map(json.loads, open(f"{run}/metrics.jsonl")) if "train/loss" in j]
try:
    a, b = logged(a_run), logged(b_run)
    print(label + ":", len(a), "steps, max relative difference:", ", ".join(
        "%s %.2e" % (k, max(abs(x[k] - y[k]) / abs(y[k]) for x, y in zip(a, b))) for k in keys))
except Exception as e:
    print(label, "comparison failed:", e)
PY
}

graphs() {
  # The captured step (train/captured_step.h): its CUDA tests first (graphed
  # micro-steps against eager ones, dropout drawn anew at each replay; the
  # graphed update against the eager one),
  # then the trainer three ways in one call, interleaved: --cuda-graphs,
  # --step-buckets (the graphs' padding, eager) and plain; docs/s of steps
  # 51-60 (the log interval's rate: most buckets captured by then; the run's
  # last log line says how many of its micro-steps were replays) and the
  # loss at step 60.
  "${mpi[@]}" -np 1 $DOCMATCH_BUILD_DIR/tests/dist_mpi_tests --gtest_filter='CapturedSmithSteps.*' --gtest_color=no \
    > "$OUT/graphs-test.log" 2>&1
  $DOCMATCH_BUILD_DIR/tests/train_tests --gtest_filter='Optimizer.TheCapturedUpdate*' --gtest_color=no \
    >> "$OUT/graphs-test.log" 2>&1
  grep -E "^\[ +(OK|SKIPPED|FAILED|PASSED) +\]|Failure|error" "$OUT/graphs-test.log" | head -n 20 | tee -a "$OUT/graphs.txt"
  # The trainer's captured path against its eager twin: fp32, dropout off,
  # two micro-steps a step (the scale folded into the graph), 8 steps; the
  # same buckets, so the losses and gradient norms agree to float rounding
  # (a wrong scale shows in the norm).
  sed 's/dropout: .*/dropout: 0.0/' configs/models/smith-paper.yaml > /tmp/gpu-graphs-no-dropout.yaml
  local side
  for side in graphs buckets; do
    "${mpi[@]}" -np 1 $bin pretrain --corpus $corpus --objective wp+sp --lr 1e-4 --warmup-steps 2 --log-every 1 \
      --fresh --no-progress --model-config /tmp/gpu-graphs-no-dropout.yaml --device cuda \
      --backend nccl --precision fp32 --steps 8 --batch-size 16 --accumulation 2 \
      --checkpoint-every 1000 --$( [ $side = graphs ] && echo cuda-graphs || echo step-buckets ) \
      --run /tmp/gpu-graphs-$side > "$OUT/graphs-fp32-$side.log" 2>&1
    echo "fp32 $side: exit $?" | tee -a "$OUT/graphs.txt"
  done
  compare_logged "fp32 accumulation 2, graphs vs buckets" /tmp/gpu-graphs-graphs /tmp/gpu-graphs-buckets \
    train/loss train/grad_norm
  rm -rf /tmp/gpu-graphs-graphs /tmp/gpu-graphs-buckets /tmp/gpu-graphs-no-dropout.yaml
  local batch round
  for batch in 32 128; do
    for round in 1 2; do
      for side in graphs buckets plain; do
        local flags=()
        [ $side = graphs ] && flags=(--cuda-graphs)
        [ $side = buckets ] && flags=(--step-buckets)
        "${mpi[@]}" -np 1 $bin pretrain "${common[@]}" --model-config configs/models/smith-paper.yaml --device cuda \
          --backend nccl --precision bf16 --steps 60 --batch-size $batch --checkpoint-every 1000 "${flags[@]}" \
          --run /tmp/gpu-graphs > "$OUT/graphs-$side-$batch-$round.log" 2>&1
        echo "exit $? $(grep -o 'CUDA graphs: .*' "$OUT/graphs-$side-$batch-$round.log" | tail -n 2)" |
          tr '\n' ' ' | tee -a "$OUT/graphs.txt"
        python3 -c 'import json, sys
rows = [json.loads(l) for l in open("/tmp/gpu-graphs/metrics.jsonl") if "train/docs_per_s" in l]
r = rows[-1]
print("trainer", sys.argv[1], "batch", sys.argv[2], "round", sys.argv[3], "step", r["step"],
      "docs/s %.1f" % r["train/docs_per_s"], "epoch min %.2f" % (714800 / r["train/docs_per_s"] / 60),
      "loss %.4f" % r["train/loss"], "gpu peak GiB %.2f" % r.get("train/gpu_peak_gib", 0))' \
          $side $batch $round 2>&1 | tee -a "$OUT/graphs.txt"
      done
    done
  done
  rm -rf /tmp/gpu-graphs
  # Contrastive fine-tuning (finetune --cuda-graphs): fp32, dropout off,
  # two micro-steps a step (the scale folded into the graph), 8 steps
  # against --step-buckets (losses, temperatures and gradient norms agree
  # to float rounding; a wrong scale shows in the norm),
  # then bf16 at batch 32 with 2 hard negatives, graphs / buckets / plain,
  # docs/s (sources, targets and negatives) and ms a step of steps 31-40.
  sed 's/dropout: .*/dropout: 0.0/' configs/models/smith-paper.yaml > /tmp/gpu-graphs-no-dropout.yaml
  local ft=(finetune --corpus $corpus --train-pairs .device/pairs.jsonl --loss contrastive --hard-negatives 2
    --device cuda --backend nccl --fresh --no-progress --checkpoint-every 1000)
  for side in graphs buckets; do
    "${mpi[@]}" -np 1 $bin "${ft[@]}" --model-config /tmp/gpu-graphs-no-dropout.yaml --precision fp32 --batch-size 16 \
      --steps 8 --log-every 1 --accumulation 2 --learn-temperature \
      --$( [ $side = graphs ] && echo cuda-graphs || echo step-buckets ) \
      --run /tmp/gpu-ft-graphs-$side > "$OUT/graphs-ft-fp32-$side.log" 2>&1
    echo "finetune fp32 $side: exit $?" | tee -a "$OUT/graphs.txt"
  done
  compare_logged "finetune fp32 accumulation 2, graphs vs buckets" /tmp/gpu-ft-graphs-graphs /tmp/gpu-ft-graphs-buckets \
    train/loss train/temperature train/grad_norm
  rm -rf /tmp/gpu-ft-graphs-graphs /tmp/gpu-ft-graphs-buckets /tmp/gpu-graphs-no-dropout.yaml
  for round in 1 2; do
    for side in graphs buckets plain; do
      local flags=()
      [ $side = graphs ] && flags=(--cuda-graphs)
      [ $side = buckets ] && flags=(--step-buckets)
      "${mpi[@]}" -np 1 $bin "${ft[@]}" --model-config configs/models/smith-paper.yaml --precision bf16 \
        --batch-size 32 --steps 40 --log-every 10 --time-split "${flags[@]}" --run /tmp/gpu-ft-graphs \
        > "$OUT/graphs-ft-$side-$round.log" 2>&1
      echo "exit $? $(grep -o 'CUDA graph.*' "$OUT/graphs-ft-$side-$round.log" | tail -n 2)" | tr '\n' ' ' |
        tee -a "$OUT/graphs.txt"
      tail -n 1 /tmp/gpu-ft-graphs/metrics.jsonl | python3 -c 'import json, sys
m = json.loads(sys.stdin.read())
get = lambda end: next((v for k, v in m.items() if k.endswith(end)), 0)
print("finetune", sys.argv[1], "round", sys.argv[2], "step", m["step"], "docs/s %.1f" % get("docs_per_s"),
      "step ms %.1f" % get("time/step_ms"), "loss %.4f" % m["train/loss"])' $side $round 2>&1 |
        tee -a "$OUT/graphs.txt"
    done
  done
  rm -rf /tmp/gpu-ft-graphs
  # What the loader gives against what the graphed step takes: 30 epochs
  # (the 3-epoch figure of the bench stage is mostly start-up), with the
  # buckets' host work, at 2, 4 and 8 builders.
  for builders in 2 4 8; do
    $DOCMATCH_BUILD_DIR/bench/stream_bench --corpus $corpus --epochs 30 --batch-size 32 --block-length 32 \
      --max-blocks 48 --builders $builders --buckets 2>&1 | tail -n 1 | tee -a "$OUT/graphs.txt"
  done
}

profile() {
  # Where this build's trainer step goes: steps 31-33 of 40 under the profiler
  # (not the last, which checkpoints; step 30 logs: 31-33 do not; each step's
  # wall, leaf ops, the GPU work it launched, then the ops). Batch 32, where
  # the step is launch-bound, and 256, where the epoch target can only be met
  # and the GPU's own kernels bound the step (bench/NOTES.md); then the host
  # synchronisations of smith_step's step (the model alone). Needs no base
  # pack, unlike ab.
  local batch trace=/tmp/gpu-profile/profile/steps-31-33.rank-0.json
  for batch in 32 256; do
    echo "[gpu-checks] this build's trainer, steps 31-33 profiled, batch $batch" | tee -a "$OUT/profile.txt"
    if "${mpi[@]}" -np 1 $bin pretrain "${common[@]}" --model-config configs/models/smith-paper.yaml \
      --device cuda --backend nccl --precision bf16 --steps 40 --batch-size $batch --checkpoint-every 1000 \
      --profile-steps 31:33 --run /tmp/gpu-profile > "$OUT/profile-$batch.log" 2>&1 && [ -f $trace ]; then
      python3 bench/profile_table.py $trace --top 30 > /tmp/gpu-profile-table.txt 2>&1
      cat /tmp/gpu-profile-table.txt >> "$OUT/profile.txt"
      grep -m 4 -E "^(GPU|docmatch step)" /tmp/gpu-profile-table.txt
      gzip -c $trace > "$OUT/trainer-profile-$batch.json.gz"
    else
      echo "[gpu-checks] the profiled run at batch $batch failed:" | tee -a "$OUT/profile.txt"
      tail -n 20 "$OUT/profile-$batch.log" | tee -a "$OUT/profile.txt"
    fi
    rm -rf /tmp/gpu-profile
  done
  $DOCMATCH_BUILD_DIR/bench/smith_step --model configs/models/smith-paper.yaml --corpus $corpus --batch 32 \
    --steps 3 --device cuda --precision bf16 --sync-debug 2>&1 | grep -o '"host_syncs":{[^}]*}' |
    tee -a "$OUT/profile.txt"
}

curve() {
  # Issue 41: MRR against the global batch with labelled pairs and one
  # labelled hard negative each, MiniLM reading the first 256 tokens, on the
  # GPU (docs/RESULTS.md, "MRR against the global batch", ran it at 64 tokens
  # and 10 steps on the CPU). Two calls: scripts/device/prepare-curve.py's
  # call 1 left .device/curve1 in /tmp/curve; this call carries .device/curve2.
  # CURVE_BATCHES (16 64 256 1024), CURVE_STEPS (100), CURVE_CHUNK (256 pairs a
  # gradient-caching chunk above it), CURVE_VARIANTS (plain drop-related);
  # CURVE_DEVICE (cuda) and CURVE_PRECISION (bf16) for a rehearsal on a CPU.
  [ -f /tmp/curve/weights.safetensors ] && [ -f .device/curve2/rows.safetensors ] || {
    echo "[gpu-checks] curve: needs call 1's /tmp/curve (a warm machine) and .device/curve2 carried" |
      tee "$OUT/curve.txt"; return; }
  python3 scripts/device/restore-curve.py /tmp/curve .device/curve2 /tmp/curve-model || return
  local c=/tmp/curve steps=${CURVE_STEPS:-100} chunk=${CURVE_CHUNK:-256} device=${CURVE_DEVICE:-cuda} b variant
  echo "[gpu-checks] curve: the import, no training"
  "${mpi[@]}" -np 1 $bin eval --model /tmp/curve-model --corpus $c/corpus --relevance $c/relevance.jsonl \
    --valid-pairs $c/pairs.valid.jsonl --test-pairs $c/pairs.test.jsonl --max-queries 0 --write-rankings 1 \
    --device $device --output $OUT/curve-import --no-progress > "$OUT/curve-import.log" 2>&1
  for b in ${CURVE_BATCHES:-16 64 256 1024}; do
    for variant in ${CURVE_VARIANTS:-plain drop-related}; do
      local name=b$b-$variant cache=()
      [ "$b" -gt "$chunk" ] && cache=(--grad-cache $chunk)
      echo "[gpu-checks] curve: batch $b, $variant, $steps steps"
      local start=$SECONDS
      "${mpi[@]}" -np 1 $bin finetune --corpus $c/corpus --init /tmp/curve-model --train-pairs $c/pairs.train.jsonl \
        --loss contrastive --temperature 0.05 --hard-negatives 1 --steps $steps --batch-size $b --lr 2e-5 \
        --warmup-steps 1 --decay-steps $steps --checkpoint-every $steps --log-every 1 --seed 1 "${cache[@]}" \
        $([ $variant = drop-related ] && echo --drop-related) --device $device --precision ${CURVE_PRECISION:-bf16} \
        --run /tmp/curve-$name --fresh --no-progress > "$OUT/curve-$name.train.log" 2>&1 || {
        tail -n 5 "$OUT/curve-$name.train.log"; continue; }
      local train_s=$((SECONDS - start))
      "${mpi[@]}" -np 1 $bin eval --model /tmp/curve-$name/latest --corpus $c/corpus --relevance $c/relevance.jsonl \
        --valid-pairs $c/pairs.valid.jsonl --test-pairs $c/pairs.test.jsonl --max-queries 0 --write-rankings 1 \
        --device $device --output $OUT/curve-$name --no-progress > "$OUT/curve-$name.eval.log" 2>&1
      cp /tmp/curve-$name/metrics.jsonl "$OUT/curve-$name.metrics.jsonl"
      echo "$name train_s $train_s" >> "$OUT/curve-times.txt"
      rm -rf /tmp/curve-$name
    done
  done
  python3 - "$OUT" <<'PYEOF' | tee "$OUT/curve.txt"
import glob, json, os, sys
out = sys.argv[1]
times = dict(l.split(" train_s ") for l in open(os.path.join(out, "curve-times.txt"))) \
    if os.path.exists(os.path.join(out, "curve-times.txt")) else {}
print("| run | MRR | P@1 | test accuracy | InfoNCE first -> last | train s |")
print("|---|---|---|---|---|---|")
for folder in sorted(glob.glob(os.path.join(out, "curve-*/metrics.json")), key=os.path.getmtime):
    name = os.path.basename(os.path.dirname(folder))[len("curve-"):]
    m = json.load(open(folder))
    test = m.get("classification", {}).get("test", {}).get("accuracy", float("nan"))
    losses = []
    path = os.path.join(out, f"curve-{name}.metrics.jsonl")
    if os.path.exists(path):
        losses = [json.loads(l)["train/infonce"] for l in open(path) if '"train/infonce"' in l]
    loss = f"{losses[0]:.2f} -> {losses[-1]:.2f}" if losses else ""
    print(f"| {name} | {m['ranking']['mrr']:.4f} | {m['ranking']['p@1']:.4f} | {test:.4f} | {loss} | "
          f"{times.get(name, '').strip()} |")
PYEOF
  # What comes back: the table, and per run its metrics (rankings stay there: 8 files a call).
  (cd "$OUT" && for d in curve-*/; do [ -f "$d/metrics.json" ] && cp "$d/metrics.json" "${d%/}.json"; rm -rf "$d"; done)
}

finetune() {
  # Issue 37, item 11: contrastive fine-tuning on the GPU with the loader
  # thread; "data" is the wait for its batch. Pairs: .device/pairs.jsonl
  # (prepare.sh: the training pairs among the 1,500 articles).
  local variant
  for variant in plain grad-cache; do
    echo "[gpu-checks] finetune, SMITH paper config from scratch, bf16, batch 32, $variant"
    "${mpi[@]}" -np 1 $bin finetune --corpus $corpus --train-pairs .device/pairs.jsonl \
      --model-config configs/models/smith-paper.yaml --loss contrastive --batch-size 32 --hard-negatives 2 \
      --mine-negatives 2 --steps 40 --log-every 20 --time-split --device cuda --precision bf16 \
      $([ $variant = grad-cache ] && echo --grad-cache 8) --run /tmp/gpu-ft-$variant --fresh --no-progress \
      > "$OUT/finetune-$variant.log" 2>&1
    echo "exit $?"
    tail -n 1 /tmp/gpu-ft-$variant/metrics.jsonl | python3 -c 'import json, sys; m = json.loads(sys.stdin.read())
print({k.split("/")[-1]: round(v, 2) for k, v in m.items() if "time/" in k or k in ("step", "train/loss")})' |
      tee -a "$OUT/finetune.txt"
  done
}

# A device call returns at most 8 files from $OUT: the logs go back as one
# archive, the short summaries beside it. Packed on any exit, so that a call
# stopped at its limit (timeout -k 10 N bash gpu-checks.sh ...) still returns them.
pack_logs() {
  (cd "$OUT" && logs=$(ls | grep -vE '^(epoch|large|backends|syncs|finetune|ab|attention|graphs|profile)\.txt$|^peer-.*\.txt$|^train_step\.txt$|\.gz$') &&
    [ -n "$logs" ] && tar -czf "logs-$(IFS=-; echo "${stages[*]}").tar.gz" $logs && rm -f $logs)
  ls "$OUT"
}
trap pack_logs EXIT
trap 'exit 143' TERM INT

build
for stage in "${stages[@]}"; do
  case "$stage" in
    test) tests ;;
    train) train ;;
    bench) bench ;;
    large) large ;;
    finetune) finetune ;;
    ab) ab ;;
    attention) attention ;;
    graphs) graphs ;;
    profile) profile ;;
    curve) curve ;;
  esac
done
