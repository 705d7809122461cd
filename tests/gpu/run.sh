#!/usr/bin/env bash
# Runs every GPU check on a machine with a GPU and writes the results to a folder:
#   tests/gpu/run.sh [RESULTS_DIR]   (default: ./gpu-results, or $OUT when set)
# RESULTS_DIR receives summary.txt (also printed), the benchmark's JSON and gpu-results.tar.gz with every log, the
# test XML and the run directories: few files, so a machine that hands back only a handful loses nothing.
# With a kit from scripts/gpu-kit.sh in ./gpu-kit (or $TRAINSCOPE_GPU_KIT) nothing is built: a lent GPU machine has no
# package registry and none of our dependencies. Otherwise it builds build-gpu first.
# Without a GPU it says so and exits 0: these checks skip, they do not fail. Every step has a time limit, so the whole
# script ends within about 9 minutes even when a step hangs.
set -uo pipefail
cd "$(dirname "$0")/../.."
results="${1:-${OUT:-gpu-results}}"
mkdir -p "$results"
results="$(cd "$results" && pwd)"
work="$(mktemp -d)"
summary="$work/summary.txt"
status=0
say() { echo "$*" | tee -a "$summary"; }
finish() {
  say "gpu checks: $([ $status -eq 0 ] && echo 'ALL OK' || echo 'SOME FAILED')"
  cp "$summary" "$results/summary.txt"
  [ -f "$work/stats-gpu-bench.json" ] && cp "$work/stats-gpu-bench.json" "$results/"
  tar -C "$work" -czf "$results/gpu-results.tar.gz" . 2>/dev/null
  rm -rf "$work"
  exit $status
}

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "tests/gpu: no GPU on this machine: skipping the GPU checks" | tee "$results/summary.txt"
  exit 0
fi
nvidia-smi >"$work/nvidia-smi.txt" 2>&1
say "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | sed -n 1p)"

kit="${TRAINSCOPE_GPU_KIT:-gpu-kit}"
if [ -f "$kit/kit.txt" ]; then
  build="$kit"
  export LD_LIBRARY_PATH="$PWD/$kit/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # The machine's libstdc++ may be older than the one the kit was built with: then, and only then, use ours.
  if ! "$build/tools/trainscope" version >"$work/kit-check.txt" 2>&1; then
    export LD_LIBRARY_PATH="$PWD/$kit/lib-fallback:$LD_LIBRARY_PATH"
    "$build/tools/trainscope" version >>"$work/kit-check.txt" 2>&1 ||
      { say "kit: its binaries do not start here: $(tail -n 1 "$work/kit-check.txt")"; status=1; finish; }
    say "kit: using its own libstdc++ (the machine's is older)"
  fi
  say "kit: $(grep -E '^(commit|built):' "$kit/kit.txt" | tr '\n' ' ')"
  fatbin="$kit/stats_kernels.fatbin"
else
  build=build-gpu
  timeout 900 bash scripts/build.sh build-gpu >"$work/build.log" 2>&1 ||
    { say "build failed: $(tail -n 3 "$work/build.log" | tr '\n' ' ')"; status=1; finish; }
  fatbin="build-gpu/kernels/stats_kernels.fatbin"
fi
cuobjdump="$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)"
if [ -x "$cuobjdump" ] && [ -f "$fatbin" ]; then
  say "fatbin: $("$cuobjdump" --list-elf --list-ptx "$fatbin" 2>&1 | grep -o -E '(sm|compute)_[0-9]+[a-z]?' | sort -u |
    tr '\n' ' ')"
fi

# The real NCCL: $NCCL_LIB_DIR, the toolkit's folders, the system's, then the NCCL wheel of the machine's Python.
nccl_dir=""
python_nccl="$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' \
  2>/dev/null || true)"
for dir in "${NCCL_LIB_DIR:-}" /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu "$python_nccl"; do
  if [ -n "$dir" ] && [ -e "$dir/libnccl.so.2" ]; then nccl_dir="$dir"; break; fi
done
if [ -z "$nccl_dir" ]; then
  say "NCCL: no libnccl.so.2 found (set NCCL_LIB_DIR); the NCCL checks are skipped"
else
  export LD_LIBRARY_PATH="$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  say "NCCL: $nccl_dir/libnccl.so.2"
