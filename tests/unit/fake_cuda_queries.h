// A CudaQueries from tables, for the launch collector's tests: parameter layouts per CUfunction, device allocations.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "base/launch_event.h"

namespace trainscope::launches {

class FakeCudaQueries : public CudaQueries {
 public:
  std::map<uint64_t, std::vector<ParamInfo>> layouts;
  std::vector<Allocation> allocations;
  int layout_questions = 0;

  bool param_layout(uint64_t function_handle, ParamInfo* out, uint32_t max, uint32_t* count) override {
    ++layout_questions;
    const auto found = layouts.find(function_handle);
    if (found == layouts.end()) return false;
    *count = 0;
    for (const ParamInfo& param : found->second) {
      if (*count == max) break;
      out[(*count)++] = param;
    }
    return true;
  }

  bool allocation_of(uint64_t address, Allocation* out) override {
    for (const Allocation& allocation : allocations) {
      if (address >= allocation.base && address < allocation.base + allocation.bytes) {
        *out = allocation;
        return true;
      }
    }
    return false;
  }
};

}  // namespace trainscope::launches
