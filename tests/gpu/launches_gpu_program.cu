// The launch collector on a real GPU (run by tests/gpu/run.sh under the shim; built only with nvcc). A CUDA runtime
// program (<<<>>> launches: runtime and driver callbacks of each launch, counted once) with no NCCL at all, so the
// collector starts from the driver's injection (CUDA_INJECTION64_PATH) at cuInit:
//
//   launches_gpu_program chain STEPS   fp16 chain per step: embed_kernel, grow_kernel, then the optimizer
//                                      (fused_adam_kernel, the batch boundary); grow_kernel overflows fp16
//                                      at step 3 (TRAINSCOPE_WATCH=kernels:grow_kernel reports batch 3)
//   launches_gpu_program spin          spin_kernel that runs for 30 s, then the process waits to be killed (run.sh
//                                      reads its report while it lives, then SIGKILLs it): its launch must show as
//                                      not finished
//   launches_gpu_program oob           oob_write_kernel writes far out of bounds: cudaStreamSynchronize fails (700)
//   launches_gpu_program bench N       N launches of an empty kernel: the calling thread's cost per launch
// Without a GPU it says so and exits 0.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

__global__ void embed_kernel(const float* in, __half* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2half(in[i]);
}

__global__ void grow_kernel(const __half* in, __half* out, int n, float factor) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2half(__half2float(in[i]) * factor);
}

// Named as apex's and PyTorch's fused Adam kernels are: the collector takes it for the end of a step.
__global__ void fused_adam_kernel(float* params, const __half* grads, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) params[i] -= 1e-3f * __half2float(grads[i]);
}

__global__ void spin_kernel(const volatile int* flag, long long cycles) {
  const long long start = clock64();
  while (*flag == 0 && clock64() - start < cycles) {
  }
}

__global__ void oob_write_kernel(float* data) { data[1ull << 40] = 1.0f; }

__global__ void noop_kernel() {}

int check(cudaError_t result, const char* what) {
  if (result != cudaSuccess) {
    std::fprintf(stderr, "launches_gpu_program: %s: %s\n", what, cudaGetErrorString(result));
    std::exit(3);
  }
  return 0;
}

int chain(int steps) {
  constexpr int kCount = 4096;
  float* params = nullptr;
  __half* activations = nullptr;
  __half* grown = nullptr;
  check(cudaMalloc(&params, kCount * sizeof(float)), "cudaMalloc params");
  check(cudaMalloc(&activations, kCount * sizeof(__half)), "cudaMalloc activations");
  check(cudaMalloc(&grown, kCount * sizeof(__half)), "cudaMalloc grown");
  float* host = static_cast<float*>(std::malloc(kCount * sizeof(float)));
  for (int i = 0; i < kCount; ++i) host[i] = 1.0f + static_cast<float>(i % 7);
  check(cudaMemcpy(params, host, kCount * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
  cudaStream_t stream = nullptr;
  check(cudaStreamCreate(&stream), "cudaStreamCreate");
  for (int step = 0; step < steps; ++step) {
    const float factor = step == 3 ? 1e5f : 2.0f;  // 1e5 * 1..7 is past fp16's 65504 only at step 3
    embed_kernel<<<kCount / 256, 256, 0, stream>>>(params, activations, kCount);
    grow_kernel<<<kCount / 256, 256, 0, stream>>>(activations, grown, kCount, factor);
    fused_adam_kernel<<<kCount / 256, 256, 0, stream>>>(params, grown, kCount);
    check(cudaGetLastError(), "launch");
  }
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  std::printf("chain: %d steps done\n", steps);
  return 0;
}

int spin() {
  int* flag = nullptr;
  check(cudaMalloc(&flag, sizeof(int)), "cudaMalloc flag");
  check(cudaMemset(flag, 0, sizeof(int)), "cudaMemset");
  int clock_khz = 0;
  check(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0), "cudaDeviceGetAttribute");
  cudaStream_t stream = nullptr;
  check(cudaStreamCreate(&stream), "cudaStreamCreate");
  noop_kernel<<<1, 1, 0, stream>>>();
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  spin_kernel<<<1, 1, 0, stream>>>(flag, static_cast<long long>(clock_khz) * 1000 * 30);
  check(cudaGetLastError(), "spin launch");
  std::printf("spin: launched; waiting to be killed\n");
  std::fflush(stdout);
  for (;;) pause();  // a hung job: run.sh reads the report while it lives, then kills it
}

int oob() {
  float* data = nullptr;
  check(cudaMalloc(&data, 1024 * sizeof(float)), "cudaMalloc");
  cudaStream_t stream = nullptr;
  check(cudaStreamCreate(&stream), "cudaStreamCreate");
  noop_kernel<<<1, 1, 0, stream>>>();
  oob_write_kernel<<<1, 1, 0, stream>>>(data);
  const cudaError_t result = cudaStreamSynchronize(stream);
  std::printf("oob: cudaStreamSynchronize returned %d (%s)\n", static_cast<int>(result), cudaGetErrorName(result));
  return result == cudaSuccess ? 1 : 0;
}

int bench(long launches) {
  cudaStream_t stream = nullptr;
  check(cudaStreamCreate(&stream), "cudaStreamCreate");
  for (int i = 0; i < 1000; ++i) noop_kernel<<<1, 32, 0, stream>>>();  // warm-up: module load, first sights
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < launches; ++i) {
    noop_kernel<<<1, 32, 0, stream>>>();
    if (i % 1024 == 1023) check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  const double ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / launches;
  std::printf("launch loop: %.0f ns per launch (%ld launches)\n", ns, launches);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("launches_gpu_program: no GPU here: skipped\n");
    return 0;
  }
  if (argc >= 3 && std::strcmp(argv[1], "chain") == 0) return chain(std::atoi(argv[2]));
  if (argc >= 2 && std::strcmp(argv[1], "spin") == 0) return spin();
  if (argc >= 2 && std::strcmp(argv[1], "oob") == 0) return oob();
  if (argc >= 3 && std::strcmp(argv[1], "bench") == 0) return bench(std::atol(argv[2]));
  std::fprintf(stderr, "usage: launches_gpu_program chain STEPS | spin | oob | bench LAUNCHES\n");
  return 2;
}
