#!/usr/bin/env bash
# Builds the wheel as a user does (pip wheel ., scikit-build-core: the manylinux wheel, cmake/ManylinuxToolchain.cmake),
# checks every ELF file in it against the wheel's policy (check_wheel_policy.py: at most GLIBC_2.28, no libstdc++, only
# the policy's system libraries; the preloaded library at most GLIBC_2.17) and with `auditwheel show`, installs it
# into a fresh venv and checks the installed package: the tree it holds needs nothing but glibc (check_bundled.sh),
# `trainscope` is on the venv's PATH and exits as the bundled command does, `trainscope env` names the package's
# libraries and its policy, and a stand-in NCCL job run through `trainscope run` is recorded and reported; a PyTorch
# job (the test command's .torch) gets its module frames from the installed package.
# Usage: wheel_test.sh BUILD_DIR
#   BUILD_DIR: a build tree of this checkout configured by scripts/build.sh with the tests (build-ci): its stand-in
#   NCCL and programs run the job. The wheel is built in BUILD_DIR-wheel (scikit-build-core's build-dir, kept, so that
#   only what changed is compiled; TRAINSCOPE_WHEEL_BUILD_DIR names another) and left in its dist/ (the old-userland
#   test installs it from there).
# Needs python3 with venv and pip, and from the package index: scikit-build-core and ziglang (pip's build isolation),
# auditwheel (a venv kept in TS_BUILD_CACHE_DIR, default /var/cache/trainscope).
set -euo pipefail
source_dir="$(cd "$(dirname "$0")/../.." && pwd -P)"
build_dir="$(cd "$1" && pwd -P)"
wheel_build_dir="${TRAINSCOPE_WHEEL_BUILD_DIR:-$build_dir-wheel}"
mkdir -p "$wheel_build_dir"
wheel_build_dir="$(cd "$wheel_build_dir" && pwd -P)"
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
# environment (a new one each time pip builds): the reused tree would be configured from scratch and compiled again.
# Its note of the last use is dropped first: a build dir without one is configured as it is.
rm -f "$wheel_build_dir/.skbuild-info.json"
rm -rf "$wheel_build_dir/dist"
start=$(date +%s)
timeout 1800 python3 -m pip wheel "$source_dir" --no-deps --quiet -w "$wheel_build_dir/dist" \
  --config-settings=build-dir="$wheel_build_dir" >"$work/wheel.log" 2>&1 || { cat "$work/wheel.log"; fail "pip wheel failed"; }
wheel_seconds=$(($(date +%s) - start))
wheel="$(ls "$wheel_build_dir"/dist/trainscope-*.whl)"
tag="$(basename "$wheel" .whl)"
tag="${tag##*-}"
case "$tag" in
  manylinux_*) ;;
  *) [ "$(uname -m)" != x86_64 ] || [ -n "${TS_BUILD_NATIVE_WHEEL:-}" ] || fail "the wheel is tagged $tag, not manylinux" ;;
esac
echo "wheel_test: built $(basename "$wheel") ($(du -h "$wheel" | cut -f1)) in ${wheel_seconds} s"

