// HeldFrames: frames of calls made before TRAINSCOPE_STEP_MARKER=auto learns the period wait for their numbers, then
// reach the frame window in call order, so a trace batch among them is traced (once) and detection stays off in it.
#include "collectors/frames/held_frames.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/flight_record_format.h"
#include "collectors/frames/batch_tracker.h"
#include "collectors/frames/frame_window.h"

namespace {

using trainscope::batch::BatchTracker;
using trainscope::batch::CallInfo;
using trainscope::batch::parse_step_marker;
using trainscope::batch::StepMarker;
using trainscope::frames::Frame;
using trainscope::frames::FrameRow;
using trainscope::frames::FrameUpdate;
using trainscope::frames::FrameWindow;
using trainscope::frames::FrameWindowOptions;
using trainscope::frames::HeldFrames;

CallInfo held_call(std::uint64_t count) {
  CallInfo info;
  info.op = static_cast<std::uint16_t>(trainscope::recorder::Op::kAllReduce);
  info.comm_id = 1;
  info.count = count;
  info.dtype = 7;
  return info;
}

Frame held_frame(std::uint64_t index, std::uint64_t batch, bool nonfinite = false) {
  Frame f;
  f.name = "call " + std::to_string(index);
  f.kind = "ncclAllReduce";
  f.batch = batch;
  FrameRow row;
  row.label = "output";
  row.stats.dtype = trainscope::stats::DType::kFloat32;
  row.stats.count = 4;
  row.stats.abs_max = nonfinite ? std::numeric_limits<double>::infinity() : 1.0;
  row.stats.finite_abs_max = 1.0;
  row.stats.pos_inf_count = nonfinite ? 1 : 0;
  f.rows.push_back(row);
  return f;
}

// What the window emitted, in order: "start N" for a trace batch's header, the traced frame's "name@batch", and
// "detected name@batch".
struct Output {
  std::vector<std::string> lines;
  void add(const FrameUpdate& update, const Frame& f) {
    if (update.trace_frame) {
      if (update.trace_batch_start) lines.push_back("start " + std::to_string(update.trace_frame->batch));
      lines.push_back(update.trace_frame->name + "@" + std::to_string(update.trace_frame->batch));
    }
    if (update.detection) lines.push_back("detected " + f.name + "@" + std::to_string(update.detection->batch));
  }
};

// The frame thread's order of work for one watched call whose statistics are ready at once: feed the tracker,
// settle what it settled, then hold the frame or hand it (and whatever is released) to the window.
class Pipeline {
 public:
  Pipeline(const StepMarker& marker, FrameWindowOptions options, std::size_t max_held = HeldFrames::kDefaultMaxHeld)
      : tracker_(marker), window_(std::move(options)), held_(max_held) {}

  void on_call(std::uint64_t count, bool nonfinite = false) {
    const std::uint64_t position = tracker_.position();
    tracker_.on_collective(held_call(count));
    held_.settle(tracker_);
    const bool settled = position < tracker_.settled();
    Frame f = held_frame(position, tracker_.current_batch(), nonfinite);
    if (held_.must_hold(settled)) {
      held_.hold(f, position, settled);
    } else {
      to_window(f);
    }
    for (Frame& released : held_.release()) to_window(released);
  }
  void finish() {
    for (Frame& released : held_.release_all()) to_window(released);
  }

  Output output;
  const HeldFrames& held() const { return held_; }
  const BatchTracker& tracker() const { return tracker_; }

 private:
  void to_window(const Frame& f) { output.add(window_.add_frame(f), f); }
  BatchTracker tracker_;
  FrameWindow window_;
  HeldFrames held_;
};

FrameWindowOptions tracing(std::set<std::uint64_t> batches) {
  FrameWindowOptions options;
  options.trace_batches = std::move(batches);
  return options;
}

TEST(HeldFrames, TraceOfBatchOneIsWrittenOnceThePeriodIsLearnt) {
  Pipeline p(StepMarker{}, tracing({1, 3}));
  // Steps of 3 calls; an inf in batch 1 (traced: no detection) and in batch 2 (detected, as batch 2).
  const std::vector<std::uint64_t> step = {10, 20, 30};
  for (int i = 0; i < 8; ++i) p.on_call(step[i % 3], i == 4 || i == 7);
  EXPECT_EQ(p.tracker().period(), 0u) << "not learnt yet";
  EXPECT_TRUE(p.output.lines.empty()) << "nothing is traced or reported while the numbers are unknown";
  EXPECT_EQ(p.held().size(), 8u);

  p.on_call(step[8 % 3]);  // the third step's last call: the period is learnt
  EXPECT_EQ(p.tracker().period(), 3u);
  EXPECT_TRUE(p.held().empty());
  EXPECT_EQ(p.output.lines,
            (std::vector<std::string>{"start 1", "call 3@1", "call 4@1", "call 5@1", "detected call 7@2"}));

  for (int i = 9; i < 18; ++i) p.on_call(step[i % 3]);
  p.finish();
  EXPECT_EQ(p.output.lines,
            (std::vector<std::string>{"start 1", "call 3@1", "call 4@1", "call 5@1", "detected call 7@2", "start 3",
                                      "call 9@3", "call 10@3", "call 11@3"}));
  EXPECT_EQ(p.held().provisional(), 0u);
}

TEST(HeldFrames, TraceOfBatchZeroWaitsForItsEnd) {
  // Batch 0 is known to be batch 0 only once the period says where batch 1 starts.
  Pipeline p(StepMarker{}, tracing({0}));
  const std::vector<std::uint64_t> step = {10, 20, 30};
  for (int i = 0; i < 8; ++i) p.on_call(step[i % 3]);
  EXPECT_TRUE(p.output.lines.empty());
  for (int i = 8; i < 12; ++i) p.on_call(step[i % 3]);
  EXPECT_EQ(p.output.lines, (std::vector<std::string>{"start 0", "call 0@0", "call 1@0", "call 2@0"}));
}

TEST(HeldFrames, PastTheBoundTheOldestLeaveWithProvisionalNumbers) {
  Pipeline p(StepMarker{}, tracing({0}), /*max_held=*/4);
  for (std::uint64_t i = 0; i < 6; ++i) p.on_call(100 + i);  // no period
  EXPECT_EQ(p.held().size(), 4u);
  EXPECT_EQ(p.held().provisional(), 2u);
  EXPECT_EQ(p.output.lines, (std::vector<std::string>{"start 0", "call 0@0", "call 1@0"}));
  p.finish();  // the job ends before any period: what is held goes as batch 0, as it would have without holding
  EXPECT_EQ(p.held().provisional(), 6u);
  EXPECT_EQ(p.output.lines.size(), 7u);
  EXPECT_EQ(p.output.lines.back(), "call 5@0");
}

TEST(HeldFrames, SettledCallsPassStraightThrough) {
  StepMarker every;
  std::string error;
  ASSERT_TRUE(parse_step_marker("every:2", &every, &error)) << error;
  Pipeline p(every, tracing({1}));
  for (std::uint64_t i = 0; i < 4; ++i) {
    p.on_call(7);
    EXPECT_TRUE(p.held().empty());
  }
  EXPECT_EQ(p.output.lines, (std::vector<std::string>{"start 1", "call 2@1", "call 3@1"}));
}

}  // namespace
