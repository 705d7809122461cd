// The shim's wall clock: CLOCK_REALTIME in nanoseconds, read from the CPU's time-stamp counter where the kernel itself
// keeps time with that counter. Every recorded call reads the clock twice (start and end), and on a virtual machine
// clock_gettime costs ~21 ns, a quarter of the hook; the counter costs ~9.
//
// The conversion (an anchor and a rate, ns = anchor_ns + (ticks * rate) >> 32) is kept by whichever thread finds it
// stale, as the vDSO keeps its own: a reader that finds the anchor older than kAnchorTicks, or being rewritten, reads
// CLOCK_REALTIME itself and, if no other thread is at it, re-anchors on that reading. So the clock never waits, its
// error is bounded by the rate's error over one anchor period (microseconds), and a step of CLOCK_REALTIME (NTP,
// settimeofday) is followed at the next anchor. Until the rate is measured over kFirstBaseline ticks (tens of
// milliseconds after the start), and on a machine whose kernel does not use the counter, every reading is
// clock_gettime's. Times may step back by the rate's error at an anchor, as CLOCK_REALTIME may: readers of the
// recorder already treat an end before a start as unknown.
//
// Freestanding: a template over its two sources so the unit tests drive it with counters of their own.
#pragma once

#include <atomic>
#include <cstdint>

#include "base/thread_fence.h"

namespace trainscope::shim {

template <typename Source>
class CounterClock {
 public:
  // Between anchors: ~0.13-0.5 s at 1-4 GHz. Also bounds ticks * rate below 2^64 (rates below 2^34: above 250 MHz).
  static constexpr uint64_t kAnchorTicks = uint64_t{1} << 29;
  // The first rate is measured over at least this many ticks (a pair's error of ~1 us is then ~1e-5 of it).
  static constexpr uint64_t kFirstBaseline = uint64_t{1} << 27;
  // A pair (ticks, CLOCK_REALTIME) whose two tick readings are further apart than this was interrupted: not used.
  static constexpr uint64_t kPairTicks = uint64_t{1} << 14;
  // The rate is measured from an origin that moves every kOriginTicks (~4-17 s), so that it follows NTP's slewing.
  static constexpr uint64_t kOriginTicks = uint64_t{1} << 34;
  // A reading this far from the prediction means CLOCK_REALTIME stepped: the rate's measurement starts again.
  static constexpr uint64_t kStepNs = 1000000;
  static constexpr uint64_t kMaxRate = uint64_t{1} << 34;

  // The counter may be used: called once it is known to be invariant and the kernel's own clock source.
  void enable() { enabled_.store(true, std::memory_order_relaxed); }
  bool calibrated() const { return calibrated_.load(std::memory_order_relaxed); }

  uint64_t now() {
    if (calibrated_.load(std::memory_order_relaxed)) {
      const uint32_t seq = seq_.load(std::memory_order_acquire);
      const uint64_t ticks = Source::ticks();
      const uint64_t base_ticks = base_ticks_.load(std::memory_order_relaxed);
      const uint64_t base_ns = base_ns_.load(std::memory_order_relaxed);
      const uint64_t rate = rate_.load(std::memory_order_relaxed);
      TS_THREAD_FENCE(__ATOMIC_ACQUIRE);  // the fields' loads before seq_'s second load
      const uint64_t elapsed = ticks - base_ticks;
      if ((seq & 1) == 0 && seq_.load(std::memory_order_relaxed) == seq && elapsed < kAnchorTicks)
        return base_ns + ((elapsed * rate) >> 32);
    }
    return anchor();
  }

  // In a forked child: a thread of the parent may have been re-anchoring, and is not there to finish.
  void after_fork_in_child() {
    const uint32_t seq = seq_.load(std::memory_order_relaxed);
    if (seq & 1) seq_.store(seq + 1, std::memory_order_release);
  }

 private:
  friend struct CounterClockTestPeer;

