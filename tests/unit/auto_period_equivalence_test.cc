// The auto period learner on LagRuns gives, call by call, what the O(max_period) learner it replaced gave
// (auto_period_reference.h), on generated streams of every shape a job has: periodic with prologues and noise,
// gradient accumulation, FSDP's repeated layers, a period that changes, no period at all. And its work per call
// does not grow with the window (counted steps, not time).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "auto_period_reference.h"
#include "base/flight_record_format.h"
#include "collectors/frames/batch_tracker.h"

namespace {

using trainscope::batch::AutoOptions;
using trainscope::batch::BatchEvent;
using trainscope::batch::BatchTracker;
using trainscope::batch::CallInfo;
using trainscope::batch::StepMarker;
namespace reference = trainscope::batch::reference;

using Stream = std::vector<std::uint64_t>;  // counts of all-reduces on one communicator: one signature each

CallInfo period_call(std::uint64_t count) {
  CallInfo info;
  info.op = static_cast<std::uint16_t>(trainscope::recorder::Op::kAllReduce);
  info.comm_id = 1;
  info.count = count;
  info.dtype = 7;
  return info;
}

Stream random_block(std::mt19937_64& rng, std::size_t length, std::uint64_t alphabet) {
  Stream block(length);
  for (auto& c : block) c = 1 + rng() % alphabet;
  return block;
}

void append(Stream& out, const Stream& block, std::size_t times = 1) {
  for (std::size_t i = 0; i < times; ++i) out.insert(out.end(), block.begin(), block.end());
}

// Extra, missing and changed calls, each with probability `rate` per call.
Stream with_noise(std::mt19937_64& rng, const Stream& in, double rate) {
  std::uniform_real_distribution<double> u(0, 1);
  Stream out;
  for (const std::uint64_t c : in) {
    const double r = u(rng);
    if (r < rate) continue;                              // missing
    if (r < 2 * rate) out.push_back(900 + rng() % 50);   // extra before it
    out.push_back(r < 3 * rate ? 800 + rng() % 50 : c);  // changed
  }
  return out;
}

Stream generate(std::mt19937_64& rng, int shape) {
  Stream s;
  const std::uint64_t alphabet = 1 + rng() % 12;
  switch (shape) {
    case 0: {  // periodic after a prologue
      append(s, random_block(rng, rng() % 20, 50));
      append(s, random_block(rng, 1 + rng() % 200, alphabet), 4 + rng() % 10);
      break;
    }
    case 1: {  // periodic with noise
      Stream clean;
      append(clean, random_block(rng, 1 + rng() % 120, alphabet), 8 + rng() % 12);
      s = with_noise(rng, clean, 0.002 + 0.02 * static_cast<double>(rng() % 4));
      break;
    }
    case 2: {  // gradient accumulation: A^m B
      const Stream a = random_block(rng, 2 + rng() % 30, alphabet);
      const Stream b = random_block(rng, 1 + rng() % 10, alphabet + 3);
      const std::size_t m = 2 + rng() % 6;
      for (std::uint64_t step = 0, steps = 4 + rng() % 8; step < steps; ++step) {
        append(s, a, m);
        append(s, b);
      }
      break;
    }
    case 3: {  // FSDP: one layer's all-gather and reduce-scatter repeated, then the rest of the step
      const Stream layer = random_block(rng, 1 + rng() % 3, 3);
      const Stream rest = random_block(rng, 1 + rng() % 12, 20);
      for (std::uint64_t step = 0, steps = 4 + rng() % 8; step < steps; ++step) {
        append(s, layer, 20 + rng() % 5);
        append(s, rest);
      }
      break;
    }
    case 4: {  // a period that changes
      append(s, random_block(rng, 1 + rng() % 80, alphabet), 5 + rng() % 6);
      append(s, random_block(rng, 1 + rng() % 80, alphabet + 2), 5 + rng() % 6);
      append(s, random_block(rng, 1 + rng() % 40, alphabet), 5 + rng() % 6);
      break;
    }
    case 5:  // no period: a small alphabet (many repeated grams) or a large one
      s = random_block(rng, 500 + rng() % 1500, rng() % 2 == 0 ? 2 : 1000);
      break;
    case 6:  // one call over and over, then another
      append(s, Stream{7}, 50 + rng() % 500);
      append(s, Stream{3, 3, 5}, 20 + rng() % 50);
      break;
  }
  return s;
}

// Streams on which the reference locked a period, and locks in all: the comparison is not of two idle learners.
struct Seen {
  int locked_streams = 0;
  int locks = 0;
  int losses = 0;
};

void expect_same(const Stream& stream, const AutoOptions& options, const std::string& what, Seen* seen) {
  BatchTracker tracker(StepMarker{}, options);
  reference::AutoTracker expected(options);
  for (std::size_t i = 0; i < stream.size(); ++i) {
    const BatchEvent got = tracker.on_collective(period_call(stream[i]));
    const BatchEvent want = expected.on_collective(period_call(stream[i]));
    ASSERT_EQ(got.new_batch, want.new_batch) << what << " call " << i;
    ASSERT_EQ(got.renumbered, want.renumbered) << what << " call " << i;
    ASSERT_EQ(got.period_lost, want.period_lost) << what << " call " << i;
    ASSERT_EQ(got.batch, want.batch) << what << " call " << i;
    ASSERT_EQ(tracker.period(), expected.period()) << what << " call " << i;
    ASSERT_EQ(tracker.settled(), expected.settled()) << what << " call " << i;
    seen->locks += want.renumbered;
    seen->losses += want.period_lost;
  }
  seen->locked_streams += expected.settled() > 0;
  for (std::uint64_t position = 0; position < tracker.settled(); ++position)
    ASSERT_EQ(tracker.batch_of(position), expected.batch_of(position)) << what << " position " << position;
}

TEST(AutoPeriodEquivalence, EveryGeneratedStreamGetsTheReferencesBatches) {
  std::mt19937_64 rng(20261202);
  AutoOptions options;
  options.max_period = 512;
  Seen seen;
  for (int i = 0; i < 350; ++i) {
    const int shape = i % 7;
    const Stream stream = generate(rng, shape);
    expect_same(stream, options, "stream " + std::to_string(i) + " (shape " + std::to_string(shape) + ")", &seen);
    if (HasFatalFailure()) return;
  }
  // Every shape but "no period" locks; noise and changes lose and relearn.
  EXPECT_GE(seen.locked_streams, 250);
  EXPECT_GE(seen.locks, 800);
  EXPECT_GE(seen.losses, 400);
}

TEST(AutoPeriodEquivalence, TheDefaultWindowAndOtherOptions) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 60; ++i) {
    AutoOptions options;  // the defaults: 4096 calls
    if (i % 3 == 1) {
      options.max_period = 64;  // periods longer than the window are never found, in both
      options.confirmations = 2;
      options.min_confirm_calls = 3;
    } else if (i % 3 == 2) {
      options.confirmations = 4;
      options.min_confirm_calls = 40;
      options.max_noise = 1;
    }
    const Stream stream = generate(rng, i % 7);
    Seen seen;
    expect_same(stream, options, "stream " + std::to_string(i), &seen);
    if (HasFatalFailure()) return;
  }
}

