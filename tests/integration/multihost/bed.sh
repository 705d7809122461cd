# The multi-host test bed (sourced by multihost_test.sh): 3 "hosts" of 2 ranks on one Linux kernel.
#
# The test runs in a namespace of its own (network, mount, PID: `unshare`, entered by bed_enter), the "switch": a
# bridge br0 and nothing else on its network. Each host is a network + UTS + PID + mount namespace made from there:
# its own host name (host0, host1, host2), its own address (10.77.0.1, .2, .3) on a veth pair whose other end is on
# br0, its own process tree (pid 1 is the host's holder process: killing it kills the host, as a node crash), its own
# TRAINSCOPE_DIR (a folder of the test bind-mounted at the same path $bed/node in every host, so that one host's path
# names another file on another host, as on separate disks). No traffic leaves the switch's namespace.
#
# What the hosts share, as a documented limit of the stand-in NCCL (tests/fakes): its data path is POSIX shared
# memory, so /dev/shm (a tmpfs private to the bed) is common to all hosts; collectives keep working across a cut link,
# which no real job would. Only trainscope's own traffic (the exchange with the coordinator, ts-launch's id relay)
# goes over the bed's network.
#
# Delay: the kernel has no sch_netem (`tc netem`), so a slow host's traffic to the coordinator goes through
# delay_proxy.py (a userspace proxy, fixed delay each way) and `tc tbf` limits its rate. Loss cannot be emulated.
#
# Cleanup: everything lives in the bed's namespaces, which the kernel removes when the bed's pid 1 exits (ctest's
# timeout included: unshare --kill-child); the trap kills the hosts and removes the test's folder.

bed_root_skip() {
  echo "SKIP: $*"
  exit 77
}

# Checks that the bed can be made here, then re-runs the calling script inside the switch's namespaces.
bed_enter() {
  if [ -n "${TS_BED_INSIDE:-}" ]; then return 0; fi
  [ "$(id -u)" = 0 ] || bed_root_skip "the multi-host bed needs root (network, UTS, PID and mount namespaces)"
  local tool
  for tool in unshare nsenter ip tc python3; do
    command -v "$tool" >/dev/null || bed_root_skip "no $tool here (scripts/setup.sh installs iproute2 and util-linux)"
  done
  unshare --net --uts --mount --pid --fork true 2>/dev/null ||
    bed_root_skip "namespaces cannot be made here (unshare --net --uts --mount --pid failed: a container without CAP_SYS_ADMIN?)"
  unshare --net sh -c 'ip link add ts-probe type veth peer name ts-probe1 && ip link add ts-br type bridge' 2>/dev/null ||
    bed_root_skip "veth pairs or bridges cannot be made here"
  export TS_BED_INSIDE=1
  exec unshare --net --mount --pid --fork --kill-child --mount-proc --propagation private bash "$0" "$@"
}

bed_hosts=3
bed_holders=()

# The switch: a private /dev/shm and /tmp folder, the bridge.
bed_start() {
  bed=$(mktemp -d /tmp/ts-bed.XXXXXX)
  trap bed_cleanup EXIT
  mount -t tmpfs -o size=512m,mode=1777 tmpfs /dev/shm
  ip link set lo up
  ip link add br0 type bridge
  ip link set br0 up
  mkdir -p "$bed/node"
  local k
  for ((k = 0; k < bed_hosts; ++k)); do bed_start_host "$k"; done
}

bed_cleanup() {
  local status=$? pid
  for pid in "${bed_holders[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  # Every process of a host dies with its pid 1: waiting for the bed's children (launches, holders, proxies) is bounded.
  wait 2>/dev/null || true
  if [ -n "${TS_BED_KEEP:-}" ]; then
    echo "bed kept in $bed"
  else
    rm -rf "$bed" || echo "could not remove $bed" >&2
  fi
  exit "$status"
}

