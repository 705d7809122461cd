// The launch collector: turns the CUDA API calls of the job's threads (launch_event.h) into flight recorder records,
// in order with the NCCL calls, and keeps what the reports need to say what each stream was doing.
//
//   - A launch is recorded once: a runtime launch and the driver launch it makes inside count as one (the outermost
//     call on the thread is the one recorded); trainscope's own CUDA calls (OwnCudaCalls) are never recorded.
//   - A kernel's name is demangled and interned once per CUfunction (recorder name table); API names once per id.
//   - Each stream gets a stream table entry at its first launch; a successful synchronisation of a stream (or of its
//     context) marks every launch before it finished.
//   - The first call that returns an error (sticky or not) is recorded as a kCudaError record and handed to the
//     first-error handler (the engine writes the cuda-error report from it); later errors are counted only. A call
//     nested in another on the thread (the driver call inside a runtime call) reports through the outer call's
//     result: the runtime call that fails is the error, and a driver call failing inside a runtime call that
//     succeeds (the runtime handled it) is no error of the job.
//   - Launches into a capturing stream are recorded with kFlagCapturing and never watched.
//   - TRAINSCOPE_WATCH=kernels:REGEX: a launch whose demangled name matches is handed to the LaunchWatcher before
//     (kEnter) and after (kExit) the real launch, with the buffers its pointer parameters reach (kernel_buffers.h).
// Thread-safe: on_call() runs on any of the job's threads, lock-free on the common path (a launch of a known kernel
// on a known stream); the first sight of a kernel or stream takes a lock.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "base/flight_recorder_writer.h"
#include "base/launch_event.h"

namespace trainscope::launches {

struct WatchedLaunch;  // kernel_buffers.h

// Where watched launches go (the engine's frame machinery; a vector in tests).
class LaunchWatcher {
 public:
  virtual ~LaunchWatcher() = default;
  // Before the real launch, on the launching thread: `launch` lists the buffers and their dtypes. `index` is 0: the
  // launch's record is appended at the call's exit (after_launch gets its index). Never called for a capturing
  // stream. Both run inside OwnCudaCalls: the watcher's CUDA calls are not recorded.
  virtual void before_launch(const WatchedLaunch& launch, uint64_t index) = 0;
  // After it returned `result` (the statistics of the outputs go on the same stream, after the kernel), with its
  // record's index; a launch the recorder could not take is not handed over (no record, no frame).
  virtual void after_launch(const WatchedLaunch& launch, uint64_t index, int32_t result) = 0;
};

struct CollectorOptions {
  const char* watch_kernels = nullptr;  // POSIX extended regex of TRAINSCOPE_WATCH=kernels:REGEX; nullptr: none
  const char* kernel_dtype = nullptr;   // TRAINSCOPE_KERNEL_DTYPE ("float16" ...); nullptr: from the name only
};

class LaunchCollector {
 public:
  // `writer` is attached to this process's recorder; `queries` and `watcher` (may be null) outlive the collector.
  LaunchCollector(recorder::Writer* writer, CudaQueries* queries, LaunchWatcher* watcher,
                  const CollectorOptions& options);
  ~LaunchCollector();
  LaunchCollector(const LaunchCollector&) = delete;
  LaunchCollector& operator=(const LaunchCollector&) = delete;

  // One callback of the job's thread.
  void on_call(const ApiCall& call);
  // CUPTI kernel activity: the launch with this correlation id finished at `end_ns` (engine thread).
  void on_kernel_completed(uint32_t correlation, uint64_t end_ns);
  // Called by the engine after each activity flush: completion is up to date as of `ns`.
  void on_completions_checked(uint64_t ns);
  // Called (once, on the thread whose call failed) after the first error's kCudaError record was appended.
  void set_first_error_handler(std::function<void(uint64_t record_index)> handler);
  // Called on the launching thread once per launch of the job that ran (recorded, its watched buffers handed over;
  // not into a capturing stream, not failed), with its CUfunction (0: a graph launch): the engine's batch gate,
  // which under TRAINSCOPE_STEP_MARKER=auto ends batches at optimizer kernels. Set before the first call; lock-free.
  void set_launch_handler(void (*handler)(uint64_t function_handle));
  // Whether a batch may start at this kernel (TRAINSCOPE_STEP_MARKER=auto): an optimizer step kernel
  // (multi_tensor_apply, fused Adam/AdamW/SGD/LAMB) ends a batch. Answer cached per CUfunction.
  bool is_optimizer_kernel(uint64_t function_handle) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace trainscope::launches
