// TRAINSCOPE_ON_NONFINITE=abort in a process with a loss scaler (AMP's GradScaler): which inf/nan stops the job.
//
// A loss scaler meets inf/nan on purpose: it scales the loss up until the gradients overflow, then skips that
// batch's optimizer step and lowers the scale. Stopping at the first inf would stop a healthy job at its first
// overflow (the first steps of most float16 trainings). So each batch with inf/nan is held until its step is known:
//   - the scaler skipped it (a step-skipped event for that batch): not a failure, the job goes on;
//   - the window reached the batch kBatchesToWait after it with no skip told: the step was applied, inf/nan and
//     all, to the weights: stop, naming that batch's first frame with it;
//   - inf/nan in TRAINSCOPE_OVERFLOW_STREAK batches in a row (the window's persistent overflow): the scaler is not
//     getting past it (nan weights, a model that overflows at any scale): stop.
// Why two batches: a skip is told before the next batch's first frame, except a fused optimizer's on a GPU, read
// back from the device without waiting (python/inject/_trainscope_module_frames.py), which may come a batch later.
// The frame thread's alone; no locking.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <utility>

#include "collectors/frames/frame_window.h"

namespace trainscope::frames {

class HeldNonfiniteStops {
 public:
  static constexpr std::uint64_t kBatchesToWait = 2;

  void hold(NonfiniteBatch batch) {
    const std::uint64_t number = batch.batch;
    held_.try_emplace(number, std::move(batch));
  }
  void step_skipped(std::uint64_t batch) { held_.erase(batch); }
  // The window moved to `batch`: the oldest held batch whose step had time to be told skipped and was not, if any.
  std::optional<NonfiniteBatch> batch_began(std::uint64_t batch) const {
    for (const auto& [number, held] : held_)
      if (batch >= number + kBatchesToWait) return held;
    return std::nullopt;
  }
  std::size_t holding() const { return held_.size(); }

 private:
  std::map<std::uint64_t, NonfiniteBatch> held_;  // by batch number, oldest first
};

}  // namespace trainscope::frames
