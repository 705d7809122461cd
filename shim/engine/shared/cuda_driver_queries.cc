// The driver's answers (see cuda_driver_queries.h): its three entry points resolved once, on the handle the statistics
// kernel opened, and asked inside OwnCudaCalls.
#include "shim/engine/shared/cuda_driver_queries.h"

#include <cuda.h>
#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "kernels/gpu_stats.h"

namespace trainscope::engine {
namespace {

struct DriverCalls {
  decltype(&::cuStreamIsCapturing) stream_is_capturing = nullptr;
  decltype(&::cuFuncGetParamInfo) func_get_param_info = nullptr;  // CUDA 12.4 and later
  decltype(&::cuPointerGetAttribute) pointer_get_attribute = nullptr;
};

// Resolved at the first launch (never inside cuInit, where InitializeInjection runs: loading the driver for the
// statistics kernel calls cuInit itself).
const DriverCalls& driver_calls() {
  static const DriverCalls* calls = [] {
    auto* resolved = new DriverCalls();  // leaked: callbacks may run until the very end of the process
    launches::OwnCudaCalls own;
    void* handle = stats::GpuStats::instance().driver_library();
    if (handle != nullptr) {
      resolved->stream_is_capturing =
          reinterpret_cast<decltype(resolved->stream_is_capturing)>(dlsym(handle, "cuStreamIsCapturing"));
      resolved->func_get_param_info =
          reinterpret_cast<decltype(resolved->func_get_param_info)>(dlsym(handle, "cuFuncGetParamInfo"));
      resolved->pointer_get_attribute =
          reinterpret_cast<decltype(resolved->pointer_get_attribute)>(dlsym(handle, "cuPointerGetAttribute"));
    }
    return resolved;
  }();
  return *calls;
}

}  // namespace

bool stream_capturing(uint64_t stream) {
  const DriverCalls& d = driver_calls();
  if (d.stream_is_capturing == nullptr) return false;
  launches::OwnCudaCalls own;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult result = d.stream_is_capturing(reinterpret_cast<CUstream>(stream), &status);
  return result != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE;
}

bool DriverQueries::param_layout(uint64_t function_handle, launches::ParamInfo* out, uint32_t max, uint32_t* count) {
  if (function_handle == 0 || count == nullptr) return false;
  std::vector<launches::ParamInfo> layout;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = layouts_.find(function_handle);
    if (found == layouts_.end()) found = layouts_.emplace(function_handle, ask_layout(function_handle)).first;
    if (!found->second.known) return false;
    layout = found->second.params;
  }
  *count = static_cast<uint32_t>(layout.size() < max ? layout.size() : max);
  for (uint32_t i = 0; i < *count; ++i) out[i] = layout[i];
  return true;
}

bool DriverQueries::allocation_of(uint64_t address, launches::Allocation* out) {
  const DriverCalls& d = driver_calls();
  if (d.pointer_get_attribute == nullptr || out == nullptr) return false;
  launches::OwnCudaCalls own;
  CUdeviceptr base = 0;
  size_t bytes = 0;
  unsigned int type = 0;
  const auto pointer = static_cast<CUdeviceptr>(address);
  if (d.pointer_get_attribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, pointer) != CUDA_SUCCESS ||
      d.pointer_get_attribute(&bytes, CU_POINTER_ATTRIBUTE_RANGE_SIZE, pointer) != CUDA_SUCCESS ||
      d.pointer_get_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, pointer) != CUDA_SUCCESS)
    return false;
  out->base = static_cast<uint64_t>(base);
  out->bytes = static_cast<uint64_t>(bytes);
  out->device = type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED;
  return true;
}

DriverQueries::Layout DriverQueries::ask_layout(uint64_t function_handle) {
  Layout layout;
  const DriverCalls& d = driver_calls();
  if (d.func_get_param_info == nullptr) return layout;  // a driver older than CUDA 12.4
  launches::OwnCudaCalls own;
  for (size_t index = 0;; ++index) {
    size_t offset = 0;
    size_t size = 0;
    const CUresult result = d.func_get_param_info(reinterpret_cast<CUfunction>(function_handle), index, &offset, &size);
    if (result == CUDA_ERROR_INVALID_VALUE) break;  // past the last parameter
    if (result != CUDA_SUCCESS) return layout;
    layout.params.push_back({offset, size});
  }
  layout.known = true;
  return layout;
}

}  // namespace trainscope::engine
