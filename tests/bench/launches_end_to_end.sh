#!/usr/bin/env bash
# Cost per kernel launch of the whole launch path on the CPU stand-ins (libcuda, libcupti, NCCL in tests/fakes):
# cuda_launches_program --loop N launches one kernel N times, without trainscope, and under the shim with
# TRAINSCOPE_LAUNCHES=off, calls and on; each run prints its own ns per launch, and the median of REPEATS runs is
# shown. The stand-in CUPTI calls the subscriber as the real one does, so the difference is what trainscope adds on
# the launching thread; a real driver's launch (microseconds) and CUPTI's own dispatch are not in it. A figure, not a
# test.
#   launches_end_to_end.sh BUILD_DIR [LAUNCHES] [REPEATS]
set -euo pipefail
build="$1"
launches="${2:-200000}"
repeats="${3:-5}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
libs="$build/tests/fakes/cuda:$build/tests/fakes/lib"
program="$build/tests/programs/cuda_launches_program"

per_launch() {  # $1: none|off|calls|on; prints ns per launch
  if [ "$1" = none ]; then
    LD_LIBRARY_PATH="$libs" "$program" --loop "$launches"
  else
    LD_LIBRARY_PATH="$libs" LD_PRELOAD="$build/shim/libtrainscope.so" TRAINSCOPE_DIR="$scratch/runs" \
      TRAINSCOPE_LAUNCHES="$1" TRAINSCOPE_LOG_LEVEL=warn "$program" --loop "$launches"
  fi | awk '/ns per launch/ {print $3}'
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}'; }

for mode in none off calls on; do
  figures=()
  for ((i = 0; i < repeats; ++i)); do figures+=("$(per_launch "$mode")"); done
  printf '%-6s %s ns per launch (median of %d runs of %d launches: %s)\n' "$mode" \
    "$(printf '%s\n' "${figures[@]}" | median)" "$repeats" "$launches" "${figures[*]}"
done
