// Coordinator figures: fingerprints ingested per second on one core with 256 and 1024 simulated ranks, and the
// time from the last mismatched fingerprint to the verdict under that load (p99, printed as a counter).
#include <benchmark/benchmark.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "collectors/exchange/coordinator_core.h"
#include "collectors/exchange/wire_protocol.h"

namespace {

using trainscope::exchange::CoordinatorCore;
using trainscope::exchange::EventKind;
using trainscope::exchange::Fingerprint;
using trainscope::recorder::Op;

constexpr uint64_t kComm = 0x3f2a9c0011223344ull;
constexpr uint64_t kCallsPerBatch = 64;  // what one rank's client sends per message under load

Fingerprint all_reduce(int32_t rank, int32_t nranks, uint64_t seq, uint64_t count) {
  Fingerprint f{};
  f.comm_id = kComm;
  f.comm_rank = rank;
  f.nranks = nranks;
  f.seq = seq;
  f.count = count;
  f.dtype = 6;
  f.peer = -1;
  f.op = static_cast<uint16_t>(Op::kAllReduce);
  f.kind = static_cast<uint8_t>(EventKind::kCall);
  return f;
}

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

// One rank's message of 1,024 calls of a collective-bound loop (all-reduce, broadcast, all-gather, reduce-scatter, a
// send and a receive), as its client encodes it and the coordinator decodes it: time per fingerprint each way and
// the bytes one takes on the wire (issues 20 and 22).
std::vector<Fingerprint> loop_calls(size_t n) {
  std::vector<Fingerprint> calls;
  constexpr Op kOps[] = {Op::kAllReduce, Op::kBroadcast, Op::kAllGather, Op::kReduceScatter, Op::kSend, Op::kRecv};
  uint64_t seq = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t k = i % 6;
    Fingerprint f = all_reduce(1, 4, k < 4 ? ++seq : i / 6 + 1, k == 2 || k == 3 ? 4 : 16);
    f.op = static_cast<uint16_t>(kOps[k]);
    f.peer = k == 1 ? 0 : k >= 4 ? 2 : -1;
    f.redop = k == 0 || k == 3 ? 0 : -1;
    f.caller = 0x401000 + k * 0x40;
    f.stack_id = static_cast<uint32_t>(k + 1);
    f.record_index = i;
    f.start_ns = 1700000000000000000ull + i * 61000 + (i * 7919) % 3000;
    f.result = k % 2 == 0 ? 0 : -1;
    calls.push_back(f);
  }
  return calls;
}

void BM_EncodeFingerprints(benchmark::State& state) {
  const std::vector<Fingerprint> calls = loop_calls(1024);
  std::vector<uint8_t> encoded;
  for (auto _ : state) {
    encoded.clear();
    trainscope::exchange::encode_fingerprint_batch(1, 7, 0, calls, encoded);
    benchmark::DoNotOptimize(encoded.data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(calls.size()));
  state.counters["bytes_per_fingerprint"] =
      static_cast<double>(encoded.size() - trainscope::exchange::kHeaderBytes - 24) / static_cast<double>(calls.size());
}
BENCHMARK(BM_EncodeFingerprints);

void BM_DecodeFingerprints(benchmark::State& state) {
  const std::vector<Fingerprint> calls = loop_calls(1024);
  std::vector<uint8_t> encoded;
  trainscope::exchange::encode_fingerprint_batch(1, 7, 0, calls, encoded);
  for (auto _ : state) {
    const auto decoded = trainscope::exchange::decode(encoded);
    if (!decoded.ok) state.SkipWithError(decoded.error.c_str());
    benchmark::DoNotOptimize(&decoded);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(calls.size()));
}
BENCHMARK(BM_DecodeFingerprints);

// Every rank's batch of kCallsPerBatch calls, decoded from the wire as the server does, then fed to the core.
void BM_CoordinatorIngest(benchmark::State& state) {
  const auto ranks = static_cast<int32_t>(state.range(0));
  CoordinatorCore core;
  std::vector<Fingerprint> batch(kCallsPerBatch);
  std::vector<std::vector<uint8_t>> encoded(static_cast<size_t>(ranks));
  uint64_t first = 1;
  uint64_t fingerprints = 0;
  for (auto _ : state) {
    state.PauseTiming();
    for (int32_t r = 0; r < ranks; ++r) {
      for (uint64_t i = 0; i < kCallsPerBatch; ++i) batch[i] = all_reduce(r, ranks, first + i, 1048576);
      encoded[r].clear();
      trainscope::exchange::encode_fingerprint_batch(r, first, 0, batch, encoded[r]);
    }
    state.ResumeTiming();
    for (int32_t r = 0; r < ranks; ++r) {
      const auto decoded = trainscope::exchange::decode(encoded[r]);
      const auto& message = std::get<trainscope::exchange::FingerprintBatch>(decoded.message);
      core.on_fingerprints(r, message.fingerprints, message.dropped_total, now_ns());
    }
    benchmark::DoNotOptimize(core.tick(now_ns()));
    fingerprints += kCallsPerBatch * static_cast<uint64_t>(ranks);
    first += kCallsPerBatch;
  }
  state.SetItemsProcessed(static_cast<int64_t>(fingerprints));
}
BENCHMARK(BM_CoordinatorIngest)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond);

