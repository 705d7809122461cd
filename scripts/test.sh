#!/usr/bin/env bash
# Sets everything up and runs every test: the format check, the main build (warnings as errors) with all tests
# and the benchmarks' figures, then the unit, integration and stand-in NCCL tests under ASan+UBSan and TSan.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The real clients' NCCL wrappers that tests/clients runs unchanged (not committed: see tests/clients/README.md); only
# the tests need them, so the demo does not download their wheels. Without the package index those tests skip.
bash scripts/client_wrappers.sh .clients ||
  echo "test: the client wrappers are missing; their tests will skip (run scripts/client_wrappers.sh .clients)" >&2
# The Python environments the tests need are made while the formatting checks and the build run (each pip install
# keeps one core busy for one to two minutes on a fresh clone, and the build leaves room beside it); their output is
# printed after the build.
# - nccl4py and CuPy, whose compiled bindings tests/clients runs unchanged: a venv for each CPython 3.10-3.13 found.
# - PyTorch, transformers and DeepSpeed for the module-frame tests (tests/integration/module_frames_test.cc): a venv
#   kept in .torch between runs, and again in a .torch-3.N for each other CPython that torch has a wheel for; where one
#   cannot be made (no package index, no such CPython), its tests skip and say why, naming the script.
environments_log="$(mktemp)"
{
  bash scripts/client_packages.sh .clients ||
    echo "test: the client packages are missing; their tests will skip (run scripts/client_packages.sh .clients)"
  bash scripts/torch_env.sh .torch ||
    echo "test: no torch environment; the module-frame tests will skip (run scripts/torch_env.sh .torch)"
  main_torch_version="$(.torch/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true)"
  for version in 3.10 3.11 3.12 3.13 3.14; do
    if [ "$version" != "$main_torch_version" ]; then
      bash scripts/torch_env.sh ".torch-$version" "$version" || true
    fi
  done
} >"$environments_log" 2>&1 &
environments=$!
# A step that fails ends this script (set -e): then no further install starts behind it.
trap 'kill "$environments" 2>/dev/null || true' EXIT
jobs="$(nproc)"

echo "== $(date -u +%T) format check (clang-format)"
mapfile -t sources < <(git ls-files '*.cc' '*.h' 2>/dev/null || find . -name '*.cc' -o -name '*.h')
clang-format --dry-run --Werror "${sources[@]}"
echo "== $(date -u +%T) layer check (every #include goes down the layers of docs/layers.md)"
python3 scripts/check_layers.py
echo "== $(date -u +%T) pipe check (no reader that leaves early under pipefail: scripts/check_pipes.py)"
python3 scripts/check_pipes.py

# Every build's compilations, the manylinux wheel's dependency builds, Zig's own cache, the tools' venv and the Debian 11
# root are kept here between runs on the same machine (each keyed by what it is made of): a run on a fresh clone
# compiles only what changed since the machine's last run; a first run makes them (see README, "Testing").
export TS_BUILD_CACHE_DIR="${TS_BUILD_CACHE_DIR:-/var/cache/trainscope}"
export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
export CCACHE_DIR="$TS_BUILD_CACHE_DIR/ccache" CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1 CCACHE_COMPILERCHECK=content \
  CCACHE_MAXSIZE=6G
mkdir -p "$CCACHE_DIR"

# The test binaries' own code at -O0 with line tables (TRAINSCOPE_TEST_CODE_FLAGS): it is most of what each build
# compiles, and at -O2 -g it takes three times as long; the code under test keeps its build type's flags.
test_code_flags=(-DTRAINSCOPE_TEST_CODE_FLAGS="-O0 -g1")
# The code under test at -O2 with line tables only (-g1): what the tests' stacks and the benchmarks need (one report file
# compiled in 11 s of CPU so, 17 s with full debug information), and smaller objects in ccache's store.
echo "== $(date -u +%T) build (RelWithDebInfo at -O2 -g1, -Werror)"
mkdir -p build-ci
bash scripts/build.sh build-ci -DTRAINSCOPE_WERROR=ON "${test_code_flags[@]}" \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"
wait "$environments"
echo "== $(date -u +%T) the Python environments of the tests (scripts/client_packages.sh, scripts/torch_env.sh)"
cat "$environments_log"
rm -f "$environments_log"
echo "== $(date -u +%T) tests"
ctest --test-dir build-ci --output-on-failure -j "$jobs"

