// Host statistics throughput per core (GB/s) for each type, finite data (the common case) and data with NaNs, beside
// memcpy's and a plain read's over the same sizes: what memory bandwidth one core gets (issue 20's bar).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/stats.h"

namespace {

using trainscope::stats::DType;

std::vector<unsigned char> make_buffer(DType type, std::size_t bytes, bool with_nans) {
  std::mt19937_64 rng(1);
  std::normal_distribution<double> normal(0.0, 10.0);
  const std::uint32_t size = trainscope::stats::dtype_size(type);
  const auto rules = trainscope::stats::dtype_rules(type);
  std::vector<unsigned char> buffer(bytes);
  for (std::size_t i = 0; i + size <= bytes; i += size) {
    std::uint64_t bits = rng();
    if (rules.is_float) bits &= ~(rules.sign_mask >> 1);  // one exponent bit cleared: finite
    if (with_nans && rules.is_float && (i / size) % 1000 == 999) bits = rules.non_finite_key | 1;
    std::memcpy(&buffer[i], &bits, size);
  }
  return buffer;
}

// Without the checksum, as the engine takes a watched host buffer (engine_watch.cc); BM_StatsHostChecksum with it.
void BM_StatsHost(benchmark::State& state, DType type, bool with_nans) {
  const std::size_t bytes = static_cast<std::size_t>(state.range(0));
  const auto buffer = make_buffer(type, bytes, with_nans);
  const std::uint64_t count = bytes / trainscope::stats::dtype_size(type);
  for (auto _ : state) {
    auto stats =
        trainscope::stats::compute_stats_host(buffer.data(), count, type, trainscope::stats::ChecksumMode::kSkip);
    benchmark::DoNotOptimize(stats);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(bytes));
}

void BM_StatsHostChecksum(benchmark::State& state, DType type) {
  const std::size_t bytes = static_cast<std::size_t>(state.range(0));
  const auto buffer = make_buffer(type, bytes, false);
  const std::uint64_t count = bytes / trainscope::stats::dtype_size(type);
  for (auto _ : state) {
    auto stats = trainscope::stats::compute_stats_host(buffer.data(), count, type);
    benchmark::DoNotOptimize(stats);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(bytes));
}

constexpr std::int64_t kSmall = 64 << 10;
constexpr std::int64_t kLarge = 64 << 20;

// The references: memcpy (a read and a write per byte) and a sum of 64-bit words (a read only, as the statistics).
void BM_Memcpy(benchmark::State& state) {
  const std::size_t bytes = static_cast<std::size_t>(state.range(0));
  std::vector<unsigned char> from(bytes, 1);
  std::vector<unsigned char> to(bytes);
  for (auto _ : state) {
    std::memcpy(to.data(), from.data(), bytes);
    benchmark::DoNotOptimize(to.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(bytes));
}
BENCHMARK(BM_Memcpy)->Arg(kSmall)->Arg(kLarge);

void BM_ReadOnly(benchmark::State& state) {
  const std::size_t bytes = static_cast<std::size_t>(state.range(0));
  std::vector<std::uint64_t> words(bytes / 8, 1);
  for (auto _ : state) {
    std::uint64_t sum = 0;
    for (const std::uint64_t w : words) sum += w;
    benchmark::DoNotOptimize(sum);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(bytes));
}
BENCHMARK(BM_ReadOnly)->Arg(kSmall)->Arg(kLarge);

BENCHMARK_CAPTURE(BM_StatsHost, fp64, DType::kFloat64, false)->Arg(kSmall)->Arg(kLarge);
BENCHMARK_CAPTURE(BM_StatsHost, fp32, DType::kFloat32, false)->Arg(kSmall)->Arg(kLarge);
BENCHMARK_CAPTURE(BM_StatsHost, fp32_nans, DType::kFloat32, true)->Arg(kLarge);
BENCHMARK_CAPTURE(BM_StatsHost, fp16, DType::kFloat16, false)->Arg(kSmall)->Arg(kLarge);
BENCHMARK_CAPTURE(BM_StatsHost, bf16, DType::kBfloat16, false)->Arg(kLarge);
BENCHMARK_CAPTURE(BM_StatsHost, e4m3, DType::kFloat8E4M3, false)->Arg(kLarge);
BENCHMARK_CAPTURE(BM_StatsHost, e5m2, DType::kFloat8E5M2, false)->Arg(kLarge);
BENCHMARK_CAPTURE(BM_StatsHost, int32, DType::kInt32, false)->Arg(kLarge);
BENCHMARK_CAPTURE(BM_StatsHost, int64, DType::kInt64, false)->Arg(kLarge);
BENCHMARK_CAPTURE(BM_StatsHostChecksum, fp32, DType::kFloat32)->Arg(kLarge);
BENCHMARK_CAPTURE(BM_StatsHostChecksum, fp16, DType::kFloat16)->Arg(kLarge);

}  // namespace

BENCHMARK_MAIN();
