// The engine's CUPTI adapter: the job's CUDA launches, errors and synchronisations into the launch collector
// (collectors/launches/launch_collector.h), kernel completion from CUPTI activity, and the first-error report.
//
// libcupti is loaded with dlopen (never linked): the copy the process already has, else libcupti.so.13/.12/.so on
// the library path, under $CUDA_HOME and /usr/local/cuda, or in the nvidia-cuda-cupti wheel beside the job's Python
// packages. CUPTI allows one subscriber: when another tool holds it (Nsight Systems, torch.profiler / Kineto) the
// recorder's launch mode says so, one warning is logged, and the job runs on without launches.
//
// Started at engine start when libcuda.so.1 is already loaded, and from InitializeInjection (the driver loads
// libtrainscope.so as CUDA_INJECTION64_PATH at cuInit), whichever comes first; the second start is a no-op.
// The engine's "launches" thread flushes CUPTI's activity buffers every 500 ms while launches are outstanding and
// writes the cuda-error report when the job's first CUDA error happened.
#pragma once

#include "shim/engine/shared/launches_setup.h"

namespace trainscope::engine {

// At engine start: keeps the setup, and starts the collector when the CUDA driver is already in the process.
void prepare_launches(const LaunchesSetup& setup);
// The CUDA driver initialised (InitializeInjection): start the collector if it is not running yet.
void start_launches();
// Normal exit: stops the thread, writes a first-error report not written yet.
void stop_launches();
// In a forked child: the parent's subscriber, thread and recorder are not ours; nothing is recorded any more.
void abandon_launches();

}  // namespace trainscope::engine
