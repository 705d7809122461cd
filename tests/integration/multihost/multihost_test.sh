#!/usr/bin/env bash
# One scenario of a job across hosts on the multi-host test bed (bed.sh): 3 hosts x 2 ranks, MASTER_ADDR on host 0.
#
#   multihost_test.sh SCENARIO TS_LAUNCH PROGRAM_DIR SHIM FAKE_NCCL_DIR
# SCENARIO: healthy, mismatch, node_killed, link_cut, coordinator_host_lost, slow_link.
# Exits 0 when the scenario behaved, 1 when not, 77 (skipped) where namespaces cannot be made. Prints its figures
# ("figure: ..."): verdict latencies, exit delays. TS_BED_KEEP=1 keeps the bed's folder for a look afterwards.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=tests/integration/multihost/bed.sh
source "$here/bed.sh"
[ $# -eq 5 ] || {
  echo "usage: multihost_test.sh SCENARIO TS_LAUNCH PROGRAM_DIR SHIM FAKE_NCCL_DIR" >&2
  exit 2
}
bed_enter "$@"
scenario=$1
launch=$(realpath "$2") programs=$(realpath "$3") shim=$(realpath "$4") nccl_dir=$(realpath "$5")

failures=0
check() { # check DESCRIPTION COMMAND...
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else
    echo "FAILED: $what"
    failures=$((failures + 1))
  fi
}
equals() { [ "$1" = "$2" ] || { echo "  got '$1', expected '$2'" && return 1; }; }
no_verdict_files() { ! ls "$bed"/host*/runs/job/{mismatch,desync,vanished}-* >/dev/null 2>&1; }
own_recorders_only() { # host k's folder holds its two ranks' recorders and no other host's
  local k=$1 files
  files=$(cd "$bed/host$k/runs/job" && ls -- *.tsrec | tr '\n' ' ')
  [[ $files == *"rank-$((2 * k))."* && $files == *"rank-$((2 * k + 1))."* ]] &&
    [ "$(ls "$bed/host$k/runs/job/"*.tsrec | wc -l)" = 2 ] || {
    echo "  host$k holds: $files"
    return 1
  }
}
show_logs() {
  local k
  for ((k = 0; k < bed_hosts; ++k)); do
    echo "---- host$k (ts-launch status $(cut -d' ' -f1 "$bed/exit$k" 2>/dev/null || echo running))"
    tail -n 40 "$bed/host$k.log" 2>/dev/null || true
  done
}

# The mismatch report's first lines (its communicator id made neutral) and the time from the last call of the
# mismatched collective to the coordinator's verdict, in ms.
mismatch_summary() {
  python3 - "$1" <<'EOF'
import glob, json, re, sys
run = sys.argv[1]
text = open(sorted(glob.glob(run + "/mismatch-*.txt"))[0]).read()
report = json.load(open(sorted(glob.glob(run + "/mismatch-*.json"))[0]))
head = text.split("\n\n")[0] + "\n" + "\n".join(l for l in text.splitlines() if l.startswith(("Operation", "Input shapes", "  - Process")))
print(re.sub(r"communicator [0-9a-f]+", "communicator C", head))
latest = max(c["call"]["start_ns"] for c in report["calls"] if c["present"])
print("latency_ms %.1f" % ((report["detected_ns"] - latest) / 1e6), file=sys.stderr)
EOF
}

# The vanished verdict of host 2: its text names the host and both ranks; prints the ms from `since_ns` to it.
host2_lost_verdict() { # RUN_DIR SINCE_NS
  python3 - "$1" "$2" <<'EOF'
import glob, json, sys
run, since = sys.argv[1], int(sys.argv[2])
jsons = sorted(glob.glob(run + "/vanished-rank*.json"))
if not jsons:
    print("  no vanished-rank report in " + run)
    sys.exit(1)
report = json.load(open(jsons[0]))
text = open(jsons[0][:-5] + ".txt").read()
ok = report["host"] == "host2" and report["host_ranks_lost"] == [4, 5] and \
    "Host lost: host2, ranks 4 and 5 vanished together" in text and " on host2 (not on the coordinator's host" in text
print(text if not ok else "", end="")
print("figure: verdict %.0f ms after the host was lost" % ((report["time_ns"] - since) / 1e6))
sys.exit(0 if ok else 1)
EOF
}

host_env=("" "" "") # extra environment of each host's ranks (slow_link: host 2 reaches the coordinator by the proxy)
launch_all() { # PROGRAM ARGS...: the job on every host
  local k
  for ((k = 0; k < bed_hosts; ++k)); do bed_launch "$k" "${host_env[k]}" "$@"; done
}
expect_all() { # STATUS WHAT: every host's ranks end with STATUS
  local k
  for ((k = 0; k < bed_hosts; ++k)); do
    bed_wait "$k"
    check "$2: host$k's ranks end with status $1" equals "$bed_status" "$1"
  done
}

run_healthy() {
  launch_all "$programs/loop_program" --iterations 500 --pace-ms 2
  expect_all 0 healthy
  check "healthy: no verdict" no_verdict_files
}

# Rank 4 (host 2) all-reduces half the count at step 5, milliseconds after the start: host 2's ranks may still be
# connecting. The report's first lines go to $bed/across-hosts.txt.
run_mismatch_at_start() {
  rm -rf "$bed"/host*/runs
  launch_all "$programs/scenario_program" --steps 20 --fault half-count --rank 4 --step 5
  expect_all 86 "mismatch at the start"
  mismatch_summary "$bed/host0/runs/job" >"$bed/across-hosts.txt" 2>"$bed/latency" || true
  echo "figure: mismatch at the start: verdict $(cut -d' ' -f2 "$bed/latency") ms after the last rank's call"
}

