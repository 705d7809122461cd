# Sourced by the scripts that make venvs for the tests (torch_env.sh, client_packages.sh).
# install_packages PYTHON PACKAGE...: installs the packages from the package index into the venv of PYTHON, with their
# bytecode compiled (the tests run Python with PYTHONDONTWRITEBYTECODE: without it, each of their processes would
# compile torch again).
#
# With uv, where it can be had: it keeps one unpacked copy of each wheel in its cache and links it into every venv,
# where pip unpacks the same 3 GB of CUDA libraries into each of the test command's four torch venvs: measured on 2
# cores, torch and transformers into a new venv took 98 s by pip with its cache warm, 29 s by uv with its own (56 s with
# nothing in it), most of that the bytecode. uv comes from the package index too, pinned, into a venv of its own in
# TS_BUILD_CACHE_DIR (default /var/cache/trainscope); where it cannot be installed, pip does the work, as before.
uv_version="0.13.9"

# Prints the path of uv, installing it first where needed; fails where it cannot be had (pip says why on stderr).
uv_binary() {
  local cache="${TS_BUILD_CACHE_DIR:-/var/cache/trainscope}"
  local venv="$cache/uv-$uv_version"
  if [ ! -x "$venv/bin/uv" ]; then
    rm -rf "$venv"
    if ! { mkdir -p "$cache" && python3 -m venv "$venv" &&
      timeout 300 "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "uv==$uv_version"; } >&2; then
      rm -rf "$venv"
      return 1
    fi
  fi
  echo "$venv/bin/uv"
}

install_packages() {
  local python="$1" uv
  shift
  if uv="$(uv_binary)"; then
    "$uv" pip install --quiet --python "$python" --compile-bytecode "$@" && return 0
    echo "install_packages: uv could not install $* (it said why above); pip tries" >&2
  else
    echo "install_packages: uv $uv_version could not be installed; pip installs $*" >&2
  fi
  "$python" -m pip install --quiet "$@"
}