# Its policy, checked twice: our check names each file and symbol, auditwheel is the judge PyPI's uploaders use.
if [ "${tag#manylinux_}" != "$tag" ]; then
  tools="$(bash "$source_dir/tests/integration/wheel_tools_venv.sh")" || fail "no venv with auditwheel"
  "$tools/bin/python" "$source_dir/tests/integration/check_wheel_policy.py" "$wheel" \
    --floor trainscope/lib/libtrainscope.so=GLIBC_2.17 || fail "the wheel breaks its policy $tag"
  "$tools/bin/auditwheel" show "$wheel" >"$work/auditwheel.txt" 2>&1 || { cat "$work/auditwheel.txt"; fail "auditwheel show failed"; }
  # "... is consistent with the following platform tag: "manylinux_2_X_x86_64"": the policy the files meet, which must be
  # the wheel's or an older one.
  consistent="$(tr '\n' ' ' <"$work/auditwheel.txt" | sed -n 's/.*consistent with the following platform tag: *"\([^"]*\)".*/\1/p')"
  minor() { sed -n 's/^manylinux_2_\([0-9]*\)_.*/\1/p' <<<"$1"; }
  [ -n "$consistent" ] && [ "$(minor "$consistent")" -le "$(minor "$tag")" ] ||
    { cat "$work/auditwheel.txt"; fail "auditwheel does not find the wheel consistent with $tag"; }
  echo "wheel_test: $(basename "$wheel") meets $tag (auditwheel: consistent with $consistent)"
fi

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
  "  glibc found: $(ldd --version | sed -n 1p | awk '{print $NF}')"; do
  grep -qxF "$line" "$work/env.txt" || { cat "$work/env.txt"; fail "trainscope env does not say: $line"; }
done
if [ "${tag#manylinux_}" != "$tag" ]; then
  # ZeroMQ, libsodium and the C++ runtime are linked in: nothing bundled, nothing of theirs loaded from elsewhere.
  for line in "  bundled beside the engine: none (ZeroMQ, libsodium and the C++ runtime are linked in)" \
    "  wheel policy: $tag (needs glibc 2.28 or newer; the preloaded library 2.17)"; do
    grep -qxF "$line" "$work/env.txt" || { cat "$work/env.txt"; fail "trainscope env does not say: $line"; }
  done
  ! grep -q '^  loaded by this command: ' "$work/env.txt" || { cat "$work/env.txt"; fail "the command loaded a library of its own"; }
else
  grep -q '^  bundled beside the engine: .*libzmq\.so\.5' "$work/env.txt" || { cat "$work/env.txt"; fail "no bundled libzmq"; }
fi
trainscope env --json | python -c '
import json, sys
out = json.load(sys.stdin)
libraries, platform = out["libraries"], out["platform"]
package, tag = sys.argv[1], sys.argv[2]
assert libraries["preload"] == package + "/lib/libtrainscope.so", libraries
assert libraries["engine"] == package + "/lib/libtrainscope-engine.so", libraries
if tag.startswith("manylinux_"):
    assert libraries["bundled"] == [] and libraries["loaded"] == [], libraries
    assert platform["policy"] == tag and platform["glibc_needed"] == "2.28", platform
    assert platform["preload_glibc_needed"] == "2.17", platform
else:
    assert {"libzmq.so.5", "libsodium.so.23"} <= set(libraries["bundled"]), libraries
    assert platform["policy"] is None, platform
' "$package" "$tag" || fail "trainscope env --json"

# The job: two ranks of the stand-in NCCL program, only the stand-in NCCL on LD_LIBRARY_PATH.
LD_LIBRARY_PATH="$fake_nccl_dir" trainscope run --dir "$work/runs" --run-id wheel -- \
  "$program_dir/ts-launch" -n 2 --timeout 60 -- "$program_dir/collectives_program" --iterations 2 >"$work/job.out" 2>"$work/job.err" ||
  { cat "$work/job.out" "$work/job.err"; fail "the job failed under trainscope run"; }
trainscope report "$work/runs/wheel" >"$work/report" 2>&1 || { cat "$work/report"; fail "trainscope report failed"; }
grep -q ncclAllReduce "$work/report" || { cat "$work/report"; fail "the report names no ncclAllReduce"; }
# Each rank's recorder and engine log (the engine writes the log: it was loaded).
for rank in 0 1; do
  for kind in tsrec log; do
    ls "$work/runs/wheel" | grep "^rank-$rank\..*\.$kind\$" >/dev/null || { ls "$work/runs/wheel"; fail "no $kind for rank $rank"; }
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
# And frames from the installed package in a PyTorch job: the test command's torch environment runs the job (trainscope
# installed as a tool, the job in an environment of its own), its gradient overflowing in head.proj at batch 2 and
# the fused optimizer skipping that step under GradScaler.
torch_python="$source_dir/.torch/bin/python"
if [ -x "$torch_python" ]; then
  TRAINSCOPE_WATCH=modules,backward OMP_NUM_THREADS=1 trainscope run --dir "$work/runs" --run-id torch -- \
    "$torch_python" "$source_dir/tests/programs/python/module_backward_job.py" --grad-scaler --fused \
    >"$work/torch.out" 2>"$work/torch.err" || { cat "$work/torch.out" "$work/torch.err"; fail "the torch job failed"; }
  trainscope report "$work/runs/torch" >"$work/torch-report" 2>&1 ||
    { cat "$work/torch-report"; fail "trainscope report of the torch job failed"; }
  grep -q "first inf/nan: batch 2 .* head.proj Linear (backward) grad_input\[0\]; the loss scaler skipped" \
    "$work/torch-report" || { cat "$work/torch-report"; fail "the torch job's report names no module frame"; }
  modules="and a PyTorch job's module frames"
else
  modules="(no $torch_python: the module frames of a PyTorch job were not run)"
fi
echo "wheel_test: the installed wheel works, for a C and a Python job and the module hooks $modules (wheel step" \
  "${wheel_seconds} s)"
