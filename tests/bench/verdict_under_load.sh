#!/usr/bin/env bash
# How late a verdict comes, and how long the job takes to stop, when the node's cores are busy: a 4-rank stand-in job
# whose rank 2 makes a collective of another count at step 20 is run with every core idle, and with one and with two
# busy-looping processes per core (at the job's own priority). Prints the median and worst time from the last rank
# reaching the mismatched call to the coordinator's verdict (the report's detected_ns against the calls' start_ns),
# and until every rank has exited with status 86. A figure, not a test (docs/performance.md: why trainscope's threads
# are scheduled as the job's).
#   verdict_under_load.sh BUILD_DIR [ROUNDS]
set -euo pipefail
build="$1"
rounds="${2:-5}"
scratch="$(mktemp -d)"
hogs=()
stop_hogs() {
  if [ ${#hogs[@]} -gt 0 ]; then
    kill "${hogs[@]}" 2>/dev/null || true
    wait "${hogs[@]}" 2>/dev/null || true
  fi
  hogs=()
}
trap 'stop_hogs; rm -rf "$scratch"' EXIT
start_hogs() {  # $1: busy processes per core
  for ((i = 0; i < $1 * $(nproc); ++i)); do
    sh -c 'while :; do :; done' &
    hogs+=($!)
  done
}

run_once() {  # prints "verdict_ms exit_ms status"
  local dir="$scratch/run.$RANDOM" start end status=0
  start=$(date +%s%N)
  LD_LIBRARY_PATH="$build/tests/fakes/lib" LD_PRELOAD="$build/shim/libtrainscope.so" TRAINSCOPE_DIR="$dir" \
    "$build/tests/programs/ts-launch" -n 4 --timeout 120 -- \
    "$build/tests/programs/scenario_program" --steps 40 --count 128 --fault half-count --rank 2 --step 20 \
    >/dev/null 2>&1 || status=$?
  end=$(date +%s%N)
  local verdict
  verdict=$(python3 - "$dir" <<'EOF'
import glob, json, sys
reports = glob.glob(sys.argv[1] + "/**/mismatch-*.json", recursive=True)
if not reports:
    print("nan")
else:
    report = json.load(open(reports[0]))
    last = max(c["call"]["start_ns"] for c in report["calls"] if c.get("present"))
    print("%.1f" % ((report["detected_ns"] - last) / 1e6))
EOF
  )
  rm -rf "$dir"
  echo "$verdict $(((end - start) / 1000000)) $status"
}

stats() { sort -n | awk '{a[NR]=$1} END {printf "median %7.1f  worst %7.1f", a[int((NR + 1) / 2)], a[NR]}'; }

echo "verdict under load: 4 ranks, a count mismatch at step 20 of 40, $rounds rounds, $(nproc) cores"
for load in 0 1 2; do
  verdicts=""
  exits=""
  wrong=""
  for ((round = 0; round < rounds; ++round)); do
    start_hogs "$load"
    read -r verdict exit_ms status < <(run_once)
    stop_hogs
    verdicts+="$verdict "
    exits+="$exit_ms "
    [ "$status" = 86 ] || wrong+="$status "
  done
  printf '  %d busy per core: verdict after the last arrival (ms): %s; all ranks out (ms): %s%s\n' "$load" \
    "$(printf '%s\n' $verdicts | stats)" "$(printf '%s\n' $exits | stats)" \
    "${wrong:+; exit statuses other than 86: $wrong}"
done
