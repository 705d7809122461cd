#!/usr/bin/env bash
# Checks that a GPU kit (scripts/gpu-kit.sh) runs on a machine that has nothing but glibc: a chroot holding only the
# C library, the loader, the kit and the CPU stand-in NCCL. A lent GPU machine lacks our dependencies and cannot
# install any, so a library the kit forgot would cost a whole device run; here it fails the test instead.
#   tests/gpu/kit_check.sh KIT_DIR STAND_IN_NCCL_DIR
# Needs root (chroot, bind mounts); elsewhere it says so and exits 0.
set -euo pipefail
kit="$(cd "$1" && pwd)"
stand_in="$(cd "$2" && pwd)"
if [ "$(id -u)" != 0 ] || ! command -v chroot >/dev/null; then
  echo "kit_check: needs root and chroot: skipped"
  exit 0
fi
root="$(mktemp -d)"
cleanup() {
  umount "$root/dev/shm" 2>/dev/null || true
  rm -rf "$root"
}
trap cleanup EXIT
mkdir -p "$root/lib/x86_64-linux-gnu" "$root/lib64" "$root/tmp" "$root/dev/shm" "$root/nccl"
for library in libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libresolv.so.2; do
  cp -L "/lib/x86_64-linux-gnu/$library" "$root/lib/x86_64-linux-gnu/"
done
cp -L /lib64/ld-linux-x86-64.so.2 "$root/lib64/"
cp -r "$kit" "$root/kit"
cp -L "$stand_in/libnccl.so.2" "$root/nccl/"
# The stand-in NCCL's ranks meet in shared memory.
shm=yes
mount --bind /dev/shm "$root/dev/shm" 2>/dev/null || shm=no

in_root() { LD_LIBRARY_PATH=/kit/lib:/kit/lib-fallback:/nccl chroot "$root" "$@"; }
failures=0
check() {  # check WHAT EXPECTED_TEXT COMMAND...
  local what="$1" expected="$2"
  shift 2
  local output
  if output="$("$@" 2>&1)" && grep -q -- "$expected" <<<"$output"; then
    echo "kit_check: $what: OK"
  else
    echo "kit_check: $what: FAILED"
    sed 's/^/    /' <<<"$output"
    failures=$((failures + 1))
  fi
}
head -c 4096 /dev/zero >"$root/tmp/zeros.bin"
check "trainscope starts" "trainscope " in_root /kit/tools/trainscope version
check "trainscope stats" "elements: 1024 fp32" in_root /kit/tools/trainscope stats /tmp/zeros.bin --dtype fp32
check "GPU tests start (and skip)" "SKIPPED" in_root /kit/tests/gpu/stats_gpu_tests
check "GPU benchmark starts (and skips)" "skipped" in_root /kit/tests/gpu/stats_gpu_bench
exits_77() { "$@"; [ $? -eq 77 ]; }  # what a GPU program does where there is no driver
check "the module-frame program starts (and finds no driver)" "no CUDA driver" exits_77 in_root \
  /kit/tests/programs/device_module_frames_program
if [ "$shm" = no ]; then
  echo "kit_check: cannot bind-mount /dev/shm here: the checks of the shim on the stand-in NCCL are skipped"
  [ "$failures" -eq 0 ] && exit 0
  exit 1
fi
# The shim and the engine it loads, on the stand-in NCCL. LD_PRELOAD reaches chroot itself too, which cannot find
# the path and says so; the program inside finds it.
check "the shim and its engine" "ncclCommDestroy 0" env TRAINSCOPE_DIR=/tmp/runs TRAINSCOPE_RUN_ID=kit \
  TRAINSCOPE_LOG_LEVEL=debug LD_PRELOAD=/kit/shim/libtrainscope.so LD_LIBRARY_PATH=/kit/lib:/kit/lib-fallback:/nccl \
  chroot "$root" /kit/tests/programs/nccl_probe_program
check "the engine logged" "cross-rank checks off" cat "$root/tmp/runs/kit/"*.log
check "trainscope report" "processes: 1 recorded: 1 exited" in_root /kit/tools/trainscope report /tmp/runs/kit
# The whole-job benchmark's pieces (tests/bench/whole_job.sh, run by tests/gpu/run.sh): the kit's own stand-in NCCL
# and the 4-rank loop under ts-launch and the shim, with the exchange.
check "the whole-job loop on the kit's stand-in NCCL" "rank 3 done" env TRAINSCOPE_DIR=/tmp/runs \
  TRAINSCOPE_RUN_ID=loop LD_PRELOAD=/kit/shim/libtrainscope.so \
  LD_LIBRARY_PATH=/kit/tests/fakes/lib:/kit/lib:/kit/lib-fallback chroot "$root" /kit/tests/programs/ts-launch -n 4 \
  --timeout 60 -- /kit/tests/programs/loop_program --mix --iterations 50 --count 16
if [ "$failures" -ne 0 ]; then
  echo "kit_check: $failures check(s) failed: the kit needs something a bare machine lacks"
  exit 1
fi
echo "kit_check: the kit runs with nothing but glibc"
