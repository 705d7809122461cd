// The CUDA driver for the GPU tests and benchmarks, opened with dlopen so the binaries start (and skip) without one.
#pragma once

#include <cuda.h>
#include <dlfcn.h>

#include <string>

namespace trainscope::gpu_testing {

#define TRAINSCOPE_TEST_CU_STRING2(name) #name
#define TRAINSCOPE_TEST_CU_STRING(name) TRAINSCOPE_TEST_CU_STRING2(name)
#define TRAINSCOPE_TEST_CU_FUNCTIONS(X) \
  X(cuInit)                             \
  X(cuGetErrorString)                   \
  X(cuDeviceGet)                        \
  X(cuDeviceGetCount)                   \
  X(cuDeviceGetName)                    \
  X(cuDevicePrimaryCtxRetain)           \
  X(cuCtxSetCurrent)                    \
  X(cuStreamCreate)                     \
  X(cuStreamSynchronize)                \
  X(cuStreamBeginCapture)               \
  X(cuStreamEndCapture)                 \
  X(cuGraphGetNodes)                    \
  X(cuGraphDestroy)                     \
  X(cuMemAlloc)                         \
  X(cuMemFree)                          \
  X(cuMemcpyHtoD)                       \
  X(cuMemcpyDtoDAsync)                  \
  X(cuMemsetD8Async)                    \
  X(cuEventCreate)                      \
  X(cuEventRecord)                      \
  X(cuEventSynchronize)                 \
  X(cuEventElapsedTime)                 \
  X(cuModuleLoadData)                   \
  X(cuModuleGetFunction)                \
  X(cuLaunchKernel)

struct Driver {
#define TRAINSCOPE_TEST_CU_MEMBER(name) decltype(&::name) name = nullptr;
  TRAINSCOPE_TEST_CU_FUNCTIONS(TRAINSCOPE_TEST_CU_MEMBER)
#undef TRAINSCOPE_TEST_CU_MEMBER
  CUcontext context = nullptr;
  CUstream stream = nullptr;
  std::string device_name;

  std::string error_text(CUresult result) const {
    const char* text = nullptr;
    if (cuGetErrorString != nullptr) cuGetErrorString(result, &text);
    return text != nullptr ? text : "CUDA error " + std::to_string(static_cast<int>(result));
  }

  // Opens the driver, makes device 0's primary context current and creates a non-blocking stream. Empty string on
  // success, else why the GPU checks must skip.
  std::string open() {
    void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) return "no CUDA driver (libcuda.so.1 cannot be opened)";
#define TRAINSCOPE_TEST_CU_RESOLVE(name)                                                   \
  name = reinterpret_cast<decltype(name)>(dlsym(handle, TRAINSCOPE_TEST_CU_STRING(name))); \
  if (name == nullptr) return std::string("libcuda.so.1 lacks ") + TRAINSCOPE_TEST_CU_STRING(name);
    TRAINSCOPE_TEST_CU_FUNCTIONS(TRAINSCOPE_TEST_CU_RESOLVE)
#undef TRAINSCOPE_TEST_CU_RESOLVE
    CUresult r = cuInit(0);
    if (r != CUDA_SUCCESS) return "cuInit: " + error_text(r);
    int count = 0;
    if (cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) return "no GPU visible to the driver";
    CUdevice device = 0;
    if ((r = cuDeviceGet(&device, 0)) != CUDA_SUCCESS) return "cuDeviceGet: " + error_text(r);
    char name[256] = {};
    cuDeviceGetName(name, sizeof name, device);
    device_name = name;
    if ((r = cuDevicePrimaryCtxRetain(&context, device)) != CUDA_SUCCESS) return "primary context: " + error_text(r);
    if ((r = cuCtxSetCurrent(context)) != CUDA_SUCCESS) return "cuCtxSetCurrent: " + error_text(r);
    if ((r = cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS)
      return "cuStreamCreate: " + error_text(r);
    return {};
  }
};

// The process-wide driver for a test binary; reason() is empty when the GPU is usable.
inline Driver& driver() {
  static Driver* d = new Driver();
  return *d;
}
inline const std::string& driver_unavailable_reason() {
  static const std::string reason = driver().open();
  return reason;
}

}  // namespace trainscope::gpu_testing
