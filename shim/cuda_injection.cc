// CUDA injection: the CUDA driver, at the process's first cuInit, dlopen()s CUDA_INJECTION64_PATH and calls its
// InitializeInjection. That path is this library (`trainscope run` sets it, and the load-time constructor sets it when
// the job has not chosen an injection library of its own), so launches are recorded from the job's first CUDA call on,
// not only from its first NCCL call. dlopen of an already loaded library returns it: this runs in the preloaded copy.
//
// It starts the runtime (the flight recorder and the engine, as a first NCCL call would) and then the engine's launch
// collector (CUPTI callbacks). Freestanding like the rest of the shim (libc only).
#include "shim/runtime.h"

// Called by the driver once per process, inside cuInit; 1 accepts the injection. Never fails the job's cuInit: what
// cannot start is warned about by the runtime or the engine, and the job runs on.
extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  using namespace trainscope::shim;
  Runtime& rt = g_runtime;
  if (!rt.enabled || rt.config.launches == trainscope::LaunchesMode::kOff) return 1;
  ensure_started();
  if (auto start_launches = rt.engine.start_launches; start_launches != nullptr) {
    ++t_thread.depth;  // whatever the start touches is ours, not the job's
    start_launches();
    --t_thread.depth;
  }
  return 1;
}
