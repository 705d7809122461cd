#!/usr/bin/env bash
# Makes, in DEST, one venv for each CPython 3.10-3.13 this machine has, holding the client packages whose own compiled
# NCCL bindings tests/integration/client_packages_test.cc drives unchanged on the stand-in NCCL: nccl4py
# (nccl.bindings.nccl) and CuPy (cupy.cuda.nccl, cupy-cuda13x). DEST/packages-3.N for CPython 3.N.
# Usage: client_packages.sh DEST      (scripts/test.sh runs it with DEST = .clients of the checkout)
# Their releases need CPython 3.10 or newer (nccl4py has no wheel for 3.9). Safe to run again: a venv already at the
# pinned versions is kept. About 330 MB and a few seconds each with the installer's cache warm (install_packages.sh).
# Exits 1 and says why where it could make none; the tests of a version without its venv skip, naming this script.
set -euo pipefail
dest="$1"
source "$(dirname "$0")/find_python.sh"
source "$(dirname "$0")/install_packages.sh"

packages="nccl4py==0.6.0 cupy-cuda13x==14.2.0"
made=0
for version in 3.10 3.11 3.12 3.13; do
  python="$(find_python "$version")"
  if [ -z "$python" ]; then
    echo "client_packages: no CPython $version on this machine; its client package tests will skip" >&2
    continue
  fi
  venv="$dest/packages-$version"
  stamp="$venv/TRAINSCOPE_PINS"
  if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$packages" ]; then
    made=$((made + 1))
    continue
  fi
  rm -rf "$venv"
  mkdir -p "$dest"
  "$python" -m venv "$venv"
  echo "client_packages: installing $packages into $venv with $python"
  # shellcheck disable=SC2086  # the list of pins is split on purpose
  if ! install_packages "$venv/bin/python" $packages >&2; then
    echo "client_packages: could not install $packages for CPython $version; its client package tests will skip" >&2
    rm -rf "$venv"
    continue
  fi
  echo "$packages" >"$stamp"
  made=$((made + 1))
done
if [ "$made" -eq 0 ]; then
  echo "client_packages: no venv made (no CPython 3.10-3.13, or no package index)" >&2
  exit 1
fi
