// The counter clock, driven by a simulated counter: a 3 GHz tick count that advances by a few ticks per reading, and a
// CLOCK_REALTIME that follows it (or steps, or drifts) as the test says.
#include "shim/counter_clock.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace trainscope::shim {

struct CounterClockTestPeer {
  template <typename Source>
  static void hold_anchor(CounterClock<Source>& clock) {
    clock.seq_.fetch_add(1);
  }
};

namespace {

struct FakeSource {
  static inline uint64_t ticks_now = 0;
  static inline uint64_t ticks_per_read = 30;  // ~10 ns at 3 GHz
  // Nanoseconds per tick as a fraction, in integers: a double cannot hold 2023's nanoseconds to the nanosecond.
  static inline uint64_t ns_per_tick_num = 1;
  static inline uint64_t ns_per_tick_den = 3;
  static inline int64_t realtime_offset = 1'700'000'000'000'000'000;
  static inline uint64_t stall_after_realtime = 0;  // ticks that pass while clock_gettime runs (a preemption)
  static inline int realtime_reads = 0;

  static uint64_t ticks() { return ticks_now += ticks_per_read; }
  static uint64_t realtime() {
    ++realtime_reads;
    const uint64_t ns = truth();
    ticks_now += stall_after_realtime;
    return ns;
  }
  static uint64_t truth() {
    return static_cast<uint64_t>(realtime_offset + static_cast<int64_t>(static_cast<unsigned __int128>(ticks_now) *
                                                                        ns_per_tick_num / ns_per_tick_den));
  }
  static void reset() {
    ticks_now = 1000;
    ticks_per_read = 30;
    ns_per_tick_num = 1;
    ns_per_tick_den = 3;
    realtime_offset = 1'700'000'000'000'000'000;
    stall_after_realtime = 0;
    realtime_reads = 0;
  }
};

using Clock = CounterClock<FakeSource>;

class CounterClockTest : public ::testing::Test {
 protected:
  void SetUp() override { FakeSource::reset(); }
  // Moves the simulated counter on by `ticks` and reads the clock.
  static uint64_t read_after(Clock& clock, uint64_t ticks) {
    FakeSource::ticks_now += ticks;
    return clock.now();
  }
  static int64_t error_of(uint64_t reading) {
    return static_cast<int64_t>(reading) - static_cast<int64_t>(FakeSource::truth());
  }
  // Reads until the clock has its first rate.
  static void calibrate(Clock& clock) {
    clock.enable();
    clock.now();
    read_after(clock, Clock::kFirstBaseline + 1000);
    ASSERT_TRUE(clock.calibrated());
  }
};

TEST_F(CounterClockTest, ANotEnabledClockIsClockGettimeOnEveryReading) {
  Clock clock;
  for (int i = 0; i < 10; ++i) read_after(clock, Clock::kFirstBaseline);
  EXPECT_FALSE(clock.calibrated());
  EXPECT_EQ(FakeSource::realtime_reads, 10);
}

TEST_F(CounterClockTest, TheRateIsMeasuredOverTheFirstBaselineBeforeTheCounterIsUsed) {
  Clock clock;
  clock.enable();
  clock.now();
  read_after(clock, Clock::kFirstBaseline / 2);
  EXPECT_FALSE(clock.calibrated()) << "half the baseline is not enough";
  read_after(clock, Clock::kFirstBaseline);
  EXPECT_TRUE(clock.calibrated());
  const int reads = FakeSource::realtime_reads;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t reading = read_after(clock, 3000);  // 1 us apart
    ASSERT_LE(std::abs(error_of(reading)), 20) << "reading " << i;
  }
  EXPECT_EQ(FakeSource::realtime_reads, reads) << "the counter alone answers between anchors";
}

TEST_F(CounterClockTest, AStaleAnchorIsMovedByTheReaderThatFindsIt) {
  Clock clock;
  calibrate(clock);
  int reads = FakeSource::realtime_reads;
  read_after(clock, Clock::kAnchorTicks / 2);
  EXPECT_EQ(FakeSource::realtime_reads, reads);
  read_after(clock, Clock::kAnchorTicks);
  EXPECT_EQ(FakeSource::realtime_reads, reads + 1) << "past the anchor period the reading is clock_gettime's";
  reads = FakeSource::realtime_reads;
  EXPECT_LE(std::abs(error_of(read_after(clock, 3000))), 20);
  EXPECT_EQ(FakeSource::realtime_reads, reads) << "and the anchor moved there";
}

