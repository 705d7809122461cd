// Which buffers a watched kernel launch reads and writes, found without the kernel's source: the driver's parameter
// layout (cuFuncGetParamInfo) says where each argument is, an argument the size of a pointer that falls in a device
// allocation is a buffer, its extent runs to the end of that allocation (or to the next buffer argument inside the
// same allocation), and its element type comes from the demangled signature (the parameter's own pointee type, else
// the kernel's template arguments: float, double, c10::Half, c10::BFloat16, __half, __nv_bfloat16, __nv_fp8_e4m3 ...)
// or from TRAINSCOPE_KERNEL_DTYPE. A pointer to const is an input, any other pointer an output.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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

}  // namespace trainscope::launches
