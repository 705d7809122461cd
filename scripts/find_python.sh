# Sourced by the scripts that make venvs for the tests (torch_env.sh, client_packages.sh).
# find_python 3.N: prints the executable of CPython 3.N that runs, or nothing: python3.N on PATH, then pyenv's newest
# 3.N.x (the shim of a pyenv version that is not selected exists but does not run).
find_python() {
  local version="$1" candidate pyenv_version
  for candidate in "$(command -v "python$version" || true)" \
    "$(command -v pyenv >/dev/null && pyenv_version="$(pyenv versions --bare | grep "^$version\." | sort -t. -k3 -n |
      tail -n 1)" && [ -n "$pyenv_version" ] && echo "$(pyenv prefix "$pyenv_version")/bin/python$version")"; do
    if [ -n "$candidate" ] && [ -x "$candidate" ] && "$candidate" -c '' >/dev/null 2>&1; then
      echo "$candidate"
      return
    fi
  done
}