fi
shim="$PWD/$build/shim/libtrainscope.so"

step() {  # step NAME SECONDS COMMAND...: runs with a time limit, logs to NAME.log, says OK/FAILED
  local name="$1" limit="$2"
  shift 2
  local start=$SECONDS
  if timeout --kill-after=10 "$limit" "$@" >"$work/$name.log" 2>&1; then
    say "$name: OK ($((SECONDS - start)) s)"
  else
    local rc=$?
    say "$name: FAILED, exit $rc$([ $rc -eq 124 ] && echo " (past its $limit s)") after $((SECONDS - start)) s"
    grep -E '^\[  FAILED  \]|Failure|ERROR SUMMARY|error' "$work/$name.log" | sed -n 1,20p | sed 's/^/    /' |
      tee -a "$summary"
    status=1
  fi
}

if [ -n "$nccl_dir" ]; then
  # The real NCCL on a real GPU, with and without the shim: a one-rank communicator must initialise, and every
  # return code must be the same.
  timeout 120 "$build/tests/programs/nccl_probe_program" >"$work/probe-plain.txt" 2>&1
  TRAINSCOPE_DIR="$work/runs" TRAINSCOPE_RUN_ID=gpu LD_PRELOAD="$shim" timeout 120 \
    "$build/tests/programs/nccl_probe_program" >"$work/probe-shim.txt" 2>"$work/probe-shim.err"
  if diff -u "$work/probe-plain.txt" "$work/probe-shim.txt" >"$work/probe.diff" &&
    grep -q "ncclCommInitRank 0" "$work/probe-shim.txt" &&
    timeout 60 "$build/tools/trainscope" report "$work/runs/gpu" >"$work/report.txt" 2>&1; then
    say "probe (real NCCL, 1 rank, with and without the shim): OK"
  else
    say "probe (real NCCL, 1 rank, with and without the shim): FAILED"
    status=1
  fi
  sed 's/^/    /' "$work/probe-shim.txt" | tee -a "$summary"
fi

# Statistics kernels (issue 4): every GPU test against the host implementation, then compute-sanitizer memcheck and
# racecheck on the tests that run quickly under it (the 2^31-element test takes minutes there), then the benchmark.
step stats-gpu-tests 240 "$build/tests/gpu/stats_gpu_tests" --gtest_output="xml:$work/stats-gpu-tests.xml"
grep -E '^\[  (PASSED|SKIPPED|FAILED) *\] [0-9]+ tests?[,.]|^\[==========\] .* ran' "$work/stats-gpu-tests.log" |
  sed 's/^/    /' | tee -a "$summary"
# nvidia-smi sees a GPU, so a test that skips (no driver for us, a launcher that cannot load) is a failure here.
if grep -q -E '^\[  SKIPPED \] [1-9]' "$work/stats-gpu-tests.log"; then
  say "stats-gpu-tests: SKIPPED on a machine with a GPU: $(grep -m 1 -o -E 'no GPU here.*|the launcher cannot run.*' \
    "$work/stats-gpu-tests.log")"
  status=1
fi
sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
quick='StatsGpu.OneLaunchForAThousandMixedTensors:StatsGpu.AddressNotAMultipleOfTheElementSizeIsReadBytewise'
quick="$quick:StatsGpu.ACapturingStreamGetsNoWork"
if [ -x "$sanitizer" ]; then
  for tool in memcheck racecheck; do
    step "stats-gpu-$tool" 150 "$sanitizer" --tool "$tool" --error-exitcode 1 \
      "$build/tests/gpu/stats_gpu_tests" --gtest_filter="$quick"
    grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$work/stats-gpu-$tool.log" | sed 's/^/    /' | tee -a "$summary"
  done
else
  say "compute-sanitizer: not found, memcheck/racecheck skipped"
fi
step stats-gpu-bench 150 "$build/tests/gpu/stats_gpu_bench" --json "$work/stats-gpu-bench.json"
tee -a "$summary" <"$work/stats-gpu-bench.log"
grep -q 'skipped' "$work/stats-gpu-bench.log" && status=1

