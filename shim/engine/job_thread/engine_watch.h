// Watching NCCL calls' buffers, the job's side: the statistics of a watched call's send buffer before the call and
// of its receive buffer after it, handed to the frame thread (engine_frames.h) through the WatchBoard.
//
// On the job's thread only what must happen in call order happens: a host buffer (the CPU stand-in NCCL's, a
// pinned host buffer) is read at once with the host implementation, because the call may overwrite it (in place);
// a device buffer gets the fused statistics kernel enqueued on the call's own stream (kernels/gpu_stats.h), which
// runs in stream order and is polled later by the frame thread. Nothing here waits for the GPU.
//
// Non-blocking communicators (config.blocking = 0): a call (or the outermost ncclGroupEnd) that returns
// ncclInProgress has not enqueued NCCL's work yet, so its receive buffer cannot be read or given a kernel then. The
// call is parked under its communicator, incomplete, until the application's ncclCommGetAsyncError on that
// communicator reads ncclSuccess (outputs taken then, on that thread) or an error (outputs skipped). A parked call
// the application never confirms is completed with its output skipped when the same communicator makes its next
// call, ends, or the process exits, so the frame thread never waits on it forever.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/flight_record_format.h"
#include "kernels/gpu_stats.h"
#include "kernels/stats.h"
#include "shim/engine/shared/bounded_queue.h"

namespace trainscope::engine {

// The statistics of one buffer of a watched call.
struct WatchedBuffer {
  enum class State : uint8_t {
    kAbsent,      // the operation has no such buffer on this rank (reduce's output off the root)
    kReady,       // stats hold the result
    kGpuPending,  // enqueued on the stream: poll `pending`
    kNotATensor,  // a data type this build does not know
    kSkipped,     // could not be taken (graph capture, every result slot busy, a driver error, the call failed)
    kUnreadable,  // a module's tensor of a type the statistics do not read (int16, complex, sparse): says so
  };
  State state = State::kAbsent;
  stats::TensorStats stats{};
  std::unique_ptr<stats::PendingStats> pending;
  std::string skipped_why;
};

// A watched kernel launch's buffers (engine_kernel_frames.h), one per pointer parameter, after the launch.
struct WatchedLaunchBuffers {
  std::string short_name;              // the frame's header
  std::string name;                    // the demangled name
  std::string note;                    // why some parameters have no row
  std::vector<std::string> labels;     // "input[0]", "output[2]": by parameter index
  std::vector<WatchedBuffer> buffers;  // in parameter order; a device buffer is kGpuPending on `device` below
  // The device buffers' statistics, enqueued as one batch on the launch's stream: results()[i] is the statistics of
  // buffers[device_rows[i]].
  std::unique_ptr<stats::PendingStats> device;
  std::vector<uint32_t> device_rows;
};

struct WatchedCall {
  uint64_t index = 0;  // the record's index in the flight recorder
  recorder::Record record{};
  WatchedBuffer input;                           // the send buffer, before the call
  WatchedBuffer output;                          // the receive buffer, after the call
  std::unique_ptr<WatchedLaunchBuffers> launch;  // a kernel launch's buffers instead (record.op is kKernelLaunch)
  std::atomic<bool> complete{false};             // every buffer taken or enqueued: the frame thread may use it
};

// Counters for the closing log line.
struct WatchCounters {
  std::atomic<uint64_t> watched{0};
  std::atomic<uint64_t> host_buffers{0};
  std::atomic<uint64_t> device_buffers{0};
  std::atomic<uint64_t> skipped_capturing{0};
  std::atomic<uint64_t> skipped_other{0};
  std::atomic<uint64_t> dropped_backlog{0};  // refused because the frame thread is too far behind
  std::atomic<uint64_t> parked{0};           // non-blocking calls whose outputs waited for ncclCommGetAsyncError
  std::atomic<uint64_t> unconfirmed{0};      // of those, outputs skipped: never confirmed, failed, or over the cap
};

// The table of watched calls between the job's threads (which add and complete them) and the frame thread (which
// takes complete ones in record order). A call is added before its record could be read by the frame thread's
// lookup, except for the short window between the record's append and watch_begin: the frame thread waits then.
//
// The job's side takes no lock and, once the board is warm, allocates nothing: a call claims the slot of its record
// index with one compare-and-swap and its WatchedCall comes from the spares the frame thread handed back. So a frame
// thread that is preempted or starved of CPU on a busy node never holds a job's thread up; at worst the job's calls
// find their slots still taken and go unwatched, counted.
class WatchBoard {
 public:
  static constexpr size_t kSlots = 1u << 14;  // calls added and not yet taken (per slot of index % kSlots)

  // A call taken by the frame thread: handed back to the board (its slot freed, the call kept as a spare) when the
  // handle lets go of it.
  struct Release {
    WatchBoard* board = nullptr;
    void operator()(WatchedCall* call) const { board->release(call); }
  };
  using Taken = std::unique_ptr<WatchedCall, Release>;