# The same fault 2 s into a job paced at one all-reduce every 2 ms, every rank long connected.
run_mismatch_while_running() {
  rm -rf "$bed"/host*/runs
  launch_all "$programs/loop_program" --iterations 3000 --pace-ms 2 --half-count-rank 4 --at 1000
  expect_all 86 "mismatch while running"
  mismatch_summary "$bed/host0/runs/job" >/dev/null 2>"$bed/latency" || true
  echo "figure: mismatch while running: verdict $(cut -d' ' -f2 "$bed/latency") ms after the last rank's call"
}

bed_start
case "$scenario" in
  healthy)
    run_healthy
    for ((k = 0; k < bed_hosts; ++k)); do check "host$k's folder holds its own ranks' recorders only" own_recorders_only "$k"; done
    ;;
  mismatch)
    run_mismatch_at_start
    # The same job on one host (host 0, 6 ranks): the same report.
    mkdir -p "$bed/single"
    bed_in 0 env -i PATH="$PATH" LD_LIBRARY_PATH="$nccl_dir" LD_PRELOAD="$shim" TRAINSCOPE_DIR="$bed/single/runs" \
      TRAINSCOPE_RUN_ID=job MASTER_ADDR=127.0.0.1 MASTER_PORT=29600 \
      "$launch" -n 6 --timeout 60 -- "$programs/scenario_program" --steps 20 --fault half-count --rank 4 --step 5 \
      >"$bed/single.log" 2>&1 || true
    single=$(mismatch_summary "$bed/single/runs/job" 2>/dev/null) || true
    check "the report across hosts is the one on one host" equals "$(cat "$bed/across-hosts.txt")" "$single"
    run_mismatch_while_running
    ;;
  node_killed | link_cut)
    # After a cut, host 2's ranks wait in the stand-in's collective for ranks that left (as NCCL would, until its own
    # timeout): the bed's cleanup ends them.
    for ((k = 0; k < bed_hosts; ++k)); do bed_launch "$k" "" "$programs/loop_program" --iterations 0 --pace-ms 2; done
    check "every rank joined" bed_wait_all_joined 20
    since=$(now_ns)
    if [ "$scenario" = node_killed ]; then bed_kill_host 2; else bed_cut_link 2; fi
    bed_wait 0
    check "host0's ranks stop with 86" equals "$bed_status" 86
    bed_wait 1
    check "host1's ranks stop with 86" equals "$bed_status" 86
    check "the verdict names host2 and its ranks 4 and 5" host2_lost_verdict "$bed/host0/runs/job" "$since"
    check "host1 was told the verdict" grep -q "Host lost: host2, ranks 4 and 5 vanished together" "$bed/host1.log"
    for k in 0 1; do check "host$k's recorders are whole" own_recorders_only "$k"; done
    ;;
  coordinator_host_lost)
    # The stand-in's collectives go through /dev/shm and survive the cut, so the job runs on; host 0's coordinator
    # sees hosts 1 and 2 vanish: TRAINSCOPE_ON_DESYNC=warn keeps that from stopping host 0's ranks.
    for ((k = 0; k < bed_hosts; ++k)); do
      bed_launch "$k" "TRAINSCOPE_ON_DESYNC=warn" "$programs/loop_program" --iterations 4000 --pace-ms 2
    done
    check "every rank joined" bed_wait_all_joined 20
    bed_cut_link 0
    for ((k = 0; k < bed_hosts; ++k)); do
    bed_wait "$k"
    check "host$k's ranks end with status 0" equals "$bed_status" 0
done
    for k in 1 2; do
      check "host$k's ranks warned once each that the coordinator is gone" \
        equals "$(grep -c "is not reachable; the job runs on and records locally" "$bed/host$k.log")" 2
      check "host$k's ranks made every call" equals "$(grep -c "done" "$bed/host$k.log")" 2
      delay_us=$((($(bed_exit_ns "$k") - $(bed_exit_ns 0)) / 1000))
      echo "figure: host$k exited $(awk "BEGIN { printf \"%.1f\", $delay_us / 1000 }") ms after host0"
      check "host$k's exit is not held up by the lost coordinator (bound 3000 ms)" test "$delay_us" -le 3000000
    done
    ;;
  slow_link)
    # Host 2 100 ms away from the coordinator (each way), at 10 Mbit/s.
    tc qdisc add dev vh2 root tbf rate 10mbit burst 32kbit latency 400ms
    mkfifo "$bed/proxy"
    bed_in 2 python3 "$here/delay_proxy.py" 127.0.0.1 39503 10.77.0.1 29503 100 >"$bed/proxy" &
    read -r -t 10 line <"$bed/proxy" || true
    check "the delay proxy listens" equals "${line:-}" listening
    host_env[2]=TRAINSCOPE_COORDINATOR=127.0.0.1:39503
    run_healthy
    run_mismatch_at_start
    run_mismatch_while_running
    ;;
  *)
    echo "unknown scenario '$scenario'" >&2
    exit 2
    ;;
esac

if [ "$failures" -gt 0 ]; then
  show_logs
  exit 1
fi
echo "MultiHost.$scenario passed"
