#!/usr/bin/env bash
# Builds the wheel (pip wheel ., scikit-build-core), installs it into a fresh venv and checks the installed package:
# the tree it holds needs nothing but glibc (check_bundled.sh), `trainscope` is on the venv's PATH and exits as the
# bundled command does, `trainscope env` names the package's libraries, and a stand-in NCCL job run through
# `trainscope run` is recorded and reported.
# Usage: wheel_test.sh BUILD_DIR
#   BUILD_DIR: a build tree of this checkout configured by scripts/build.sh with the tests (build-ci): its stand-in
#   NCCL and programs run the job, and the wheel is built in it (scikit-build-core's build-dir), so that only what
#   changed is compiled. Set TRAINSCOPE_WHEEL_BUILD_DIR to build the wheel elsewhere (e.g. a fresh directory).
# Needs python3 with venv and pip, and scikit-build-core from the package index (pip's build isolation).
set -euo pipefail
source_dir="$(cd "$(dirname "$0")/../.." && pwd -P)"
build_dir="$(cd "$1" && pwd -P)"
wheel_build_dir="${TRAINSCOPE_WHEEL_BUILD_DIR:-$build_dir}"
fake_nccl_dir="$build_dir/tests/fakes/lib"
program_dir="$build_dir/tests/programs"
for f in "$fake_nccl_dir/libnccl.so.2" "$program_dir/collectives_program" "$program_dir/ts-launch"; do
  [ -e "$f" ] || { echo "wheel_test: $f is missing: build the tests in $build_dir first" >&2; exit 1; }
done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() {
  echo "wheel_test: $*" >&2
  exit 1
}

# scikit-build-core clears a build dir's CMake cache when the build dir was last used from another isolated build
# environment (a new one each time pip builds): the reused tree would be reconfigured from scratch, losing its
# settings (tests, -Werror) and compiling everything again. Its note of the last use is dropped first: a build dir
# without one is configured as it is.
rm -f "$wheel_build_dir/.skbuild-info.json"
start=$(date +%s)
timeout 900 python3 -m pip wheel "$source_dir" --no-deps --quiet -w "$work/dist" --config-settings=build-dir="$wheel_build_dir" \
  >"$work/wheel.log" 2>&1 || { cat "$work/wheel.log"; fail "pip wheel failed"; }
wheel_seconds=$(($(date +%s) - start))
if [ "$wheel_build_dir" = "$build_dir" ] && ! grep -q '^TRAINSCOPE_BUILD_TESTS:BOOL=ON$' "$build_dir/CMakeCache.txt"; then
  fail "the wheel build reconfigured $build_dir from scratch (its tests are off now): configure it again"
fi
# scikit-build-core left its variables (SKBUILD*, an install prefix in a temporary directory) in the reused tree's
# cache: drop them, so that the tree is configured as scripts/build.sh left it.
cmake -U 'SKBUILD*' -U CMAKE_INSTALL_PREFIX "$wheel_build_dir" >"$work/reconfigure.log" 2>&1 ||
  { cat "$work/reconfigure.log"; fail "reconfiguring $wheel_build_dir failed"; }
wheel="$(ls "$work"/dist/trainscope-*.whl)"
echo "wheel_test: built $(basename "$wheel") ($(du -h "$wheel" | cut -f1)) in ${wheel_seconds} s"

python3 -m venv "$work/venv"
timeout 300 "$work/venv/bin/python" -m pip install --quiet --no-index "$wheel" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "pip install of the wheel failed"; }
package="$("$work/venv/bin/python" -c 'import os, trainscope; print(os.path.dirname(trainscope.library_dir()))')"
package="$(cd "$package" && pwd -P)"
bash "$source_dir/tests/integration/check_bundled.sh" "$package"

# From here on, as a user of the venv: its bin/ first on PATH, nothing of ours in the environment.
mkdir -p "$work/elsewhere"
cd "$work/elsewhere"
export PATH="$work/venv/bin:/usr/bin:/bin"
[ "$(command -v trainscope)" = "$work/venv/bin/trainscope" ] || fail "trainscope is not the venv's: $(command -v trainscope)"
[ "$(trainscope version)" = "$("$package/bin/trainscope" version)" ] || fail "trainscope version differs"
status=0
trainscope env --no-such-flag 2>/dev/null || status=$?
[ "$status" -eq 2 ] || fail "trainscope env --no-such-flag exited $status through the console script, not 2"
status=0
python -m trainscope env --no-such-flag 2>/dev/null || status=$?
[ "$status" -eq 2 ] || fail "python -m trainscope env --no-such-flag exited $status, not 2"

