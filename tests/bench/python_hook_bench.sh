#!/usr/bin/env bash
# The shim's cost per NCCL call for a Python caller 30 frames deep (figures, not a test): tests/bench/python_hook_bench.py
# run without trainscope, then under it, for the NCCL looked up on a handle (ctypes) and through the process-wide
# look-up (a linked libnccl), on every CPython 3.9-3.13 found.  Usage: python_hook_bench.sh BUILD_DIR
set -uo pipefail
build="$(cd "${1:-build}" && pwd)"
here="$(cd "$(dirname "$0")" && pwd)"
noop="$build/tests/fakes/noop/libnccl.so.2"
helpers="$build/tests/bench/libts_python_call_helpers.so"
shim="$build/shim/libtrainscope.so"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
pythons=()
for minor in 9 10 11 12 13; do
  found="$(ls -d "${PYENV_ROOT:-/root/.pyenv}"/versions/3."$minor".*/bin/python3."$minor" 2>/dev/null | sed -n 1p)"
  [ -z "$found" ] && found="$(command -v python3."$minor" || true)"
  if [ -n "$found" ]; then pythons+=("$found"); else echo "python 3.$minor: not found on this machine, skipped"; fi
done
for python in "${pythons[@]}"; do
  for mode in handle global; do
    "$python" "$here/python_hook_bench.py" "$noop" "$helpers" "$mode" | sed 's/^/without trainscope: /'
    TRAINSCOPE_WATCH=off TRAINSCOPE_DIR="$scratch/runs" LD_PRELOAD="$shim" \
      "$python" "$here/python_hook_bench.py" "$noop" "$helpers" "$mode" | sed 's/^/with trainscope:    /'
  done
done
