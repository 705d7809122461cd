// BatchTracker: the step-marker parser and each marker (auto, nvtx, collective, every) on synthetic sequences.
#include "collectors/frames/batch_tracker.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/flight_record_format.h"

namespace {

using trainscope::batch::BatchEvent;
using trainscope::batch::BatchTracker;
using trainscope::batch::CallInfo;
using trainscope::batch::MarkerKind;
using trainscope::batch::parse_step_marker;
using trainscope::batch::StepMarker;
using trainscope::recorder::Op;

CallInfo call(std::uint64_t count, Op op = Op::kAllReduce, std::uint64_t comm = 1) {
  CallInfo info;
  info.op = static_cast<std::uint16_t>(op);
  info.comm_id = comm;
  info.count = count;
  info.dtype = 7;
  return info;
}

std::vector<std::uint64_t> repeat(const std::vector<std::uint64_t>& cycle, int times) {
  std::vector<std::uint64_t> out;
  for (int i = 0; i < times; ++i) out.insert(out.end(), cycle.begin(), cycle.end());
  return out;
}

std::vector<std::uint64_t> concat(std::vector<std::uint64_t> a, const std::vector<std::uint64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

struct Fed {
  std::vector<BatchEvent> events;
  bool lost = false;
};

Fed feed(BatchTracker& tracker, const std::vector<std::uint64_t>& counts) {
  Fed fed;
  for (std::uint64_t c : counts) {
    fed.events.push_back(tracker.on_collective(call(c)));
    fed.lost = fed.lost || fed.events.back().period_lost;
  }
  return fed;
}

BatchTracker auto_tracker() { return BatchTracker(StepMarker{}); }

TEST(BatchTrackerParse, AcceptsEveryForm) {
  StepMarker m;
  std::string error;
  ASSERT_TRUE(parse_step_marker("auto", &m, &error)) << error;
  EXPECT_EQ(m.kind, MarkerKind::kAuto);
  ASSERT_TRUE(parse_step_marker("nvtx:^train_step", &m, &error)) << error;
  EXPECT_EQ(m.kind, MarkerKind::kNvtx);
  EXPECT_EQ(m.pattern, "^train_step");
  ASSERT_TRUE(parse_step_marker("collective:AllGather$", &m, &error)) << error;
  EXPECT_EQ(m.kind, MarkerKind::kCollective);
  EXPECT_EQ(m.pattern, "AllGather$");
  ASSERT_TRUE(parse_step_marker("every:1000000000", &m, &error)) << error;
  EXPECT_EQ(m.kind, MarkerKind::kEvery);
  EXPECT_EQ(m.every, 1000000000u);
}

TEST(BatchTrackerParse, RejectsWithTheAcceptedForms) {
  for (const char* bad : {"", "Auto", "every:0", "every:1000000001", "every:", "every:-3", "every:1e3",
                          "nvtx:", "collective:", "steps:4", "nvtx:(unclosed"}) {
    StepMarker m;
    std::string error;
    EXPECT_FALSE(parse_step_marker(bad, &m, &error)) << bad;
    EXPECT_NE(error.find("auto|nvtx:REGEX|collective:REGEX|every:N"), std::string::npos) << error;
    EXPECT_NE(error.find(std::string("'") + bad + "'"), std::string::npos) << error;
  }
  std::string error;
  EXPECT_FALSE(parse_step_marker("nvtx:[a-", nullptr, &error));
  EXPECT_NE(error.find("invalid regex '[a-'"), std::string::npos) << error;
}

TEST(BatchTrackerAuto, ConstantPeriod) {
  BatchTracker t = auto_tracker();
  const auto seq = repeat({1, 2, 3, 4}, 10);
  Fed fed = feed(t, seq);
  EXPECT_EQ(t.period(), 4u);
  EXPECT_EQ(t.current_batch(), 9u);
  EXPECT_FALSE(fed.lost);
  EXPECT_TRUE(fed.events[0].new_batch);
  // Before the lock (3 cycles) everything is batch 0; from the lock on, numbers are exact.
  for (std::size_t i = 12; i < seq.size(); ++i) {
    EXPECT_EQ(fed.events[i].batch, i / 4) << i;
    EXPECT_EQ(fed.events[i].new_batch, i % 4 == 0) << i;
  }
  EXPECT_TRUE(fed.events[11].renumbered);
  EXPECT_EQ(fed.events[11].batch, 2u);
  EXPECT_EQ(fed.events[5].batch, 0u);
}

TEST(BatchTrackerAuto, DifferentFirstStepIsBatchZero) {
  BatchTracker t = auto_tracker();
  const auto seq = concat({9, 8, 7}, repeat({1, 2, 3, 4}, 10));
  Fed fed = feed(t, seq);
  EXPECT_EQ(t.period(), 4u);
  EXPECT_EQ(t.current_batch(), 10u);
  for (std::size_t i = 16; i < seq.size(); ++i) {
    EXPECT_EQ(fed.events[i].batch, (i - 3) / 4 + 1) << i;
    EXPECT_EQ(fed.events[i].new_batch, (i - 3) % 4 == 0) << i;
  }
}

TEST(BatchTrackerAuto, ShortPrologueMergesIntoBatchZero) {
  BatchTracker t = auto_tracker();
  const auto seq = concat({9}, repeat({1, 2, 3, 4}, 10));  // an initial broadcast
  Fed fed = feed(t, seq);
  EXPECT_EQ(t.current_batch(), 9u);
  EXPECT_TRUE(fed.events.back().batch == 9u);
  EXPECT_TRUE(fed.events[seq.size() - 4].new_batch);
}

TEST(BatchTrackerAuto, GradientAccumulationStepPeriodWins) {
  // 4 micro-batches of {1,2} then the step's own call {3}: step period 9, micro-batch period 2.
  for (const std::vector<std::uint64_t>& tail : std::vector<std::vector<std::uint64_t>>{{3}, {3, 5, 6, 7, 8}}) {
    BatchTracker t = auto_tracker();
    const auto step = concat(repeat({1, 2}, 4), tail);
    const auto seq = repeat(step, 12);
    Fed fed = feed(t, seq);
    EXPECT_EQ(t.period(), step.size());
    EXPECT_EQ(t.current_batch(), 11u);
    // Once the step period is locked (3 steps), every later call carries its step's number.
    for (std::size_t i = 3 * step.size(); i < seq.size(); ++i) {
      EXPECT_EQ(fed.events[i].batch, i / step.size()) << i;
      EXPECT_EQ(fed.events[i].new_batch, i % step.size() == 0) << i;
    }
  }
}

TEST(BatchTrackerAuto, PeriodChangeIsRelearnt) {
  BatchTracker t = auto_tracker();
  const auto seq = concat(repeat({1, 2, 3, 4}, 10), repeat({5, 6, 7}, 10));
  Fed fed = feed(t, seq);
  EXPECT_EQ(t.period(), 3u);
  EXPECT_TRUE(fed.lost);
  EXPECT_EQ(t.current_batch(), 19u);
  for (std::size_t i = 1; i < seq.size(); ++i) EXPECT_GE(fed.events[i].batch, fed.events[i - 1].batch) << i;
  for (std::size_t i = 40 + 9; i < seq.size(); ++i) {
    EXPECT_EQ(fed.events[i].batch, 10 + (i - 40) / 3) << i;
    EXPECT_EQ(fed.events[i].new_batch, (i - 40) % 3 == 0) << i;
  }
}

TEST(BatchTrackerAuto, OccasionalExtraOrMissingCallIsNoise) {
  BatchTracker t = auto_tracker();
  auto seq = repeat({1, 2, 3, 4, 5}, 20);
  seq.insert(seq.begin() + 52, 99);  // an extra call inside step 10
  seq.erase(seq.begin() + 76);       // step 15 (at 76 after the insertion) misses its first call
  Fed fed = feed(t, seq);
  EXPECT_FALSE(fed.lost);
  EXPECT_EQ(t.period(), 5u);
  EXPECT_EQ(t.current_batch(), 19u);
  std::size_t starts = 0;
  for (std::size_t i = 15; i < seq.size(); ++i) {
    if (fed.events[i].new_batch) {
      ++starts;
      EXPECT_EQ(seq[i], i == 76 ? 2u : 1u) << i;  // without its first call, step 15 starts at its second
    }
  }
  EXPECT_EQ(starts, 17u);  // batches 3..19
}

// Feeds `counts` and returns settled() after each call.
std::vector<std::uint64_t> settled_after_each(BatchTracker& tracker, const std::vector<std::uint64_t>& counts) {
  std::vector<std::uint64_t> settled;
  for (std::uint64_t c : counts) {
    tracker.on_collective(call(c));
    settled.push_back(tracker.settled());
  }
  return settled;
}

TEST(BatchTrackerAuto, CallsBeforeThePeriodIsLearntAreNumberedWhenItIs) {
  BatchTracker t = auto_tracker();
  const auto seq = repeat({1, 2, 3, 4}, 10);
  for (std::size_t i = 0; i < seq.size(); ++i) {
    EXPECT_EQ(t.position(), i);
    t.on_collective(call(seq[i]));
    // Learnt with the third cycle's last call (11): nothing is settled before, everything from then on.
    EXPECT_EQ(t.settled(), i < 11 ? 0u : i + 1) << i;
    if (i == 11) {
      for (std::size_t j = 0; j <= 11; ++j) EXPECT_EQ(t.batch_of(j), j / 4) << j;  // batches 0, 1, 2
    }
  }
  for (std::size_t j = 0; j < seq.size(); ++j) EXPECT_EQ(t.batch_of(j), j / 4) << j;
}

TEST(BatchTrackerAuto, CallsBeforeThePeriodIsLearntAfterAPrologue) {
  {
    BatchTracker t = auto_tracker();  // a different first step: batch 0, the cycles 1, 2, 3 ...
    const auto seq = concat({9, 8, 7}, repeat({1, 2, 3, 4}, 5));
    const auto settled = settled_after_each(t, seq);
    EXPECT_EQ(settled[13], 0u);
    EXPECT_EQ(settled[14], 15u);
    for (std::size_t j = 0; j < 3; ++j) EXPECT_EQ(t.batch_of(j), 0u) << j;
    for (std::size_t j = 3; j < seq.size(); ++j) EXPECT_EQ(t.batch_of(j), (j - 3) / 4 + 1) << j;
  }
  {
    BatchTracker t = auto_tracker();  // an initial broadcast: merged into batch 0 with the first cycle
    const auto seq = concat({9}, repeat({1, 2, 3, 4}, 5));
    settled_after_each(t, seq);
    EXPECT_EQ(t.settled(), seq.size());
    for (std::size_t j = 0; j < 5; ++j) EXPECT_EQ(t.batch_of(j), 0u) << j;
    for (std::size_t j = 5; j < seq.size(); ++j) EXPECT_EQ(t.batch_of(j), (j - 1) / 4) << j;
  }
}

TEST(BatchTrackerAuto, CallsWhileAPeriodIsRelearntAreNumberedWhenItIs) {
  BatchTracker t = auto_tracker();
  // Batches 0-9 of 4 calls (0..39), then batches 10-19 of 3 calls (40..69).
  const auto seq = concat(repeat({1, 2, 3, 4}, 10), repeat({5, 6, 7}, 10));
  const auto settled = settled_after_each(t, seq);
  // Calls 40-42 are taken as noise while the old period is locked (settled, in batch 9); call 43 loses it.
  EXPECT_EQ(settled[42], 43u);
  std::size_t relearnt = 43;
  while (relearnt < seq.size() && settled[relearnt] == 43) ++relearnt;
  ASSERT_LT(relearnt, seq.size()) << "the new period is learnt";
  EXPECT_EQ(settled[relearnt], relearnt + 1);
  EXPECT_EQ(t.settled(), seq.size());
  for (std::size_t j = 43; j < seq.size(); ++j) EXPECT_EQ(t.batch_of(j), 10 + (j - 40) / 3) << j;
}

TEST(BatchTracker, OtherMarkersSettleEveryCallAsItIsFed) {
  for (const char* text : {"every:2", "collective:AllGather", "nvtx:^step"}) {
    StepMarker m;
    std::string error;
    ASSERT_TRUE(parse_step_marker(text, &m, &error)) << error;
    BatchTracker t(m);
    for (std::uint64_t i = 0; i < 10; ++i) {
      t.on_collective(call(1, i % 3 == 0 ? Op::kAllGather : Op::kAllReduce));
      EXPECT_EQ(t.settled(), i + 1) << text;
      EXPECT_EQ(t.position(), i + 1) << text;
    }
  }
}

TEST(BatchTrackerNvtx, MatchingRangePushStartsABatch) {
  StepMarker m;
  std::string error;
  ASSERT_TRUE(parse_step_marker("nvtx:^train_step", &m, &error)) << error;
  BatchTracker t(m);
  EXPECT_EQ(t.on_collective(call(1)).batch, 0u);  // prologue
  EXPECT_FALSE(t.on_range_push("forward").new_batch);
  BatchEvent e = t.on_range_push("train_step 0");
  EXPECT_TRUE(e.new_batch);
  EXPECT_EQ(e.batch, 0u);
  EXPECT_FALSE(t.on_collective(call(1)).new_batch);
  EXPECT_FALSE(t.on_range_push("my_train_step").new_batch);
  e = t.on_range_push("train_step 1");
  EXPECT_TRUE(e.new_batch);
  EXPECT_EQ(e.batch, 1u);
  EXPECT_EQ(t.on_collective(call(1)).batch, 1u);
}

TEST(BatchTrackerCollective, FirstMatchingCallAfterANonMatchingOne) {
  StepMarker m;
  std::string error;
  ASSERT_TRUE(parse_step_marker("collective:AllGather", &m, &error)) << error;
  BatchTracker t(m);
  EXPECT_FALSE(t.on_collective(call(1, Op::kBroadcast)).new_batch);
  BatchEvent e = t.on_collective(call(1, Op::kAllGather));
  EXPECT_TRUE(e.new_batch);
  EXPECT_EQ(e.batch, 0u);
  EXPECT_FALSE(t.on_collective(call(2, Op::kAllGather)).new_batch);  // consecutive: same batch
  EXPECT_FALSE(t.on_collective(call(2, Op::kReduceScatter)).new_batch);
  e = t.on_collective(call(1, Op::kAllGather));
  EXPECT_TRUE(e.new_batch);
  EXPECT_EQ(e.batch, 1u);
  EXPECT_FALSE(t.on_collective(call(3, Op::kAllReduce)).new_batch);
  EXPECT_EQ(t.current_batch(), 1u);
}

TEST(BatchTrackerEvery, CountsCallsOfTheFirstCommunicator) {
  StepMarker m;
  std::string error;
  ASSERT_TRUE(parse_step_marker("every:3", &m, &error)) << error;
  BatchTracker t(m);
  std::vector<std::uint64_t> starts;
  for (int i = 0; i < 12; ++i) {
    if (t.on_collective(call(1, Op::kAllReduce, 7)).new_batch) starts.push_back(t.current_batch());
    EXPECT_FALSE(t.on_collective(call(1, Op::kAllReduce, 8)).new_batch);  // another communicator
    EXPECT_EQ(t.current_batch(), static_cast<std::uint64_t>(i / 3));
  }
  EXPECT_EQ(starts, (std::vector<std::uint64_t>{0, 1, 2, 3}));
}

}  // namespace

TEST(BatchTrackerAutoOptimizer, AnOptimizerStepEndsTheBatchAndTheNextWorkStartsTheNext) {
  BatchTracker t = auto_tracker();
  // Step 0 before any optimizer kernel was seen: learning, nothing settled.
  t.on_collective(call(1));
  t.on_launch(false);
  t.on_collective(call(2));
  EXPECT_EQ(t.settled(), 0u);
  BatchEvent e = t.on_launch(true);  // the optimizer's first kernel: it ends batch 0
  EXPECT_TRUE(e.optimizer_steps);
  EXPECT_FALSE(e.new_batch);
  EXPECT_EQ(e.batch, 0u);
  EXPECT_TRUE(t.optimizer_steps());
  EXPECT_EQ(t.settled(), 2u) << "what auto knew of the calls before it: batch 0";
  EXPECT_EQ(t.batch_of(0), 0u);
  EXPECT_EQ(t.batch_of(1), 0u);
  EXPECT_FALSE(t.on_launch(true).new_batch) << "the same step's next optimizer kernel";
  // Step 1 starts with the next work that is not the optimizer's: here a call.
  e = t.on_collective(call(1));
  EXPECT_TRUE(e.new_batch);
  EXPECT_EQ(e.batch, 1u);
  EXPECT_FALSE(e.optimizer_steps);
  EXPECT_EQ(t.settled(), 3u) << "from now on every call is settled as it is fed";
  EXPECT_FALSE(t.on_launch(false).new_batch);
  EXPECT_FALSE(t.on_launch(true).new_batch);
  // Step 2 starts with a launch, before the next call (position 3): that call is batch 2.
  e = t.on_launch(false);
  EXPECT_TRUE(e.new_batch);
  EXPECT_EQ(e.batch, 2u);
  t.on_collective(call(2));
  EXPECT_EQ(t.batch_of(2), 1u);
  EXPECT_EQ(t.batch_of(3), 2u);
  EXPECT_EQ(t.period(), 0u) << "the calls' period is no longer learnt";
}

TEST(BatchTrackerAutoOptimizer, OtherMarkersIgnoreLaunches) {
  StepMarker m;
  ASSERT_TRUE(parse_step_marker("every:2", &m, nullptr));
  BatchTracker t(m);
  t.on_collective(call(1));
  EXPECT_FALSE(t.on_launch(true).new_batch);
  EXPECT_FALSE(t.on_launch(false).new_batch);
  EXPECT_FALSE(t.optimizer_steps());
  EXPECT_EQ(t.current_batch(), 0u);
}
