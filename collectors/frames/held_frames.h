// Frames whose batch is not known yet, held in call order until the batch tracker settles their numbers.
//
// With TRAINSCOPE_STEP_MARKER=auto a call's batch number is known only once the period of the call sequence is
// learnt (batch_tracker.h: the first `confirmations` cycles, 3 by default), or relearnt after it stopped matching.
// The engine holds the frames of the calls fed before that here, instead of giving them to the frame window with a
// guess, and releases them, in order and with their numbers, once BatchTracker::settled() covers them: the window
// then traces batch 1 (and checks it, or not when it is traced) exactly as it would have done live.
//
// Bounded: at most max_held frames (kDefaultMaxHeld, 16384 frames: three cycles of the longest period auto finds,
// 4096 calls, with room for a prologue; a frame with two rows takes about 470 bytes, so about 8 MB at most). Past
// the bound the oldest held frame is released with the number it was fed with (its provisional number: the
// current batch of the tracker then, as without holding) and counted in provisional(); so is every frame still
// held at release_all() (the job ended before the period was learnt).
//
// Not thread-safe: the engine's frame thread owns it, next to its tracker.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "collectors/frames/batch_tracker.h"
#include "collectors/frames/frame_window.h"

namespace trainscope::frames {

class HeldFrames {
 public:
  static constexpr std::size_t kDefaultMaxHeld = 16384;

  explicit HeldFrames(std::size_t max_held = kDefaultMaxHeld);

  // Whether a frame must be held: its number is not `settled`, or earlier frames are held (frames leave in call
  // order).
  bool must_hold(bool settled) const { return !settled || !held_.empty(); }
  // Holds `frame` of the call at `position` (BatchTracker::position() before that call was fed). `settled`: its
  // frame.batch is its number already (the call was settled when it was fed, or numbered since); otherwise
  // frame.batch is the provisional number, used only if the frame leaves unsettled.
  void hold(Frame frame, std::uint64_t position, bool settled);
  // After the tracker was fed: numbers the held frames it has settled since, as the tracker knows them now. Call it
  // whenever settled() may have grown, before feeding calls that could renumber older positions again.
  void settle(const batch::BatchTracker& tracker);
  // The frames that may go to the window now, oldest first: the settled ones at the front, then, past the bound,
  // the oldest unsettled ones with their provisional numbers.
  std::vector<Frame> release();
  // Every held frame, oldest first; those never settled keep their provisional numbers (counted).
  std::vector<Frame> release_all();

  std::size_t size() const { return held_.size(); }
  bool empty() const { return held_.empty(); }
  // Frames released with provisional numbers (past the bound, or by release_all).
  std::uint64_t provisional() const { return provisional_; }

 private:
  struct Held {
    Frame frame;
    std::uint64_t position = 0;
    bool settled = false;
  };
  std::size_t max_held_;
  std::deque<Held> held_;  // oldest first
  std::uint64_t provisional_ = 0;
};

}  // namespace trainscope::frames
