// A CUDA driver API program with NCCL calls between its launches, for the launch collector's tests: it links
// libcuda.so.1 and libnccl.so.2 (the CPU stand-ins in tests, through LD_LIBRARY_PATH) and includes only cuda.h and
// nccl.h, as a real job would.
//
//   cuInit; two streams; scale_kernel on A (before any NCCL call); the communicator; add_kernel on B; all-reduce;
//   both streams synchronised; a graph captured on A (one launch under capture) and launched; add_kernel on B,
//   all-reduce, fault_kernel on B; then cuStreamSynchronize(B) fails with 700 (CUDA_ERROR_ILLEGAL_ADDRESS) and one
//   more launch fails the same way.
//
// Options: --profiler-first subscribes to CUPTI before cuInit, as torch.profiler or Nsight Systems would hold it;
// --no-fault stops before the faulting kernel; --spin ends with a kernel that never finishes on B (not waited for);
// --loop N only launches scale_kernel N times on A (synchronised every 1024) and prints the time per launch;
// --train STEPS INF_STEP instead runs STEPS steps of add_kernel on A, an all-reduce and a synchronisation, with
// inf_kernel (its buffer becomes +inf) after add_kernel at step INF_STEP; --optimizer ends each of those steps with
// fused_adam_kernel (named as fused Adam kernels are: the collector takes it for the end of a step);
// --runtime launches and synchronises streams through the CUDA runtime (cudaLaunchKernel, cudaStreamSynchronize:
// runtime callbacks around the driver's), the kernel's host handle being its CUfunction as the stand-in runtime takes.
// The modules are the stand-in driver's text modules ("<mangled name> <parameter sizes> [fault|hang]").
#include <cuda.h>
#include <cupti.h>
#include <dlfcn.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bootstrap.h"

namespace {

const char kModule[] =
    "_Z12scale_kernelPfPKfi 8,8,4\n"
    "_Z10add_kernelPfPKfS1_i 8,8,8,4\n"
    "_Z12fault_kernelPf 8 fault\n"
    "_Z11spin_kernelPi 8 hang\n"
    "_Z10inf_kernelPf 8 inf\n"
    "_Z17fused_adam_kernelPfPKfi 8,8,4\n";

void check_cu(CUresult result, const char* what) {
  if (result != CUDA_SUCCESS) tsprog::fail(what, static_cast<int>(result));
}

void CUPTIAPI ignore_callback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

// What a profiler does first: takes CUPTI's one subscriber slot.
void take_cupti() {
  void* cupti = dlopen("libcupti.so.13", RTLD_NOW | RTLD_GLOBAL);
  if (cupti == nullptr) tsprog::fail("dlopen libcupti.so.13", 0);
  using Subscribe = CUptiResult (*)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*);
  auto subscribe = reinterpret_cast<Subscribe>(dlsym(cupti, "cuptiSubscribe"));
  CUpti_SubscriberHandle handle = nullptr;
  if (subscribe == nullptr || subscribe(&handle, ignore_callback, nullptr) != CUPTI_SUCCESS)
    tsprog::fail("cuptiSubscribe", 0);
}

struct Kernels {
  CUfunction scale = nullptr;
  CUfunction add = nullptr;
  CUfunction fault = nullptr;
  CUfunction spin = nullptr;
  CUfunction inf = nullptr;
  CUfunction adam = nullptr;
};

bool g_runtime_api = false;  // --runtime

CUresult launch(CUfunction f, unsigned grid, unsigned block, unsigned shared, CUstream stream,
                std::vector<void*> args) {
  if (g_runtime_api)
    return static_cast<CUresult>(cudaLaunchKernel(reinterpret_cast<const void*>(f), dim3(grid), dim3(block),
                                                  args.data(), shared, reinterpret_cast<cudaStream_t>(stream)));
  return cuLaunchKernel(f, grid, 1, 1, block, 1, 1, shared, stream, args.data(), nullptr);
}

CUresult synchronize(CUstream stream) {
  if (g_runtime_api) return static_cast<CUresult>(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream)));
  return cuStreamSynchronize(stream);
}

}  // namespace

