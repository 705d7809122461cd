// The frame reports on a real GPU: a one-rank job on the real NCCL all-reduces device buffers (fp32, then fp16 in a
// group) for a few steps; at step 3 the fp32 send buffer holds an inf. Under the shim, the statistics of device
// buffers come from the fused kernel on the call's stream, so nonfinite-rank0.txt must say batch_number=3 and show
// the inf in input[0] and output. tests/gpu/run.sh runs it with and without the shim and checks the report.
//   watch_gpu_program [STEPS]   (exit 0 when every call succeeded; 77 when there is no GPU)
#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "gpu/cuda_driver.h"

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 6;
  trainscope::gpu_testing::Driver cuda;
  if (const std::string why = cuda.open(); !why.empty()) {
    std::fprintf(stderr, "watch_gpu_program: %s\n", why.c_str());
    return 77;
  }
  constexpr size_t kCount = 1 << 20;
  CUdeviceptr grads = 0, reduced = 0, halves = 0;
  if (cuda.cuMemAlloc(&grads, kCount * 4) != CUDA_SUCCESS || cuda.cuMemAlloc(&reduced, kCount * 4) != CUDA_SUCCESS ||
      cuda.cuMemAlloc(&halves, kCount * 2) != CUDA_SUCCESS) {
    std::fprintf(stderr, "watch_gpu_program: cuMemAlloc failed\n");
    return 1;
  }
  ncclUniqueId id;
  ncclComm_t comm = nullptr;
  if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess) {
    std::fprintf(stderr, "watch_gpu_program: NCCL initialisation failed\n");
    return 1;
  }
  std::vector<float> host(kCount, 0.25f);
  std::vector<uint16_t> host_halves(kCount, 0x3C00);
  const auto stream = reinterpret_cast<cudaStream_t>(cuda.stream);
  int failures = 0;
  const auto loop_start = std::chrono::steady_clock::now();
  for (int step = 0; step < steps; ++step) {
    host[12345] = step == 3 ? std::numeric_limits<float>::infinity() : 0.25f;
    cuda.cuMemcpyHtoD(grads, host.data(), kCount * 4);
    cuda.cuMemcpyHtoD(halves, host_halves.data(), kCount * 2);
    failures += ncclAllReduce(reinterpret_cast<void*>(grads), reinterpret_cast<void*>(reduced), kCount, ncclFloat32,
                              ncclSum, comm, stream) != ncclSuccess;
    ncclGroupStart();
    failures += ncclAllReduce(reinterpret_cast<void*>(halves), reinterpret_cast<void*>(halves), kCount, ncclFloat16,
                              ncclMax, comm, stream) != ncclSuccess;
    failures += ncclGroupEnd() != ncclSuccess;
    cuda.cuStreamSynchronize(cuda.stream);
  }
  const double loop_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - loop_start).count();
  ncclCommDestroy(comm);
  // The loop alone: NCCL's initialisation would hide the per-call cost the shim adds.
  std::printf("watch_gpu_program: %d steps, %d failed calls, loop %.1f ms (%.1f us per step)\n", steps, failures,
              loop_ms, steps > 0 ? loop_ms * 1000 / steps : 0.0);
  return failures == 0 ? 0 : 1;
}
