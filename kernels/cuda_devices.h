// What the CUDA driver says of itself and its GPUs, asked through dlopen (nothing CUDA is linked): for the engine's
// hello (its rank's GPU) and for `trainscope doctor` (every GPU).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace trainscope::stats {

struct CudaDevice {
  std::string name;
  int major = 0;  // compute capability
  int minor = 0;
  std::size_t memory_bytes = 0;
  std::string bus_id;
};

struct CudaDriver {
  int version = 0;                  // cuDriverGetVersion (12040 for CUDA 12.4); 0 when it could not be asked
  std::vector<CudaDevice> devices;  // the devices asked for
  std::string error;                // why the driver or its devices could not be asked; "" when they were
};

// `library`: "libcuda.so.1" or a path. `ordinal` >= 0: that device only (modulo the device count); -1: every device.
CudaDriver query_cuda_driver(const std::string& library, int ordinal);

}  // namespace trainscope::stats
