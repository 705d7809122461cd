// The frame machinery the frame thread runs (engine_frames.h), as plain C++ over this process's flight recorder, so
// that collectives and kernel launches go through one copy of it and the unit tests drive it without a thread.
//
// Each pass reads the records committed since the last one, in record order:
//   - collectives and send/recv on a communicator, NVTX step markers, and (TRAINSCOPE_STEP_MARKER=auto, when the
//     engine knows which kernels are the optimizer's) kernel launches feed the batch tracker (batch_tracker.h);
//   - a watched record (kFlagWatched) becomes a frame once its statistics are there (the WatchBoard,
//     engine_watch.h): a collective's send and receive buffers ("input[0]", "output"), or a kernel launch's buffers
//     by parameter ("input[i]", "output[i]", engine_kernel_frames.h), with the kernel's short name as the header;
//   - frames enter the frame window (frame_window.h) in record order, with batch starts between them; under auto
//     with trace batches, frames whose batch is not known yet wait in HeldFrames.
// What the window returns (detections, traces, streaks, near overflow) goes to the sink, which writes the reports.
//
// Not thread-safe: one thread passes at a time (the frame thread, or the stopping thread under the caller's lock).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "base/flight_record_format.h"
#include "collectors/frames/batch_tracker.h"
#include "collectors/frames/frame_window.h"
#include "collectors/frames/held_frames.h"
#include "shim/engine/engine_ring.h"
#include "shim/engine/job_thread/engine_watch.h"

namespace trainscope::engine {

struct FrameFeedOptions {
  batch::StepMarker marker;
  frames::FrameWindowOptions window;
  // auto with trace batches: frames wait for their batch numbers (HeldFrames) instead of taking a guess.
  bool hold_unsettled = false;
  // auto: whether the kernel with this CUfunction is an optimizer step kernel (an empty function, or one that says
  // false for every kernel: launches end no batch). Asked on the feeding thread, once per launch record.
  std::function<bool(uint64_t function_handle)> is_optimizer_kernel;
  // How long a watched launch's record may wait for its statistics to appear on the board (the launching thread
  // appends the record, then hands the launch to the watcher): past it the launch gets no frame.
  std::chrono::milliseconds launch_watch_wait{2000};
};

class FrameFeed {
 public:
  // What the window returned for one frame (`frame`; nullptr for a batch start).
  using Sink = std::function<void(const frames::FrameUpdate& update, const frames::Frame* frame)>;
  // A line for the log: warn (else debug) and its text.
  using Note = std::function<void(bool warn, const std::string& text)>;

  FrameFeed(FrameFeedOptions options, Sink sink, Note note);

  // Reads the records committed since the last pass and moves every frame whose statistics are there into the
  // window. Returns whether the front frame still waits (statistics on a device, or a launch's not yet handed over).
  bool pass(const recorder::FileHeader* header);
  // Every held frame goes to the window, numbered or not (the end, or a stop).
  void release_all_held();

  uint64_t dropped() const { return cursor_.dropped(); }               // records overwritten before they were read
  uint64_t launches_unwatched() const { return launches_unwatched_; }  // watched launches that never got a frame
  // Watched calls, launches and modules read but not yet framed (their statistics, or an earlier one's, not there).
  uint64_t frames_waiting() const;
  const batch::BatchTracker& tracker() const { return tracker_; }
  const frames::FrameWindow& window() const { return window_; }

 private:
  struct Pending {
    bool batch_start = false;
    uint64_t batch = 0;
    uint64_t index = 0;         // the watched record
    uint64_t position = 0;      // the call's position in the tracker (a launch: the last call before it)
    bool settled = true;        // `batch` is the call's number (else its provisional number: auto, period not known)
    recorder::Record record{};  // a launch's record (grid, block, stream: the frame's launch object)
    bool step_skipped = false;  // not a frame: a loss scaler skipped batch `batch`'s optimizer step
    bool step_applied = false;  // not a frame: a loss scaler applied batch `batch`'s optimizer step
    bool loss_scaler = false;   // not a frame: a loss scaler is enabled in this process
    bool event() const { return step_skipped || step_applied || loss_scaler; }
  };

  void on_record(uint64_t index, const recorder::Record& r);
  void on_module(uint64_t index, const recorder::Record& r, uint64_t position);
  void settle();
  void release_held();
  void warn_provisional();
  void drain_backlog();
  bool launch_never_watched();
  void apply(const frames::FrameUpdate& update, const frames::Frame* frame) { sink_(update, frame); }
  void add_to_window(frames::Frame frame);

  FrameFeedOptions options_;
  const recorder::FileHeader* header_ = nullptr;
  Sink sink_;
  Note note_;
  batch::BatchTracker tracker_;
  frames::FrameWindow window_;
  uint64_t settled_seen_ = 0;  // tracker_.settled() when settle() last ran
  frames::HeldFrames held_;
  uint64_t warned_provisional_ = 0;
  RingCursor cursor_;
  std::deque<Pending> backlog_;
  WatchBoard::Taken taken_;  // the backlog's front, taken from the board, waiting on the GPU
  // The backlog's front is a watched launch not on the board yet: since when it waits.
  bool launch_missing_ = false;
  std::chrono::steady_clock::time_point launch_missing_since_{};
  uint64_t launches_unwatched_ = 0;
  // TRAINSCOPE_WATCH=modules under auto: the root modules' forwards count the batches (on_module).
  bool module_batches_ = false;
  uint64_t module_batch_ = 0;
  // A root's forward ended module_batch_: the next module forward starts the next one. Until then (the backward, the
  // gradients' all-reduce, the optimizer step) everything belongs to the batch that ended.
  bool module_batch_ended_ = false;
  bool next_frame_starts_batch_ = true;  // the next frame is its batch's first
};

// The frame of a watched call (a collective's or a kernel launch's) in batch `batch`; `record` is the ring's record
// of a launch (grid, block, stream), unused for a collective (the call's own copy is). No rows: nothing was taken.
// A collective's frame is made in `reuse`'s buffers (a frame the window let go of: FrameWindow::take_spare).
frames::Frame make_frame(const WatchedCall& call, const recorder::Record& record, uint64_t index, uint64_t batch,
                         frames::Frame reuse = {});

// The detection report of `detection` on `rank` (without the stack of its first frame: the caller's to add).
reports::DetectionReport detection_report(const frames::Detection& detection, int32_t rank, uint32_t max_frames);
// What the coordinator needs for the origin: the detecting (newest) frame, and whether this rank had the value in an
// input. A kernel launch's frame names the kernel (short name) and its record index; it has no communicator.
reports::FirstNonfinite first_nonfinite(const frames::Detection& detection, int32_t rank);

}  // namespace trainscope::engine
