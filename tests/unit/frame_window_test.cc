// FrameWindow: window size, detection once, streaks, near-overflow once per name, trace batches, abort-after-batch.
#include "collectors/frames/frame_window.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

namespace {

using trainscope::frames::Frame;
using trainscope::frames::FrameRow;
using trainscope::frames::FrameUpdate;
using trainscope::frames::FrameWindow;
using trainscope::frames::FrameWindowOptions;
using trainscope::stats::DType;

Frame frame(const std::string& name, std::uint64_t batch, double abs_max = 1.0, bool nonfinite = false,
            DType type = DType::kFloat16) {
  Frame f;
  f.name = name;
  f.kind = "Linear";
  f.batch = batch;
  FrameRow row;
  row.label = "output";
  row.stats.dtype = type;
  row.stats.count = 4;
  row.stats.abs_min = 0;
  row.stats.abs_max = nonfinite ? std::numeric_limits<double>::infinity() : abs_max;
  row.stats.finite_abs_min = 0;
  row.stats.finite_abs_max = abs_max;
  row.stats.pos_inf_count = nonfinite ? 1 : 0;
  f.rows.push_back(row);
  FrameRow none;
  none.label = "output[1]";
  none.kind = trainscope::frames::RowKind::kNone;
  f.rows.push_back(none);
  return f;
}

TEST(FrameWindow, KeepsTheLastKFramesOldestFirst) {
  FrameWindowOptions options;
  options.max_frames = 3;
  FrameWindow w(options);
  for (int i = 0; i < 5; ++i) w.add_frame(frame("f" + std::to_string(i), 0));
  ASSERT_EQ(w.frames().size(), 3u);
  EXPECT_EQ(w.frames()[0].name, "f2");
  EXPECT_EQ(w.frames()[2].name, "f4");
  EXPECT_EQ(FrameWindow().options().max_frames, 21u);
}

// A frame that leaves the window lends its buffers to the next one: once the window is full, making a frame
// allocates nothing on the frame thread.
TEST(FrameWindow, TheFrameThatLeftIsRecycledAsANewFrameWithItsBuffers) {
  FrameWindowOptions options;
  options.max_frames = 2;
  FrameWindow w(options);
  EXPECT_TRUE(w.take_spare().name.empty()) << "nothing has left yet";
  const std::string long_name(100, 'n');
  w.add_frame(frame(long_name, 0));
  w.add_frame(frame("f1", 0));
  w.add_frame(frame("f2", 0));
  Frame left = w.take_spare();
  EXPECT_EQ(left.name, long_name);
  const char* name_buffer = left.name.data();
  const FrameRow* rows_buffer = left.rows.data();
  left.comm_id = 7;
  left.starts_batch = 3;
  left.module = true;
  const Frame fresh = trainscope::frames::recycled(std::move(left));
  EXPECT_TRUE(fresh.name.empty());
  EXPECT_TRUE(fresh.rows.empty());
  EXPECT_EQ(fresh.name.data(), name_buffer) << "the name's buffer is kept";
  EXPECT_GE(fresh.rows.capacity(), 2u);
  EXPECT_EQ(fresh.rows.data(), rows_buffer) << "the rows' buffer is kept";
  EXPECT_EQ(fresh.comm_id, 0u) << "everything else as a new frame";
  EXPECT_FALSE(fresh.starts_batch.has_value());
  EXPECT_FALSE(fresh.module);
  EXPECT_TRUE(w.take_spare().name.empty()) << "taken once";
  ASSERT_EQ(w.frames().size(), 2u);
  EXPECT_EQ(w.frames()[0].name, "f1");
}

TEST(FrameWindow, DetectsTheFirstNonFiniteFrameOnce) {
  FrameWindowOptions options;
  options.max_frames = 4;
  FrameWindow w(options);
  for (int i = 0; i < 6; ++i) EXPECT_FALSE(w.add_frame(frame("ok" + std::to_string(i), 2)).detection);
  FrameUpdate u = w.add_frame(frame("dropout", 2, 6.27e4, true));
  ASSERT_TRUE(u.detection);
  EXPECT_EQ(u.detection->batch, 2u);
  ASSERT_EQ(u.detection->frames.size(), 4u);
  EXPECT_EQ(u.detection->frames.front().name, "ok3");
  EXPECT_EQ(u.detection->frames.back().name, "dropout");
  EXPECT_TRUE(w.detected());
  EXPECT_FALSE(w.add_frame(frame("again", 2, 1, true)).detection);
  EXPECT_FALSE(w.add_frame(frame("later", 3, 1, true)).detection);
}

TEST(FrameWindow, PersistentOverflowAfterSConsecutiveBatchesResetByACleanOne) {
  FrameWindowOptions options;
  options.streak_batches = 3;
  FrameWindow w(options);
  auto bad_batch = [&](std::uint64_t b) {
    w.on_batch_start(b);
    w.add_frame(frame("clean", b));
    FrameUpdate u = w.add_frame(frame("bad" + std::to_string(b), b, 1, true));
    w.add_frame(frame("bad_again", b, 1, true));
    return u;
  };
  EXPECT_FALSE(bad_batch(0).persistent);
  EXPECT_FALSE(bad_batch(1).persistent);
  w.on_batch_start(2);
  w.add_frame(frame("clean", 2));  // a clean batch resets the streak
  EXPECT_FALSE(bad_batch(3).persistent);
  EXPECT_FALSE(bad_batch(4).persistent);
  FrameUpdate u = bad_batch(5);
  ASSERT_TRUE(u.persistent);
  ASSERT_EQ(u.persistent->batches.size(), 3u);
  EXPECT_EQ(u.persistent->batches[0].batch, 3u);
  EXPECT_EQ(u.persistent->batches[0].first_nonfinite.name, "bad3");
  EXPECT_EQ(u.persistent->batches[2].first_nonfinite.name, "bad5");
  EXPECT_FALSE(bad_batch(6).persistent);  // once per streak
  w.on_batch_start(7);
  w.add_frame(frame("clean", 7));
  EXPECT_FALSE(bad_batch(8).persistent);
  EXPECT_FALSE(bad_batch(9).persistent);
  EXPECT_TRUE(bad_batch(10).persistent);  // a new streak is reported again
}

TEST(FrameWindow, NearOverflowOncePerFrameName) {
  FrameWindow w;
  EXPECT_TRUE(w.add_frame(frame("mlp", 0, 5.0e4)).near_overflow.empty());  // 0.76 of fp16's max
  FrameUpdate u = w.add_frame(frame("mlp", 0, 6.27e4));
  ASSERT_EQ(u.near_overflow.size(), 1u);
  EXPECT_EQ(u.near_overflow[0].frame_name, "mlp");
  EXPECT_EQ(u.near_overflow[0].limit, 65504.0);
  EXPECT_TRUE(w.add_frame(frame("mlp", 1, 6.4e4)).near_overflow.empty());
  EXPECT_EQ(w.add_frame(frame("attn", 1, 6.0e4)).near_overflow.size(), 1u);
  EXPECT_EQ(w.add_frame(frame("e4m3", 1, 420, false, DType::kFloat8E4M3)).near_overflow.size(), 1u);
  EXPECT_TRUE(w.add_frame(frame("fp32", 1, 6.4e4, false, DType::kFloat32)).near_overflow.empty());
  EXPECT_TRUE(w.add_frame(frame("int", 1, 1e30, false, DType::kInt64)).near_overflow.empty());
}

TEST(FrameWindow, TraceBatchesAreEmittedAndDisableDetection) {
  FrameWindowOptions options;
  options.trace_batches = {1, 3};
  FrameWindow w(options);
  EXPECT_FALSE(w.add_frame(frame("a", 0)).trace_frame);
  FrameUpdate u = w.add_frame(frame("a", 1, 6.4e4, true));
  EXPECT_TRUE(u.trace_batch_start);
  ASSERT_TRUE(u.trace_frame);
  EXPECT_EQ(u.trace_frame->name, "a");
  EXPECT_FALSE(u.detection);
  EXPECT_TRUE(u.near_overflow.empty());
  u = w.add_frame(frame("b", 1, 1, true));
  EXPECT_FALSE(u.trace_batch_start);
  EXPECT_TRUE(u.trace_frame);
  EXPECT_FALSE(u.detection);
  EXPECT_FALSE(w.detected());
  u = w.add_frame(frame("c", 2, 1, true));  // batch 2 is not traced: detection is on
  EXPECT_FALSE(u.trace_frame);
  EXPECT_TRUE(u.detection);
  u = w.add_frame(frame("d", 3));
  EXPECT_TRUE(u.trace_batch_start);
  EXPECT_TRUE(u.trace_frame);
}

TEST(FrameWindow, AbortAfterBatchFiresWhenBatchNEnds) {
  FrameWindowOptions options;
  options.abort_after_batch = 3;
  FrameWindow w(options);
  for (std::uint64_t b = 0; b <= 3; ++b) {
    EXPECT_FALSE(w.on_batch_start(b).abort_now) << b;
    EXPECT_FALSE(w.add_frame(frame("f", b)).abort_now) << b;
    EXPECT_FALSE(w.add_frame(frame("g", b)).abort_now) << b;
  }
  EXPECT_TRUE(w.on_batch_start(4).abort_now);
  EXPECT_FALSE(w.add_frame(frame("f", 4)).abort_now);
  EXPECT_FALSE(w.on_batch_start(5).abort_now);

  FrameWindow by_frame(options);  // a frame of a later batch also ends batch N
  by_frame.add_frame(frame("f", 3));
  EXPECT_TRUE(by_frame.add_frame(frame("f", 4)).abort_now);
}

}  // namespace