// The core alone (no decoding): the bound of the logic itself.
void BM_CoordinatorCoreOnly(benchmark::State& state) {
  const auto ranks = static_cast<int32_t>(state.range(0));
  CoordinatorCore core;
  std::vector<std::vector<Fingerprint>> batches(static_cast<size_t>(ranks), std::vector<Fingerprint>(kCallsPerBatch));
  uint64_t first = 1;
  uint64_t fingerprints = 0;
  for (auto _ : state) {
    state.PauseTiming();
    for (int32_t r = 0; r < ranks; ++r) {
      for (uint64_t i = 0; i < kCallsPerBatch; ++i) batches[r][i] = all_reduce(r, ranks, first + i, 1048576);
    }
    state.ResumeTiming();
    for (int32_t r = 0; r < ranks; ++r) core.on_fingerprints(r, batches[r], 0, now_ns());
    benchmark::DoNotOptimize(core.tick(now_ns()));
    fingerprints += kCallsPerBatch * static_cast<uint64_t>(ranks);
    first += kCallsPerBatch;
  }
  state.SetItemsProcessed(static_cast<int64_t>(fingerprints));
}
BENCHMARK(BM_CoordinatorCoreOnly)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond);

// Under the same load, one call in each round is mismatched on the last rank; the clock runs from the moment its
// batch (carrying the last mismatched fingerprint) is handed to the coordinator until tick() returns the verdict.
void BM_MismatchVerdictLatency(benchmark::State& state) {
  const auto ranks = static_cast<int32_t>(state.range(0));
  trainscope::exchange::CoordinatorOptions options;
  options.max_mismatch_reports_per_comm = UINT32_MAX;
  std::vector<double> latencies_us;
  std::vector<Fingerprint> batch(kCallsPerBatch);
  std::vector<uint8_t> encoded;
  uint64_t comm_salt = 0;
  for (auto _ : state) {
    state.PauseTiming();
    CoordinatorCore core(options);  // a fresh communicator per round: every round has its own first mismatch
    ++comm_salt;
    const uint64_t mismatched_seq = kCallsPerBatch / 2;
    state.ResumeTiming();
    uint64_t started = 0;
    for (int32_t r = 0; r < ranks; ++r) {
      for (uint64_t i = 0; i < kCallsPerBatch; ++i) {
        const uint64_t seq = 1 + i;
        batch[i] = all_reduce(r, ranks, seq, r == ranks - 1 && seq == mismatched_seq ? 524288 : 1048576);
        batch[i].comm_id = kComm + comm_salt;
      }
      encoded.clear();
      trainscope::exchange::encode_fingerprint_batch(r, 1, 0, batch, encoded);
      if (r == ranks - 1) started = now_ns();
      const auto decoded = trainscope::exchange::decode(encoded);
      const auto& message = std::get<trainscope::exchange::FingerprintBatch>(decoded.message);
      core.on_fingerprints(r, message.fingerprints, 0, now_ns());
    }
    const auto verdicts = core.tick(now_ns());
    const uint64_t finished = now_ns();
    if (verdicts.size() != 1) state.SkipWithError("expected exactly one verdict");
    latencies_us.push_back(static_cast<double>(finished - started) / 1000.0);
  }
  std::sort(latencies_us.begin(), latencies_us.end());
  if (!latencies_us.empty()) {
    const size_t p99 = std::min(latencies_us.size() - 1, latencies_us.size() * 99 / 100);
    state.counters["p99_verdict_us"] = latencies_us[p99];
    state.counters["p50_verdict_us"] = latencies_us[latencies_us.size() / 2];
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * ranks * static_cast<int64_t>(kCallsPerBatch));
}
BENCHMARK(BM_MismatchVerdictLatency)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond);

