// The runs of a call stream at each lag, in O(1) amortised work per call: what the auto step marker learns the
// period from (batch_tracker.h, "auto").
//
// For a lag p, run(p) is the number of consecutive latest calls whose signature equals the one p calls earlier
// (sig[n] == sig[n - p]). Keeping run(p) for every p up to the window (4096) costs a pass over the window per call;
// but a lag can only ever be a confirmed period once its run is long (the caller's confirmation needs about twice
// the lag), and a long run at lag p means the last calls occurred p calls earlier too. So:
//   - the small lags (1..small_lags, 32) are kept as before, one comparison each per call;
//   - a larger lag is tracked once found from where the last `gram` calls (64: no more than any larger lag's
//     shortest confirmation) occurred before: every call's gram (the hash of the last `gram` signatures) is chained
//     to the previous calls with the same gram (a fixed table of chain heads, as zlib's deflate finds matches), and
//     the latest `candidates` earlier occurrences at larger lags within the window are the lags tried at this call;
//   - a lag found this way that is not tracked yet gets its run from the history: the longest common suffix of the
//     stream and the stream p calls earlier, by binary search on prefix hashes (modulo 2^61 - 1);
//   - a tracked lag whose call no longer matches is dropped (its run is 0), unless it is pinned (the locked period,
//     whose run the caller compares every call).
// The runs of small and tracked lags are exact. A larger lag is missed only when each of the last `gram` calls of
// its cycle occurs more than `candidates` times in the window at smaller larger lags, at every call of its run (a
// cycle made of one long block repeated), or when the tracked set is full (the shortest run makes way). The
// reference that keeps every lag's run (tests/unit/auto_period_reference.h) gives the same batches on every stream
// the tests generate.
//
// work() counts the steps of every loop (lags updated, chain links followed, hash probes), for the test that the
// work per call does not grow with the window.
#pragma once

#include <cstdint>
#include <vector>

namespace trainscope::batch {

class LagRuns {
 public:
  // Lags 1..max_lag; lags 1..small_lags kept every call; larger ones found by grams of `gram` >= 1 calls; the run
  // of a lag found late is read from the last `history` calls at most.
  LagRuns(std::uint32_t max_lag, std::uint32_t small_lags, std::uint32_t gram, std::uint64_t history);

  // The signature of call `n` (0, 1, 2 ... in order).
  void feed(std::uint64_t signature, std::uint64_t n);

  // f(lag, run) for every lag with a run: the small lags and the tracked ones, in no particular order.
  template <typename F>
  void for_each_run(F f) const {
    for (std::uint32_t lag = 1; lag < small_starts_.size(); ++lag) {
      if (calls_ > small_starts_[lag]) f(lag, calls_ - small_starts_[lag]);
    }
    for (const Tracked& t : tracked_) {
      if (calls_ > t.start) f(t.lag, calls_ - t.start);
    }
  }
  std::uint64_t run(std::uint32_t lag) const;  // 0 when not tracked

  // A pinned lag stays tracked with its exact run (0 after a mismatch, then counting again); at most one.
  void pin(std::uint32_t lag);
  void unpin();

  // The signature of call `position`, one of the last `history` calls.
  std::uint64_t signature_at(std::uint64_t position) const { return signatures_[position & ring_mask_]; }

  std::uint64_t work() const { return work_; }
  std::size_t tracked_count() const { return tracked_.size(); }

  static constexpr std::uint32_t kCandidates = 8;   // earlier occurrences of a gram tried per call
  static constexpr std::uint32_t kChainSteps = 32;  // chain links followed per call at most
  static constexpr std::size_t kMaxTracked = 64;

 private:
  std::uint64_t prefix(std::int64_t position) const;  // hash of calls 0 .. position; 0 for position -1
  std::uint64_t segment(std::uint64_t first, std::uint64_t last) const;  // hash of calls first .. last
  std::uint64_t common_suffix(std::uint64_t n, std::uint32_t lag);       // calls equal at `lag`, ending at n
  void track(std::uint32_t lag, std::uint64_t start);

  struct Tracked {
    std::uint32_t lag;
    std::uint64_t start;  // the run covers calls start .. the latest (0 when start is past the latest)
  };

  std::uint32_t max_lag_;
  std::uint32_t small_lags_;
  std::uint32_t gram_;
  std::uint64_t ring_mask_;
  std::uint64_t calls_ = 0;
  std::vector<std::uint64_t> signatures_;    // ring
  std::vector<std::uint64_t> prefixes_;      // ring: prefix(position)
  std::vector<std::uint64_t> powers_;        // base^k mod 2^61 - 1, k < ring size
  std::vector<std::uint64_t> chain_;         // ring: the previous call + 1 with the same gram bucket, 0: none
  std::vector<std::uint64_t> heads_;         // gram bucket -> the latest call + 1 with it, 0: none
  std::vector<std::uint64_t> small_starts_;  // lag 1..small_lags_ -> its run's first call
  std::vector<Tracked> tracked_;
  std::vector<std::int32_t> index_of_;  // lag -> index in tracked_, -1
  std::uint32_t pinned_ = 0;
  std::uint64_t work_ = 0;
};

}  // namespace trainscope::batch
