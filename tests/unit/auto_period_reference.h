// The auto period learner as it was before LagRuns (collectors/frames/lag_runs.h): every lag's run updated on every
// call, an O(max_period) pass. Kept as the reference the O(1) learner is compared with, call by call
// (tests/unit/auto_period_equivalence_test.cc): the same events, the same settled calls, the same batch_of.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <iterator>
#include <vector>

#include "collectors/frames/batch_tracker.h"

namespace trainscope::batch::reference {

class AutoTracker {
 public:
  explicit AutoTracker(const AutoOptions& options = {}) : options_(options) {
    options_.max_period = std::max<std::uint32_t>(options_.max_period, 1);
    options_.confirmations = std::max<std::uint32_t>(options_.confirmations, 2);
    history_.assign(static_cast<std::size_t>(options_.max_period) + 1, 0);
    run_.assign(static_cast<std::size_t>(options_.max_period) + 1, 0);
  }

  BatchEvent on_collective(const CallInfo& call) {
    const std::uint64_t n = calls_++;
    return auto_step(call_signature(call), n);
  }
  std::uint64_t current_batch() const { return batch_; }
  std::uint32_t period() const { return locked_period_; }
  std::uint64_t settled() const { return settled_; }
  std::uint64_t batch_of(std::uint64_t position) const {
    if (boundaries_.empty()) return batch_;
    auto after = std::upper_bound(boundaries_.begin(), boundaries_.end(), position,
                                  [](std::uint64_t p, const Boundary& b) { return p < b.position; });
    if (after == boundaries_.begin()) return boundaries_.front().batch;
    return std::prev(after)->batch;
  }

 private:
  struct Boundary {
    std::uint64_t position;
    std::uint64_t batch;
  };
  std::uint64_t hist_at(std::uint64_t position) const { return history_[position % history_.size()]; }
  void add_boundary(std::uint64_t position, std::uint64_t batch) {
    boundaries_.push_back({position, batch});
    if (boundaries_.size() > BatchTracker::kMaxBoundaries) boundaries_.pop_front();
  }

  BatchEvent auto_step(std::uint64_t sig, std::uint64_t n) {
    const std::uint64_t limit = std::min<std::uint64_t>(options_.max_period, n);
    const std::uint64_t c1 = options_.confirmations - 1;
    std::uint32_t best = 0;
    std::uint32_t best_longer = 0;
    for (std::uint64_t p = 1; p <= limit; ++p) {
      std::uint64_t& run = run_[p];
      run = (sig == hist_at(n - p)) ? run + 1 : 0;
      if (run != 0 && run >= c1 * p && run + p >= options_.min_confirm_calls) {
        if (best == 0 || run > run_[best]) best = static_cast<std::uint32_t>(p);
        if (p > locked_period_ && (best_longer == 0 || run > run_[best_longer])) {
          best_longer = static_cast<std::uint32_t>(p);
        }
      }
    }
    history_[n % history_.size()] = sig;

    BatchEvent event;
    if (n == 0) {
      boundaries_.push_back({0, 0});
      event.new_batch = true;
      event.batch = 0;
      return event;
    }
    if (locked_period_ != 0) {
      const std::uint32_t p = locked_period_;
      const std::uint32_t expected = phase_;
      std::int64_t matched = -1;
      if (sig == cycle_[expected]) {
        matched = expected;
      } else if (p > 1 && sig == cycle_[(expected + 1) % p]) {
        matched = (expected + 1) % p;
        ++cycle_misses_;
      } else {
        ++consecutive_misses_;
        ++cycle_misses_;
      }
      bool lost = consecutive_misses_ > options_.max_noise;
      if (matched >= 0) {
        consecutive_misses_ = 0;
        phase_ = static_cast<std::uint32_t>((matched + 1) % p);
        if (expected == 0 || matched == 0) {
          if (cycle_misses_ > options_.max_noise + p / 4) {
            lost = true;
          } else {
            cycle_misses_ = 0;
            ++batch_;
            add_boundary(n, batch_);
            event.new_batch = true;
          }
        }
      }
      if (lost) {
        locked_period_ = 0;
        event.new_batch = false;
        event.period_lost = true;
      } else if (best_longer != 0 && run_[best_longer] > run_[p]) {
        event.new_batch = lock(best_longer, n);
        event.renumbered = true;
      }
    } else if (best != 0) {
      event.new_batch = lock(best, n);
      event.renumbered = true;
    }
    if (locked_period_ != 0) settled_ = n + 1;
    event.batch = batch_;
    return event;
  }

  bool lock(std::uint32_t period, std::uint64_t n) {
    const std::uint64_t p = period;
    const std::uint64_t span_start = n + 1 - run_[p] - p;
    cycle_.assign(p, 0);
    for (std::uint64_t j = n + 1 - p; j <= n; ++j) cycle_[(j - span_start) % p] = hist_at(j);
    while (boundaries_.size() > 1 && boundaries_.back().position > span_start) boundaries_.pop_back();
    const Boundary base = boundaries_.back();
    std::uint64_t batch = base.batch;
    std::uint64_t first_start = span_start;
    if (span_start > base.position &&
        static_cast<double>(span_start - base.position) < options_.prologue_fraction * static_cast<double>(p)) {
      first_start = span_start + p;
    }
    if (first_start <= base.position) first_start += ((base.position - first_start) / p + 1) * p;
    bool starts_here = false;
    if (first_start <= n) {
      std::uint64_t start = first_start;
      for (; start <= n; start += p) add_boundary(start, ++batch);
      starts_here = start - p == n;
    }
    batch_ = batch;
    locked_period_ = period;
    phase_ = static_cast<std::uint32_t>((n - span_start + 1) % p);
    consecutive_misses_ = 0;
    cycle_misses_ = 0;
    return starts_here;
  }

  AutoOptions options_;
  std::uint64_t batch_ = 0;
  std::uint64_t calls_ = 0;
  std::uint64_t settled_ = 0;
  std::vector<std::uint64_t> history_;
  std::vector<std::uint64_t> run_;
  std::uint32_t locked_period_ = 0;
  std::vector<std::uint64_t> cycle_;
  std::uint32_t phase_ = 0;
  std::uint32_t consecutive_misses_ = 0;
  std::uint32_t cycle_misses_ = 0;
  std::deque<Boundary> boundaries_;
};

}  // namespace trainscope::batch::reference