# The manylinux wheel's compiler at a stable path (the tools' venv's ziglang, the version pyproject.toml pins, rather
# than pip's new isolated environment each time), so that ccache finds its compilations again.
tools="$(bash tests/integration/wheel_tools_venv.sh)"
TS_BUILD_ZIG="$("$tools/bin/python" -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')"
export TS_BUILD_ZIG
echo "== $(date -u +%T) the wheel: manylinux_2_28 by pip wheel (Zig), its policy (every ELF, auditwheel), installed into a fresh venv, a stand-in job run through it"
bash tests/integration/wheel_test.sh build-ci
echo "== $(date -u +%T) the wheel on Debian 11 (glibc 2.31): pip install in a bullseye chroot, a mismatched job, its report"
# The stand-in NCCL and ts-launch built like the wheel (the test build's need Debian 12's glibc).
mkdir -p build-ci-standins
bash scripts/build.sh build-ci-standins -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/ManylinuxToolchain.cmake" \
  -DTRAINSCOPE_BUILD_TESTS=OFF -DTRAINSCOPE_BUILD_BENCH=OFF \
  -DTRAINSCOPE_BUILD_KERNELS=OFF -DTRAINSCOPE_BUILD_STANDINS=ON --target nccl_fake --target ts-launch
bash tests/integration/old_userland_test.sh build-ci-wheel/dist/trainscope-*.whl build-ci-standins

echo "== $(date -u +%T) benchmarks (figures only)"
bench_dir="$(mktemp -d)"
(cd "$bench_dir" && echo "-- the shim, watching off" &&
  TRAINSCOPE_WATCH=off TRAINSCOPE_DIR="$bench_dir/runs" "$OLDPWD/build-ci/tests/bench/shim_bench" \
    --benchmark_min_time=0.2 --benchmark_format=console --benchmark_filter=-Watched &&
  echo "-- the shim, watching collectives (host buffers; the statistics are taken on the calling thread)" &&
  TRAINSCOPE_DIR="$bench_dir/runs" "$OLDPWD/build-ci/tests/bench/shim_bench" \
    --benchmark_min_time=0.2 --benchmark_format=console --benchmark_filter=Watched) ||
  echo "benchmarks failed (figures only; not a test)"
rm -rf "$bench_dir"
bash tests/bench/frames_end_to_end.sh build-ci 500 65536 3 || echo "end-to-end figure failed (not a test)"
echo "-- the launch collector on the launching thread: per launch (runtime + nested driver) and per other API call"
build-ci/tests/bench/launch_bench --benchmark_min_time=0.2 --benchmark_format=console ||
  echo "launch figures failed (not a test)"
echo "-- the whole launch path per launch on the stand-in CUDA driver and CUPTI: none, off, calls, on"
bash tests/bench/launches_end_to_end.sh build-ci 200000 5 || echo "launch path figures failed (not a test)"
echo "-- the whole job: a collective-bound 4-rank loop unwatched and under each configuration (issue 20: defaults <= 1.02x)"
bash tests/bench/whole_job.sh build-ci 8000 5 || echo "whole-job figures failed (not a test)"
echo "-- host statistics per core beside memcpy and a plain read (GB/s)"
build-ci/tests/bench/stats_host_bench --benchmark_min_time=0.1 --benchmark_format=console ||
  echo "statistics figures failed (not a test)"
echo "-- trainscope's network traffic per rank on the multi-host bed (3 namespaced hosts x 2 ranks; skipped without root)"
bash tests/bench/multihost_traffic.sh build-ci || echo "multi-host traffic figures failed or skipped (not a test)"
echo "-- the coordinator: ingest rate and verdict latency with simulated ranks"
build-ci/tests/bench/coordinator_bench --benchmark_min_time=0.2 --benchmark_format=console ||
  echo "coordinator figures failed (not a test)"
