#!/usr/bin/env bash
# Module frames on a GPU (issue 21), for tests/gpu/run.sh: GPT-2 in float16 on CUDA, its first MLP made to overflow
# at batch 2, run once with transformers' DebugUnderflowOverflow attached and once unmodified under
# TRAINSCOPE_WATCH=modules.
#   tests/gpu/module_frames_gpu.sh SHIM WORK_DIR
# Prints one line per check (OK, FAILED or skipped, with why) and exits 1 when one failed. It needs torch with CUDA
# and transformers in python3; without them every check is skipped and it exits 0. Every run has a time limit.
#  - module-frames-cuda-fp16: "Last 21 forward frames" of both, equal line for line (statistics by the kernel here,
#    by torch there).
#  - module-frames-no-sync: PyTorch's sync debug mode set to "error" during every step's forward and backward: a hook
#    that synchronised the host with the GPU (.item(), a copy to the host) would raise. The unwatched job goes first:
#    where the model itself synchronises, the check cannot say anything and says so.
#  - module-frames-fused-skip: a fused optimizer (SGD(fused=True)) under GradScaler on CUDA skips batch 2's update
#    itself; the hooks read its found-inf back without waiting (sync debug mode "error" in every step after the
#    first) and the skip is told in batch 2, not in the batch the copy came back in.
#  - module-frames-step-time: GPT-2 small (124M) in float16, batch 8 x 512, the median step time without and with the
#    watch (a figure; the issue's target is 1.05x or less).
set -uo pipefail
shim="$1"
work="$2"
job=tests/programs/python/module_overflow_job.py
status=0
mkdir -p "$work"

if ! timeout 120 python3 -c 'import torch, transformers; assert torch.cuda.is_available()' >"$work/mf-probe.log" 2>&1
then
  echo "module-frames-cuda: skipped (python3 has no torch with CUDA, or no transformers: $(tail -n 1 "$work/mf-probe.log"))"
  exit 0
fi
overflow=(--model gpt2 --device cuda --dtype float16 --weight transformer.h.1.mlp.c_fc.weight --scale 3e5)
watched=(env TRAINSCOPE_DIR="$work/mf-runs" TRAINSCOPE_WATCH=modules TRAINSCOPE_COORDINATOR=off RANK=0 WORLD_SIZE=1
  LD_PRELOAD="$shim")

# The dumps: DUO's from "Detected inf/nan" to its last frame, trainscope's report from "Detected inf/nan" to its end.
timeout 150 python3 "$job" "${overflow[@]}" --duo >"$work/mf-duo.log" 2>&1
timeout 150 "${watched[@]}" TRAINSCOPE_RUN_ID=fp16 python3 "$job" "${overflow[@]}" >"$work/mf-watched.log" 2>&1
if python3 - "$work/mf-duo.log" "$work/mf-runs/fp16" >"$work/mf-compare.log" 2>&1 <<'EOF'
import glob, sys
out = open(sys.argv[1]).read()
start, end = out.find("Detected inf/nan"), out.find("\n\n\n\njob: stopped")
duo = out[start:end + 1] if 0 <= start < end else ""
reports = glob.glob(sys.argv[2] + "/nonfinite-*.txt")
text = open(reports[0]).read() if len(reports) == 1 else ""
ours = text[text.find("Detected inf/nan"):] if "Detected inf/nan" in text else ""
print("DUO's dump: %d lines; trainscope's: %d lines (%d report(s))" % (duo.count("\n"), ours.count("\n"), len(reports)))
if not duo or duo != ours:
    import difflib
    sys.stdout.writelines(list(difflib.unified_diff(duo.splitlines(True), ours.splitlines(True), "duo", "trainscope"))[:40])
    sys.exit(1)
print(duo[:duo.find("\n", duo.find("\n") + 1)])
EOF
then
  echo "module-frames-cuda-fp16 (dump equal to DUO's): OK ($(sed -n 1p "$work/mf-compare.log"))"
else
  echo "module-frames-cuda-fp16 (dump equal to DUO's): FAILED"
  sed 's/^/    /' "$work/mf-compare.log" | sed -n 1,30p
  status=1
fi

quiet=(--model gpt2 --device cuda --dtype float16 --overflow-batch 99 --sync-check)
if ! timeout 150 python3 "$job" "${quiet[@]}" >"$work/mf-sync-plain.log" 2>&1; then
  echo "module-frames-no-sync: skipped (the unwatched job synchronises by itself: $(grep -m1 -i 'error' \
    "$work/mf-sync-plain.log"))"
elif timeout 150 "${watched[@]}" TRAINSCOPE_RUN_ID=sync python3 "$job" "${quiet[@]}" >"$work/mf-sync.log" 2>&1; then
  echo "module-frames-no-sync (no host synchronisation in a watched step): OK"
else
  echo "module-frames-no-sync (no host synchronisation in a watched step): FAILED"
  grep -m3 -i 'error' "$work/mf-sync.log" | sed 's/^/    /'
  status=1
fi

fused=(--device cuda --grad-scaler --fused --steps 6 --sync-check)
if timeout 150 "${watched[@]}" TRAINSCOPE_WATCH=modules,backward TRAINSCOPE_RUN_ID=fused python3 \
  tests/programs/python/module_backward_job.py "${fused[@]}" >"$work/mf-fused.log" 2>&1 &&
  grep -qs "skipped the optimizer step of batch 2 (" "$work/mf-runs/fused/"step-skipped-*.txt; then
  echo "module-frames-fused-skip (a fused optimizer's skip, read without waiting, in its batch): OK"
else
  echo "module-frames-fused-skip (a fused optimizer's skip, read without waiting, in its batch): FAILED"
  { cat "$work/mf-runs/fused/"step-skipped-*.txt; grep -m3 -i 'error' "$work/mf-fused.log"; } 2>/dev/null |
    sed 's/^/    /'
  status=1
fi

timed=(--model gpt2 --size small --device cuda --dtype float16 --overflow-batch 99 --batch 8 --seq-len 512 --steps 14
  --timing)
plain_ms="$(timeout 150 python3 "$job" "${timed[@]}" 2>"$work/mf-time-plain.err" |
  sed -n 's/^job: median step \([0-9.]*\) ms.*/\1/p')"
watched_ms="$(timeout 150 "${watched[@]}" TRAINSCOPE_RUN_ID=time python3 "$job" "${timed[@]}" \
  2>"$work/mf-time-watched.err" | sed -n 's/^job: median step \([0-9.]*\) ms.*/\1/p')"
if [ -n "$plain_ms" ] && [ -n "$watched_ms" ]; then
  echo "module-frames-step-time (GPT-2 small, fp16, 8 x 512): unwatched $plain_ms ms, TRAINSCOPE_WATCH=modules" \
    "$watched_ms ms, $(python3 -c "print('%.3f' % ($watched_ms / $plain_ms))")x"
else
  echo "module-frames-step-time: FAILED (no median step time: see mf-time-*.err)"
  status=1
fi
exit $status
