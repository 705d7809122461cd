#!/usr/bin/env bash
# Figures: trainscope's network traffic per rank on the multi-host test bed (tests/integration/multihost/bed.sh), 3
# hosts x 2 ranks. Host 1's link carries nothing but trainscope's exchange with the coordinator on host 0 (the
# stand-in NCCL's data path is shared memory), so its veth's byte counters are that traffic, both directions.
#
#   multihost_traffic.sh BUILD_DIR [COLLECTIVES (default 1500)] [PACE_MS (default 2)]
# Prints: the bytes per rank of joining, idle bytes per rank per second once joined (heartbeats and pings), and for a
# job of COLLECTIVES all-reduces one every PACE_MS, bytes per rank per second and bytes per collective beyond the idle
# rate.
# Exits 77 where the bed cannot be made (no root, no namespaces); it is a figure, never a test.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=tests/integration/multihost/bed.sh
source "$here/../integration/multihost/bed.sh"
build=$(cd "${1:?usage: multihost_traffic.sh BUILD_DIR [COLLECTIVES] [PACE_MS]}" && pwd)
bed_enter "$build" "${2:-1500}" "${3:-2}"
collectives=$2 pace=$3
launch="$build/tests/programs/ts-launch"
programs="$build/tests/programs"
shim="$build/shim/libtrainscope.so"
nccl_dir="$build/tests/fakes/lib"
for f in "$launch" "$programs/loop_program" "$shim" "$nccl_dir/libnccl.so.2"; do
  [ -e "$f" ] || { echo "multihost_traffic: $f is not built" >&2 && exit 1; }
done

# Bytes both ways on host 1's veth, from /proc/net/dev (the switch's namespace: /sys shows the machine's devices).
link_bytes() { awk -F'[: ]+' '$2 == "vh1" { print $3 + $11 }' /proc/net/dev; }

# Runs the loop on every host; prints "BYTES SECONDS" of host 1's link over host 1's job.
measure() { # ITERATIONS PACE_MS
  local before start k
  before=$(link_bytes)
  start=$(now_ns)
  for ((k = 0; k < bed_hosts; ++k)); do bed_launch "$k" "" "$programs/loop_program" --iterations "$1" --pace-ms "$2"; done
  for ((k = 0; k < bed_hosts; ++k)); do
    bed_wait "$k"
    [ "$bed_status" = 0 ] || { echo "multihost_traffic: host$k's job failed" >&2 && tail "$bed/host$k.log" >&2 && exit 1; }
  done
  echo "$(($(link_bytes) - before)) $(((($(bed_exit_ns 1) - start) / 1000000)))"
  rm -rf "$bed"/host*/runs
}

# Steady idle traffic: 2 s of a job that makes no call, counted once every rank has joined (its start-up, CURVE
# handshakes and hellos, counted apart).
idle_window() {
  local k start joined before
  start=$(link_bytes)
  for ((k = 0; k < bed_hosts; ++k)); do bed_launch "$k" "" "$programs/loop_program" --iterations 1 --pace-ms 4000; done
  bed_wait_all_joined 20 || exit 1
  joined=$(link_bytes)
  sleep 2 # a measuring window, not a synchronisation
  before=$joined
  echo "$(($(link_bytes) - before)) 2000 $((joined - start))"
  for ((k = 0; k < bed_hosts; ++k)); do bed_wait "$k"; done
  rm -rf "$bed"/host*/runs
}

bed_start
read -r idle_bytes idle_ms startup_bytes < <(idle_window)
read -r busy_bytes busy_ms < <(measure "$collectives" "$pace")
python3 - "$idle_bytes" "$idle_ms" "$busy_bytes" "$busy_ms" "$collectives" "$pace" "$startup_bytes" <<'EOF'
import sys
idle_bytes, idle_ms, busy_bytes, busy_ms, collectives, pace, startup_bytes = map(int, sys.argv[1:])
idle_rate = idle_bytes / 2 / (idle_ms / 1000)  # per rank per second, once joined
busy_rate = busy_bytes / 2 / (busy_ms / 1000)
per_collective = (busy_bytes / 2 - startup_bytes / 2 - idle_rate * busy_ms / 1000) / collectives
print("multi-host traffic (host 1's link, 2 ranks, coordinator on host 0):")
print("  joining (launch to every hello):    %8.0f B per rank" % (startup_bytes / 2))
print("  idle, joined (2 s, no call):        %8.0f B/s per rank (heartbeats and pings)" % idle_rate)
print("  %d all-reduces, one every %d ms:  %8.0f B/s per rank (%d B in %d ms)" % (collectives, pace, busy_rate, busy_bytes, busy_ms))
print("  per collective, beyond joining and idle: %5.1f B per rank" % per_collective)
EOF