if [ -n "$nccl_dir" ]; then
  # Frame reports on device buffers (issue 5): the real NCCL, one rank, an inf in a device send buffer at batch 3
  # (every:2 marks a batch per step: an fp32 all-reduce, then an fp16 one in a group). The shim takes their
  # statistics with the kernel on the call's stream.
  frames="$work/frames-runs"
  step watch-gpu 120 env TRAINSCOPE_DIR="$frames" TRAINSCOPE_RUN_ID=gpu TRAINSCOPE_STEP_MARKER=every:2 \
    LD_PRELOAD="$shim" "$build/tests/gpu/watch_gpu_program" 6
  if grep -q "Detected inf/nan during batch_number=3" "$frames/gpu/nonfinite-rank0.txt" 2>/dev/null &&
    grep -q "     inf input\[0\]" "$frames/gpu/nonfinite-rank0.txt"; then
    say "frames-on-device-buffers: OK"
  else
    say "frames-on-device-buffers: FAILED (see watch-gpu.log, frames-runs/)"
    status=1
  fi
  sed 's/^/    /' "$frames/gpu/nonfinite-rank0.txt" 2>/dev/null | tee -a "$summary"
  # Calling-thread cost of a watched call on device buffers, and the end-to-end ratio, on the GPU job.
  for watch in none off collectives; do
    preload="$shim"
    [ "$watch" = none ] && preload=""
    TRAINSCOPE_DIR="$frames" TRAINSCOPE_RUN_ID="bench-$watch" TRAINSCOPE_WATCH="${watch/none/off}" \
      LD_PRELOAD="$preload" timeout 120 "$build/tests/gpu/watch_gpu_program" 200 >"$work/bench-$watch.log" 2>&1 ||
      status=1
    say "watch_gpu_program 200 steps, $([ "$watch" = none ] && echo 'without the shim' ||
      echo "TRAINSCOPE_WATCH=$watch"): $(grep -o 'loop .*' "$work/bench-$watch.log" || echo 'failed')"
  done
fi
# Module frames of CUDA tensors without PyTorch (issue 21): what the hooks pack for a module on a GPU, through
# trainscope_module_frame, read by the statistics kernel: an fp16 weight, a host bias, a transposed fp32 view (its
# elements 4 ... 1915, read in logical order; a contiguous read from its start would end at 1539) and an output
# holding +inf from batch 2. The same program runs in ctest on the stand-in GPU, where the kernel is replayed.
step module-frames-device 60 env TRAINSCOPE_DIR="$work/module-device-runs" TRAINSCOPE_RUN_ID=m TRAINSCOPE_WATCH=modules \
  TRAINSCOPE_COORDINATOR=off LD_PRELOAD="$shim" "$build/tests/programs/device_module_frames_program" 4
module_report="$(cat "$work/module-device-runs/m"/nonfinite-*.txt 2>/dev/null)"
if grep -q "Detected inf/nan during batch_number=2" <<<"$module_report" &&
  grep -q "^4.00e+00 1.92e+03 input\[0\]$" <<<"$module_report" && grep -q "^2.50e-01      inf output$" <<<"$module_report"
then
  say "module-frames-cuda-tensors (strided view read by the kernel, inf at batch 2): OK"
else
  say "module-frames-cuda-tensors (strided view read by the kernel, inf at batch 2): FAILED (see module-device-runs/)"
  status=1
fi
grep -A4 "encoder.fc Linear" <<<"$module_report" | tail -5 | sed 's/^/    /' | tee -a "$summary"

# trainscope doctor (issue 13) on a real driver: the driver's CUDA and every GPU (nvidia-smi's names) are found.
timeout 120 "$build/tools/trainscope" doctor --json >"$work/doctor.json" 2>"$work/doctor.err"
gpu_name="$(nvidia-smi --query-gpu=name --format=csv,noheader | sed -n 1p)"
if grep -q '"check": "gpus"' "$work/doctor.json" && grep -q -F "$gpu_name" "$work/doctor.json" &&
  grep -q 'supports CUDA up to' "$work/doctor.json"; then
  say "doctor (real driver and GPUs): OK"
else
  say "doctor (real driver and GPUs): FAILED (see doctor.json, doctor.err)"
  status=1
