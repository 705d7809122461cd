// Synthetic CUPTI callbacks for the launch collector's tests: one ApiCall built field by field, as the adapter
// (shim/engine/job_thread/launch_callbacks.cc) fills it from a real callback.
#pragma once

#include <cstdint>

#include "base/launch_event.h"

namespace trainscope::launches {

inline constexpr uint64_t kSyntheticContext = 0xC0;

// One callback, built field by field.
struct Call {
  ApiCall api;
  Call(Phase phase, CudaDomain domain, CallClass klass, uint32_t cbid, const char* function, uint32_t correlation,
       uint64_t time_ns, uint64_t context = kSyntheticContext) {
    api.phase = phase;
    api.domain = domain;
    api.klass = klass;
    api.cbid = cbid;
    api.function = function;
    api.correlation = correlation;
    api.context = context;
    api.time_ns = time_ns;
  }
  Call& stream(uint64_t s) {
    api.stream = s;
    return *this;
  }
  Call& result(int32_t r) {
    api.result = r;
    return *this;
  }
  Call& kernel(uint64_t function, const char* symbol, LaunchKind kind = LaunchKind::kKernel) {
    api.kind = kind;
    api.function_handle = function;
    api.symbol = symbol;
    api.grid[0] = 120;
    api.grid[1] = 2;
    api.grid[2] = 1;
    api.block[0] = 256;
    api.block[1] = 1;
    api.block[2] = 1;
    api.shared_bytes = 1024;
    return *this;
  }
  Call& dims(uint32_t grid_x, uint32_t block_x, uint32_t shared_bytes) {
    api.grid[0] = grid_x;
    api.grid[1] = 1;
    api.grid[2] = 1;
    api.block[0] = block_x;
    api.block[1] = 1;
    api.block[2] = 1;
    api.shared_bytes = shared_bytes;
    return *this;
  }
  Call& params(void** p) {
    api.params = p;
    return *this;
  }
  Call& capturing() {
    api.capturing = true;
    return *this;
  }
};

}  // namespace trainscope::launches
