#!/usr/bin/env bash
# Runs every GPU check on a machine with a GPU and writes the results to a folder:
#   tests/gpu/run.sh [RESULTS_DIR]   (default: ./gpu-results, or $OUT when set)
# Without a GPU it says so and exits 0: these checks skip, they do not fail.
set -uo pipefail
cd "$(dirname "$0")/../.."
results="${1:-${OUT:-gpu-results}}"
mkdir -p "$results"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "tests/gpu: no GPU on this machine: skipping the GPU checks" | tee "$results/summary.txt"
  exit 0
fi
nvidia-smi >"$results/nvidia-smi.txt" 2>&1
bash scripts/build.sh build-gpu >"$results/build.log" 2>&1 || { echo "build failed" | tee "$results/summary.txt"; exit 1; }

# The real NCCL on a real GPU, with and without the shim: a one-rank communicator must initialise, and every
# return code must be the same.
export LD_LIBRARY_PATH="${NCCL_LIB_DIR:-/usr/local/cuda/lib}"
build-gpu/tests/programs/nccl_probe_program >"$results/probe-plain.txt" 2>&1
TRAINSCOPE_DIR="$PWD/$results/runs" TRAINSCOPE_RUN_ID=gpu LD_PRELOAD="$PWD/build-gpu/shim/libtrainscope.so" \
  build-gpu/tests/programs/nccl_probe_program >"$results/probe-shim.txt" 2>"$results/probe-shim.err"
status=0
if ! diff -u "$results/probe-plain.txt" "$results/probe-shim.txt" >"$results/probe.diff"; then status=1; fi
grep -q "ncclCommInitRank 0" "$results/probe-shim.txt" || status=1
build-gpu/tools/trainscope report "$PWD/$results/runs/gpu" >"$results/report.txt" 2>&1 || status=1
{ echo "probe (real NCCL, 1 rank, with and without the shim): $([ $status -eq 0 ] && echo OK || echo FAILED)"
  cat "$results/probe-shim.txt"; } | tee "$results/summary.txt"

# Statistics kernels (issue 4): every GPU test against the host implementation, then compute-sanitizer memcheck and
# racecheck on the tests that run quickly under it (the 2^31-element test takes minutes there), then the benchmark.
step() {  # step NAME COMMAND...: runs, logs to $results/NAME.log, appends OK/FAILED to the summary
  local name="$1"; shift
  if "$@" >"$results/$name.log" 2>&1; then echo "$name: OK" | tee -a "$results/summary.txt"
  else echo "$name: FAILED (see $name.log)" | tee -a "$results/summary.txt"; status=1; fi
}
step stats-gpu-tests build-gpu/tests/gpu/stats_gpu_tests --gtest_output="xml:$results/stats-gpu-tests.xml"
sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
quick='StatsGpu.OneLaunchForAThousandMixedTensors:StatsGpu.AddressNotAMultipleOfTheElementSizeIsReadBytewise'
quick="$quick:StatsGpu.ACapturingStreamGetsNoWork"
if [ -x "$sanitizer" ]; then
  for tool in memcheck racecheck; do
    step "stats-gpu-$tool" "$sanitizer" --tool "$tool" --error-exitcode 1 \
      build-gpu/tests/gpu/stats_gpu_tests --gtest_filter="$quick"
  done
else
  echo "compute-sanitizer: not found, memcheck/racecheck skipped" | tee -a "$results/summary.txt"
fi
if [ -x build-gpu/tests/gpu/stats_gpu_bench ]; then
  step stats-gpu-bench build-gpu/tests/gpu/stats_gpu_bench --json "$results/stats-gpu-bench.json"
  cat "$results/stats-gpu-bench.log" >>"$results/summary.txt"
fi
# Frame reports on device buffers (issue 5): the real NCCL, one rank, an inf in a device send buffer at batch 3
# (every:2 marks a batch per step: an fp32 all-reduce, then an fp16 one in a group). The shim takes their statistics
# with the kernel on the call's stream.
frames_dir="$PWD/$results/frames-runs"
if TRAINSCOPE_DIR="$frames_dir" TRAINSCOPE_RUN_ID=gpu TRAINSCOPE_STEP_MARKER=every:2 \
  LD_PRELOAD="$PWD/build-gpu/shim/libtrainscope.so" build-gpu/tests/gpu/watch_gpu_program 6 \
  >"$results/watch-gpu.log" 2>&1 &&
  grep -q "Detected inf/nan during batch_number=3" "$frames_dir/gpu/nonfinite-rank0.txt" &&
  grep -q "     inf input\[0\]" "$frames_dir/gpu/nonfinite-rank0.txt"; then
  echo "frames-on-device-buffers: OK" | tee -a "$results/summary.txt"
else
  echo "frames-on-device-buffers: FAILED (see watch-gpu.log, frames-runs/)" | tee -a "$results/summary.txt"
  status=1
fi
cat "$frames_dir/gpu/nonfinite-rank0.txt" >>"$results/summary.txt" 2>/dev/null
# Calling-thread cost of a watched call on device buffers, and the end-to-end ratio, on the GPU job.
for watch in off collectives; do
  start=$(date +%s%N)
  TRAINSCOPE_DIR="$frames_dir" TRAINSCOPE_RUN_ID="bench-$watch" TRAINSCOPE_WATCH=$watch \
    LD_PRELOAD="$PWD/build-gpu/shim/libtrainscope.so" build-gpu/tests/gpu/watch_gpu_program 200 >/dev/null 2>&1
  end=$(date +%s%N)
  echo "watch_gpu_program 200 steps, TRAINSCOPE_WATCH=$watch: $(((end - start) / 1000000)) ms" |
    tee -a "$results/summary.txt"
done
exit $status
