#!/usr/bin/env bash
# Sets everything up, builds, and runs the bundled demo: a 4-rank job on the CPU stand-in NCCL under the shim,
# then prints where its run directory is and a summary of what was recorded.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mkdir -p build
bash scripts/build.sh build >/dev/null

export TRAINSCOPE_DIR="$PWD/trainscope-runs"
export TRAINSCOPE_RUN_ID="demo-$(date -u +%Y%m%d-%H%M%S)"
run_dir="$TRAINSCOPE_DIR/$TRAINSCOPE_RUN_ID"

echo "== demo: 4 ranks, 20 training steps, CPU stand-in NCCL, trainscope preloaded"
LD_PRELOAD="$PWD/build/shim/libtrainscope.so" \
  build/tests/programs/ts-launch -n 4 --timeout 300 -- build/demo/demo_train 20

echo
echo "== run directory: $run_dir"
build/tools/trainscope report "$run_dir" --last 6
