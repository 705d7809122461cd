// Batch tracking: the step-marker parser and the auto / nvtx / collective / every trackers (see batch_tracker.h).
#include "collectors/frames/batch_tracker.h"

#include <algorithm>
#include <cstdlib>

#include "base/flight_record_format.h"

namespace trainscope::batch {
namespace {

constexpr std::uint64_t kMaxEvery = 1000000000ull;
// auto: lags kept on every call, and the longest gram larger lags are found by (lag_runs.h).
constexpr std::uint32_t kSmallLags = 32;
constexpr std::uint64_t kLongestGram = 64;

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 29;
  return h;
}

bool fail(const std::string& text, const std::string& problem, std::string* error) {
  if (error != nullptr) {
    *error = "TRAINSCOPE_STEP_MARKER='" + text + "': " + problem + "; accepted: " + step_marker_forms() +
             " (N from 1 to 1000000000, REGEX a POSIX extended regular expression)";
  }
  return false;
}

bool compile(const std::string& pattern, std::unique_ptr<MarkerRegex>* out, std::string* what) {
  auto regex = std::make_unique<MarkerRegex>(pattern);
  if (!regex->ok()) {
    if (what != nullptr) *what = regex->error();
    return false;
  }
  *out = std::move(regex);
  return true;
}

}  // namespace

MarkerRegex::MarkerRegex(const std::string& pattern) {
  const int code = regcomp(&regex_, pattern.c_str(), REG_EXTENDED | REG_NOSUB);
  if (code != 0) {
    char text[256];
    regerror(code, &regex_, text, sizeof(text));
    error_ = text;
    return;
  }
  ok_ = true;
}

MarkerRegex::~MarkerRegex() {
  if (ok_) regfree(&regex_);
}

bool MarkerRegex::search(const char* text) const { return ok_ && regexec(&regex_, text, 0, nullptr, 0) == 0; }

const char* step_marker_forms() { return "auto|nvtx:REGEX|collective:REGEX|every:N"; }

bool parse_step_marker(const std::string& text, StepMarker* marker, std::string* error) {
  StepMarker result;
  if (text == "auto") {
    result.kind = MarkerKind::kAuto;
  } else if (text.rfind("nvtx:", 0) == 0 || text.rfind("collective:", 0) == 0) {
    const bool nvtx = text[0] == 'n';
    result.kind = nvtx ? MarkerKind::kNvtx : MarkerKind::kCollective;
    result.pattern = text.substr(nvtx ? 5 : 11);
    if (result.pattern.empty())
      return fail(text, std::string(nvtx ? "nvtx:" : "collective:") + " needs a regex", error);
    std::unique_ptr<MarkerRegex> compiled;
    std::string what;
    if (!compile(result.pattern, &compiled, &what)) {
      return fail(text, "invalid regex '" + result.pattern + "': " + what, error);
    }
  } else if (text.rfind("every:", 0) == 0) {
    const std::string digits = text.substr(6);
    if (digits.empty() || digits.size() > 10 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return fail(text, "every: needs a whole number of calls", error);
    }
    const std::uint64_t n = std::strtoull(digits.c_str(), nullptr, 10);
    if (n < 1 || n > kMaxEvery) return fail(text, "every:N out of range", error);
    result.kind = MarkerKind::kEvery;
    result.every = n;
  } else {
    return fail(text, "unknown step marker", error);
  }
  if (marker != nullptr) *marker = result;
  return true;
}

std::uint64_t call_signature(const CallInfo& call) {
  std::uint64_t h = mix(0x7472616e73636f70ull, call.op);
  h = mix(h, call.comm_id);
  h = mix(h, call.count);
  return mix(h, static_cast<std::uint64_t>(static_cast<std::int64_t>(call.dtype)));
}

