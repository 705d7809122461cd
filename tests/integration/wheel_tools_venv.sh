#!/usr/bin/env bash
# The tools the wheel's tests run, from PyPI into a venv kept in TS_BUILD_CACHE_DIR (default /var/cache/trainscope)
# and made again only when their versions change: auditwheel (and pyelftools, which it brings) for the policy checks,
# and ziglang, the same version as pyproject.toml's build requirement, for builds with cmake/ManylinuxToolchain.cmake
# outside pip (the stand-ins of the old-userland test). Prints the venv's path.
# Usage: wheel_tools_venv.sh
set -euo pipefail
source_dir="$(cd "$(dirname "$0")/../.." && pwd -P)"
zig="$(grep -o 'ziglang==[0-9.]*' "$source_dir/pyproject.toml" | sed -n 1p)"
[ -n "$zig" ] || { echo "wheel_tools_venv: pyproject.toml pins no ziglang==VERSION" >&2; exit 1; }
requirements="auditwheel==6.8.2 $zig"
cache="${TS_BUILD_CACHE_DIR:-/var/cache/trainscope}"
venv="$cache/venv-$(sha256sum <<<"$requirements $(python3 --version)" | cut -c1-12)"
if [ ! -f "$venv/.complete" ]; then
  mkdir -p "$cache"
  rm -rf "$venv"
  python3 -m venv "$venv" >&2
  # shellcheck disable=SC2086
  timeout 600 "$venv/bin/python" -m pip install --quiet --disable-pip-version-check $requirements >&2 ||
    { echo "wheel_tools_venv: pip install $requirements failed" >&2; rm -rf "$venv"; exit 1; }
  touch "$venv/.complete"
fi
echo "$venv"
