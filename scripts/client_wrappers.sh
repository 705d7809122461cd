#!/usr/bin/env bash
# Installs the NCCL wrappers of the real clients that tests/clients drives (vLLM's and SGLang's pynccl_wrapper.py,
# ctypes, used unchanged) into DEST, from their released packages on the package index (pip download --no-deps; only
# the one file is kept). They are not committed to this repository: tests/clients/README.md says why and what they are.
# Usage: client_wrappers.sh DEST       (scripts/setup.sh runs it with DEST = .clients of the checkout)
# Safe to run again: a wrapper already in DEST at the pinned version is kept. Needs python3 with pip. Without the
# package index it says so and exits 1; the tests that use a wrapper then skip, naming this script.
set -euo pipefail
dest="$1"
python="${PYTHON:-python3}"

# project  version  file inside the wheel (the wheels for CPython 3.11: the file is the same in each of a release's)
clients=(
  "vllm 0.33.0 vllm/distributed/device_communicators/pynccl_wrapper.py"
  "sglang 0.5.23 sglang/srt/distributed/device_communicators/pynccl_wrapper.py"
)

mkdir -p "$dest"
status=0
for client in "${clients[@]}"; do
  read -r project version path <<<"$client"
  target="$dest/$project/pynccl_wrapper.py"
  stamp="$dest/$project/SOURCE"
  if [ -f "$target" ] && [ -f "$stamp" ] && grep -qx "version: $version" "$stamp"; then
    continue
  fi
  work="$(mktemp -d)"
  echo "client_wrappers: $project $version: downloading its wheel for $path"
  if ! "$python" -m pip download --quiet --no-deps --only-binary :all: --python-version 3.11 --dest "$work" "$project==$version" >&2; then
    echo "client_wrappers: could not download $project $version; the tests that run its wrapper will skip" >&2
    rm -rf "$work"
    status=1
    continue
  fi
  mkdir -p "$dest/$project"
  "$python" - "$work" "$path" "$target" "$stamp" "$project" "$version" <<'EOF'
import glob, hashlib, sys, zipfile
work, path, target, stamp, project, version = sys.argv[1:]
wheels = glob.glob(work + "/*.whl")
if len(wheels) != 1:
    sys.exit("client_wrappers: expected one wheel in %s, found %d" % (work, len(wheels)))
with zipfile.ZipFile(wheels[0]) as wheel:
    data = wheel.read(path)
with open(target, "wb") as out:
    out.write(data)
with open(stamp, "w") as out:
    out.write("project: %s\nversion: %s\nwheel: %s\nfile: %s\nsha256: %s\n" % (
        project, version, wheels[0].rsplit("/", 1)[-1], path, hashlib.sha256(data).hexdigest()))
EOF
  rm -rf "$work"
done
exit "$status"