  // Reads CLOCK_REALTIME and, when this thread can take the anchor, moves it (and measures the rate) there.
  uint64_t anchor() {
    const uint64_t before = Source::ticks();
    const uint64_t ns = Source::realtime();
    const uint64_t after = Source::ticks();
    if (!enabled_.load(std::memory_order_relaxed) || after - before > kPairTicks) return ns;
    uint32_t seq = seq_.load(std::memory_order_relaxed);
    if ((seq & 1) != 0 || !seq_.compare_exchange_strong(seq, seq + 1, std::memory_order_acquire)) return ns;
    const uint64_t ticks = before + (after - before) / 2;
    update(ticks, ns);
    seq_.store(seq + 2, std::memory_order_release);
    return ns;
  }

  // Holding the anchor (seq odd).
  void update(uint64_t ticks, uint64_t ns) {
    const uint64_t origin_ticks = origin_ticks_.load(std::memory_order_relaxed);
    const uint64_t origin_ns = origin_ns_.load(std::memory_order_relaxed);
    if (origin_ticks == 0 || ticks < origin_ticks || ns < origin_ns) {
      restart(ticks, ns);
      return;
    }
    if (calibrated_.load(std::memory_order_relaxed)) {
      const double predicted = static_cast<double>(base_ns_.load(std::memory_order_relaxed)) +
                               static_cast<double>(ticks - base_ticks_.load(std::memory_order_relaxed)) *
                                   static_cast<double>(rate_.load(std::memory_order_relaxed)) / 4294967296.0;
      const double off = predicted - static_cast<double>(ns);
      if (off > static_cast<double>(kStepNs) || off < -static_cast<double>(kStepNs)) {
        restart(ticks, ns);  // the rate measured so far stays in use: it is the counter's, not the step's
        set_base(ticks, ns);
        return;
      }
    } else if (ticks - origin_ticks < kFirstBaseline) {
      return;
    }
    const double rate = static_cast<double>(ns - origin_ns) * 4294967296.0 / static_cast<double>(ticks - origin_ticks);
    if (!(rate >= 1.0 && rate < static_cast<double>(kMaxRate))) {
      restart(ticks, ns);
      return;
    }
    rate_.store(static_cast<uint64_t>(rate), std::memory_order_relaxed);
    set_base(ticks, ns);
    calibrated_.store(true, std::memory_order_relaxed);
    // Two origins, the older used: the rate is always measured over kOriginTicks to twice that.
    if (ticks - origin_ticks >= 2 * kOriginTicks) {
      origin_ticks_.store(next_origin_ticks_.load(std::memory_order_relaxed), std::memory_order_relaxed);
      origin_ns_.store(next_origin_ns_.load(std::memory_order_relaxed), std::memory_order_relaxed);
      next_origin_ticks_.store(ticks, std::memory_order_relaxed);
      next_origin_ns_.store(ns, std::memory_order_relaxed);
    } else if (ticks - origin_ticks >= kOriginTicks &&
               next_origin_ticks_.load(std::memory_order_relaxed) <= origin_ticks) {
      next_origin_ticks_.store(ticks, std::memory_order_relaxed);
      next_origin_ns_.store(ns, std::memory_order_relaxed);
    }
  }

  void restart(uint64_t ticks, uint64_t ns) {
    origin_ticks_.store(ticks, std::memory_order_relaxed);
    origin_ns_.store(ns, std::memory_order_relaxed);
    next_origin_ticks_.store(ticks, std::memory_order_relaxed);
    next_origin_ns_.store(ns, std::memory_order_relaxed);
  }

  void set_base(uint64_t ticks, uint64_t ns) {
    base_ticks_.store(ticks, std::memory_order_relaxed);
    base_ns_.store(ns, std::memory_order_relaxed);
  }

  std::atomic<uint32_t> seq_{0};  // odd while a thread moves the anchor
  std::atomic<bool> enabled_{false};
  std::atomic<bool> calibrated_{false};
  std::atomic<uint64_t> base_ticks_{0};
  std::atomic<uint64_t> base_ns_{0};
  std::atomic<uint64_t> rate_{0};  // nanoseconds per tick, times 2^32
  std::atomic<uint64_t> origin_ticks_{0};
  std::atomic<uint64_t> origin_ns_{0};
  std::atomic<uint64_t> next_origin_ticks_{0};
  std::atomic<uint64_t> next_origin_ns_{0};
};

}  // namespace trainscope::shim
