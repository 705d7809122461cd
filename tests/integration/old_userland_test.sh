#!/usr/bin/env bash
# The wheel on an older userland than the build machine's: a Debian 11 ("bullseye", glibc 2.31) root made by
# debootstrap from the Debian registry, with its own python3. There, as a user would: `pip install` of the wheel into a
# venv of that python3, `trainscope env` (the wheel's policy, the glibc found), and `trainscope run` of a two-rank Python
# job (ctypes on the stand-in NCCL, as vLLM reaches NCCL) whose backward() all-reduces half the count on rank 1: the
# run exits 86 with a mismatch report that names backward(), and `trainscope report` reads the run.
# Usage: old_userland_test.sh WHEEL STANDINS_BUILD_DIR
#   WHEEL: the manylinux wheel (tests/integration/wheel_test.sh keeps it); STANDINS_BUILD_DIR: a build tree made with the
#   wheel's toolchain and -DTRAINSCOPE_BUILD_STANDINS=ON, holding tests/fakes/lib/libnccl.so.2 and
#   tests/programs/ts-launch (the stand-ins of the test build need the build machine's glibc).
# The root is kept in TS_BUILD_CACHE_DIR (default /var/cache/trainscope) and made again only when the list below
# changes. Needs root (debootstrap, chroot, mounts); elsewhere it says so and exits 0.
set -euo pipefail
source_dir="$(cd "$(dirname "$0")/../.." && pwd -P)"
wheel="$(realpath "$1")"
standins="$(cd "$2" && pwd -P)"
suite=bullseye
include=python3,python3-venv
fail() {
  echo "old_userland_test: $*" >&2
  exit 1
}
if [ "$(id -u)" != 0 ]; then
  echo "old_userland_test: needs root (debootstrap, chroot): skipped"
  exit 0
fi
for f in "$standins/tests/fakes/lib/libnccl.so.2" "$standins/tests/programs/ts-launch"; do
  [ -f "$f" ] || fail "$f is missing: build nccl_fake and ts-launch in $standins"
done
command -v debootstrap >/dev/null || fail "debootstrap is missing (scripts/setup.sh installs it)"

# The root, once per suite and package list.
cache="${TS_BUILD_CACHE_DIR:-/var/cache/trainscope}"
key="$(printf '%s %s minbase 1\n' "$suite" "$include" | sha256sum | cut -c1-12)"
root="$cache/chroot/$suite-$key"
if [ ! -f "$root/.complete" ]; then
  mkdir -p "$cache/chroot"
  exec 9>"$cache/chroot/.lock"
  flock -w 1800 9 || fail "another run has held $cache/chroot/.lock for 30 minutes"
  if [ ! -f "$root/.complete" ]; then
    # The Debian archive the system's own apt uses (its entry for this release's main suite).
    codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
    # Every stage reads all of its input: under pipefail, a reader that leaves early (head, awk's exit) can end the
    # writer with SIGPIPE, and the assignment then stops this script with status 141 and no message.
    mirror="$({ cat /etc/apt/sources.list.d/*.sources 2>/dev/null || true; } | awk -v codename="$codename" '
      function take() { if (found == "" && suites ~ ("(^| )" codename "( |$)") && uris != "") found = uris }
      /^[[:space:]]*$/ { take(); uris = ""; suites = "" }
      /^URIs:/ { uris = $2 }
      /^Suites:/ { $1 = ""; suites = $0 " " }
      END { take(); if (found != "") print found }')"
    if [ -z "$mirror" ]; then
      mirror="$({ sed -n -E "s/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+)[[:space:]]+$codename[[:space:]].*/\2/p" \
        /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true; } | sed -n 1p)"
    fi
    [ -n "$mirror" ] || fail "no Debian archive for '$codename' in the system's apt sources"
    echo "old_userland_test: making the $suite root in $root (once: a few minutes)"
    rm -rf "$root.new"
    timeout 1500 debootstrap --variant=minbase --include="$include" "$suite" "$root.new" "$mirror" \
      >"$cache/chroot/$suite.log" 2>&1 || { tail -n 30 "$cache/chroot/$suite.log" >&2; fail "debootstrap failed"; }
    touch "$root.new/.complete"
    rm -rf "$root"
    mv "$root.new" "$root"
  fi
  exec 9>&-
fi

