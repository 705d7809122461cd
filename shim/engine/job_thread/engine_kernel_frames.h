// Kernel frames (TRAINSCOPE_WATCH=kernels:REGEX), the launching thread's side: the engine's LaunchWatcher.
//
// The launch collector (collectors/launches/launch_collector.h) appends a watched launch's record (kFlagWatched) and
// then hands the launch to after_launch() on the launching thread, with the buffers its pointer parameters reach
// (kernel_buffers.h). Here, as for a collective's buffers (engine_watch.h), only what must happen in launch order
// happens: a host buffer (what the CPU stand-ins give) is read at once; the device buffers get one statistics batch
// enqueued on the launch's own stream, after the kernel, which the frame thread polls later. Nothing waits for the
// GPU, and nothing goes into a capturing stream (the collector never hands such a launch over; the statistics
// kernel refuses one too). The WatchBoard carries the result to the frame machinery (engine_frame_feed.h), which
// makes the launch a frame with the kernel's short name as its header, in record order with the collectives'.
//
// For the CUPTI adapter, which creates the LaunchCollector:
//   LaunchCollector collector(writer, queries, engine::kernel_watcher(), options);   // null: no kernel watched
//   engine::set_optimizer_kernel_predicate([&](uint64_t f) { return collector.is_optimizer_kernel(f); });
//   ... and on each launch record it appends: engine::batch_gate_launch(function_handle) (engine_batches.h).
#pragma once

#include <cstdint>
#include <functional>

#include "collectors/launches/kernel_buffers.h"
#include "collectors/launches/launch_collector.h"

namespace trainscope::engine {

class KernelFrameWatcher final : public launches::LaunchWatcher {
 public:
  // Statistics are taken after the launch only (a kernel's inputs are pointers to const, unchanged by it).
  void before_launch(const launches::WatchedLaunch& launch, uint64_t index) override;
  void after_launch(const launches::WatchedLaunch& launch, uint64_t index, int32_t result) override;
};

// Turns kernel watching on (engine start, when TRAINSCOPE_WATCH names kernels); idempotent.
void start_kernel_frames();
// The engine's watcher for the LaunchCollector; nullptr while kernel watching is off. Its address never changes.
launches::LaunchWatcher* kernel_watcher();

// TRAINSCOPE_STEP_MARKER=auto: which kernels are optimizer step kernels (the launch collector's
// is_optimizer_kernel, by CUfunction). Set once the collector exists; thread-safe; the predicate must outlive the
// process's use of it (the collector lives until exit). Empty: launches end no batch.
void set_optimizer_kernel_predicate(std::function<bool(uint64_t function_handle)> predicate);
// False while no predicate is set.
bool is_optimizer_kernel(uint64_t function_handle);
bool has_optimizer_kernel_predicate();

}  // namespace trainscope::engine
