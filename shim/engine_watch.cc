// Watching NCCL calls' buffers, the job's side (see engine_watch.h).
#include "shim/engine_watch.h"

#include <vector>

#include "collectors/buffer_layout.h"

namespace trainscope::engine {
namespace {

using recorder::Op;
using State = WatchedBuffer::State;

// Grouped calls whose receive buffers wait for the outermost ncclGroupEnd of this thread.
thread_local std::vector<WatchedCall*> t_grouped;

bool call_succeeded(int32_t result) { return result == 0 /* ncclSuccess */ || result == 7 /* ncclInProgress */; }

void mark_complete(WatchedCall* call) { call->complete.store(true, std::memory_order_release); }

// Takes (host) or enqueues (device) the statistics of `elements` elements at `address`.
void take(WatchedBuffer* buffer, const recorder::Record& record, uint64_t address, uint64_t elements) {
  WatchCounters& counters = watch_board().counters();
  const std::optional<stats::DType> dtype = stats::dtype_from_nccl(record.dtype);
  if (!dtype) {
    buffer->state = State::kNotATensor;
    return;
  }
  const void* data = reinterpret_cast<const void*>(address);
  if (elements == 0 || data == nullptr) {
    buffer->state = State::kReady;
    buffer->stats = stats::compute_stats_host(nullptr, 0, *dtype);
    return;
  }
  stats::GpuStats& gpu = stats::GpuStats::instance();
  switch (gpu.memory_kind(data)) {
    case stats::MemoryKind::kHost:
      counters.host_buffers.fetch_add(1, std::memory_order_relaxed);
      buffer->stats = stats::compute_stats_host(data, elements, *dtype, stats::ChecksumMode::kSkip);
      buffer->state = State::kReady;
      return;
    case stats::MemoryKind::kDevice: {
      counters.device_buffers.fetch_add(1, std::memory_order_relaxed);
      const stats::TensorRef ref{data, elements, *dtype};
      stats::GpuLaunch launch = gpu.enqueue(reinterpret_cast<void*>(record.stream), {&ref, 1});
      if (launch.status == stats::GpuStatus::kOk) {
        buffer->pending = std::move(launch.pending);
        buffer->state = State::kGpuPending;
        return;
      }
      (launch.status == stats::GpuStatus::kSkippedCapturing ? counters.skipped_capturing : counters.skipped_other)
          .fetch_add(1, std::memory_order_relaxed);
      buffer->state = State::kSkipped;
      buffer->skipped_why =
          std::string(stats::gpu_status_name(launch.status)) + (launch.message.empty() ? "" : ": " + launch.message);
      return;
    }
    case stats::MemoryKind::kUnknown:
      break;
  }
  counters.skipped_other.fetch_add(1, std::memory_order_relaxed);
  buffer->state = State::kSkipped;
  buffer->skipped_why = "the CUDA driver cannot say where the buffer lives";
}

frames::BufferLayout layout_of(const recorder::Record& r) {
  return frames::buffer_layout(static_cast<Op>(r.op), r.count, r.nranks, r.rank, r.peer);
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

WatchedCall* WatchBoard::add(const recorder::Record& record, uint64_t index) {
  auto call = std::make_unique<WatchedCall>();
  call->index = index;
  call->record = record;
  WatchedCall* raw = call.get();
  std::lock_guard<std::mutex> lock(mutex_);
  if (calls_.size() >= kMaxBacklog) {
    counters_.dropped_backlog.fetch_add(1, std::memory_order_relaxed);
    call->input.state = call->output.state = State::kSkipped;
    call->input.skipped_why = call->output.skipped_why = "the frame thread is too far behind";
    call->complete.store(true, std::memory_order_relaxed);
  }
  calls_[index] = std::move(call);
  return raw;
}

std::unique_ptr<WatchedCall> WatchBoard::take_if_complete(uint64_t index, bool* present) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = calls_.find(index);
  *present = it != calls_.end();
  if (!*present || !it->second->complete.load(std::memory_order_acquire)) return nullptr;
  std::unique_ptr<WatchedCall> call = std::move(it->second);
  calls_.erase(it);
  return call;
}

void WatchBoard::discard_complete_before(uint64_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = calls_.begin(); it != calls_.end();) {
    if (it->first < index && it->second->complete.load(std::memory_order_acquire)) {
      it = calls_.erase(it);
    } else {
      ++it;
    }
  }
}

size_t WatchBoard::size() {
  std::lock_guard<std::mutex> lock(mutex_);
  return calls_.size();
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

void abandon_watch_board() {
  g_board.store(new WatchBoard(), std::memory_order_release);
  t_grouped.clear();  // the forking thread's grouped calls were the parent's
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
  take_output(call, true, result);
}

void group_end(bool executed) {
  std::vector<WatchedCall*> grouped;
  grouped.swap(t_grouped);
  for (WatchedCall* call : grouped) take_output(call, executed, 0);
}

}  // namespace trainscope::engine