BatchTracker::BatchTracker(const StepMarker& marker, const AutoOptions& options) : marker_(marker), options_(options) {
  options_.max_period = std::max<std::uint32_t>(options_.max_period, 1);
  options_.confirmations = std::max<std::uint32_t>(options_.confirmations, 2);
  if (marker_.kind == MarkerKind::kNvtx || marker_.kind == MarkerKind::kCollective) {
    compile(marker_.pattern, &regex_, nullptr);
  }
  if (marker_.kind == MarkerKind::kAuto) {
    // A lag P is a confirmed period only once its run reaches max((confirmations - 1) x P, min_confirm_calls - P):
    // the lags above the small ones are found by grams no longer than the shortest such run (lag_runs.h).
    const std::uint32_t small = std::min<std::uint32_t>(kSmallLags, options_.max_period);
    std::uint64_t shortest = kLongestGram;
    for (std::uint64_t p = small + 1; p <= options_.max_period && shortest > 1; ++p) {
      const std::uint64_t needed = std::max<std::uint64_t>(
          {(options_.confirmations - 1) * p, options_.min_confirm_calls > p ? options_.min_confirm_calls - p : 0, 1});
      shortest = std::min(shortest, needed);
    }
    runs_ = std::make_unique<LagRuns>(options_.max_period, small, static_cast<std::uint32_t>(shortest),
                                      2 * static_cast<std::uint64_t>(options_.max_period));
  }
}

BatchEvent BatchTracker::start_batch(std::uint64_t batch) {
  batch_ = batch;
  BatchEvent event;
  event.new_batch = true;
  event.batch = batch_;
  return event;
}

BatchEvent BatchTracker::on_collective(const CallInfo& call) {
  const std::uint64_t n = calls_++;
  if (marker_.kind != MarkerKind::kAuto) settled_ = calls_;
  switch (marker_.kind) {
    case MarkerKind::kAuto:
      if (optimizer_steps_) {
        settled_ = calls_;
        BatchEvent event;
        event.batch = batch_;
        return after_optimizer_step(event, n);
      }
      return auto_step(call_signature(call), n);
    case MarkerKind::kCollective: {
      if (!regex_) break;
      // One regex search per distinct op, not per call.
      const std::size_t op = call.op < op_matches_.size() ? call.op : 0;
      if (op_matches_[op] < 0)
        op_matches_[op] = regex_->search(recorder::op_name(static_cast<recorder::Op>(op))) ? 1 : 0;
      const bool matched = op_matches_[op] == 1;
      const bool starts = matched && !previous_matched_;
      previous_matched_ = matched;
      if (starts) return start_batch(markers_seen_++);
      break;
    }
    case MarkerKind::kEvery: {
      if (!have_first_comm_) {
        have_first_comm_ = true;
        first_comm_ = call.comm_id;
      }
      if (call.comm_id != first_comm_) break;
      const std::uint64_t k = first_comm_calls_++;
      if (k % marker_.every == 0) return start_batch(k / marker_.every);
      break;
    }
    case MarkerKind::kNvtx:
      break;
  }
  BatchEvent event;
  event.batch = batch_;
  return event;
}

BatchEvent BatchTracker::on_marker() {
  if (marker_.kind == MarkerKind::kNvtx) return start_batch(markers_seen_++);
  BatchEvent event;
  event.batch = batch_;
  return event;
}

BatchEvent BatchTracker::on_launch(bool optimizer) {
  BatchEvent event;
  event.batch = batch_;
  if (marker_.kind != MarkerKind::kAuto) return event;
  if (!optimizer) return after_optimizer_step(event, calls_);
  if (in_optimizer_run_) return event;  // the same step's next optimizer kernel
  in_optimizer_run_ = true;
  batch_ended_ = true;
  if (!optimizer_steps_) {
    // The calls fed so far keep what auto knows of them (batch_of: the boundaries of the periods it locked).
    optimizer_steps_ = true;
    event.optimizer_steps = true;
    settled_ = calls_;
  }
  return event;
}

// Work that is not the optimizer's: after an optimizer step it starts the next batch, whose first call is at
// `first_position` (batch_of numbers the calls by it).
BatchEvent BatchTracker::after_optimizer_step(BatchEvent event, std::uint64_t first_position) {
  in_optimizer_run_ = false;
  if (!batch_ended_) return event;
  batch_ended_ = false;
  add_boundary(first_position, batch_ + 1);
  BatchEvent started = start_batch(batch_ + 1);
  started.optimizer_steps = event.optimizer_steps;
  return started;
}

BatchEvent BatchTracker::on_range_push(std::string_view name) {
  if (marker_.kind == MarkerKind::kNvtx && regex_ && regex_->search(std::string(name).c_str())) {
    return start_batch(markers_seen_++);
  }
  BatchEvent event;
  event.batch = batch_;
  return event;
}

