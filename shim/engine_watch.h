// Watching NCCL calls' buffers, the job's side: the statistics of a watched call's send buffer before the call and
// of its receive buffer after it, handed to the frame thread (engine_frames.h) through the WatchBoard.
//
// On the job's thread only what must happen in call order happens: a host buffer (the CPU stand-in NCCL's, a
// pinned host buffer) is read at once with the host implementation, because the call may overwrite it (in place);
// a device buffer gets the fused statistics kernel enqueued on the call's own stream (kernels/gpu_stats.h), which
// runs in stream order and is polled later by the frame thread. Nothing here waits for the GPU.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "kernels/gpu_stats.h"
#include "kernels/stats.h"
#include "reports/flight_record_format.h"

namespace trainscope::engine {

// The statistics of one buffer of a watched call.
struct WatchedBuffer {
  enum class State : uint8_t {
    kAbsent,      // the operation has no such buffer on this rank (reduce's output off the root)
    kReady,       // stats hold the result
    kGpuPending,  // enqueued on the stream: poll `pending`
    kNotATensor,  // a data type this build does not know
    kSkipped,     // could not be taken (graph capture, every result slot busy, a driver error, the call failed)
  };
  State state = State::kAbsent;
  stats::TensorStats stats{};
  std::unique_ptr<stats::PendingStats> pending;
  std::string skipped_why;
};

struct WatchedCall {
  uint64_t index = 0;  // the record's index in the flight recorder
  recorder::Record record{};
  WatchedBuffer input;                // the send buffer, before the call
  WatchedBuffer output;               // the receive buffer, after the call
  std::atomic<bool> complete{false};  // both buffers taken or enqueued: the frame thread may use it
};

// Counters for the closing log line.
struct WatchCounters {
  std::atomic<uint64_t> watched{0};
  std::atomic<uint64_t> host_buffers{0};
  std::atomic<uint64_t> device_buffers{0};
  std::atomic<uint64_t> skipped_capturing{0};
  std::atomic<uint64_t> skipped_other{0};
  std::atomic<uint64_t> dropped_backlog{0};  // refused because the frame thread is too far behind
};

// The table of watched calls between the job's threads (which add and complete them) and the frame thread (which
// takes complete ones in record order). A call is added before its record could be read by the frame thread's
// lookup, except for the short window between the record's append and watch_begin: the frame thread waits then.
class WatchBoard {
 public:
  static constexpr size_t kMaxBacklog = 1u << 16;  // calls added and not yet taken; beyond, watching pauses

  // Job thread: a new watched call (never null: a refused one comes back already complete and skipped).
  WatchedCall* add(const recorder::Record& record, uint64_t index);
  // Frame thread: the call of record `index`, once complete (nullptr while it is not there or not complete).
  // `present` says whether it was there at all.
  std::unique_ptr<WatchedCall> take_if_complete(uint64_t index, bool* present);
  size_t size();
  // Frame thread: forgets complete calls below `index` that it will never take (their records were overwritten in
  // the flight recorder before it read them). Incomplete ones stay until their thread has finished with them.
  void discard_complete_before(uint64_t index);
  WatchCounters& counters() { return counters_; }

 private:
  std::mutex mutex_;
  std::unordered_map<uint64_t, std::unique_ptr<WatchedCall>> calls_;
  WatchCounters counters_;
};

WatchBoard& watch_board();
// Forked child: a fresh, empty board (the parent's, whose lock another thread may have held at the fork, is leaked:
// its calls belong to the parent's records, and the child's records start again from index 0).
void abandon_watch_board();

// The engine entry points' work (engine.cc forwards to these).
WatchedCall* watch_begin(const recorder::Record& record, uint64_t index);
void watch_end(WatchedCall* call, int32_t result);
void group_end(bool executed);

}  // namespace trainscope::engine
