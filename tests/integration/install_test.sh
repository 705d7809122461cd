#!/usr/bin/env bash
# Installs the build into a temporary prefix and checks that the installed copy works from another directory,
# with no build-tree path baked in: the shim finds its engine, records a job, and `trainscope report` reads it. With
# BUNDLED=ON (TRAINSCOPE_BUNDLE_DEPENDENCIES), the installed tree must need nothing but glibc (check_bundled.sh).
# Usage: install_test.sh BUILD_DIR FAKE_NCCL_DIR PROGRAM_DIR [BUNDLED]
set -euo pipefail
build_dir="$1"
fake_nccl_dir="$2"
program_dir="$3"
bundled="${4:-OFF}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
for f in bin/trainscope lib/libtrainscope.so lib/libtrainscope-engine.so; do
  [ -e "$work/prefix/$f" ] || { echo "missing after install: $f"; exit 1; }
done
# Debug information names the build tree (compile directories); nothing that is used at run time may.
for f in bin/trainscope lib/libtrainscope.so lib/libtrainscope-engine.so; do
  strip --strip-debug -o "$work/stripped" "$work/prefix/$f"
  if grep -q "$build_dir" "$work/stripped"; then
    echo "the installed $f names the build tree $build_dir"
    exit 1
  fi
done
case "$bundled" in
  ON | on | 1 | TRUE | true) bash "$(dirname "$0")/check_bundled.sh" "$work/prefix" libzmq.so.5 libsodium.so.23 ;;
esac
# Move the build tree's engine out of the way for the run, so only the installed one can be found.
mkdir -p "$work/elsewhere"
cd "$work/elsewhere"
LD_LIBRARY_PATH="$fake_nccl_dir" LD_PRELOAD="$work/prefix/lib/libtrainscope.so" TRAINSCOPE_DIR="$work/runs" \
  TRAINSCOPE_RUN_ID=installed TRAINSCOPE_LOG_LEVEL=info "$program_dir/collectives_program" 2>"$work/stderr"
grep -q "recording to $work/runs/installed" "$work/stderr" || { cat "$work/stderr"; echo "engine not loaded"; exit 1; }
"$work/prefix/bin/trainscope" report "$work/runs/installed" >"$work/report"
grep -q ncclAllReduce "$work/report" || { cat "$work/report"; exit 1; }
echo "installed copy works"