trainscope env >"$work/env.txt"
for line in "  preloaded by \`trainscope run\`: $package/lib/libtrainscope.so" \
  "  engine (loaded by it on first NCCL use): $package/lib/libtrainscope-engine.so" \
  "  loaded by this command: libzmq.so.5 => $package/lib/libzmq.so.5" \
  "  loaded by this command: libsodium.so.23 => $package/lib/libsodium.so.23"; do
  grep -qxF "$line" "$work/env.txt" || { cat "$work/env.txt"; fail "trainscope env does not say: $line"; }
done
grep -q '^  bundled beside the engine: .*libzmq\.so\.5' "$work/env.txt" || { cat "$work/env.txt"; fail "no bundled libzmq"; }
trainscope env --json | python -c '
import json, sys
libraries = json.load(sys.stdin)["libraries"]
package = sys.argv[1]
assert libraries["preload"] == package + "/lib/libtrainscope.so", libraries
assert libraries["engine"] == package + "/lib/libtrainscope-engine.so", libraries
assert {"libzmq.so.5", "libsodium.so.23", "libunwind.so.8"} <= set(libraries["bundled"]), libraries
' "$package" || fail "trainscope env --json"

# The job: two ranks of the stand-in NCCL program, only the stand-in NCCL on LD_LIBRARY_PATH.
LD_LIBRARY_PATH="$fake_nccl_dir" trainscope run --dir "$work/runs" --run-id wheel -- \
  "$program_dir/ts-launch" -n 2 --timeout 60 -- "$program_dir/collectives_program" --iterations 2 >"$work/job.out" 2>"$work/job.err" ||
  { cat "$work/job.out" "$work/job.err"; fail "the job failed under trainscope run"; }
trainscope report "$work/runs/wheel" >"$work/report" 2>&1 || { cat "$work/report"; fail "trainscope report failed"; }
grep -q ncclAllReduce "$work/report" || { cat "$work/report"; fail "the report names no ncclAllReduce"; }
# Each rank's recorder and engine log (the engine writes the log: it was loaded).
for rank in 0 1; do
  for kind in tsrec log; do
    ls "$work/runs/wheel" | grep -q "^rank-$rank\..*\.$kind\$" || { ls "$work/runs/wheel"; fail "no $kind for rank $rank"; }
  done
done
# Most jobs are Python: a ctypes job (NCCL on a library handle, as vLLM's) through the installed command, the venv's
# own interpreter, its calls named by the job's line.
PYTHONDONTWRITEBYTECODE=1 LD_LIBRARY_PATH="$fake_nccl_dir" trainscope run --dir "$work/runs" --run-id python -- \
  "$program_dir/ts-launch" -n 2 --timeout 60 -- "$work/venv/bin/python" "$source_dir/tests/programs/python/forward_backward_job.py" \
  --steps 2 >"$work/python.out" 2>"$work/python.err" ||
  { cat "$work/python.out" "$work/python.err"; fail "the Python job failed under trainscope run"; }
trainscope report "$work/runs/python" >"$work/python-report" 2>&1 ||
  { cat "$work/python-report"; fail "trainscope report of the Python job failed"; }
grep -q "forward_backward_job.py:[0-9]* in " "$work/python-report" ||
  { cat "$work/python-report"; fail "the Python job's report names no line of the job"; }
# TRAINSCOPE_WATCH=modules from the installed package: its trainscope-python/ goes first on the job's path and its
# sitecustomize runs (the venv has no torch: the hooks wait for an import that never comes).
[ -f "$package/lib/trainscope-python/sitecustomize.py" ] || fail "the wheel has no lib/trainscope-python/sitecustomize.py"
TRAINSCOPE_WATCH=modules trainscope run --dir "$work/runs" --run-id modules -- "$work/venv/bin/python" -c '
import sys
site = sys.modules.get("sitecustomize")
print(sys.path[1] if len(sys.path) > 1 else "", getattr(site, "__file__", ""))
' >"$work/modules.out" 2>"$work/modules.err" || { cat "$work/modules.out" "$work/modules.err"; fail "the modules job failed"; }
read -r first_path site_file <"$work/modules.out"
[ "$first_path" = "$package/lib/trainscope-python" ] && [ "$site_file" = "$package/lib/trainscope-python/sitecustomize.py" ] ||
  { cat "$work/modules.out" "$work/modules.err"; fail "TRAINSCOPE_WATCH=modules did not put the package's hooks first"; }
echo "wheel_test: the installed wheel works, for a C and a Python job and the module hooks (wheel step ${wheel_seconds} s)"
