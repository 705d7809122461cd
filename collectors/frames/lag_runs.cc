// The runs of a call stream at its tracked lags (see lag_runs.h).
#include "collectors/frames/lag_runs.h"

#include <algorithm>

namespace trainscope::batch {
namespace {

// Polynomial hashes modulo the Mersenne prime 2^61 - 1: no structured input (Thue-Morse strings break hashes
// modulo 2^64) makes two different call sequences collide more often than by chance.
constexpr std::uint64_t kModulus = (std::uint64_t{1} << 61) - 1;
constexpr std::uint64_t kBase = 0x1f3a5c7e9b2d4f61ull % kModulus;

std::uint64_t mul_mod(std::uint64_t a, std::uint64_t b) {
  const unsigned __int128 product = static_cast<unsigned __int128>(a) * b;
  const std::uint64_t folded =
      static_cast<std::uint64_t>(product & kModulus) + static_cast<std::uint64_t>(product >> 61);
  return folded >= kModulus ? folded - kModulus : folded;
}

std::uint64_t add_mod(std::uint64_t a, std::uint64_t b) {
  const std::uint64_t sum = a + b;
  return sum >= kModulus ? sum - kModulus : sum;
}

std::uint64_t sub_mod(std::uint64_t a, std::uint64_t b) { return a >= b ? a - b : a + kModulus - b; }

std::uint64_t power_of_two_at_least(std::uint64_t n) {
  std::uint64_t size = 1;
  while (size < n) size <<= 1;
  return size;
}

}  // namespace

LagRuns::LagRuns(std::uint32_t max_lag, std::uint32_t small_lags, std::uint32_t gram, std::uint64_t history)
    : max_lag_(std::max<std::uint32_t>(max_lag, 1)),
      small_lags_(std::min(small_lags, max_lag_)),
      gram_(std::max<std::uint32_t>(gram, 1)) {
  small_starts_.assign(static_cast<std::size_t>(small_lags_) + 1, 0);
  // The grams of every lag's candidates, and the prefix before each, must still be in the ring.
  const std::uint64_t size = power_of_two_at_least(std::max<std::uint64_t>(history, max_lag_ + gram_ + 2));
  ring_mask_ = size - 1;
  signatures_.assign(size, 0);
  prefixes_.assign(size, 0);
  chain_.assign(size, 0);
  heads_.assign(size, 0);
  powers_.resize(size);
  powers_[0] = 1;
  for (std::uint64_t k = 1; k < size; ++k) powers_[k] = mul_mod(powers_[k - 1], kBase);
  index_of_.assign(static_cast<std::size_t>(max_lag_) + 1, -1);
  tracked_.reserve(kMaxTracked);
}

std::uint64_t LagRuns::prefix(std::int64_t position) const {
  return position < 0 ? 0 : prefixes_[static_cast<std::uint64_t>(position) & ring_mask_];
}

std::uint64_t LagRuns::segment(std::uint64_t first, std::uint64_t last) const {
  return sub_mod(prefix(static_cast<std::int64_t>(last)),
                 mul_mod(prefix(static_cast<std::int64_t>(first) - 1), powers_[last - first + 1]));
}

std::uint64_t LagRuns::run(std::uint32_t lag) const {
  if (lag == 0 || lag > max_lag_) return 0;
  const std::uint64_t start = lag <= small_lags_   ? small_starts_[lag]
                              : index_of_[lag] < 0 ? calls_
                                                   : tracked_[static_cast<std::size_t>(index_of_[lag])].start;
  return calls_ > start ? calls_ - start : 0;
}

// The largest r with calls n-r+1 .. n equal to calls n-lag-r+1 .. n-lag, as far back as the ring holds (the prefix
// before the earlier segment included). The caller knows r >= gram_.
std::uint64_t LagRuns::common_suffix(std::uint64_t n, std::uint32_t lag) {
  const std::uint64_t oldest = n + 1 > ring_mask_ + 1 ? n + 1 - (ring_mask_ + 1) : 0;  // the oldest call held
  // r <= n - lag + 1 (the earlier segment starts at call 0 or later), and its prefix at oldest or later.
  std::uint64_t most = n - lag + 1;
  if (oldest > 0) most = std::min<std::uint64_t>(most, n - lag - oldest);
  auto equal = [&](std::uint64_t r) {
    ++work_;
    return segment(n - r + 1, n) == segment(n - lag - r + 1, n - lag);
  };
  std::uint64_t good = std::min<std::uint64_t>(gram_, most);
  if (good == most || !equal(good + 1)) return good;
  // Galloping, then bisection: O(log r) probes.
  std::uint64_t step = 2;
  std::uint64_t bad = most + 1;
  ++good;
  while (good < most) {
    const std::uint64_t probe = std::min<std::uint64_t>(most, good + step);
    if (equal(probe)) {
      good = probe;
      step <<= 1;
    } else {
      bad = probe;
      break;
    }
  }
  while (bad - good > 1) {
    const std::uint64_t middle = good + (bad - good) / 2;
    if (equal(middle)) {
      good = middle;
    } else {
      bad = middle;
    }
  }
  return good;
}

void LagRuns::track(std::uint32_t lag, std::uint64_t start) {
  if (tracked_.size() >= kMaxTracked) {
    // The shortest run (the latest start) makes way; never the pinned lag.
    std::size_t shortest = tracked_.size();
    for (std::size_t i = 0; i < tracked_.size(); ++i) {
      ++work_;
      if (tracked_[i].lag == pinned_) continue;
      if (shortest == tracked_.size() || tracked_[i].start > tracked_[shortest].start ||
          (tracked_[i].start == tracked_[shortest].start && tracked_[i].lag > tracked_[shortest].lag)) {
        shortest = i;
      }
    }
    if (shortest == tracked_.size() || tracked_[shortest].start <= start) return;  // every one is longer
    index_of_[tracked_[shortest].lag] = -1;
    tracked_[shortest] = tracked_.back();
    index_of_[tracked_[shortest].lag] = static_cast<std::int32_t>(shortest);
    tracked_.pop_back();
  }
  index_of_[lag] = static_cast<std::int32_t>(tracked_.size());
  tracked_.push_back({lag, start});
}

void LagRuns::pin(std::uint32_t lag) {
  if (lag <= small_lags_ || lag > max_lag_) return;  // a small lag's run is always kept
  pinned_ = lag;
  if (index_of_[lag] < 0) {
    // Not tracked: its run is under gram_ calls. Count it from the history (at most gram_ comparisons).
    std::uint64_t start = calls_;
    while (start > lag && start > calls_ - std::min<std::uint64_t>(calls_, gram_) &&
           signature_at(start - 1) == signature_at(start - 1 - lag)) {
      ++work_;
      --start;
    }
    track(lag, start);
  }
}

void LagRuns::unpin() { pinned_ = 0; }

void LagRuns::feed(std::uint64_t signature, std::uint64_t n) {
  calls_ = n + 1;
  const std::uint64_t slot = n & ring_mask_;
  signatures_[slot] = signature;
  const std::uint64_t symbol = (signature % kModulus) + 1;  // never 0: a run of zeros hashes like a shorter one
  prefixes_[slot] = add_mod(mul_mod(prefix(static_cast<std::int64_t>(n) - 1), kBase), symbol);

  // Every lag's run: a call that matches extends it; one that does not ends it (a tracked lag is dropped).
  for (std::uint32_t lag = 1; lag <= small_lags_; ++lag) {
    ++work_;
    if (lag > n || signature_at(n - lag) != signature) small_starts_[lag] = n + 1;
  }
  for (std::size_t i = 0; i < tracked_.size();) {
    ++work_;
    Tracked& t = tracked_[i];
    if (t.lag <= n && signature_at(n - t.lag) == signature) {
      ++i;
      continue;
    }
    if (t.lag == pinned_) {
      t.start = n + 1;  // run 0, counting again from the next call
      ++i;
      continue;
    }
    index_of_[t.lag] = -1;
    t = tracked_.back();
    tracked_.pop_back();
    if (i < tracked_.size()) index_of_[t.lag] = static_cast<std::int32_t>(i);
  }

  if (small_lags_ >= max_lag_ || n + 1 < gram_) return;
  // New lags: where the last gram_ calls occurred before, latest first.
  const std::uint64_t gram = segment(n + 1 - gram_, n);
  std::uint64_t& head = heads_[(gram ^ (gram >> 29)) & ring_mask_];
  std::uint64_t link = head;
  std::uint32_t found = 0;
  for (std::uint32_t step = 0; step < kChainSteps && link != 0 && found < kCandidates; ++step) {
    ++work_;
    const std::uint64_t earlier = link - 1;
    if (n - earlier > max_lag_) break;  // the chain goes back in time: every later link is farther
    link = chain_[earlier & ring_mask_];
    const auto lag = static_cast<std::uint32_t>(n - earlier);
    if (lag <= small_lags_) continue;                             // kept already
    if (segment(earlier + 1 - gram_, earlier) != gram) continue;  // another gram in the same bucket
    ++found;
    if (index_of_[lag] >= 0) continue;
    track(lag, n + 1 - common_suffix(n, lag));
  }
  chain_[slot] = head;
  head = n + 1;
}

}  // namespace trainscope::batch