fi
timeout 60 "$build/tools/trainscope" doctor 2>&1 | sed 's/^/    /' | tee -a "$summary"
if [ -n "$nccl_dir" ]; then
  # trainscope commcheck (issue 13) on the real NCCL with device buffers: one rank per GPU (NCCL refuses two ranks on
  # one GPU), each must say OK.
  gpus="$(nvidia-smi -L | wc -l)"
  step commcheck-gpu 120 "$build/tests/programs/ts-launch" -n "$gpus" --timeout 100 -- \
    "$build/tools/trainscope" commcheck --buffers device --timeout 60
  say "commcheck ($gpus rank(s), device buffers): $(grep -c 'is OK (global rank' "$work/commcheck-gpu.log") of $gpus OK"
  sed 's/^/    /' "$work/commcheck-gpu.log" | sed -n 1,16p | tee -a "$summary"
fi
if [ -n "$nccl_dir" ]; then
  # Python stacks on a real framework (issue 10): a one-rank PyTorch job whose ncclAllReduce calls must carry the line
  # of torch_job.py that called dist.all_reduce, in `trainscope report`'s list of last calls.
  if python3 -c 'import torch, torch.distributed' >/dev/null 2>&1; then
    line="$(grep -n 'dist.all_reduce(tensor)' tests/gpu/torch_job.py | cut -d: -f1)"
    step torch-job 180 env TRAINSCOPE_DIR="$work/torch-runs" TRAINSCOPE_RUN_ID=torch MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=29533 RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LD_PRELOAD="$shim" python3 tests/gpu/torch_job.py
    timeout 60 "$build/tools/trainscope" report "$work/torch-runs/torch" >"$work/torch-report.txt" 2>&1
    if grep -q "ncclAllReduce" "$work/torch-report.txt" && grep -q "torch_job.py:$line" "$work/torch-report.txt"; then
      say "pytorch-python-stack: OK (ncclAllReduce at torch_job.py:$line)"
    else
      say "pytorch-python-stack: FAILED (no ncclAllReduce with torch_job.py:$line in torch-report.txt)"
      status=1
    fi
    grep -E "ncclAllReduce|Python" "$work/torch-report.txt" | sed -n 1,8p | sed 's/^/    /' | tee -a "$summary"
  else
    say "pytorch-python-stack: skipped (no torch in this machine's python3)"
  fi
fi