# Host k: its namespaces around a holder process (pid 1 there), its name, address and run folder.
bed_start_host() {
  local k=$1
  mkdir -p "$bed/host$k"
  mkfifo "$bed/ready$k"
  unshare --net --uts --pid --mount --fork --mount-proc --propagation private \
    sh -c "echo ready > '$bed/ready$k'; exec sleep 100000" 2>>"$bed/holders.log" &
  local outer=$!
  local line=""
  read -r -t 10 line <"$bed/ready$k" || true
  [ "$line" = ready ] || { echo "host$k did not start" >&2; exit 1; }
  local holder
  holder=$(cat "/proc/$outer/task/$outer/children")
  holder=${holder// /}
  bed_holders[k]=$holder
  ip link add "vh$k" type veth peer name eth0 netns "$holder"
  ip link set "vh$k" master br0 up
  bed_in "$k" sh -c "hostname host$k && ip link set lo up && ip addr add 10.77.0.$((k + 1))/24 dev eth0 &&
    ip link set eth0 up && mount --bind '$bed/host$k' '$bed/node'"
}

# Runs a command on host k.
bed_in() {
  local k=$1
  shift
  nsenter -t "${bed_holders[k]}" --net --uts --mount --pid -- "$@"
}

# A node crash: the host's pid 1 dies, and the kernel kills every process of the host with it.
bed_kill_host() { kill -9 "${bed_holders[$1]}"; }

# A cut link: the host's cable pulled at the switch.
bed_cut_link() { ip link set "vh$1" down; }

now_ns() { date +%s%N; }

# Starts the job's ranks on host k in the background: ts-launch --nnodes with MASTER_ADDR on host 0. Its exit status
# and the time it exited go to $bed/exit$k ("STATUS NS"), its output to $bed/host$k.log. ts-launch's --timeout
# (bed_job_timeout, 60 s) bounds it.
# Usage: bed_launch K "EXTRA ENV ASSIGNMENTS" PROGRAM ARGS...
bed_pids=()
bed_launch() {
  local k=$1 extra=$2
  shift 2
  rm -f "$bed/exit$k"
  (
    set +e
    # shellcheck disable=SC2086
    bed_in "$k" env -i PATH="$PATH" HOME=/root LD_LIBRARY_PATH="$nccl_dir" LD_PRELOAD="$shim" \
      TRAINSCOPE_DIR="$bed/node/runs" TRAINSCOPE_RUN_ID=job TRAINSCOPE_LOG_RANKS=all \
      MASTER_ADDR=10.77.0.1 MASTER_PORT=29500 $extra \
      "$launch" --nnodes "$bed_hosts" --node-rank "$k" -n 2 --timeout "${bed_job_timeout:-60}" -- "$@" \
      >"$bed/host$k.log" 2>&1
    echo "$? $(now_ns)" >"$bed/exit$k"
  ) &
  bed_pids[k]=$!
}

# Waits for host k's ts-launch to end (bounded by its --timeout); its status goes to bed_status. (Not in a $(...):
# a subshell cannot wait for the bed's children.)
bed_status=""
bed_wait() {
  wait "${bed_pids[$1]}" || true
  bed_status=$(cut -d' ' -f1 "$bed/exit$1" 2>/dev/null || echo none)
}

bed_exit_ns() { cut -d' ' -f2 "$bed/exit$1"; }

# Waits (at most SECONDS) until the coordinator on host 0 has every rank's hello (its manifest lists 6 ranks): polls
# the manifest every 50 ms.
bed_wait_all_joined() {
  python3 - "$bed/host0/runs/job/manifest.json" "$1" <<'EOF'
import json, sys, time
deadline = time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    try:
        if len(json.load(open(sys.argv[1]))["ranks"]) == 6:
            sys.exit(0)
    except (OSError, ValueError, KeyError):
        pass
    time.sleep(0.05)
print("the coordinator did not see all 6 ranks within %s s" % sys.argv[2], file=sys.stderr)
sys.exit(1)
EOF
}