// The learner's steps per call for `stream` with this window.
double work_per_call(const Stream& stream, std::uint32_t window) {
  AutoOptions options;
  options.max_period = window;
  BatchTracker tracker(StepMarker{}, options);
  for (const std::uint64_t c : stream) tracker.on_collective(period_call(c));
  return static_cast<double>(tracker.auto_work()) / static_cast<double>(stream.size());
}

TEST(AutoPeriodWork, PerCallWorkDoesNotGrowWithTheWindow) {
  std::mt19937_64 rng(99);
  std::vector<std::pair<std::string, Stream>> streams;
  Stream periodic;
  append(periodic, random_block(rng, 37, 10), 600);
  streams.emplace_back("periodic, 37 calls", with_noise(rng, periodic, 0.001));
  Stream long_period;
  append(long_period, random_block(rng, 3000, 40), 8);
  streams.emplace_back("periodic, 3000 calls", long_period);
  streams.emplace_back("no period, 2 signatures", random_block(rng, 20000, 2));
  streams.emplace_back("no period, 1000 signatures", random_block(rng, 20000, 1000));
  Stream constant;
  append(constant, Stream{5}, 20000);
  streams.emplace_back("one call repeated", constant);
  for (const auto& [name, stream] : streams) {
    const double small = work_per_call(stream, 4096);
    const double large = work_per_call(stream, 65536);
    std::printf("%s: %.1f steps per call (4096-call window), %.1f (65536)\n", name.c_str(), small, large);
    // Bounded by the chain steps and tracked lags per call, whatever the window (the O(window) learner took 4096
    // and 65536 steps per call).
    EXPECT_LE(small, 160.0) << name;
    EXPECT_LE(large, 160.0) << name;
    // A larger window may hold a few more multiples of a long period (kCandidates at most), nothing more.
    EXPECT_LE(large, small + trainscope::batch::LagRuns::kCandidates + 2.0)
        << name << ": " << small << " steps per call with a 4096-call window, " << large << " with 65536";
  }
}

}  // namespace