size_t resident_bytes() {
  long pages = 0;
  long resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<size_t>(resident) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// Issue 20's scale, simulated: every rank in an 8-rank tensor-parallel communicator and the world's, each batch of
// 64 calls 56 on its TP group and 8 on the world (decoded from the wire, as the server gets them). Counters: the
// rank count's need at 1,000 collectives per second per rank against what one coordinator core ingests
// (headroom > 1: it keeps up), the coordinator's memory per rank, and the time from a round's last batch to the
// end of its tick (every call of the round judged), p50 and p99.
void BM_CoordinatorAtScale(benchmark::State& state) {
  const auto ranks = static_cast<int32_t>(state.range(0));
  constexpr int32_t kTensorParallel = 8;
  constexpr uint64_t kWorldCallsPerBatch = 8;
  const size_t resident_before = resident_bytes();
  auto core = std::make_unique<CoordinatorCore>();
  std::vector<std::vector<uint8_t>> encoded(static_cast<size_t>(ranks));
  std::vector<Fingerprint> batch(kCallsPerBatch);
  std::vector<double> tick_us;
  uint64_t first_tp = 1;
  uint64_t first_world = 1;
  uint64_t fingerprints = 0;
  for (auto _ : state) {
    state.PauseTiming();
    for (int32_t r = 0; r < ranks; ++r) {
      for (uint64_t i = 0; i < kCallsPerBatch; ++i) {
        const bool world = i % (kCallsPerBatch / kWorldCallsPerBatch) == 0;
        const uint64_t k = world ? i / (kCallsPerBatch / kWorldCallsPerBatch) : i - i / 8 - 1;
        Fingerprint f = all_reduce(world ? r : r % kTensorParallel, world ? ranks : kTensorParallel,
                                   world ? first_world + k : first_tp + k, world ? 4096 : 1048576);
        f.comm_id = world ? kComm : kComm + 1 + static_cast<uint64_t>(r / kTensorParallel);
        batch[i] = f;
      }
      encoded[r].clear();
      trainscope::exchange::encode_fingerprint_batch(r, first_tp, 0, batch, encoded[r]);
    }
    state.ResumeTiming();
    for (int32_t r = 0; r < ranks; ++r) {
      const auto decoded = trainscope::exchange::decode(encoded[r]);
      const auto& message = std::get<trainscope::exchange::FingerprintBatch>(decoded.message);
      core->on_fingerprints(r, message.fingerprints, message.dropped_total, now_ns());
    }
    const uint64_t ticked = now_ns();
    benchmark::DoNotOptimize(core->tick(ticked));
    tick_us.push_back(static_cast<double>(now_ns() - ticked) / 1000.0);
    fingerprints += kCallsPerBatch * static_cast<uint64_t>(ranks);
    first_tp += kCallsPerBatch - kWorldCallsPerBatch;
    first_world += kWorldCallsPerBatch;
  }
  const size_t resident_after = resident_bytes();
  std::sort(tick_us.begin(), tick_us.end());
  if (!tick_us.empty()) {
    state.counters["p50_tick_us"] = tick_us[tick_us.size() / 2];
    state.counters["p99_tick_us"] = tick_us[std::min(tick_us.size() - 1, tick_us.size() * 99 / 100)];
  }
  state.counters["bytes_per_rank"] =
      static_cast<double>(resident_after > resident_before ? resident_after - resident_before : 0) / ranks;
  state.counters["needed_per_s"] = static_cast<double>(ranks) * 1000.0;
  state.SetItemsProcessed(static_cast<int64_t>(fingerprints));
}
BENCHMARK(BM_CoordinatorAtScale)->Arg(1024)->Arg(4096)->Arg(16384)->Unit(benchmark::kMillisecond);

}  // namespace
BENCHMARK_MAIN();
