// TRAINSCOPE_ON_NONFINITE=abort in a process with a loss scaler (AMP's GradScaler): which inf/nan stops the job.
//
// A loss scaler meets inf/nan on purpose: it scales the loss up until the gradients overflow, then skips that step
// and lowers the scale. Stopping at the first inf would stop a healthy job at its first overflow (the first steps of
// most float16 trainings). So each batch with inf/nan is held until the scaler's next step says what became of it
// (the hooks tell every step of the scaler, skipped or applied):
//   - a step skipped in that batch or a later one (gradient accumulation: one step for several batches): released,
//     the job goes on;
//   - a step applied, and no step of its batch skipped once the window moved past that batch: the inf/nan did not
//     stop the update (it never reached the gradients the scaler checks): stop, naming the held batch's first frame
//     with it. (Several optimizers: one of them skipping its step releases the batch.)
//   - inf/nan in TRAINSCOPE_OVERFLOW_STREAK batches in a row (the window's persistent overflow): the scaler is not
//     getting past it (nan weights, a model that overflows at any scale): the caller stops.
// A step's outcome may come batches late (a fused optimizer's found-inf, read back from a GPU without waiting): it
// comes with its own batch's number. The frame thread's alone; no locking.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <utility>

#include "collectors/frames/frame_window.h"

namespace trainscope::frames {

class HeldNonfiniteStops {
 public:
  void hold(NonfiniteBatch batch) {
    const std::uint64_t number = batch.batch;
    held_.try_emplace(number, Held{std::move(batch), std::nullopt});
  }
  // A step of batch `batch` was skipped: every batch held up to it is released.
  void step_skipped(std::uint64_t batch) { held_.erase(held_.begin(), held_.upper_bound(batch)); }
  // A step of batch `batch` was applied: the batches held up to it are judged once the window moves past it.
  void step_applied(std::uint64_t batch) {
    for (auto it = held_.begin(); it != held_.upper_bound(batch); ++it)
      if (!it->second.applied_in) it->second.applied_in = batch;
  }
  // The window moved to `batch`: the oldest held batch whose step was applied in an earlier batch, if any.
  std::optional<NonfiniteBatch> batch_began(std::uint64_t batch) const {
    for (const auto& [number, held] : held_)
      if (held.applied_in && *held.applied_in < batch) return held.batch;
    return std::nullopt;
  }
  std::size_t holding() const { return held_.size(); }

 private:
  struct Held {
    NonfiniteBatch batch;
    std::optional<std::uint64_t> applied_in;  // the batch of the applied step that covered it
  };
  std::map<std::uint64_t, Held> held_;  // by batch number, oldest first
};

}  // namespace trainscope::frames
