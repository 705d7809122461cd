#!/usr/bin/env bash
# Builds what tests/gpu/run.sh runs and packs it for a GPU machine that has the CUDA driver, nvcc and NCCL but none
# of our other dependencies and no package registry (a lent device machine, say):
#   scripts/gpu-kit.sh [KIT_DIR]     (default: gpu-kit; git ignores it)
# The kit keeps the build tree's layout (shim/, tools/, tests/gpu/, tests/programs/) so run.sh finds the same paths,
# holds stripped binaries (the engine's debug info alone is 20 MB) and, in lib/, every shared library they need that
# is not part of glibc, NCCL or the CUDA driver. libstdc++ and libgcc_s go to lib-fallback/: run.sh uses them only if
# the machine's own are older than ours, so that the machine's tools (compute-sanitizer) keep their own.
# tests/gpu/run.sh uses KIT_DIR instead of building when KIT_DIR/kit.txt exists; carry the folder to the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
kit="${1:-gpu-kit}"
build="${TRAINSCOPE_GPU_KIT_BUILD:-build-gpu-kit}"
binaries=(shim/libtrainscope.so shim/libtrainscope-engine.so tools/trainscope tests/gpu/stats_gpu_tests
  tests/gpu/stats_gpu_bench tests/gpu/watch_gpu_program tests/gpu/launches_gpu_program
  tests/programs/nccl_probe_program tests/programs/ts-launch tests/programs/loop_program
  tests/programs/device_module_frames_program tests/fakes/lib/libnccl.so.2)

bash scripts/setup.sh
mkdir -p "$build"
bash scripts/build.sh "$build" -DTRAINSCOPE_BUILD_KERNELS=ON -DTRAINSCOPE_BUILD_TESTS=ON -DTRAINSCOPE_BUILD_BENCH=ON \
  --target trainscope_shim --target trainscope_engine --target trainscope_tool --target stats_gpu_tests \
  --target stats_gpu_bench --target watch_gpu_program --target launches_gpu_program_build \
  --target nccl_probe_program --target loop_program --target device_module_frames_program --target nccl_fake

rm -rf "$kit"
mkdir -p "$kit/lib" "$kit/lib-fallback"
for binary in "${binaries[@]}"; do
  [ -f "$build/$binary" ] || { echo "gpu-kit: $build/$binary was not built" >&2; exit 1; }
  mkdir -p "$kit/$(dirname "$binary")"
  strip --strip-debug -o "$kit/$binary" "$build/$binary"
done

# The shared libraries to carry: everything the binaries load, by ldd's resolution here, except what every Linux
# machine with the CUDA driver has (glibc's parts, the loader), what the GPU machine brings (NCCL, the driver), and
# the stand-in NCCL the test programs were linked against (run.sh points them at the real one).
is_provided() {
  case "$1" in
    linux-vdso.so.* | ld-linux*.so.* | libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | \
      libresolv.so.* | libutil.so.* | libanl.so.* | libnsl.so.* | libnccl.so.* | libcuda.so.*) return 0 ;;
  esac
  return 1
}
for binary in "${binaries[@]}"; do
  while read -r name _ path _; do
    [ -n "$name" ] || continue
    name="${name##*/}"
    is_provided "$name" && continue
    if [ -z "${path:-}" ] || [ ! -e "$path" ]; then
      echo "gpu-kit: $binary needs $name, which does not resolve here" >&2
      exit 1
    fi
    case "$name" in
      libstdc++.so.* | libgcc_s.so.*) cp -L "$path" "$kit/lib-fallback/$name" ;;
      *) cp -L "$path" "$kit/lib/$name" ;;
    esac
  done < <(ldd "$build/$binary" | awk '/=>/ {print $1, $2, $3} !/=>/ {print $1}')
done

# The fatbin the engine embeds, so the machine's cuobjdump can list its SASS and PTX.
cp "$build/kernels/stats_kernels.fatbin" "$kit/"

{
  echo "trainscope GPU kit"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"
  echo "built: $(date -u +%FT%TZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), $(ldd --version | sed -n 1p)"
  echo "nvcc: $("${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" --version | tail -n 1)"
  echo "binaries: ${binaries[*]}"
  echo "lib: $(cd "$kit/lib" && echo *)"
  echo "lib-fallback: $(cd "$kit/lib-fallback" && echo *)"
} >"$kit/kit.txt"
du -sh "$kit" | awk '{print "gpu-kit: " $2 " holds " $1 "; carry it and run tests/gpu/run.sh"}'