# CUDA launches (issue 12): a CUDA runtime program with no NCCL under the shim, so the collector starts from the
# driver's injection (CUDA_INJECTION64_PATH, set by the shim at load). One rank, no coordinator.
launches="$work/launch-runs"
program="$build/tests/gpu/launches_gpu_program"
job=(env TRAINSCOPE_DIR="$launches" RANK=0 WORLD_SIZE=1 TRAINSCOPE_COORDINATOR=off LD_PRELOAD="$shim")
if [ -x "$program" ]; then
  # Kernel frames: grow_kernel overflows fp16 at step 3; the optimizer kernel ends each batch (auto markers).
  step launches-chain 120 "${job[@]}" TRAINSCOPE_RUN_ID=chain TRAINSCOPE_WATCH=kernels:grow_kernel \
    TRAINSCOPE_STEP_MARKER=auto "$program" chain 6
  nonfinite="$launches/chain/nonfinite-rank0.txt"
  if grep -q "Detected inf/nan during batch_number=3" "$nonfinite" 2>/dev/null && grep -q "grow_kernel" "$nonfinite"
  then
    say "kernel-frames (fp16 overflow in grow_kernel at batch 3): OK"
  else
    say "kernel-frames (fp16 overflow in grow_kernel at batch 3): FAILED (see launch-runs/chain)"
    status=1
  fi
  sed 's/^/    /' "$nonfinite" 2>/dev/null | sed -n 1,20p | tee -a "$summary"
  timeout 60 "$build/tools/trainscope" report "$launches/chain" >"$work/launches-chain-report.txt" 2>&1
  if grep -q "fused_adam_kernel" "$work/launches-chain-report.txt"; then
    say "launches-in-report (last launches per stream): OK"
  else
    say "launches-in-report (last launches per stream): FAILED (see launches-chain-report.txt)"
    status=1
  fi
  # Did it finish: a kernel still spinning in a hung process is not finished in the report. The report is read while
  # the process lives (bounded: 40 tries, until the activity flush has reached the spin), then once more after the
  # process is SIGKILLed, as a launcher would end a hung job.
  "${job[@]}" TRAINSCOPE_RUN_ID=spin timeout -s KILL 60 "$program" spin >"$work/launches-spin.log" 2>&1 &
  spin_pid=$!
  for _ in $(seq 1 40); do
    timeout 60 "$build/tools/trainscope" report "$launches/spin" >"$work/launches-spin-report.txt" 2>&1 || true
    grep -q "spin_kernel.*not finished as of" "$work/launches-spin-report.txt" && break
    sleep 0.5
  done
  pkill -KILL -f "$program spin" || true
  wait "$spin_pid" 2>/dev/null || true
  timeout 60 "$build/tools/trainscope" report "$launches/spin" >"$work/launches-spin-report.txt" 2>&1
  if grep -q "spin_kernel" "$work/launches-spin-report.txt" && grep -q "not finished" "$work/launches-spin-report.txt"
  then
    say "unfinished-launch (spin_kernel of a killed process): OK"
  else
    say "unfinished-launch (spin_kernel of a killed process): FAILED (see launches-spin-report.txt)"
    status=1
  fi
  # The first CUDA error: an out-of-bounds write surfaces at cudaStreamSynchronize, reported with the kernel before.
  step launches-oob 60 "${job[@]}" TRAINSCOPE_RUN_ID=oob "$program" oob
  error_report="$launches/oob/cuda-error-rank0.txt"
  if grep -q "cudaStreamSynchronize" "$error_report" 2>/dev/null && grep -q "oob_write_kernel" "$error_report"; then
    say "cuda-error-report (oob_write_kernel, then cudaStreamSynchronize): OK"
  else
    say "cuda-error-report (oob_write_kernel, then cudaStreamSynchronize): FAILED (see launch-runs/oob)"
    status=1
  fi
  sed 's/^/    /' "$error_report" 2>/dev/null | sed -n 1,20p | tee -a "$summary"
  # Calling-thread cost per launch: a launch-bound loop without the shim, and with TRAINSCOPE_LAUNCHES off/calls/on.
  for mode in none off calls on; do
    preload="$shim"
    [ "$mode" = none ] && preload=""
    env TRAINSCOPE_DIR="$launches" TRAINSCOPE_RUN_ID="bench-$mode" RANK=0 WORLD_SIZE=1 TRAINSCOPE_COORDINATOR=off \
      TRAINSCOPE_LAUNCHES="${mode/none/off}" LD_PRELOAD="$preload" timeout 120 "$program" bench 200000 \
      >"$work/launches-bench-$mode.log" 2>&1 || status=1
    say "launches_gpu_program bench 200000, $([ "$mode" = none ] && echo 'without the shim' ||
      echo "TRAINSCOPE_LAUNCHES=$mode"): $(grep -o 'launch loop: .*' "$work/launches-bench-$mode.log" || echo 'failed')"
  done
else
  say "launches: $program was not built (it needs nvcc): FAILED"
  status=1
fi
# The whole-job figure of issue 20 on a machine with spare cores (the developers' machines have 2, which the 4 ranks
# of the stand-in job already oversubscribe): the ratio to the unwatched job under each configuration. A figure.
if [ -x "$build/tests/programs/loop_program" ] && [ -e "$build/tests/fakes/lib/libnccl.so.2" ]; then
  step whole-job 240 bash tests/bench/whole_job.sh "$build" 8000 3 plain
  grep -E '^whole job|x wall|^  unwatched' "$work/whole-job.log" | sed 's/^/    /' | tee -a "$summary"
fi
# Module frames (issue 21): GPT-2 in float16 on CUDA under TRAINSCOPE_WATCH=modules against DebugUnderflowOverflow,
# no host synchronisation in a watched step, and the time per step (where python3 has torch with CUDA and
# transformers; skipped, saying so, where not). Last, in what is left of 9 minutes, so that a device run's 10-minute
# limit still leaves time to write the results.
left=$((540 - SECONDS))
if [ "$left" -ge 60 ]; then
  timeout --kill-after=10 "$left" bash tests/gpu/module_frames_gpu.sh "$shim" "$work/module-frames" \
    >"$work/module-frames.log" 2>&1
  rc=$?
  sed 's/^/  /' "$work/module-frames.log" | sed -n 1,40p | tee -a "$summary"
  if [ $rc -ne 0 ]; then
    status=1
    [ $rc -eq 124 ] && say "module-frames: FAILED (past the $left s left)"
  fi
else
  say "module-frames: skipped (only $left s left of the 9 minutes)"
fi
finish
