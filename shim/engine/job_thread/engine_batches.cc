// TRAINSCOPE_ABORT_AFTER_BATCH checked on the job's thread (see engine_batches.h).
#include "shim/engine/job_thread/engine_batches.h"

#include <cstdint>
#include <exception>
#include <mutex>
#include <string>

#include "collectors/frames/batch_tracker.h"
#include "shim/engine/job_thread/engine_kernel_frames.h"
#include "shim/engine/shared/engine_logging.h"

namespace trainscope::engine {
namespace {

using recorder::Op;

class BatchGate {
 public:
  BatchGate(const batch::StepMarker& marker, uint64_t last_batch) : tracker_(marker), last_batch_(last_batch) {}

  // Each returns true when the rank must stop now.
  bool on_call(const recorder::Record& r) {
    std::lock_guard<std::mutex> lock(mutex_);
    tracker_.on_collective({r.op, r.comm_id, r.count, r.dtype});
    return past_last_batch();
  }
  bool on_marker() {
    std::lock_guard<std::mutex> lock(mutex_);
    tracker_.on_marker();
    return past_last_batch();
  }
  bool on_launch(bool optimizer) {
    std::lock_guard<std::mutex> lock(mutex_);
    tracker_.on_launch(optimizer);
    return past_last_batch();
  }
  // A module forward (TRAINSCOPE_WATCH=modules): under auto the modules count the batches from the first one on, as
  // the frame feed counts them (a root's forward ends its batch). The first module forward of a batch after the
  // last one stops the rank: batch N has run whole, its backward and optimizer step included.
  bool on_module(bool root) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!modules_) {
      if (tracker_.marker().kind != batch::MarkerKind::kAuto) return false;
      modules_ = true;
      module_batch_ = tracker_.current_batch();
    }
    if (module_batch_ > last_batch_) return true;
    if (root) ++module_batch_;
    return false;
  }
  // Once modules count the batches, calls and launches no longer do.
  bool counts_modules() {
    std::lock_guard<std::mutex> lock(mutex_);
    return modules_;
  }
  bool counts_launches() const { return tracker_.marker().kind == batch::MarkerKind::kAuto; }
  bool counts_calls() const { return tracker_.marker().kind != batch::MarkerKind::kNvtx; }
  uint64_t last_batch() const { return last_batch_; }

 private:
  // The latest call's number is known (auto: a period is locked) and after the last batch.
  bool past_last_batch() const {
    return tracker_.settled() == tracker_.position() && tracker_.current_batch() > last_batch_;
  }

  std::mutex mutex_;
  batch::BatchTracker tracker_;
  const uint64_t last_batch_;
  bool modules_ = false;  // under mutex_
  uint64_t module_batch_ = 0;
};

BatchGate* g_gate = nullptr;      // leaked: job threads may be in a hook while the process exits
StopAfterBatch g_stop = nullptr;  // set with g_gate

}  // namespace

void start_batch_gate(const Config& config, StopAfterBatch stop) {
  if (!config.abort_after_batch_set || g_gate != nullptr || stop == nullptr) return;
  g_stop = stop;
  batch::StepMarker marker;
  std::string error;
  if (!batch::parse_step_marker(config.step_marker, &marker, &error)) {
    // The shim checked the value at load with the same rules; this cannot happen, but never guess quietly.
    log(LogLevel::kError, ("TRAINSCOPE_ABORT_AFTER_BATCH is off: " + error).c_str());
    return;
  }
  try {
    g_gate = new BatchGate(marker, config.abort_after_batch);
  } catch (const std::exception& e) {
    log(LogLevel::kWarn, (std::string("TRAINSCOPE_ABORT_AFTER_BATCH is off: ") + e.what()).c_str());
  }
}

void batch_gate_call(const recorder::Record& record) {
  BatchGate* gate = g_gate;
  const Op op = static_cast<Op>(record.op);
  if (gate != nullptr && op == Op::kModuleForward) {
    // A module's gradients, a skipped step and a frame beside the model (a loss module's) belong to the batch of the
    // forward before them: they never stop it.
    if (record.aux != recorder::kModuleRecordForward && record.aux != recorder::kModuleRecordRoot) return;
    if (gate->on_module(record.aux == recorder::kModuleRecordRoot)) g_stop(gate->last_batch());
    return;
  }
  if (gate == nullptr || !gate->counts_calls() || gate->counts_modules() || record.comm_id == 0 ||
      !(recorder::is_collective(op) || recorder::is_point_to_point(op)))
    return;
  if (gate->on_call(record)) g_stop(gate->last_batch());
}

void batch_gate_marker() {
  BatchGate* gate = g_gate;
  if (gate != nullptr && gate->on_marker()) g_stop(gate->last_batch());
}

void batch_gate_launch(uint64_t function_handle) {
  BatchGate* gate = g_gate;
  // Launches end batches only where optimizer kernels can be told (auto, with the launch collector's predicate).
  if (gate == nullptr || !gate->counts_launches() || gate->counts_modules() || !has_optimizer_kernel_predicate())
    return;
  if (gate->on_launch(function_handle != 0 && is_optimizer_kernel(function_handle))) g_stop(gate->last_batch());
}

void abandon_batch_gate() { g_gate = nullptr; }

}  // namespace trainscope::engine
