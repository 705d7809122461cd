#!/usr/bin/env bash
# Configures and builds one build tree: scripts/build.sh BUILD_DIR [extra cmake arguments...]
set -euo pipefail
build_dir="$1"
shift
cuda_root="${CUDA_HOME:-/usr/local/cuda}"
cmake -S "$(dirname "$0")/.." -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCUDAToolkit_ROOT="$cuda_root" "$@" >"$build_dir.configure.log" 2>&1 || {
  cat "$build_dir.configure.log"
  exit 1
}
cmake --build "$build_dir" -j "$(nproc)"