# One run's files inside the root, removed afterwards with the mounts; the root itself stays as debootstrap made it.
inside="/tmp/trainscope-old-userland.$$"
work="$root$inside"
mounted=()
cleanup() {
  local m
  for m in "${mounted[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/nccl" "$work/jobs"
mount -t proc proc "$root/proc" && mounted+=("$root/proc") || fail "cannot mount /proc in $root"
mount -t tmpfs -o mode=1777 shm "$root/dev/shm" && mounted=("$root/dev/shm" "${mounted[@]}") ||
  fail "cannot mount a tmpfs on $root/dev/shm (the stand-in NCCL's shared memory)"
cp "$wheel" "$work/"
cp -a "$standins/tests/fakes/lib/." "$work/nccl/"
cp "$standins/tests/programs/ts-launch" "$work/"
cp "$source_dir/tests/programs/python/"*.py "$work/jobs/"
chroot_program="$(command -v chroot)"
in_root() { env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8 "$chroot_program" "$root" "$@"; }

glibc="$(in_root /usr/bin/ldd --version | sed -n 1p | awk '{print $NF}')"
python="$(in_root python3 --version)"
echo "old_userland_test: $suite root: glibc $glibc, $python"
in_root python3 -m venv "$inside/venv" >"$work/venv.log" 2>&1 || { cat "$work/venv.log"; fail "python3 -m venv failed"; }
in_root "$inside/venv/bin/pip" install --no-index --no-cache-dir --disable-pip-version-check \
  "$inside/$(basename "$wheel")" >"$work/install.log" 2>&1 || { cat "$work/install.log"; fail "pip install of the wheel failed"; }

in_root "$inside/venv/bin/trainscope" env >"$work/env.txt" 2>&1 || { cat "$work/env.txt"; fail "trainscope env failed"; }
policy="$(basename "$wheel" .whl)"
policy="${policy##*-}"
grep -q "^  wheel policy: $policy (" "$work/env.txt" || { cat "$work/env.txt"; fail "trainscope env names no policy $policy"; }
grep -qxF "  glibc found: $glibc" "$work/env.txt" || { cat "$work/env.txt"; fail "trainscope env names no glibc $glibc"; }

# The job: rank 1's backward() all-reduces half the count at step 1. Without trainscope it would hang.
status=0
in_root env TS_NCCL_PATH="$inside/nccl/libnccl.so.2" PYTHONDONTWRITEBYTECODE=1 \
  "$inside/venv/bin/trainscope" run --dir "$inside/runs" --run-id old -- "$inside/ts-launch" -n 2 --timeout 60 -- \
  /usr/bin/python3 "$inside/jobs/forward_backward_job.py" --steps 3 --fault backward-count --rank 1 --step 1 \
  >"$work/job.out" 2>"$work/job.err" || status=$?
[ "$status" -eq 86 ] || { cat "$work/job.out" "$work/job.err"; fail "the job exited $status, not 86 (a mismatch verdict)"; }
mismatch="$(ls "$work/runs/old/" | grep '^mismatch-.*\.txt$' | sed -n 1p)"
[ -n "$mismatch" ] || { ls "$work/runs/old"; cat "$work/job.err"; fail "no mismatch report in the run"; }
grep -q "^Cannot apply desired operation due to shape mismatches" "$work/runs/old/$mismatch" ||
  { cat "$work/runs/old/$mismatch"; fail "the mismatch report does not say so"; }
grep -q "forward_backward_job.py\", line [0-9]*, in backward" "$work/runs/old/$mismatch" ||
  { cat "$work/runs/old/$mismatch"; fail "the mismatch report names no line of backward()"; }
grep -q "^    #0 " "$work/runs/old/$mismatch" || { cat "$work/runs/old/$mismatch"; fail "the mismatch report has no native stack"; }
in_root "$inside/venv/bin/trainscope" report "$inside/runs/old" >"$work/report.txt" 2>&1 ||
  { cat "$work/report.txt"; fail "trainscope report failed"; }
grep -q "ncclAllReduce" "$work/report.txt" || { cat "$work/report.txt"; fail "the report names no ncclAllReduce"; }
grep -qi "mismatch" "$work/report.txt" || { cat "$work/report.txt"; fail "the report tells no mismatch"; }
sed -n '1,/^Input shapes:/p' "$work/runs/old/$mismatch" | sed 's/^/  | /'
echo "old_userland_test: on $suite (glibc $glibc, $python): pip install, trainscope env, a mismatched job (86) and" \
  "its report work"
