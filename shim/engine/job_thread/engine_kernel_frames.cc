// Kernel frames, the launching thread's side (see engine_kernel_frames.h).
#include "shim/engine/job_thread/engine_kernel_frames.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kernels/stats.h"
#include "shim/engine/job_thread/engine_watch.h"

namespace trainscope::engine {
namespace {

using State = WatchedBuffer::State;

constexpr int32_t kLaunchSucceeded = 0;  // cudaSuccess and CUDA_SUCCESS

// Leaked: job threads may launch while the process exits.
std::atomic<KernelFrameWatcher*> g_watcher{nullptr};
std::atomic<const std::function<bool(uint64_t)>*> g_optimizer_predicate{nullptr};

// The launch's buffers: host ones read now, device ones gathered into `device` for one batch on the stream.
std::unique_ptr<WatchedLaunchBuffers> take_launch(const launches::WatchedLaunch& launch, int32_t result) {
  auto taken = std::make_unique<WatchedLaunchBuffers>();
  taken->short_name = launch.short_name.empty() ? launch.name : launch.short_name;
  taken->name = launch.name;
  taken->note = launch.note;
  taken->labels.reserve(launch.buffers.size());
  taken->buffers.resize(launch.buffers.size());
  std::vector<stats::TensorRef> device;
  for (size_t i = 0; i < launch.buffers.size(); ++i) {
    const launches::WatchedBuffer& from = launch.buffers[i];
    WatchedBuffer& buffer = taken->buffers[i];
    taken->labels.push_back(from.label);
    if (result != kLaunchSucceeded) {
      buffer.state = State::kSkipped;  // nothing ran: its buffers say nothing about the kernel
      buffer.skipped_why = "the launch failed: " + std::to_string(result);
    } else if (static_cast<int>(from.tensor.dtype) >= stats::kDTypeCount) {
      buffer.state = State::kNotATensor;
    } else {
      take_statistics(&buffer, from.tensor, launch.stream, &device);
      if (buffer.state == State::kGpuPending) taken->device_rows.push_back(static_cast<uint32_t>(i));
    }
  }
  if (!device.empty()) {
    const std::string why = enqueue_device_batch(launch.stream, device, &taken->device);
    if (!why.empty()) {
      for (const uint32_t row : taken->device_rows) {
        taken->buffers[row].state = State::kSkipped;
        taken->buffers[row].skipped_why = why;
      }
      taken->device_rows.clear();
    }
  }
  return taken;
}

}  // namespace

void KernelFrameWatcher::before_launch(const launches::WatchedLaunch&, uint64_t) {}

void KernelFrameWatcher::after_launch(const launches::WatchedLaunch& launch, uint64_t index, int32_t result) {
  recorder::Record record{};
  record.op = static_cast<uint16_t>(recorder::Op::kKernelLaunch);
  record.stream = launch.stream;
  record.caller = launch.function_handle;
  WatchedCall* call = nullptr;
  try {
    call = watch_board().add(record, index);
    if (call->complete.load(std::memory_order_relaxed)) return;  // refused: the frame thread is too far behind
    watch_board().counters().watched.fetch_add(1, std::memory_order_relaxed);
    call->launch = take_launch(launch, result);
  } catch (...) {
    // Out of memory: the launch gets no frame (no row), but the frame thread must not wait on it.
    if (call == nullptr) return;
    call->launch.reset();
    call->input.state = call->output.state = State::kSkipped;
  }
  call->complete.store(true, std::memory_order_release);
}

void start_kernel_frames() {
  if (g_watcher.load(std::memory_order_acquire) != nullptr) return;
  auto* fresh = new KernelFrameWatcher();
  KernelFrameWatcher* expected = nullptr;
  if (!g_watcher.compare_exchange_strong(expected, fresh, std::memory_order_acq_rel)) delete fresh;
}

launches::LaunchWatcher* kernel_watcher() { return g_watcher.load(std::memory_order_acquire); }

void set_optimizer_kernel_predicate(std::function<bool(uint64_t function_handle)> predicate) {
  const std::function<bool(uint64_t)>* fresh =
      predicate ? new std::function<bool(uint64_t)>(std::move(predicate)) : nullptr;
  const std::function<bool(uint64_t)>* previous = g_optimizer_predicate.exchange(fresh, std::memory_order_acq_rel);
  if (previous == nullptr) return;
  // The previous one is never freed (another thread may be asking it right now), but kept where it can be found: a
  // replaced predicate is retired, not lost (LeakSanitizer counts an unreachable one as a leak).
  static std::mutex retired_mutex;
  static auto* retired = new std::vector<const std::function<bool(uint64_t)>*>();
  std::lock_guard<std::mutex> lock(retired_mutex);
  retired->push_back(previous);
}

bool is_optimizer_kernel(uint64_t function_handle) {
  const std::function<bool(uint64_t)>* predicate = g_optimizer_predicate.load(std::memory_order_acquire);
  return predicate != nullptr && (*predicate)(function_handle);
}

bool has_optimizer_kernel_predicate() { return g_optimizer_predicate.load(std::memory_order_acquire) != nullptr; }

}  // namespace trainscope::engine
