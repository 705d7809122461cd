// HeldNonfiniteStops: under a loss scaler, TRAINSCOPE_ON_NONFINITE=abort stops on a batch's inf/nan only once its
// step was not skipped.
#include "collectors/frames/held_nonfinite_stops.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace {

using trainscope::frames::HeldNonfiniteStops;
using trainscope::frames::NonfiniteBatch;

NonfiniteBatch held_batch(std::uint64_t batch) { return {batch, "head.proj Linear (backward)", "grad_input[0]"}; }

TEST(HeldNonfiniteStops, ASkippedStepReleasesItsBatch) {
  HeldNonfiniteStops stops;
  stops.hold(held_batch(2));
  stops.step_skipped(2);
  EXPECT_EQ(stops.holding(), 0u);
  EXPECT_FALSE(stops.batch_began(9).has_value());
}

TEST(HeldNonfiniteStops, AStepNotSkippedStopsTwoBatchesLaterNotBefore) {
  HeldNonfiniteStops stops;
  stops.hold(held_batch(2));
  EXPECT_FALSE(stops.batch_began(2).has_value());
  EXPECT_FALSE(stops.batch_began(3).has_value());  // a fused optimizer's skip on a GPU may come during batch 3
  const auto applied = stops.batch_began(4);
  ASSERT_TRUE(applied.has_value());
  EXPECT_EQ(applied->batch, 2u);
  EXPECT_EQ(applied->frame_name, "head.proj Linear (backward)");
  EXPECT_EQ(applied->label, "grad_input[0]");
}

TEST(HeldNonfiniteStops, TheOldestBatchNotSkippedIsNamedAndAnotherSkipDoesNotReleaseIt) {
  HeldNonfiniteStops stops;
  stops.hold(held_batch(3));
  stops.hold(held_batch(5));
  stops.hold(held_batch(3));  // held once
  EXPECT_EQ(stops.holding(), 2u);
  stops.step_skipped(5);
  stops.step_skipped(4);
  const auto applied = stops.batch_began(7);
  ASSERT_TRUE(applied.has_value());
  EXPECT_EQ(applied->batch, 3u);
}

}  // namespace
