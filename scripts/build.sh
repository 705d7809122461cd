#!/usr/bin/env bash
# Configures and builds one build tree: scripts/build.sh BUILD_DIR [cmake arguments...] [--target T]
set -euo pipefail
build_dir="$1"
shift
targets=()
args=()
while [ $# -gt 0 ]; do
  if [ "$1" = "--target" ]; then
    targets+=(--target "$2")
    shift 2
  else
    args+=("$1")
    shift
  fi
done
cuda_root="${CUDA_HOME:-/usr/local/cuda}"
cmake -S "$(dirname "$0")/.." -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCUDAToolkit_ROOT="$cuda_root" "${args[@]}" >"$build_dir.configure.log" 2>&1 || {
  cat "$build_dir.configure.log"
  exit 1
}
cmake --build "$build_dir" -j "$(nproc)" "${targets[@]}"
