// Which buffers a watched kernel launch reads and writes, found without the kernel's source: the driver's parameter
// layout (cuFuncGetParamInfo) says where each argument is, an argument the size of a pointer that falls in a device
// allocation is a buffer, its extent runs to the end of that allocation (or to the next buffer argument inside the
// same allocation), and its element type comes from the demangled signature (the parameter's own pointee type, else
// the kernel's template arguments: float, double, c10::Half, c10::BFloat16, __half, __nv_bfloat16, __nv_fp8_e4m3 ...)
// or from TRAINSCOPE_KERNEL_DTYPE. A pointer to const is an input, any other pointer an output.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/launch_event.h"
#include "collectors/launches/kernel_names.h"
#include "kernels/gpu_stats.h"

namespace trainscope::launches {

struct WatchedBuffer {
  stats::TensorRef tensor;  // address, element count, dtype
  std::string label;        // "input[0]", "output[2]": by parameter index, as the frame report prints it
  bool output = false;      // written by the kernel (not a pointer to const)
};

// A watched launch as the frame machinery needs it.
struct WatchedLaunch {
  std::string short_name;  // the frame's header: the kernel's unqualified name without templates or parameters
  std::string name;        // the demangled name, for the JSON twin
  uint64_t stream = 0;     // CUstream the statistics go on, after the kernel
  uint64_t function_handle = 0;
  std::vector<WatchedBuffer> buffers;  // in parameter order
  std::string note;  // why some parameters are not shown ("no parameter layout: driver older than CUDA 12.4", ...)
};

// What the demangled name says about a kernel's buffers, worked out once per CUfunction.
struct KernelSignature {
  std::string name;                       // demangled
  std::string short_name;                 // kernel_short_name()
  std::vector<ParameterType> parameters;  // empty when the name has no signature (extern "C": Triton, cuBLAS)
  bool has_template_type = false;         // a floating type among the template arguments ...
  stats::DType template_type = stats::DType::kFloat32;  // ... the first one
};
KernelSignature describe_kernel(std::string_view demangled);

struct BufferOptions {
  bool has_default_type = false;  // TRAINSCOPE_KERNEL_DTYPE given ...
  stats::DType default_type = stats::DType::kFloat32;
  uint64_t max_buffer_bytes = uint64_t{1} << 30;  // a buffer's extent is cut here (the frame's note says so)
};

// The most parameters a watched kernel's layout is read for (cuFuncGetParamInfo is asked for at most this many).
inline constexpr uint32_t kMaxWatchedParameters = 256;

// The watched launch of `call` (a kernel launch with its `params`): every parameter the size of a pointer whose value
// falls in device memory is a buffer, running to the end of its allocation or to the next buffer parameter that
// starts later in the same allocation, capped at options.max_buffer_bytes. Its element type is the parameter's
// pointee type, else the kernel's first floating template argument, else options.default_type; a buffer none of them
// types is left out. `note` says what was left out or cut, and why.
WatchedLaunch watched_launch(const ApiCall& call, const KernelSignature& kernel, CudaQueries& queries,
                             const BufferOptions& options);

}  // namespace trainscope::launches
