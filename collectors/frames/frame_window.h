// Per-rank frame window: the last K frames, inf/nan detection, persistent-overflow streaks, near-overflow, tracing.
//
// One FrameWindow per rank, fed in order by the engine's background thread: on_batch_start(b) when the batch
// tracker says batch b starts, add_frame(frame) as each frame's statistics complete. Plain structs come out; the
// text is written by reports/frame_report.h.
//   - window: the last max_frames frames (TRAINSCOPE_MAX_FRAMES, default 21), oldest first.
//   - detection: the first frame, outside trace batches, with a non-finite value in any row; reported once, with
//     the window at that moment (this frame last).
//   - persistent overflow: non-finite values in `streak_batches` consecutive batch numbers (default 5), reported
//     once per streak with each batch and its first non-finite frame; a batch that ends clean, or a gap in the
//     numbers, resets the streak. Trace batches are not counted.
//   - near-overflow: a row whose finite abs max reaches near_overflow_fraction (default 0.9) of its dtype's largest
//     finite value; reported once per frame name. Off in trace batches, like detection.
//   - trace batches: frames of these batches are returned for emission as they complete (the first one with
//     trace_batch_start, for the "*** Starting batch number=N ***" header); detection is off within them.
//   - abort-after-batch N: abort_now is returned once, when batch N has ended (a batch > N starts or a frame of a
//     later batch arrives).
//   - every batch the window moves to (batch_began), and every batch's first frame with a non-finite value
//     (nonfinite_batch, detection or not): what TRAINSCOPE_ON_NONFINITE=abort judges by under a loss scaler.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kernels/stats.h"
#include "reports/frame_report.h"

namespace trainscope::frames {

// Frames and rows are the reports' own (reports/frame_report.h); the window adds the batch each frame belongs to.
using FrameRow = reports::FrameRow;
using RowKind = reports::FrameRowKind;
struct Frame : reports::Frame {
  std::uint64_t batch = 0;
  std::uint64_t comm_id = 0;  // the watched call's communicator and call number (for the origin report)
  std::uint64_t call_number = 0;
  // A send/recv: this rank's and the peer's communicator ranks (the origin pairs a send with its receive); else -1.
  std::int32_t comm_rank = -1;
  std::int32_t peer = -1;
  // Where in the step this call is (its communicator, operation, count, type and call site): near overflow is
  // reported once per site, as the seed reports it once per module. 0: the frame's name is the site.
  std::uint64_t site = 0;
  // The call site's id (the flight recorder's site table, and the stack id of its stack; 0: none), for the stack
  // shown with the first inf/nan.
  std::uint32_t stack_id = 0;
};

// `frame` as a new Frame{}, but keeping its name's and rows' buffers for the next one.
Frame recycled(Frame frame);

struct FrameWindowOptions {
  std::uint32_t max_frames = 21;
  std::uint32_t streak_batches = 5;     // 0: no persistent-overflow reports
  double near_overflow_fraction = 0.9;  // 0: no near-overflow warnings
  std::set<std::uint64_t> trace_batches;
  std::function<bool(std::uint64_t)> trace_batch;  // also traced when this says so (TRAINSCOPE_TRACE_BATCHES ranges)
  std::optional<std::uint64_t> abort_after_batch;
};

struct Detection {
  std::uint64_t batch = 0;
  std::vector<Frame> frames;  // oldest first, the detecting frame last
};

struct StreakBatch {
  std::uint64_t batch = 0;
  Frame first_nonfinite;
};
struct PersistentOverflow {
  std::vector<StreakBatch> batches;  // oldest first
};

// The first frame of a batch holding a non-finite value, the detection's or a later batch's.
struct NonfiniteBatch {
  std::uint64_t batch = 0;
  std::string frame_name;
  std::string label;  // its first non-finite row's
};

struct NearOverflow {
  std::string frame_name;
  std::string label;
  std::uint64_t batch = 0;
  double abs_max = 0;  // the row's finite abs max
  double limit = 0;    // the dtype's largest finite value
  stats::DType dtype = stats::DType::kFloat16;
};

// What one call produced.
struct FrameUpdate {
  std::optional<Detection> detection;
  std::optional<PersistentOverflow> persistent;
  std::vector<NearOverflow> near_overflow;
  bool trace_batch_start = false;    // the first traced frame of its batch: emit the batch header first
  std::optional<Frame> trace_frame;  // a frame of a trace batch, to emit now
  bool abort_now = false;            // batch abort_after_batch has ended
  // A loss scaler (AMP's GradScaler) skipped the optimizer step of this batch: its gradients held inf/nan, and the
  // job goes on with a lower scale (the frame feed's, from a module record; never the window's).
  std::optional<std::uint64_t> step_skipped_batch;
  std::optional<std::uint64_t> step_applied_batch;  // the loss scaler applied this batch's step (the feed's, too)
  // A loss scaler is enabled in this process (the frame feed's, from a module record): TRAINSCOPE_ON_NONFINITE=abort
  // then judges each batch with inf/nan by whether its step was skipped.
  bool loss_scaler = false;
  std::optional<std::uint64_t> batch_began;       // the window moved to this batch (its start, or its first frame)
  std::optional<NonfiniteBatch> nonfinite_batch;  // this frame is its batch's first with inf/nan (not in trace batches)
};

class FrameWindow {
 public:
  explicit FrameWindow(FrameWindowOptions options = {});

  FrameUpdate on_batch_start(std::uint64_t batch);
  // The frame add_frame kept last (the window always holds it until the next one).
  const Frame& newest() const { return window_.back(); }
  FrameUpdate add_frame(Frame frame);

  const std::deque<Frame>& frames() const { return window_; }  // oldest first
  // The frame that last left the window, for the next frame to be made in its buffers (its name's and rows'
  // capacity): once the window is full, a frame costs no allocation. Empty when none has left since the last take.
  Frame take_spare() { return std::move(spare_); }
  bool detected() const { return detected_; }
  std::uint64_t current_batch() const { return batch_; }
  const FrameWindowOptions& options() const { return options_; }

 private:
  void change_batch(std::uint64_t batch, FrameUpdate* update);
  bool traced(std::uint64_t batch) const {
    return options_.trace_batches.count(batch) != 0 || (options_.trace_batch && options_.trace_batch(batch));
  }

  FrameWindowOptions options_;
  std::deque<Frame> window_;
  Frame spare_;  // the frame that last left the window (take_spare)
  bool detected_ = false;
  bool aborted_ = false;
  std::uint64_t batch_ = 0;
  bool batch_traced_started_ = false;           // the current trace batch's header was emitted
  std::optional<Frame> batch_first_nonfinite_;  // of the current batch
  std::vector<StreakBatch> streak_;             // ended consecutive batches with non-finite values
  bool streak_reported_ = false;
  std::set<std::string> near_reported_;  // sites (names) already warned about
  std::set<std::uint64_t> near_reported_sites_;
};

}  // namespace trainscope::frames