int main(int argc, char** argv) {
  bool profiler_first = false;
  bool fault = true;
  bool spin = false;
  long loop = 0;
  int train_steps = 0;
  int inf_step = -1;
  bool optimizer = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--profiler-first") == 0) {
      profiler_first = true;
    } else if (std::strcmp(argv[i], "--no-fault") == 0) {
      fault = false;
    } else if (std::strcmp(argv[i], "--spin") == 0) {
      spin = true;
    } else if (std::strcmp(argv[i], "--train") == 0 && i + 2 < argc) {
      train_steps = std::atoi(argv[++i]);
      inf_step = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--optimizer") == 0) {
      optimizer = true;
    } else if (std::strcmp(argv[i], "--runtime") == 0) {
      g_runtime_api = true;
    } else if (std::strcmp(argv[i], "--loop") == 0 && i + 1 < argc) {
      loop = std::atol(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: cuda_launches_program [--profiler-first] [--no-fault] [--spin] [--runtime] [--loop N] "
                   "[--train STEPS INF_STEP [--optimizer]]\n");
      return 2;
    }
  }
  if (profiler_first) take_cupti();
  check_cu(cuInit(0), "cuInit");
  CUmodule module = nullptr;
  check_cu(cuModuleLoadData(&module, kModule), "cuModuleLoadData");
  Kernels k;
  check_cu(cuModuleGetFunction(&k.scale, module, "_Z12scale_kernelPfPKfi"), "cuModuleGetFunction scale");
  check_cu(cuModuleGetFunction(&k.add, module, "_Z10add_kernelPfPKfS1_i"), "cuModuleGetFunction add");
  check_cu(cuModuleGetFunction(&k.fault, module, "_Z12fault_kernelPf"), "cuModuleGetFunction fault");
  check_cu(cuModuleGetFunction(&k.spin, module, "_Z11spin_kernelPi"), "cuModuleGetFunction spin");
  check_cu(cuModuleGetFunction(&k.inf, module, "_Z10inf_kernelPf"), "cuModuleGetFunction inf");
  check_cu(cuModuleGetFunction(&k.adam, module, "_Z17fused_adam_kernelPfPKfi"), "cuModuleGetFunction adam");
  CUstream a = nullptr;
  CUstream b = nullptr;
  check_cu(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING), "cuStreamCreate a");
  check_cu(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING), "cuStreamCreate b");
  constexpr int kCount = 256;
  CUdeviceptr x = 0;
  CUdeviceptr y = 0;
  check_cu(cuMemAlloc(&x, kCount * sizeof(float)), "cuMemAlloc x");
  check_cu(cuMemAlloc(&y, kCount * sizeof(float)), "cuMemAlloc y");
  int n = kCount;
  if (loop > 0) {
    const auto start = std::chrono::steady_clock::now();
    for (long i = 0; i < loop; ++i) {
      check_cu(launch(k.scale, 4, 64, 0, a, {&x, &y, &n}), "scale on a");
      if (i % 1024 == 1023) check_cu(synchronize(a), "cuStreamSynchronize a");
    }
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
    std::printf("launch loop: %.0f ns per launch (%ld launches)\n", ns / static_cast<double>(loop), loop);
    return 0;
  }
  // Before any NCCL call: seen only when the driver's injection started the collector.
  check_cu(launch(k.scale, 4, 64, 0, a, {&x, &y, &n}), "scale on a");

  const tsprog::Job job = tsprog::job();
  const ncclUniqueId id = tsprog::shared_unique_id(job);
  ncclComm_t comm = nullptr;
  tsprog::check(ncclCommInitRank(&comm, job.world, id, job.rank), "ncclCommInitRank");
  std::vector<float> buffer(kCount, 1.0f);
  auto all_reduce = [&](CUstream stream) {
    tsprog::check(ncclAllReduce(buffer.data(), buffer.data(), kCount, ncclFloat32, ncclSum, comm,
                                reinterpret_cast<cudaStream_t>(stream)),
                  "ncclAllReduce");
  };

  if (train_steps > 0) {
    for (int step = 0; step < train_steps; ++step) {
      check_cu(launch(k.add, 8, 32, 0, a, {&y, &x, &x, &n}), "add on a");
      if (step == inf_step) check_cu(launch(k.inf, 1, 32, 0, a, {&y}), "inf on a");
      all_reduce(a);
      if (optimizer) check_cu(launch(k.adam, 4, 64, 0, a, {&x, &y, &n}), "fused_adam on a");
      check_cu(synchronize(a), "cuStreamSynchronize a");
    }
    tsprog::check(ncclCommDestroy(comm), "ncclCommDestroy");
    std::printf("trained %d steps\n", train_steps);
    return 0;
  }
  check_cu(launch(k.add, 8, 32, 128, b, {&y, &x, &x, &n}), "add on b");
  all_reduce(a);
  check_cu(synchronize(a), "cuStreamSynchronize a");
  check_cu(synchronize(b), "cuStreamSynchronize b");

  // A graph: the launch under capture is recorded into it, not run; the graph launch runs it.
  check_cu(cuStreamBeginCapture(a, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture");
  check_cu(launch(k.scale, 2, 64, 0, a, {&x, &y, &n}), "scale under capture");
  CUgraph graph = nullptr;
  check_cu(cuStreamEndCapture(a, &graph), "cuStreamEndCapture");
  CUgraphExec exec = nullptr;
  check_cu(cuGraphInstantiateWithFlags(&exec, graph, 0), "cuGraphInstantiateWithFlags");
  check_cu(cuGraphLaunch(exec, a), "cuGraphLaunch");

  check_cu(launch(k.add, 8, 32, 0, b, {&y, &x, &x, &n}), "add on b");
  all_reduce(b);
  if (spin) {
    check_cu(launch(k.spin, 1, 1, 0, b, {&x}), "spin on b");
    all_reduce(a);
  }
  if (fault) {
    check_cu(launch(k.fault, 1, 32, 0, b, {&x}), "fault on b");
    const CUresult failed = synchronize(b);
    const CUresult after = launch(k.scale, 4, 64, 0, a, {&x, &y, &n});
    std::printf("sync %d launch %d\n", static_cast<int>(failed), static_cast<int>(after));
  }
  tsprog::check(ncclCommDestroy(comm), "ncclCommDestroy");
  std::printf("done\n");
  return 0;
}
