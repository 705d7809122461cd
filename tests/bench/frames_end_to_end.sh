#!/usr/bin/env bash
# End-to-end cost of watching on the CPU stand-in NCCL: the same 4-rank train_program job (each step: an fp32
# all-reduce of COUNT elements, then an fp16 all-reduce and a broadcast in one group) run REPEATS times with
# TRAINSCOPE_WATCH=off and with the default (collectives), alternating; prints the median wall time of each and
# their ratio. A figure, not a test.
#   frames_end_to_end.sh BUILD_DIR [STEPS] [COUNT] [REPEATS]
set -euo pipefail
build="$1"
steps="${2:-2000}"
count="${3:-65536}"
repeats="${4:-5}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

run_once() {  # $1: off|collectives; prints the wall time in ms
  local start end
  start=$(date +%s%N)
  LD_LIBRARY_PATH="$build/tests/fakes/lib" LD_PRELOAD="$build/shim/libtrainscope.so" TRAINSCOPE_DIR="$scratch/runs" \
    TRAINSCOPE_WATCH="$1" TRAINSCOPE_LOG_LEVEL=warn \
    "$build/tests/programs/ts-launch" -n 4 --timeout 600 -- "$build/tests/programs/train_program" \
    --steps "$steps" --count "$count" >/dev/null
  end=$(date +%s%N)
  echo $(((end - start) / 1000000))
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}'; }

off=()
on=()
for ((i = 0; i < repeats; ++i)); do
  off+=("$(run_once off)")
  on+=("$(run_once collectives)")
done
off_ms=$(printf '%s\n' "${off[@]}" | median)
on_ms=$(printf '%s\n' "${on[@]}" | median)
calls=$((steps * 3))
echo "frames end to end: 4 ranks x $steps steps ($calls collectives per rank, fp32 bucket of $count elements)"
echo "  watching off:         ${off_ms} ms (median of $repeats: ${off[*]})"
echo "  watching collectives: ${on_ms} ms (median of $repeats: ${on[*]})"
awk -v on="$on_ms" -v off="$off_ms" -v calls="$calls" \
  'BEGIN { printf "  ratio %.2f; %.1f us more per collective per rank\n", on / off, (on - off) * 1000 / calls }'
