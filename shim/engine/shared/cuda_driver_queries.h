// The CUDA driver's answers to the launch adapter: whether a stream is capturing a graph (a launch into one is marked,
// and nothing of ours may be enqueued there), and the collector's CudaQueries (a kernel's parameter layout, the
// allocation a pointer falls in: what a watched kernel's buffers are). They are asked through the statistics
// kernel's libcuda handle, resolved at the first launch: the engine never links libcuda, and the adapter may start
// inside cuInit, where loading the driver would call cuInit again. Each question runs inside OwnCudaCalls, so that
// CUPTI's callbacks do not record it as a call of the job's.
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "base/launch_event.h"

namespace trainscope::engine {

// Whether `stream` is capturing a graph. An error (a legacy-stream question during another stream's global capture)
// counts as capturing: nothing may be enqueued then either.
bool stream_capturing(uint64_t stream);

// CudaQueries with the driver: parameter layouts cached per CUfunction (they cannot change), allocations asked each
// time (they can).
class DriverQueries final : public launches::CudaQueries {
 public:
  bool param_layout(uint64_t function_handle, launches::ParamInfo* out, uint32_t max, uint32_t* count) override;
  bool allocation_of(uint64_t address, launches::Allocation* out) override;

 private:
  struct Layout {
    bool known = false;
    std::vector<launches::ParamInfo> params;
  };

  static Layout ask_layout(uint64_t function_handle);

  std::mutex mutex_;
  std::unordered_map<uint64_t, Layout> layouts_;
};

}  // namespace trainscope::engine
