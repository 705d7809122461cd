#!/usr/bin/env bash
# Makes DEST a virtual environment with PyTorch and transformers from the package index, for the tests of module
# frames (tests/python/modules): they run real models built from a config, on the CPU, with no weights downloaded.
# Usage: torch_env.sh DEST      (scripts/test.sh runs it with DEST = .torch of the checkout)
# Safe to run again: an environment already at the pinned versions is kept. The index's torch is its CUDA build; it
# runs on a machine without a GPU, and its nvidia-* dependencies are what it needs to import (about 5 GB, 2 minutes).
# Without the package index it says so and exits 1; the tests that need torch then skip, naming this script.
set -euo pipefail
dest="$1"
torch_version=2.15.0
transformers_version=5.24.0
stamp="$dest/TRAINSCOPE_PINS"
want="torch==$torch_version transformers==$transformers_version"
if [ -x "$dest/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
# torch's wheels are for CPython 3.10-3.14: the first of those this machine has.
python=""
for version in 3.11 3.12 3.13 3.10; do
  candidate="$(command -v "python$version" || true)"
  if [ -z "$candidate" ] && command -v pyenv >/dev/null; then
    candidate="$(pyenv prefix "$(pyenv versions --bare | grep "^$version\." | sed -n 1p)" 2>/dev/null)/bin/python$version" || true
  fi
  if [ -n "$candidate" ] && [ -x "$candidate" ]; then python="$candidate"; break; fi
done
if [ -z "$python" ]; then
  echo "torch_env: no CPython 3.10-3.13 here; the module-frame tests will skip" >&2
  exit 1
fi
rm -rf "$dest"
"$python" -m venv "$dest"
echo "torch_env: installing $want into $dest with $python"
if ! "$dest/bin/python" -m pip install --quiet "torch==$torch_version" "transformers==$transformers_version" >&2; then
  echo "torch_env: could not install $want; the module-frame tests will skip" >&2
  exit 1
fi
echo "$want" >"$stamp"
