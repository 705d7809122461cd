#!/usr/bin/env bash
# Installs the Debian packages trainscope builds and tests with (only those missing), and checks that the CUDA
# toolkit headers (nccl.h, cuda_runtime.h) are present. Safe to run again.
set -euo pipefail

packages=(
  cmake ninja-build g++ make binutils pkg-config
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  libspdlog-dev libfmt-dev nlohmann-json3-dev
  libzmq3-dev cppzmq-dev libsodium-dev
  dpkg-dev autoconf automake libtool  # the manylinux wheel's ZeroMQ and libsodium, from their source packages
  debootstrap  # the wheel's test on Debian 11 (tests/integration/old_userland_test.sh)
  ccache  # scripts/test.sh: the wheel's compilations, kept between runs
  clang-format clang-14 libclang-rt-14-dev
  chromium  # the HTML report's test loads the page headless (skipped without it)
  nodejs  # checks the HTML report's script (analysis/html_page/page.js)
  python3 python3-venv python3-pip
  iproute2 util-linux  # the multi-host test bed: ip, tc, bridges, veth (iproute2); unshare, nsenter (util-linux)
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep "install ok installed" >/dev/null; then
    missing+=("$package")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cuda_root="${CUDA_HOME:-/usr/local/cuda}"
if [ ! -f "$cuda_root/include/nccl.h" ] || [ ! -f "$cuda_root/include/cuda_runtime.h" ]; then
  echo "setup: the CUDA toolkit with NCCL headers was not found under $cuda_root" >&2
  echo "setup: install the CUDA toolkit (nvcc, cuda_runtime.h) and NCCL (nccl.h), or set CUDA_HOME" >&2
  exit 1
fi