TEST_F(CounterClockTest, AReadingAfterALongIdleIsClockGettimesNotAnOverflowedProduct) {
  Clock clock;
  calibrate(clock);
  // An hour at 3 GHz: ticks * rate would overflow 64 bits.
  const uint64_t reading = read_after(clock, uint64_t{3'000'000'000} * 3600);
  EXPECT_LE(std::abs(error_of(reading)), 20);
}

TEST_F(CounterClockTest, AStepOfClockRealtimeIsFollowedAtTheNextAnchor) {
  Clock clock;
  calibrate(clock);
  FakeSource::realtime_offset -= 10'000'000'000;  // settimeofday: 10 s back
  read_after(clock, Clock::kAnchorTicks);         // the anchor sees the step
  for (int i = 0; i < 100; ++i) ASSERT_LE(std::abs(error_of(read_after(clock, 30000))), 20) << "reading " << i;
  // And the rate, measured again from the step on, is still the counter's.
  read_after(clock, Clock::kAnchorTicks);
  EXPECT_LE(std::abs(error_of(read_after(clock, Clock::kAnchorTicks / 2))), 50);
}

TEST_F(CounterClockTest, APairInterruptedBetweenItsReadingsIsNotUsed) {
  Clock clock;
  clock.enable();
  clock.now();
  FakeSource::stall_after_realtime = Clock::kPairTicks * 4;
  for (int i = 0; i < 4; ++i) read_after(clock, Clock::kFirstBaseline);
  EXPECT_FALSE(clock.calibrated()) << "every pair was interrupted";
  FakeSource::stall_after_realtime = 0;
  read_after(clock, 1000);
  EXPECT_TRUE(clock.calibrated());
  EXPECT_LE(std::abs(error_of(read_after(clock, 3000))), 20);
}

TEST_F(CounterClockTest, TheRateFollowsASlewOfClockRealtime) {
  Clock clock;
  calibrate(clock);
  // NTP slews CLOCK_REALTIME by 500 ppm (its most): the prediction errs by the slew over one anchor period only once
  // the origin has moved past the change.
  // After a long run at the counter's own rate: a rate measured from the start would keep 4/5 of the old rate.
  for (uint64_t t = 0; t < 20 * Clock::kOriginTicks; t += Clock::kAnchorTicks) read_after(clock, Clock::kAnchorTicks);
  const uint64_t before = FakeSource::truth();
  FakeSource::ns_per_tick_num = 10005;
  FakeSource::ns_per_tick_den = 30000;
  FakeSource::realtime_offset += static_cast<int64_t>(before) - static_cast<int64_t>(FakeSource::truth());
  for (uint64_t t = 0; t < 5 * Clock::kOriginTicks; t += Clock::kAnchorTicks) read_after(clock, Clock::kAnchorTicks);
  const uint64_t half_period_ns = static_cast<uint64_t>(static_cast<double>(Clock::kAnchorTicks / 2) / 3.0);
  EXPECT_LE(std::abs(error_of(read_after(clock, Clock::kAnchorTicks / 2))),
            static_cast<int64_t>(static_cast<double>(half_period_ns) * 0.0005 / 10))
      << "within a tenth of the slew's error over half a period";
}

TEST_F(CounterClockTest, AForkDuringAnAnchorLeavesTheChildAClockThatWorks) {
  Clock clock;
  calibrate(clock);
  // The child of a fork made while another thread held the anchor: seq is odd, no thread will make it even.
  CounterClockTestPeer::hold_anchor(clock);
  int reads = FakeSource::realtime_reads;
  read_after(clock, 3000);
  EXPECT_EQ(FakeSource::realtime_reads, reads + 1) << "while the anchor is held, readers take clock_gettime";
  clock.after_fork_in_child();
  read_after(clock, Clock::kAnchorTicks);
  reads = FakeSource::realtime_reads;
  EXPECT_LE(std::abs(error_of(read_after(clock, 3000))), 20);
  EXPECT_EQ(FakeSource::realtime_reads, reads);
}

}  // namespace
}  // namespace trainscope::shim
