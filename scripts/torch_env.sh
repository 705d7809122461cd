#!/usr/bin/env bash
# Makes DEST a virtual environment with PyTorch, transformers and DeepSpeed from the package index, for the tests of
# module frames (tests/integration/module_frames_test.cc): they run real models built from a config, on the CPU, with
# no weights downloaded, and DeepSpeed's loss-scaled training in one process. The default one (.torch) has Megatron
# Core too, for its loss-scaled training (installed apart: see below).
# Usage: torch_env.sh DEST [3.N]
#   Without a version: the first of CPython 3.11, 3.12, 3.13, 3.10 this machine has (the test command's .torch, where
#   every module-frame test runs). With one: that CPython (the test command's .torch-3.N, one for each version torch
#   has a wheel for, where the module-frame tests run again).
# Each CPython gets the newest torch with a wheel for it, pinned here: 3.11-3.14 torch 2.15, 3.10 torch 2.14 (torch 2.15
# has no wheel for 3.10, and Ubuntu 22.04's Python is 3.10). 3.9 is past its end of life and its last torch is 2.8:
# not tested. DeepSpeed is pinned for all (0.19.8, pure Python: installed without compiling its ops).
# Safe to run again: an environment already at the pinned versions is kept. The index's torch is its CUDA build; it
# runs on a machine without a GPU, and its nvidia-* dependencies are what it needs to import (about 5 GB; installed by
# uv, which links one unpacked copy of them into every venv: install_packages.sh).
# Exits 1 and says why when it makes nothing (no such CPython, no pins for it, no package index); the tests that need
# that environment then skip, naming this script.
set -euo pipefail
dest="$1"
wanted="${2:-}"

source "$(dirname "$0")/find_python.sh"
source "$(dirname "$0")/install_packages.sh"

python=""
version=""
if [ -n "$wanted" ]; then
  if ! [[ "$wanted" =~ ^3\.[0-9]+$ ]]; then
    echo "torch_env: '$wanted' is not a CPython version: give it as 3.N (3.10 to 3.14)" >&2
    exit 2
  fi
  version="$wanted"
  python="$(find_python "$version")"
  if [ -z "$python" ]; then
    echo "torch_env: no CPython $version on this machine; its module-frame tests will skip" >&2
    exit 1
  fi
else
  for candidate in 3.11 3.12 3.13 3.10; do
    python="$(find_python "$candidate")"
    if [ -n "$python" ]; then version="$candidate"; break; fi
  done
  if [ -z "$python" ]; then
    echo "torch_env: no CPython 3.10-3.13 here; the module-frame tests will skip" >&2
    exit 1
  fi
fi

case "$version" in
  3.11 | 3.12 | 3.13 | 3.14) torch_version=2.15.0 transformers_version=5.24.0 ;;
  3.10) torch_version=2.14.1 transformers_version=5.20.2 ;;
  *)
    echo "torch_env: no pinned torch for CPython $version (tested: 3.10 to 3.14; 3.9's last torch is 2.8, past its" \
      "end of life); its module-frame tests will skip" >&2
    exit 1
    ;;
esac
packages=("torch==$torch_version" "transformers==$transformers_version" "deepspeed==0.19.8")
want="${packages[*]} python$version"
stamp="$dest/TRAINSCOPE_PINS"
if ! [ -x "$dest/bin/python" ] || ! [ -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  rm -rf "$dest"
  "$python" -m venv "$dest"
  echo "torch_env: installing ${packages[*]} into $dest with $python"
  if ! install_packages "$dest/bin/python" "${packages[@]}" >&2; then
    echo "torch_env: could not install $want; its module-frame tests will skip" >&2
    rm -rf "$dest"
    exit 1
  fi
  echo "$want" >"$stamp"
fi

# Megatron Core, for the test of its loss scaler, in the default environment only (.torch, where every module-frame
# test runs; wheels for CPython 3.10 to 3.13), installed apart: where it cannot be had, its two tests skip and say
# so, and the others run. Tried again at each run until it is there.
if [ -z "$wanted" ]; then
  megatron="megatron-core==0.16.1"
  megatron_stamp="$dest/TRAINSCOPE_MEGATRON_PIN"
  if ! [ -f "$megatron_stamp" ] || [ "$(cat "$megatron_stamp")" != "$megatron" ]; then
    echo "torch_env: installing $megatron into $dest"
    if install_packages "$dest/bin/python" "$megatron" >&2; then
      echo "$megatron" >"$megatron_stamp"
    else
      echo "torch_env: could not install $megatron into $dest; its tests (ModuleMegatron) will skip" >&2
    fi
  fi
fi
