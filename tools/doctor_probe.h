// `trainscope doctor`'s probes: what is installed, found by reading files under a root folder, the PATH and
// LD_LIBRARY_PATH it is given, the versions its programs print, and the driver and NCCL through dlopen.
#pragma once

#include <string>

#include "tools/doctor_checks.h"

namespace trainscope::tools::doctor {

struct ProbeOptions {
  std::string root;                      // prefix of every fixed system path (/usr/local/cuda-*, /proc, /usr/include)
  std::string python;                    // the interpreter to ask for its import path ("": python3, then python)
  std::string libcuda = "libcuda.so.1";  // the driver library asked for its CUDA version and GPUs
  std::string nccl = "libnccl.so.2";     // the NCCL library asked for its version
  int command_timeout_seconds = 10;      // for each program run (nvcc --version, gcc, python)
};

// Reads the environment (PATH, LD_LIBRARY_PATH, CUDA_HOME, CUDA_PATH, CONDA_PREFIX, NCCL_HOME, TORCH_CUDA_ARCH_LIST)
// of this process.
Facts probe(const ProbeOptions& options);

}  // namespace trainscope::tools::doctor