std::uint64_t BatchTracker::batch_of(std::uint64_t position) const {
  if (marker_.kind != MarkerKind::kAuto || boundaries_.empty()) return batch_;
  // The last boundary at or before `position` (boundaries are in position order).
  auto after = std::upper_bound(boundaries_.begin(), boundaries_.end(), position,
                                [](std::uint64_t p, const Boundary& b) { return p < b.position; });
  if (after == boundaries_.begin()) return boundaries_.front().batch;
  return std::prev(after)->batch;
}

void BatchTracker::add_boundary(std::uint64_t position, std::uint64_t batch) {
  boundaries_.push_back({position, batch});
  if (boundaries_.size() > kMaxBoundaries) boundaries_.pop_front();
}

BatchEvent BatchTracker::auto_step(std::uint64_t sig, std::uint64_t n) {
  runs_->feed(sig, n);
  const std::uint64_t c1 = options_.confirmations - 1;
  // The confirmed periods with the longest runs (ties: the smallest): overall, and longer than the lock. Only a
  // small or tracked lag can be confirmed (lag_runs.h).
  std::uint32_t best = 0;
  std::uint64_t best_run = 0;
  std::uint32_t best_longer = 0;
  std::uint64_t best_longer_run = 0;
  runs_->for_each_run([&](std::uint32_t lag, std::uint64_t run) {
    const std::uint64_t p = lag;
    if (run < c1 * p || run + p < options_.min_confirm_calls) return;
    if (best == 0 || run > best_run || (run == best_run && lag < best)) {
      best = lag;
      best_run = run;
    }
    if (lag > locked_period_ &&
        (best_longer == 0 || run > best_longer_run || (run == best_longer_run && lag < best_longer))) {
      best_longer = lag;
      best_longer_run = run;
    }
  });

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
      matched = (expected + 1) % p;  // one call missing
      ++cycle_misses_;
    } else {
      ++consecutive_misses_;  // an extra call
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
      runs_->unpin();
      event.new_batch = false;
      event.period_lost = true;
    } else if (best_longer != 0 && best_longer_run > runs_->run(p)) {
      event.new_batch = lock(best_longer, n);
      event.renumbered = true;
    }
  } else if (best != 0) {
    event.new_batch = lock(best, n);
    event.renumbered = true;
  }
  if (locked_period_ != 0) settled_ = n + 1;  // a call fed while a period is locked has its number
  event.batch = batch_;
  return event;
}

bool BatchTracker::lock(std::uint32_t period, std::uint64_t n) {
  const std::uint64_t p = period;
  const std::uint64_t span_start = n + 1 - runs_->run(period) - p;  // positions [span_start, n] are p-periodic
  cycle_.assign(p, 0);
  for (std::uint64_t j = n + 1 - p; j <= n; ++j) cycle_[(j - span_start) % p] = runs_->signature_at(j);

  // Renumber from the last boundary at or before the span's start; later ones were counted on a wrong period.
  while (boundaries_.size() > 1 && boundaries_.back().position > span_start) boundaries_.pop_back();
  const Boundary base = boundaries_.back();
  std::uint64_t batch = base.batch;
  std::uint64_t first_start = span_start;
  if (span_start > base.position &&
      static_cast<double>(span_start - base.position) < options_.prologue_fraction * static_cast<double>(p)) {
    first_start = span_start + p;  // a short prologue: merged into the base batch with the first cycle
  }
  if (first_start <= base.position) first_start += ((base.position - first_start) / p + 1) * p;
  bool starts_here = false;
  if (first_start <= n) {
    // Every cycle start of the span is a boundary: the calls fed before the lock are numbered by them (batch_of).
    std::uint64_t start = first_start;
    for (; start <= n; start += p) add_boundary(start, ++batch);
    starts_here = start - p == n;
  }
  batch_ = batch;
  locked_period_ = period;
  runs_->pin(period);
  phase_ = static_cast<std::uint32_t>((n - span_start + 1) % p);
  consecutive_misses_ = 0;
  cycle_misses_ = 0;
  return starts_here;
}

}  // namespace trainscope::batch
