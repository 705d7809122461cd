# Sourced by the scripts that make venvs for the tests (torch_env.sh, client_packages.sh).
# find_python 3.N: prints the executable of CPython 3.N that runs, or nothing: python3.N on PATH, then pyenv's newest
# 3.N.x (the shim of a pyenv version that is not selected exists but does not run).
find_python() {
  local version="$1" candidate pyenv_version
  local candidates=("$(command -v "python$version" || true)")
  if command -v pyenv >/dev/null; then
    pyenv_version="$(pyenv versions --bare | grep "^$version\." | sort -t. -k3 -n | tail -n 1 || true)"
    if [ -n "$pyenv_version" ]; then candidates+=("$(pyenv prefix "$pyenv_version")/bin/python$version"); fi
  fi
  for candidate in "${candidates[@]}"; do
    if [ -n "$candidate" ] && [ -x "$candidate" ] && "$candidate" -c '' >/dev/null 2>&1; then
      echo "$candidate"
      return
    fi
  done
}
