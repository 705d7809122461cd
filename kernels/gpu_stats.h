// Launches the fused statistics kernel on the job's own stream through the CUDA driver API, without synchronising it.
//
// The engine links no CUDA library: libcuda.so.1 is opened with dlopen on first use, and the kernel comes from a
// fatbin embedded in this library (SASS for sm_80, sm_90, sm_100, sm_120 and PTX). Usage:
//
//   auto& gpu = trainscope::stats::GpuStats::instance();
//   trainscope::stats::GpuLaunch launch = gpu.enqueue(stream, tensors);   // returns at once
//   if (launch.status == GpuStatus::kOk) { ... later, from any thread: if (launch.pending->ready()) use results() }
//
// - The batch runs on `stream` in that stream's context (cuStreamGetCtx), after whatever the job queued before it.
// - Results land in pinned host memory; ready() asks the driver about our own event (cuEventQuery), never waits on
//   or synchronises the job's stream.
// - A stream under graph capture gets no work: kSkippedCapturing (the caller decides what to report).
// - No driver, no GPU, a build without kernels, or a driver too old for the embedded code: kUnavailable with a
//   reason, never a crash or an exception.
// - Result buffers come from a bounded pool per context; when all are in flight, kBusy and a drop count.
// Semantics of the figures: kernels/stats.h (identical to compute_stats_host, element for element).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/stats.h"
#include "kernels/stats_kernel_abi.h"

namespace trainscope::stats {

// One tensor of a batch: a device address (or any address the GPU can read: managed, host-mapped) and its `count`
// elements, contiguous unless `shape` says otherwise.
struct TensorRef {
  const void* address = nullptr;
  std::uint64_t count = 0;
  DType dtype = DType::kFloat32;
  // A strided view (shape.ndim > 0): `address` is its first element and its elements lie where the merged dimensions
  // put them (kernels/tensor_view.h makes it); the sizes' product must be `count`. ndim 0: one contiguous range.
  StridedShape shape{};
};

enum class GpuStatus {
  kOk,                // enqueued; poll pending
  kUnavailable,       // no driver / no GPU / no kernels in this build; see GpuStats::unavailable_reason()
  kSkippedCapturing,  // the stream is capturing a CUDA graph: nothing was enqueued
  kBusy,              // every result slot of this context is in flight, or called from inside our own launch
  kInvalidArgument,   // an unknown dtype, a strided shape that does not describe its count, or an empty batch
  kError,             // a driver call failed; see message
};
const char* gpu_status_name(GpuStatus status);

// Where a buffer lives, as the CUDA driver sees it.
enum class MemoryKind {
  kHost,     // readable by the CPU as is: memory CUDA never saw, pinned or registered host memory, or no GPU at all
  kDevice,   // device or managed memory: read it with the kernel, on the GPU
  kUnknown,  // the driver failed to answer: read it neither way
};

class GpuStatsSlot;

// A batch in flight. Destroying it before it is ready is fine: its buffers go back to the pool once the GPU is done.
class PendingStats {
 public:
  ~PendingStats();
  PendingStats(const PendingStats&) = delete;
  PendingStats& operator=(const PendingStats&) = delete;

  // Non-blocking: true once the kernel has finished and results() is valid. False on a driver error (see error()).
  bool ready();
  // Blocks on our own event until the batch is done (tests and benchmarks; never on the job's threads).
  bool wait();
  // One entry per tensor, in the order given to enqueue; empty until ready() or wait() returned true.
  const std::vector<TensorStats>& results() const { return results_; }
  const std::string& error() const { return error_; }

 private:
  friend class GpuStats;
  explicit PendingStats(GpuStatsSlot* slot, std::vector<TensorRef> tensors);
  void collect();

  GpuStatsSlot* slot_;
  std::vector<TensorRef> tensors_;
  std::vector<TensorStats> results_;
  std::string error_;
};

struct GpuLaunch {
  GpuStatus status = GpuStatus::kUnavailable;
  std::string message;                    // why, for every status but kOk
  std::unique_ptr<PendingStats> pending;  // set for kOk only
};

class GpuStats {
 public:
  // The process-wide instance (leaked on purpose: it may be used from exit paths). Loads nothing until first use.
  static GpuStats& instance();

  // Loads libcuda.so.1 and initialises the driver once; false (with a reason) when the GPU side cannot work.
  bool available();
  std::string unavailable_reason();

  // The libcuda.so.1 handle the statistics kernel uses (loading the driver on first use), for the engine's other
  // driver questions (the launch collector's), so that the process has one way into the driver; nullptr without one.
  void* driver_library();

  // Where `address` lives (a driver query, no synchronisation); kHost whenever the GPU side is unavailable.
  MemoryKind memory_kind(const void* address);

  // Enqueues the statistics of `tensors` on `stream` (a CUstream; nullptr is the legacy default stream) and returns
  // immediately. Thread-safe.
  GpuLaunch enqueue(void* stream, std::span<const TensorRef> tensors);

  // Batches refused because every slot was in flight (kBusy).
  std::uint64_t dropped_batches() const;

  // Maximum batches in flight per context; a bound so a stalled GPU cannot make us allocate without end.
  static constexpr int kMaxSlotsPerContext = 64;

  struct State;  // the implementation's (gpu_stats.cc)

 private:
  GpuStats() = default;
  State* state();
};

// Why `tensor.shape` cannot be read as a strided view of `tensor.count` elements ("" when it can, or when it is 0-d:
// contiguous). enqueue refuses a batch with such a tensor (kInvalidArgument).
std::string strided_shape_error(const TensorRef& tensor);

// True while this thread is inside trainscope's own driver calls (collectors use it to ignore our launches): the same
// thread-local as launches::own_cuda_call_active() (base/launch_event.h).
bool inside_own_launch();

// Whether this build embeds the kernels (TRAINSCOPE_BUILD_KERNELS), and the embedded fatbin's size in bytes.
bool kernels_built();
std::size_t embedded_fatbin_size();

}  // namespace trainscope::stats