  WatchBoard();
  ~WatchBoard();
  WatchBoard(const WatchBoard&) = delete;
  WatchBoard& operator=(const WatchBoard&) = delete;

  // Job thread: a new watched call (never null: a refused one comes back already complete and skipped).
  WatchedCall* add(const recorder::Record& record, uint64_t index);
  // Frame thread: the call of record `index`, once complete (empty while it is not there or not complete).
  // `present` says whether it was there at all.
  Taken take_if_complete(uint64_t index, bool* present);
  // Frame thread: whether the call of record `index` was refused (its slot still held by an older call): it will
  // never be on the board.
  bool refused(uint64_t index) const;
  // Calls on the board (added, not yet handed back). Walks every slot: for tests and the closing line.
  size_t size() const;
  // Frame thread: forgets complete calls below `index` that it will never take (their records were overwritten in
  // the flight recorder before it read them). Incomplete ones stay until their thread has finished with them.
  void discard_complete_before(uint64_t index);
  WatchCounters& counters() { return counters_; }

  // Non-blocking calls whose outputs wait for their communicator's ncclCommGetAsyncError, oldest first. Only
  // non-blocking communicators come here, under a lock of their own.
  static constexpr size_t kMaxParked = 4096;  // beyond, a call's output is skipped at once
  // Job thread: parks `call` (incomplete) under `comm_id`; false when the list is full.
  bool park(uint64_t comm_id, WatchedCall* call);
  // Takes the parked calls of `comm_id` (of every communicator when `all`), oldest first.
  std::vector<WatchedCall*> unpark(uint64_t comm_id, bool all = false);

 private:
  struct Slot {
    std::atomic<uint64_t> holder{0};          // 0: free; else the index + 1 of the call in it
    std::atomic<WatchedCall*> call{nullptr};  // set by the holder once it has a call
    std::atomic<uint64_t> refused{0};         // the greatest index + 1 refused here because the slot was taken
  };
  struct Parked {
    uint64_t comm_id;
    WatchedCall* call;
  };

  Slot& slot_of(uint64_t index) const { return slots_[index % kSlots]; }
  void release(WatchedCall* call);

  std::unique_ptr<Slot[]> slots_;
  BoundedQueue<WatchedCall*> spares_{kSlots};  // calls handed back, for add() to reuse
  std::mutex parked_mutex_;
  std::vector<Parked> parked_;  // under parked_mutex_; its size is mirrored in parked_call_count()
  WatchCounters counters_;
};

WatchBoard& watch_board();
// Forked child: a fresh, empty board (the parent's, whose lock another thread may have held at the fork, is leaked:
// its calls belong to the parent's records, and the child's records start again from index 0).
void abandon_watch_board();

// How many calls are parked (on every board of the process): the shim's ncclCommGetAsyncError hook reads it with
// one relaxed load and calls into the engine only when it is not 0. Its address never changes.
const std::atomic<uint32_t>& parked_call_count();

// The engine entry points' work (engine.cc forwards to these).
WatchedCall* watch_begin(const recorder::Record& record, uint64_t index);
// `result` ncclInProgress outside a group: the call is parked (see the top of this file).
void watch_end(WatchedCall* call, int32_t result);
// The outermost group ended with `result` (ncclInProgress: its watched calls are parked).
void group_end(bool executed, int32_t result = 0);
// The application read `state` from ncclCommGetAsyncError(comm) (which returned ncclSuccess): ncclSuccess takes
// the parked outputs of the communicator now, on this thread; an error skips them; ncclInProgress changes nothing.
void comm_async_state(uint64_t comm_id, int32_t state);
// The communicator makes another call (`op`, a recorder::Op; ending it included) while calls of it are parked:
// the application never saw ncclSuccess for them, so their outputs are skipped rather than guessed.
void comm_next_call(uint64_t comm_id, uint16_t op);
// Process exit: every parked call is completed with its output skipped.
void skip_all_parked();

// The statistics of `tensor` (a buffer of the call or launch on `stream`): read at once on this thread when it is host
// memory, enqueued on `stream` when it is device memory and `device_batch` is null (a collective's buffer), or added to
// `device_batch` (the device buffers of one launch, enqueued together by the caller with enqueue_device_batch).
// Counts into the board's counters.
void take_statistics(WatchedBuffer* buffer, const stats::TensorRef& tensor, uint64_t stream,
                     std::vector<stats::TensorRef>* device_batch = nullptr);
// Enqueues `tensors` on `stream` as one batch: kOk fills *pending; otherwise returns why not (counted).
std::string enqueue_device_batch(uint64_t stream, const std::vector<stats::TensorRef>& tensors,
                                 std::unique_ptr<stats::PendingStats>* pending);

}  // namespace trainscope::engine
