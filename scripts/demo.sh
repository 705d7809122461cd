#!/usr/bin/env bash
# Sets everything up, builds, and runs the bundled demo on the CPU stand-in NCCL under trainscope:
#   1. a healthy 4-rank job: where its run directory is and a summary of what was recorded;
#   2. the same job where rank 1 all-reduces half its gradient bucket at step 7: the mismatch report, and the
#      job stopped within seconds instead of hanging.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mkdir -p build
bash scripts/build.sh build >/dev/null

runs="$PWD/trainscope-runs"
launch=(build/tests/programs/ts-launch -n 4 --timeout 300 --)

echo "== 1. a healthy job: 4 ranks, 20 training steps, trainscope preloaded"
run_id="demo-$(date -u +%Y%m%d-%H%M%S)"
TRAINSCOPE_DIR="$runs" TRAINSCOPE_RUN_ID="$run_id" LD_PRELOAD="$PWD/build/shim/libtrainscope.so" \
  "${launch[@]}" build/demo/demo_train 20
echo
echo "== run directory: $runs/$run_id"
build/tools/trainscope report "$runs/$run_id" --last 6

echo
echo "== 2. the same job, but rank 1 all-reduces half its gradient bucket at step 7 (trainscope run)"
start=$(date +%s%N)
set +e
build/tools/trainscope run --dir "$runs" -- "${launch[@]}" build/demo/demo_train 20 --mismatch-at 7
status=$?
set -e
end=$(date +%s%N)
echo
elapsed_ms=$(((end - start) / 1000000))
printf '== the job ended with status %d after %d.%03d s (with real NCCL it would have hung until its timeout)\n' \
  "$status" $((elapsed_ms / 1000)) $((elapsed_ms % 1000))

echo
echo "== 3. rank 2's bf16 gradients overflow to inf at step 12 (trainscope run; a batch starts at each step's first"
echo "==    all-reduce: TRAINSCOPE_STEP_MARKER=collective:^ncclAllReduce\$)"
set +e
TRAINSCOPE_STEP_MARKER='collective:^ncclAllReduce$' TRAINSCOPE_LOG_LEVEL=warn \
  build/tools/trainscope run --dir "$runs" -- "${launch[@]}" build/demo/demo_train 20 --overflow-at 12 2>&1 |
  grep -v '^\[trainscope\]\[rank 0\] error: *$' | sed -n '/^trainscope: the job exited/,$p'
set -e
overflow_run=$(ls -td "$runs"/run-* | sed -n 1p)
echo
echo "== what rank 2 (the one that produced the inf) wrote: $overflow_run/nonfinite-rank2.txt"
cat "$overflow_run/nonfinite-rank2.txt"
