// HeldNonfiniteStops: under a loss scaler, TRAINSCOPE_ON_NONFINITE=abort stops on a batch's inf/nan only once a step
// was applied over it and none of its batch was skipped.
#include "collectors/frames/held_nonfinite_stops.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace {

using trainscope::frames::HeldNonfiniteStops;
using trainscope::frames::NonfiniteBatch;

NonfiniteBatch held_batch(std::uint64_t batch) { return {batch, "head.proj Linear (backward)", "grad_input[0]"}; }

TEST(HeldNonfiniteStops, ASkippedStepReleasesItsBatchAndTheOnesBefore) {
  HeldNonfiniteStops stops;
  stops.hold(held_batch(2));
  stops.hold(held_batch(3));
  stops.hold(held_batch(5));
  stops.step_skipped(3);  // gradient accumulation: the step of batch 3 covered batch 2 too
  EXPECT_EQ(stops.holding(), 1u);
  stops.step_skipped(5);
  EXPECT_EQ(stops.holding(), 0u);
  EXPECT_FALSE(stops.batch_began(9).has_value());
}

TEST(HeldNonfiniteStops, NothingIsJudgedBeforeAStepSaysWhatBecameOfIt) {
  HeldNonfiniteStops stops;
  stops.hold(held_batch(2));
  EXPECT_FALSE(stops.batch_began(3).has_value());
  EXPECT_FALSE(stops.batch_began(40).has_value());  // accumulating gradients over many batches
  EXPECT_EQ(stops.holding(), 1u);
}

TEST(HeldNonfiniteStops, AnAppliedStepStopsOnceTheWindowMovedPastItsBatch) {
  HeldNonfiniteStops stops;
  stops.hold(held_batch(2));
  stops.step_applied(4);
  EXPECT_FALSE(stops.batch_began(4).has_value());  // another optimizer's step of batch 4 may still be skipped
  const auto applied = stops.batch_began(5);
  ASSERT_TRUE(applied.has_value());
  EXPECT_EQ(applied->batch, 2u);
  EXPECT_EQ(applied->frame_name, "head.proj Linear (backward)");
  EXPECT_EQ(applied->label, "grad_input[0]");
}

TEST(HeldNonfiniteStops, AnotherOptimizersSkipInTheSameBatchReleasesIt) {
  HeldNonfiniteStops stops;
  stops.hold(held_batch(2));
  stops.step_applied(2);
  stops.step_skipped(2);
  EXPECT_FALSE(stops.batch_began(3).has_value());
  EXPECT_EQ(stops.holding(), 0u);
}

TEST(HeldNonfiniteStops, AStepCoversOnlyTheBatchesUpToItsOwn) {
  HeldNonfiniteStops stops;
  stops.hold(held_batch(3));
  stops.hold(held_batch(6));
  stops.step_applied(4);  // told late: batch 6 was already held
  const auto applied = stops.batch_began(7);
  ASSERT_TRUE(applied.has_value());
  EXPECT_EQ(applied->batch, 3u);
  stops.step_skipped(3);
  EXPECT_FALSE(stops.batch_began(7).has_value());  // 6 waits for its own step
  EXPECT_EQ(stops.holding(), 1u);
}

}  // namespace
