// Frames held until their batch numbers are settled (see held_frames.h).
#include "collectors/frames/held_frames.h"

#include <algorithm>
#include <utility>

namespace trainscope::frames {

HeldFrames::HeldFrames(std::size_t max_held) : max_held_(std::max<std::size_t>(max_held, 1)) {}

void HeldFrames::hold(Frame frame, std::uint64_t position, bool settled) {
  held_.push_back({std::move(frame), position, settled});
}

void HeldFrames::settle(const batch::BatchTracker& tracker) {
  // Settled positions are a prefix of the calls, so the unsettled frames are a suffix of the held ones (a frame is
  // held settled only when every call before it was settled when it was fed, and settle() numbered those then).
  const std::uint64_t settled = tracker.settled();
  for (auto it = held_.rbegin(); it != held_.rend() && !it->settled; ++it) {
    if (it->position >= settled) continue;
    it->frame.batch = tracker.batch_of(it->position);
    it->settled = true;
  }
}

std::vector<Frame> HeldFrames::release() {
  std::vector<Frame> out;
  while (!held_.empty() && (held_.front().settled || held_.size() > max_held_)) {
    if (!held_.front().settled) ++provisional_;
    out.push_back(std::move(held_.front().frame));
    held_.pop_front();
  }
  return out;
}

std::vector<Frame> HeldFrames::release_all() {
  std::vector<Frame> out;
  out.reserve(held_.size());
  for (Held& held : held_) {
    if (!held.settled) ++provisional_;
    out.push_back(std::move(held.frame));
  }
  held_.clear();
  return out;
}

}  // namespace trainscope::frames
