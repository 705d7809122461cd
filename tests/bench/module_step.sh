#!/usr/bin/env bash
# What TRAINSCOPE_WATCH=modules costs a training step (figures, not a test): tests/bench/module_step.py's small T5
# trained on the CPU (one thread), run unwatched, with transformers' DebugUnderflowOverflow (DUO) attached, and
# unmodified under LD_PRELOAD=libtrainscope.so TRAINSCOPE_WATCH=modules, interleaved, ROUNDS rounds of STEPS timed
# steps each (after 3 warm-up steps). Prints each configuration's median step time (the median of the rounds' medians;
# the least step seen), its ratio to the unwatched median, and trainscope's overhead over DUO's (issue 21's target:
# under a third). Then the hook path per frame and per tensor row: the Python side (trainscope's hooks with the
# library call a no-op, on a chain of 256 Linear(4, 4)), the native side (the time inside trainscope_module_frame,
# called directly), and what those figures account for in one T5 step.
#   module_step.sh BUILD_DIR [STEPS] [ROUNDS]     (defaults: 15 steps, 3 rounds; about 75 s on 2 CPUs; the rounds'
#   medians of one configuration have stayed within 3 % of each other, so 5 rounds told nothing more)
set -euo pipefail
build="$(cd "${1:-build}" && pwd)"
steps="${2:-15}"
rounds="${3:-3}"
here="$(cd "$(dirname "$0")" && pwd)"
python="${TS_TORCH_PYTHON:-$here/../../.torch/bin/python}"
if [ ! -x "$python" ]; then
  echo "module frames benchmark: no torch environment (scripts/torch_env.sh), skipped"
  exit 0
fi
shim="$build/shim/libtrainscope.so"
hooks="$build/shim/trainscope-python"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
export OMP_NUM_THREADS=1 TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1

bench() {  # $1: a configuration (unwatched, duo, trainscope, or none: plain), then module_step.py's arguments
  local configuration="$1" dir="$scratch/runs.$RANDOM"
  shift
  if [ "$configuration" = trainscope ]; then
    LD_PRELOAD="$shim" TRAINSCOPE_DIR="$dir" TRAINSCOPE_WATCH=modules \
      "$python" "$here/module_step.py" "$@" 2>"$scratch/err" || { cat "$scratch/err" >&2; return 1; }
  else
    "$python" "$here/module_step.py" "$@" 2>"$scratch/err" || { cat "$scratch/err" >&2; return 1; }
  fi
  rm -rf "$dir"
}
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }  # $1: a key; reads "... key=value ..." lines
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}'; }

configurations=(unwatched duo trainscope)
declare -A medians=() mins=()
for ((round = 0; round < rounds; ++round)); do
  for configuration in "${configurations[@]}"; do
    extra=()
    [ "$configuration" = duo ] && extra=(--duo)
    line=$(bench "$configuration" step --warmup 3 --steps "$steps" "${extra[@]}")
    medians[$configuration]+="$(field median_ms <<<"$line") "
    mins[$configuration]+="$(field min_ms <<<"$line") "
  done
done

echo "module frames: T5 (4+4 layers, d_model 128) training step on 1 CPU thread, batch 8 x 64;" \
  "$rounds interleaved rounds of $steps steps"
declare -A step=()
for configuration in "${configurations[@]}"; do
  step[$configuration]=$(printf '%s\n' ${medians[$configuration]} | median)
  least=$(printf '%s\n' ${mins[$configuration]} | sort -n | sed -n 1p)
  awk -v name="$configuration" -v ms="${step[$configuration]}" -v base="${step[unwatched]}" -v least="$least" \
    -v runs="${medians[$configuration]% }" 'BEGIN {
      printf "  %-10s %8.2f ms per step  %.3fx  (least %.2f ms; rounds: %s)\n", name, ms, ms / base, least, runs }'
done
awk -v base="${step[unwatched]}" -v duo="${step[duo]}" -v ts="${step[trainscope]}" 'BEGIN {
  printf "  overhead per step: DUO %+.2f ms, trainscope %+.2f ms; trainscope overhead / DUO overhead = %.3f" \
    " (issue 21: under 0.333)\n", duo - base, ts - base, (duo - base != 0) ? (ts - base) / (duo - base) : 0 }'

python_line=$(bench plain python --hooks-dir "$hooks")
native_line=$(bench trainscope native)
chain=$(grep '^chain' <<<"$python_line")
t5=$(grep '^t5' <<<"$python_line")
watched=$(grep '^chain' <<<"$native_line" | field watched_ns)
native=$(grep '^native' <<<"$native_line")
echo "module frames: the hook path per frame and per tensor row (a chain of 256 Linear(4, 4), no autograd:" \
  "$(field frames <<<"$chain") frames, $(field rows <<<"$chain") rows a forward)"
awk -v bare="$(field bare_ns <<<"$chain")" -v noop="$(field hooked_noop_ns <<<"$chain")" -v watched="$watched" \
  -v frames="$(field frames <<<"$chain")" -v rows="$(field rows <<<"$chain")" 'BEGIN {
    printf "  python side (the hooks, library call a Python no-op): %.2f us per frame, %.2f us per row\n",
      (noop - bare) / frames / 1000, (noop - bare) / rows / 1000
    printf "  whole path (the real hooks under LD_PRELOAD):        %.2f us per frame, %.2f us per row\n",
      (watched - bare) / frames / 1000, (watched - bare) / rows / 1000 }'
awk -v call="$(field ctypes_call_ns <<<"$native")" -v small="$(field small_frame_ns <<<"$native")" \
  -v small_elements="$(field small_elements <<<"$native")" -v large="$(field large_frame_ns <<<"$native")" \
  -v large_elements="$(field large_elements <<<"$native")" -v element="$(field per_element_ns <<<"$native")" 'BEGIN {
    printf "  native side (inside trainscope_module_frame, called directly; ctypes itself %.2f us a call):\n",
      call / 1000
    printf "    Linear(4, 4) frame, 4 rows, %d elements: %.2f us per frame, %.2f us per row\n", small_elements,
      small / 1000, small / 4000
    printf "    Linear(128, 512) on 8x64x128, 4 rows, %d float32 elements: %.1f us per frame;", large_elements,
      large / 1000
    printf " %.3f ns per element (%.1f GB/s, in cache)\n", element, 4 / element }'
awk -v frames="$(field frames <<<"$t5")" -v rows="$(field rows <<<"$t5")" -v elements="$(field elements <<<"$t5")" \
  -v bare="$(field bare_ns <<<"$chain")" -v noop="$(field hooked_noop_ns <<<"$chain")" \
  -v chain_rows="$(field rows <<<"$chain")" -v call="$(field ctypes_call_ns <<<"$native")" \
  -v small="$(field small_frame_ns <<<"$native")" -v element="$(field per_element_ns <<<"$native")" \
  -v measured="${step[trainscope]}" -v base="${step[unwatched]}" 'BEGIN {
    python = rows * (noop - bare) / chain_rows / 1e6
    native = (frames * call + rows * small / 4 + elements * element) / 1e6
    printf "  one T5 step: %d frames, %d rows, %.1f M elements; by the figures above: python %.2f ms + ctypes and" \
      " native %.2f ms = %.2f ms (measured overhead %+.2f ms)\n", frames, rows, elements / 1e6, python, native,
      python + native, measured - base }'
