// CPU stand-in libcudart.so.13: the few CUDA runtime calls the launch collector's tests make, each a runtime API call
// (reported to the tool with its real *_params struct) around the stand-in driver's call, as the real runtime calls
// the driver. A kernel's host handle here is its driver function (CUfunction): the stand-in has no fatbin
// registration, so a program passes what cuModuleGetFunction gave it. Error numbers are the driver's (700 is 700).
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti.h>

#include "fake_cuda_tool.h"

#define TSFAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// A runtime API call (fake_cuda_tool.h).
class RuntimeCall : public TsfakeApiCall<cudaError_t> {
 public:
  RuntimeCall(CUpti_runtime_api_trace_cbid cbid, const char* name, const void* params, const char* symbol = nullptr)
      : TsfakeApiCall(CUPTI_CB_DOMAIN_RUNTIME_API, cbid, name, params, symbol) {
    tsfake_cuda_runtime_call(correlation());
  }
  cudaError_t finish_with(CUresult result) {
    tsfake_cuda_runtime_call(0);
    return finish(static_cast<cudaError_t>(result));
  }
};

const char* name_of(const void* func) {
  const char* name = nullptr;
  return func != nullptr && cuFuncGetName(&name, reinterpret_cast<CUfunction>(const_cast<void*>(func))) == CUDA_SUCCESS
             ? name
             : nullptr;
}

}  // namespace

TSFAKE_EXPORT cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t shared,
                                           cudaStream_t stream) {
  cudaLaunchKernel_v7000_params params{func, grid, block, args, shared, stream};
  RuntimeCall call(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, "cudaLaunchKernel", &params, name_of(func));
  return call.finish_with(cuLaunchKernel(reinterpret_cast<CUfunction>(const_cast<void*>(func)), grid.x, grid.y, grid.z,
                                         block.x, block.y, block.z, static_cast<unsigned>(shared),
                                         reinterpret_cast<CUstream>(stream), args, nullptr));
}

TSFAKE_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  cudaStreamSynchronize_v3020_params params{stream};
  RuntimeCall call(CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020, "cudaStreamSynchronize", &params);
  return call.finish_with(cuStreamSynchronize(reinterpret_cast<CUstream>(stream)));
}

TSFAKE_EXPORT cudaError_t cudaDeviceSynchronize(void) {
  RuntimeCall call(CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020, "cudaDeviceSynchronize", nullptr);
  return call.finish_with(cuCtxSynchronize());
}