echo "-- trainscope report --last all on 4 recorders x 40k calls: peak RSS and time"
build-ci/tests/bench/report_bench --benchmark_format=console || echo "report figures failed (not a test)"
echo "-- the shim for a Python caller 30 frames deep (every CPython 3.9-3.13 found)"
bash tests/bench/python_hook_bench.sh build-ci || echo "Python figures failed (not a test)"
echo "-- module frames: per-step time of a small T5 training loop on CPU, unwatched / DUO / TRAINSCOPE_WATCH=modules (issue 21: overhead under a third of DUO's)"
bash tests/bench/module_step.sh build-ci || echo "module frame figures failed (not a test)"

echo "== $(date -u +%T) the GPU kit runs with nothing but glibc (what a lent GPU machine has of ours)"
TRAINSCOPE_GPU_KIT_BUILD=build-ci bash scripts/gpu-kit.sh build-ci-kit
bash tests/gpu/kit_check.sh build-ci-kit build-ci/tests/fakes/lib

echo "== $(date -u +%T) fuzzing the exchange's message decoder (libFuzzer, clang, 60 s)"
mkdir -p build-ci-fuzz
CC=clang-14 CXX=clang++-14 bash scripts/build.sh build-ci-fuzz -DTRAINSCOPE_WERROR=ON -DTRAINSCOPE_BUILD_FUZZ=ON \
  -DTRAINSCOPE_BUILD_KERNELS=OFF -DTRAINSCOPE_BUILD_BENCH=OFF -DTRAINSCOPE_BUILD_TESTS=ON --target wire_protocol_fuzz
mkdir -p build-ci-fuzz/corpus
build-ci-fuzz/tests/fuzz/wire_protocol_fuzz -max_total_time=60 -print_final_stats=1 build-ci-fuzz/corpus 2>&1 |
  tail -n 12

for sanitizer in address thread; do
  echo "== $(date -u +%T) $sanitizer sanitizer build"
  mkdir -p "build-ci-$sanitizer"
  # The code under test at -O1 with line tables only: half the time -O2 -g takes to compile under either sanitizer,
  # with the same findings and file:line in every stack (at -O0 under TSan the stand-in NCCL's every-type-every-op
  # tests run past their deadlines). The tests' own code at -O0, as in the plain build. The kernels' fatbin is the plain
  # build's (the device code is the same): the launcher loads it before it asks the driver anything, and the device
  # path then runs on the stand-in GPU (tests/integration/device_stats_test.cc) under each sanitizer too.
  opt=(-DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG")
  # The stand-in NCCL's own tests (label fake) under ASan only: under TSan they took 140 s of test time to check the
  # stand-in's element-by-element arithmetic, while every integration test still runs the stand-in under TSan.
  fake=(--target fake_nccl_tests)
  labels='unit|integration|fake'
  if [ "$sanitizer" = thread ]; then
    fake=()
    labels='unit|integration'
  fi
  # Every target's files compiled 16 at a time (CMake's unity build; the tests' are in every build): with an empty
  # ccache store the ASan build took 8.8 minutes so and 12.1 file by file, the TSan build 4.4 and 7.5. The plain build
  # compiles file by file, which proves that each file includes what it uses.
  bash scripts/build.sh "build-ci-$sanitizer" -DTRAINSCOPE_WERROR=ON -DTRAINSCOPE_SANITIZE="$sanitizer" "${opt[@]}" \
    -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=16 \
    "${test_code_flags[@]}" -DTRAINSCOPE_BUILD_BENCH=OFF -DTRAINSCOPE_BUILD_KERNELS=ON \
    -DTRAINSCOPE_KERNELS_FATBIN="$PWD/build-ci/kernels/stats_kernels.fatbin" \
    --target trainscope_unit_tests --target trainscope_integration_tests "${fake[@]}" \
    --target trainscope_commcheck_tests --target trainscope_timeline_tests --target trainscope_html_tests
  echo "== $(date -u +%T) tests under the $sanitizer sanitizer"
  # die_after_fork=0: a forked child that uses NCCL starts an engine of its own (threads included) by design, and
  # forgets the parent's locks and threads first; TSan refuses new threads after a fork unless told.
  ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
    TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:die_after_fork=0:suppressions=$PWD/tests/tsan.supp" \
    ctest --test-dir "build-ci-$sanitizer" --output-on-failure -j "$jobs" -L "$labels"
done
echo "== $(date -u +%T) all tests passed"
