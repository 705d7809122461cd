// The private seam between the CPU stand-in libcuda.so.1 and the stand-in libcupti.so: what the real driver and
// CUPTI share behind their public APIs. The driver reports every API call (enter and exit, with the real
// CUpti_CallbackData and *_params structs) and every kernel it "ran" to the one tool installed; the stand-in CUPTI
// installs itself when a subscriber subscribes, and turns what it hears into callbacks and activity records.
#pragma once

#include <cupti.h>
#include <stdint.h>

extern "C" {

struct TsfakeCudaTool {
  // One API call of the driver domain (the stand-in has no runtime).
  void (*api)(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const CUpti_CallbackData* data);
  // A kernel (or a graph launch's work) finished: CUPTI's kernel activity. Times from tsfake_cuda_timestamp().
  void (*kernel_completed)(uint32_t correlation, CUcontext context, uint32_t stream_id, const char* name,
                           uint64_t start, uint64_t end);
};

// Installs `tool` (nullptr: none). Exported by the stand-in libcuda.so.1.
__attribute__((visibility("default"))) void tsfake_cuda_set_tool(const TsfakeCudaTool* tool);
// The clock of activity records and cuptiGetTimestamp (CLOCK_MONOTONIC, as the real CUPTI's is not CLOCK_REALTIME).
__attribute__((visibility("default"))) uint64_t tsfake_cuda_timestamp(void);
}