// What TRAINSCOPE_ON_NONFINITE=abort judges by under a loss scaler: each batch the window moves to, and each batch's
// first frame with inf/nan, the detection's and every later one's.
TEST(FrameWindow, TellsEachBatchItMovesToAndEachBatchsFirstNonFiniteFrame) {
  FrameWindow w;
  EXPECT_EQ(w.on_batch_start(1).batch_began, std::optional<std::uint64_t>(1));
  EXPECT_FALSE(w.on_batch_start(1).batch_began.has_value());  // not a move
  const FrameUpdate first = w.add_frame(frame("a", 1, 1.0, true));
  ASSERT_TRUE(first.nonfinite_batch.has_value());
  EXPECT_EQ(first.nonfinite_batch->batch, 1u);
  EXPECT_EQ(first.nonfinite_batch->frame_name, "a");
  EXPECT_EQ(first.nonfinite_batch->label, "output");
  EXPECT_TRUE(first.detection.has_value());
  EXPECT_FALSE(w.add_frame(frame("b", 1, 1.0, true)).nonfinite_batch.has_value());  // not the batch's first
  const FrameUpdate later = w.add_frame(frame("c", 2, 1.0, true));  // a frame of the next batch moves the window
  EXPECT_EQ(later.batch_began, std::optional<std::uint64_t>(2));
  ASSERT_TRUE(later.nonfinite_batch.has_value());
  EXPECT_EQ(later.nonfinite_batch->batch, 2u);
  EXPECT_EQ(later.nonfinite_batch->frame_name, "c");
  EXPECT_FALSE(later.detection.has_value());  // the detection is once
}
