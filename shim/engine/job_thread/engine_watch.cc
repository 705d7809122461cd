// Watching NCCL calls' buffers, the job's side (see engine_watch.h).
#include "shim/engine/job_thread/engine_watch.h"

#include <algorithm>
#include <string>
#include <vector>

#include "collectors/frames/buffer_layout.h"
#include "kernels/tensor_view.h"

namespace trainscope::engine {
namespace {

using recorder::Op;
using State = WatchedBuffer::State;

// Grouped calls whose receive buffers wait for the outermost ncclGroupEnd of this thread.
thread_local std::vector<WatchedCall*> t_grouped;

constexpr int32_t kNcclSuccess = 0;
constexpr int32_t kNcclInProgress = 7;

bool call_succeeded(int32_t result) { return result == kNcclSuccess || result == kNcclInProgress; }

// Mirrors the size of the current board's park list (the shim's cheap check in ncclCommGetAsyncError).
std::atomic<uint32_t> g_parked_count{0};

void mark_complete(WatchedCall* call) { call->complete.store(true, std::memory_order_release); }

// Takes (host) or enqueues (device) the statistics of `elements` elements at `address`.
void take(WatchedBuffer* buffer, const recorder::Record& record, uint64_t address, uint64_t elements) {
  const std::optional<stats::DType> dtype = stats::dtype_from_nccl(record.dtype);
  if (!dtype) {
    buffer->state = State::kNotATensor;
    return;
  }
  take_statistics(buffer, {reinterpret_cast<const void*>(address), elements, *dtype}, record.stream);
}

frames::BufferLayout layout_of(const recorder::Record& r) {
  return frames::buffer_layout(static_cast<Op>(r.op), r.count, r.nranks, r.rank, r.peer);
}

// A parked call's output that will never be confirmed: skipped with `why`, and the call complete.
void skip_parked_output(WatchedCall* call, const std::string& why) {
  WatchCounters& counters = watch_board().counters();
  counters.unconfirmed.fetch_add(1, std::memory_order_relaxed);
  if (layout_of(call->record).has_output) {
    counters.skipped_other.fetch_add(1, std::memory_order_relaxed);
    call->output.state = State::kSkipped;
    call->output.skipped_why = why;
  } else {
    call->output.state = State::kAbsent;
  }
  mark_complete(call);
}

// Whatever happens to one unparked call (out of memory), it ends complete: the frame thread must not wait on it.
template <typename Fn>
void finish_unparked(WatchedCall* call, Fn&& fn) {
  try {
    fn(call);
  } catch (...) {
    call->output.state = State::kSkipped;
    mark_complete(call);
  }
}

std::string never_confirmed(const std::string& before) {
  return "non-blocking call never confirmed enqueued (ncclCommGetAsyncError not polled before " + before + ")";
}

// NCCL returned ncclInProgress: its work is not on the stream yet. A call with an output to take waits for the
// application's ncclCommGetAsyncError; one without (a send) is complete already.
void park_or_complete(WatchedCall* call) {
  if (!layout_of(call->record).has_output) {
    call->output.state = State::kAbsent;
    mark_complete(call);
    return;
  }
  if (call->record.comm_id == 0) {
    skip_parked_output(call, "non-blocking call on a communicator trainscope does not track");
    return;
  }
  call->output.state = State::kSkipped;  // until confirmed
  if (!watch_board().park(call->record.comm_id, call))
    skip_parked_output(call, "too many non-blocking calls wait for ncclCommGetAsyncError (" +
                                 std::to_string(WatchBoard::kMaxParked) + ")");
}

void take_output(WatchedCall* call, bool executed, int32_t result) {
  const frames::BufferLayout layout = layout_of(call->record);
  if (!layout.has_output) {
    call->output.state = State::kAbsent;
  } else if (!executed || !call_succeeded(result)) {
    call->output.state = State::kSkipped;
    call->output.skipped_why = executed ? "the call failed" : "the group was only simulated";
  } else {
    take(&call->output, call->record, call->record.recvbuff, layout.output_elements);
  }
  mark_complete(call);
}

}  // namespace

void take_statistics(WatchedBuffer* buffer, const stats::TensorRef& tensor, uint64_t stream,
                     std::vector<stats::TensorRef>* device_batch) {
  WatchCounters& counters = watch_board().counters();
  if (tensor.count == 0 || tensor.address == nullptr) {
    buffer->state = State::kReady;
    buffer->stats = stats::compute_stats_host(nullptr, 0, tensor.dtype);
    return;
  }
  stats::GpuStats& gpu = stats::GpuStats::instance();
  switch (gpu.memory_kind(tensor.address)) {
    case stats::MemoryKind::kHost:
      counters.host_buffers.fetch_add(1, std::memory_order_relaxed);
      buffer->stats =
          tensor.shape.ndim == 0
              ? stats::compute_stats_host(tensor.address, tensor.count, tensor.dtype, stats::ChecksumMode::kSkip)
              : stats::strided_host_stats(tensor.address, tensor.dtype, static_cast<int64_t>(tensor.shape.ndim),
                                          tensor.shape.sizes, tensor.shape.strides);
      buffer->state = State::kReady;
      return;
    case stats::MemoryKind::kDevice: {
      counters.device_buffers.fetch_add(1, std::memory_order_relaxed);
      buffer->state = State::kGpuPending;
      if (device_batch != nullptr) {
        device_batch->push_back(tensor);
        return;
      }
      const std::string why = enqueue_device_batch(stream, {tensor}, &buffer->pending);
      if (why.empty()) return;
      buffer->state = State::kSkipped;
      buffer->skipped_why = why;
      return;
    }
    case stats::MemoryKind::kUnknown:
      break;
  }
  counters.skipped_other.fetch_add(1, std::memory_order_relaxed);
  buffer->state = State::kSkipped;
  buffer->skipped_why = "the CUDA driver cannot say where the buffer lives";
}

std::string enqueue_device_batch(uint64_t stream, const std::vector<stats::TensorRef>& tensors,
                                 std::unique_ptr<stats::PendingStats>* pending) {
  stats::GpuLaunch launch = stats::GpuStats::instance().enqueue(reinterpret_cast<void*>(stream), tensors);
  if (launch.status == stats::GpuStatus::kOk) {
    *pending = std::move(launch.pending);
    return "";
  }
  WatchCounters& counters = watch_board().counters();
  (launch.status == stats::GpuStatus::kSkippedCapturing ? counters.skipped_capturing : counters.skipped_other)
      .fetch_add(tensors.size(), std::memory_order_relaxed);
  return std::string(stats::gpu_status_name(launch.status)) + (launch.message.empty() ? "" : ": " + launch.message);
}

// A recycled call made as new: what make_unique<WatchedCall>() gives.
void reset_call(WatchedCall* call) {
  for (WatchedBuffer* buffer : {&call->input, &call->output}) {
    buffer->state = State::kAbsent;
    buffer->stats = {};
    buffer->pending.reset();
    buffer->skipped_why.clear();
  }
  call->launch.reset();
  call->complete.store(false, std::memory_order_relaxed);
}

WatchBoard::WatchBoard() : slots_(new Slot[kSlots]) {}

// Only a forked child's fresh board replaces one, and the old one is leaked (abandon_watch_board); a board that is
// destroyed (a test's) owns its calls: those in slots and the spares.
WatchBoard::~WatchBoard() {
  for (size_t i = 0; i < kSlots; ++i) delete slots_[i].call.load(std::memory_order_relaxed);
  WatchedCall* spare = nullptr;
  while (spares_.pop(&spare)) delete spare;
}

WatchedCall* WatchBoard::add(const recorder::Record& record, uint64_t index) {
  Slot& slot = slot_of(index);
  uint64_t holder = 0;
  if (!slot.holder.compare_exchange_strong(holder, index + 1, std::memory_order_acquire, std::memory_order_relaxed)) {
    counters_.dropped_backlog.fetch_add(1, std::memory_order_relaxed);
    // A record is watched once; a second watch of it (a bug of a caller) must not touch the one on the board, which
    // may be in use by its thread. Otherwise the slot holds a call kSlots records older that the frame thread has
    // not taken yet: this one goes unwatched, and the frame thread is told so (refused()).
    if (holder != index + 1) {
      uint64_t seen = slot.refused.load(std::memory_order_relaxed);
      while (seen < index + 1 && !slot.refused.compare_exchange_weak(seen, index + 1, std::memory_order_release,
                                                                     std::memory_order_relaxed)) {
      }
    }
    thread_local WatchedCall refused;
    refused.input.state = refused.output.state = State::kSkipped;
    refused.complete.store(true, std::memory_order_relaxed);
    return &refused;
  }
  WatchedCall* call = nullptr;
  if (!spares_.pop(&call)) call = new WatchedCall();  // the board is not warm yet
  call->index = index;
  call->record = record;
  slot.call.store(call, std::memory_order_release);
  return call;
}

WatchBoard::Taken WatchBoard::take_if_complete(uint64_t index, bool* present) {
  const Slot& slot = slot_of(index);
  *present = slot.holder.load(std::memory_order_acquire) == index + 1;
  if (!*present) return Taken(nullptr, Release{this});
  WatchedCall* call = slot.call.load(std::memory_order_acquire);
  if (call == nullptr || !call->complete.load(std::memory_order_acquire)) return Taken(nullptr, Release{this});
  return Taken(call, Release{this});
}

// The slot's mark names the newest refused index; an older one that is not on the board either was refused too
// (its slot was held from before it until after the newer refusal), unless it is the holder itself.
bool WatchBoard::refused(uint64_t index) const {
  const Slot& slot = slot_of(index);
  return slot.refused.load(std::memory_order_acquire) >= index + 1 &&
         slot.holder.load(std::memory_order_acquire) != index + 1;
}

// Frame thread. A pending GPU result or a launch's buffers are freed here, before the slot is free again.
void WatchBoard::release(WatchedCall* call) {
  if (call == nullptr) return;
  Slot& slot = slot_of(call->index);
  reset_call(call);
  slot.call.store(nullptr, std::memory_order_relaxed);
  slot.holder.store(0, std::memory_order_release);
  if (!spares_.push(call)) delete call;
}

void WatchBoard::discard_complete_before(uint64_t index) {
  for (size_t i = 0; i < kSlots; ++i) {
    const uint64_t holder = slots_[i].holder.load(std::memory_order_acquire);
    if (holder == 0 || holder > index) continue;  // free, or index holder - 1 >= index
    WatchedCall* call = slots_[i].call.load(std::memory_order_acquire);
    if (call != nullptr && call->complete.load(std::memory_order_acquire)) release(call);
  }
}

size_t WatchBoard::size() const {
  size_t held = 0;
  for (size_t i = 0; i < kSlots; ++i) held += slots_[i].holder.load(std::memory_order_relaxed) != 0;
  return held;
}

bool WatchBoard::park(uint64_t comm_id, WatchedCall* call) {
  std::lock_guard<std::mutex> lock(parked_mutex_);
  if (parked_.size() >= kMaxParked) return false;
  parked_.push_back({comm_id, call});
  counters_.parked.fetch_add(1, std::memory_order_relaxed);
  g_parked_count.fetch_add(1, std::memory_order_relaxed);
  return true;
}

std::vector<WatchedCall*> WatchBoard::unpark(uint64_t comm_id, bool all) {
  std::vector<WatchedCall*> out;
  std::lock_guard<std::mutex> lock(parked_mutex_);
  // Every call on a communicator comes here while another communicator has calls parked: nothing to take must cost
  // no allocation.
  const size_t taken = all ? parked_.size()
                           : static_cast<size_t>(std::count_if(parked_.begin(), parked_.end(),
                                                               [&](const Parked& p) { return p.comm_id == comm_id; }));
  if (taken == 0) return out;
  out.reserve(taken);  // the only allocation, before anything changes
  size_t kept = 0;
  for (const Parked& p : parked_) {
    if (all || p.comm_id == comm_id) {
      out.push_back(p.call);
    } else {
      parked_[kept++] = p;
    }
  }
  parked_.resize(kept);
  if (!out.empty()) g_parked_count.fetch_sub(static_cast<uint32_t>(out.size()), std::memory_order_relaxed);
  return out;
}

// Leaked: job threads may still watch while the process exits.
std::atomic<WatchBoard*> g_board{nullptr};

WatchBoard& watch_board() {
  WatchBoard* board = g_board.load(std::memory_order_acquire);
  if (board != nullptr) return *board;
  auto* fresh = new WatchBoard();
  if (g_board.compare_exchange_strong(board, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;  // another thread made it first
  return *board;
}

const std::atomic<uint32_t>& parked_call_count() { return g_parked_count; }

void abandon_watch_board() {
  g_board.store(new WatchBoard(), std::memory_order_release);
  g_parked_count.store(0, std::memory_order_relaxed);  // the parent's parked calls stay on its leaked board
  t_grouped.clear();                                   // the forking thread's grouped calls were the parent's
}

WatchedCall* watch_begin(const recorder::Record& record, uint64_t index) {
  WatchedCall* call = watch_board().add(record, index);
  if (call->complete.load(std::memory_order_relaxed)) return call;  // refused: nothing to take
  watch_board().counters().watched.fetch_add(1, std::memory_order_relaxed);
  const frames::BufferLayout layout = layout_of(record);
  if (layout.has_input) take(&call->input, record, record.sendbuff, layout.input_elements);
  return call;
}

void watch_end(WatchedCall* call, int32_t result) {
  if (call == nullptr || call->complete.load(std::memory_order_relaxed)) return;
  // A grouped call has only been queued: NCCL runs it (and fills its receive buffer) at the outermost group end.
  if ((call->record.flags & recorder::kFlagInGroup) != 0 && call_succeeded(result)) {
    call->output.state = State::kSkipped;  // until the group ends
    t_grouped.push_back(call);
    return;
  }
  if (result == kNcclInProgress) {
    park_or_complete(call);
    return;
  }
  take_output(call, true, result);
}

void group_end(bool executed, int32_t result) {
  std::vector<WatchedCall*> grouped;
  grouped.swap(t_grouped);
  for (WatchedCall* call : grouped) {
    if (executed && result == kNcclInProgress) {
      park_or_complete(call);
    } else {
      take_output(call, executed, result);
    }
  }
}

void comm_async_state(uint64_t comm_id, int32_t state) {
  if (state == kNcclInProgress || g_parked_count.load(std::memory_order_relaxed) == 0) return;
  for (WatchedCall* call : watch_board().unpark(comm_id)) {
    finish_unparked(call, [state](WatchedCall* c) {
      if (state == kNcclSuccess) {
        take_output(c, true, kNcclSuccess);  // NCCL's work is on the stream now: ours goes after it
      } else {
        skip_parked_output(c, "the non-blocking call failed: " + std::to_string(state));
      }
    });
  }
}

void comm_next_call(uint64_t comm_id, uint16_t op) {
  if (g_parked_count.load(std::memory_order_relaxed) == 0) return;
  const std::vector<WatchedCall*> unconfirmed = watch_board().unpark(comm_id);
  if (unconfirmed.empty()) return;  // the parked calls are another communicator's
  const Op next = static_cast<Op>(op);
  const bool ends =
      next == Op::kCommDestroy || next == Op::kCommFinalize || next == Op::kCommAbort || next == Op::kCommRevoke;
  std::string why;  // out of memory for the reason: the calls still complete, without it
  try {
    why = never_confirmed(ends ? std::string(recorder::op_name(next))
                               : "the communicator's next call, " + std::string(recorder::op_name(next)));
  } catch (...) {
  }
  for (WatchedCall* call : unconfirmed) finish_unparked(call, [&why](WatchedCall* c) { skip_parked_output(c, why); });
}

void skip_all_parked() {
  if (g_parked_count.load(std::memory_order_relaxed) == 0) return;
  const std::string why = never_confirmed("the process exited");
  for (WatchedCall* call : watch_board().unpark(0, true))
    finish_unparked(call, [&why](WatchedCall* c) { skip_parked_output(c, why); });
}

}  // namespace trainscope::engine
