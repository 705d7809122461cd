// The statistics kernel against the host implementation on a real GPU; every test skips where there is none.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpu/cuda_driver.h"
#include "kernels/gpu_stats.h"
#include "kernels/stats.h"
#include "kernels/tensor_view.h"

namespace {

using trainscope::stats::DType;
using trainscope::stats::GpuStats;
using trainscope::stats::GpuStatus;
using trainscope::stats::TensorRef;
using trainscope::stats::TensorStats;

constexpr DType kAllTypes[] = {DType::kFloat64,    DType::kFloat32,    DType::kFloat16, DType::kBfloat16,
                               DType::kFloat8E4M3, DType::kFloat8E5M2, DType::kInt8,    DType::kUint8,
                               DType::kInt32,      DType::kUint32,     DType::kInt64,   DType::kUint64};

trainscope::gpu_testing::Driver& cu() { return trainscope::gpu_testing::driver(); }

class StatsGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string& reason = trainscope::gpu_testing::driver_unavailable_reason();
    if (!reason.empty()) GTEST_SKIP() << "no GPU here, GPU tests skipped: " << reason;
    if (!GpuStats::instance().available()) {
      GTEST_SKIP() << "the launcher cannot run: " << GpuStats::instance().unavailable_reason();
    }
  }
};

// Device copy of host bytes, freed at scope end.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const std::vector<unsigned char>& bytes) : size_(bytes.size()) {
    EXPECT_EQ(CUDA_SUCCESS, cu().cuMemAlloc(&pointer_, size_ == 0 ? 16 : size_));
    if (size_ != 0) {
      EXPECT_EQ(CUDA_SUCCESS, cu().cuMemcpyHtoD(pointer_, bytes.data(), size_));
    }
  }
  ~DeviceBuffer() { cu().cuMemFree(pointer_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  const void* at(std::size_t offset) const { return reinterpret_cast<const void*>(pointer_ + offset); }

 private:
  CUdeviceptr pointer_ = 0;
  std::size_t size_;
};

void expect_same(const TensorStats& expected, const TensorStats& actual, const std::string& context) {
  SCOPED_TRACE(context);
  auto same = [](double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; };
  EXPECT_EQ(expected.count, actual.count);
  EXPECT_TRUE(same(expected.abs_min, actual.abs_min)) << expected.abs_min << " vs " << actual.abs_min;
  EXPECT_TRUE(same(expected.abs_max, actual.abs_max)) << expected.abs_max << " vs " << actual.abs_max;
  EXPECT_TRUE(same(expected.finite_abs_min, actual.finite_abs_min));
  EXPECT_TRUE(same(expected.finite_abs_max, actual.finite_abs_max));
  EXPECT_EQ(expected.nan_count, actual.nan_count);
  EXPECT_EQ(expected.pos_inf_count, actual.pos_inf_count);
  EXPECT_EQ(expected.neg_inf_count, actual.neg_inf_count);
  EXPECT_EQ(expected.first_nonfinite, actual.first_nonfinite);
  EXPECT_EQ(expected.checksum, actual.checksum);
}

std::vector<TensorStats> run_batch(const std::vector<TensorRef>& tensors) {
  auto launch = GpuStats::instance().enqueue(cu().stream, tensors);
  EXPECT_EQ(GpuStatus::kOk, launch.status) << launch.message;
  if (launch.status != GpuStatus::kOk) return {};
  // Poll as the engine does; wait() only as a fallback so a hang fails instead of stalling.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!launch.pending->ready() && launch.pending->error().empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  EXPECT_TRUE(launch.pending->ready()) << launch.pending->error();
  return launch.pending->results();
}

enum class Pattern { kRandomBits, kFinite, kOneNanAtEnd, kInfFirst, kAllNan, kZeros, kLargest, kSubnormals };

std::vector<unsigned char> make_data(DType type, std::uint64_t count, Pattern pattern, std::mt19937_64& rng) {
  const std::uint32_t size = trainscope::stats::dtype_size(type);
  const auto rules = trainscope::stats::dtype_rules(type);
  std::vector<unsigned char> bytes(count * size);
  for (std::size_t i = 0; i < bytes.size(); i += 8) {
    const std::uint64_t word = rng();
    std::memcpy(&bytes[i], &word, std::min<std::size_t>(8, bytes.size() - i));
  }
  auto set = [&](std::uint64_t i, std::uint64_t bits) { std::memcpy(&bytes[i * size], &bits, size); };
  if (!rules.is_float) return bytes;
  const std::uint64_t exponent_mask = rules.has_inf ? rules.inf_key : rules.non_finite_key;
  for (std::uint64_t i = 0; i < count; ++i) {
    std::uint64_t bits = 0;
    std::memcpy(&bits, &bytes[i * size], size);
    switch (pattern) {
      case Pattern::kRandomBits:
        break;
      case Pattern::kFinite:
      case Pattern::kOneNanAtEnd:
      case Pattern::kInfFirst:
        // Clear one exponent bit: always finite.
        bits &= ~(rules.sign_mask >> 1);
        break;
      case Pattern::kAllNan:
        bits = rules.non_finite_key | (rules.has_inf ? 1 : 0) | (bits & rules.sign_mask);
        break;
      case Pattern::kZeros:
        bits &= rules.sign_mask;
        break;
      case Pattern::kLargest:
        bits = (rules.non_finite_key - 1) | (bits & rules.sign_mask);
        break;
      case Pattern::kSubnormals:
        bits &= rules.sign_mask | (exponent_mask ^ (exponent_mask - 1)) >> 1;
        break;
    }
    set(i, bits);
  }
  if (count > 0 && pattern == Pattern::kOneNanAtEnd) set(count - 1, rules.non_finite_key | (rules.has_inf ? 5 : 0));
  if (count > 0 && pattern == Pattern::kInfFirst && rules.has_inf) set(0, rules.inf_key | rules.sign_mask);
  return bytes;
}

TEST_F(StatsGpu, EveryTypeEveryPatternSizesAndUnalignedStartsMatchTheHost) {
  std::mt19937_64 rng(2024);
  const std::uint64_t sizes[] = {0, 1, 3, 15, 16, 17, 255, 2047, 2048, 2049, 32768 + 5, (1u << 20) + 7};
  const Pattern patterns[] = {Pattern::kRandomBits, Pattern::kFinite, Pattern::kOneNanAtEnd, Pattern::kInfFirst,
                              Pattern::kAllNan,     Pattern::kZeros,  Pattern::kLargest,     Pattern::kSubnormals};
  for (DType type : kAllTypes) {
    const std::uint32_t size = trainscope::stats::dtype_size(type);
    for (Pattern pattern : patterns) {
      for (std::uint64_t count : sizes) {
        for (std::uint64_t shift : {0u, 1u, 3u}) {  // element offsets: unaligned vector starts
          const auto data = make_data(type, count + shift, pattern, rng);
          DeviceBuffer device(data);
          const auto results = run_batch({{device.at(shift * size), count, type}});
          ASSERT_EQ(1u, results.size());
          const auto expected = trainscope::stats::compute_stats_host(data.data() + shift * size, count, type);
          expect_same(expected, results[0],
                      std::string(trainscope::stats::dtype_name(type)) + " pattern " +
                          std::to_string(static_cast<int>(pattern)) + " n=" + std::to_string(count) +
                          " shift=" + std::to_string(shift));
        }
      }
    }
  }
}

TEST_F(StatsGpu, AddressNotAMultipleOfTheElementSizeIsReadBytewise) {
  std::mt19937_64 rng(5);
  for (DType type : {DType::kFloat32, DType::kFloat64, DType::kBfloat16, DType::kInt64}) {
    const std::uint32_t size = trainscope::stats::dtype_size(type);
    const std::uint64_t count = 100003;
    const auto data = make_data(type, count + 1, Pattern::kRandomBits, rng);
    DeviceBuffer device(data);
    const auto results = run_batch({{device.at(1), count, type}});
    ASSERT_EQ(1u, results.size());
    expect_same(trainscope::stats::compute_stats_host(data.data() + 1, count, type), results[0],
                std::string("misaligned ") + trainscope::stats::dtype_name(type));
    (void)size;
  }
}

// Strided views (module frames' transposed and sliced tensors) in one batch with contiguous tensors: each view's
// statistics, checksum and first non-finite index included, are those of a contiguous copy of its elements.
TEST_F(StatsGpu, StridedViewsMatchTheHostOnACopyOfTheirElements) {
  std::mt19937_64 rng(31);
  struct View {
    const char* what;
    std::uint64_t offset;
    std::vector<std::int64_t> sizes;
    std::vector<std::int64_t> strides;
  };
  // Storage: 4 x 96 x 130 elements.
  const std::uint64_t storage_count = 4 * 96 * 130;
  const std::vector<View> views = {
      {"transposed", 0, {130, 384}, {1, 130}},        {"a column slice", 7, {384, 100}, {130, 1}},
      {"permuted", 1, {96, 4, 129}, {130, 12480, 1}}, {"expanded", 0, {1000, 130}, {0, 1}},
      {"every third element", 2, {16639}, {3}},
  };
  for (DType type : kAllTypes) {
    const std::uint32_t size = trainscope::stats::dtype_size(type);
    for (Pattern pattern : {Pattern::kRandomBits, Pattern::kOneNanAtEnd, Pattern::kInfFirst}) {
      for (std::uint64_t shift : {0u, 1u}) {  // shift 1: an element's start that is not element-aligned (bytewise)
        std::vector<unsigned char> data(shift);
        const auto elements = make_data(type, storage_count, pattern, rng);
        data.insert(data.end(), elements.begin(), elements.end());
        DeviceBuffer device(data);
        std::vector<TensorRef> tensors;
        std::vector<std::vector<unsigned char>> copies;
        for (const View& view : views) {
          const auto dims = trainscope::stats::merge_view_dims(static_cast<std::int64_t>(view.sizes.size()),
                                                               view.sizes.data(), view.strides.data());
          const auto shape = trainscope::stats::strided_shape(dims);
          ASSERT_TRUE(shape.has_value());
          std::uint64_t count = 1;
          for (const std::int64_t n : view.sizes) count *= static_cast<std::uint64_t>(n);
          std::vector<unsigned char> copy;
          for (std::uint64_t i = 0; i < count; ++i) {
            const std::int64_t at = static_cast<std::int64_t>(shift + view.offset * size) +
                                    trainscope::stats::strided_element_offset(*shape, i) * size;
            copy.insert(copy.end(), data.begin() + at, data.begin() + at + size);
          }
          copies.push_back(std::move(copy));
          tensors.push_back({device.at(shift + view.offset * size), count, type, *shape});
          // A contiguous tensor between the views: shapes and descriptors must not be mixed up.
          copies.emplace_back(data.begin() + static_cast<std::ptrdiff_t>(shift),
                              data.begin() + static_cast<std::ptrdiff_t>(shift + 1000 * size));
          tensors.push_back({device.at(shift), 1000, type});
        }
        const auto results = run_batch(tensors);
        ASSERT_EQ(tensors.size(), results.size());
        for (std::size_t i = 0; i < tensors.size(); ++i) {
          const std::string what = std::string(trainscope::stats::dtype_name(type)) + " pattern " +
                                   std::to_string(static_cast<int>(pattern)) + " shift " + std::to_string(shift) + " " +
                                   (i % 2 == 0 ? views[i / 2].what : "contiguous");
          expect_same(trainscope::stats::compute_stats_host(copies[i].data(), tensors[i].count, type), results[i],
                      what);
        }
      }
    }
  }
}

TEST_F(StatsGpu, OneLaunchForAThousandMixedTensors) {
  std::mt19937_64 rng(77);
  std::vector<std::vector<unsigned char>> host;
  std::vector<std::unique_ptr<DeviceBuffer>> device;
  std::vector<TensorRef> tensors;
  std::vector<std::uint64_t> shifts;
  for (int i = 0; i < 1000; ++i) {
    const DType type = kAllTypes[rng() % 12];
    const std::uint64_t count = (i % 50 == 0) ? 0 : (i % 97 == 0 ? 300000 + rng() % 1000 : rng() % 5000);
    const std::uint64_t shift = rng() % 3;
    host.push_back(make_data(type, count + shift, static_cast<Pattern>(rng() % 8), rng));
    device.push_back(std::make_unique<DeviceBuffer>(host.back()));
    tensors.push_back({device.back()->at(shift * trainscope::stats::dtype_size(type)), count, type});
    shifts.push_back(shift);
  }
  const auto results = run_batch(tensors);
  ASSERT_EQ(tensors.size(), results.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    expect_same(trainscope::stats::compute_stats_host(
                    host[i].data() + shifts[i] * trainscope::stats::dtype_size(t.dtype), t.count, t.dtype),
                results[i], "batch entry " + std::to_string(i));
  }
}

TEST_F(StatsGpu, TwoToTheThirtyOneElements) {
  std::mt19937_64 rng(31);
  for (DType type : {DType::kFloat8E4M3, DType::kFloat16}) {
    const std::uint64_t count = 1ull << 31;
    auto data = make_data(type, count, Pattern::kFinite, rng);
    const std::uint32_t size = trainscope::stats::dtype_size(type);
    const auto rules = trainscope::stats::dtype_rules(type);
    const std::uint64_t nan_at = count - 12345;  // beyond 2^31 - 2^14: indices need 64 bits in the kernel
    std::memcpy(&data[nan_at * size], &rules.non_finite_key, size);
    DeviceBuffer device(data);
    const auto results = run_batch({{device.at(0), count, type}});
    ASSERT_EQ(1u, results.size());
    expect_same(trainscope::stats::compute_stats_host(data.data(), count, type), results[0],
                std::string("2^31 ") + trainscope::stats::dtype_name(type));
    EXPECT_EQ(static_cast<std::int64_t>(nan_at), results[0].first_nonfinite);
  }
}

TEST_F(StatsGpu, ACapturingStreamGetsNoWork) {
  std::vector<unsigned char> data(4096, 0);
  DeviceBuffer device(data);
  ASSERT_EQ(CUDA_SUCCESS, cu().cuStreamBeginCapture(cu().stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  const TensorRef tensor{device.at(0), 1024, DType::kFloat32};
  const auto launch = GpuStats::instance().enqueue(cu().stream, {&tensor, 1});
  CUgraph graph = nullptr;
  ASSERT_EQ(CUDA_SUCCESS, cu().cuStreamEndCapture(cu().stream, &graph));
  EXPECT_EQ(GpuStatus::kSkippedCapturing, launch.status);
  std::size_t nodes = 0;
  EXPECT_EQ(CUDA_SUCCESS, cu().cuGraphGetNodes(graph, nullptr, &nodes));
  EXPECT_EQ(0u, nodes);  // nothing of ours went into the job's graph, and the capture is still valid
  cu().cuGraphDestroy(graph);
}

TEST_F(StatsGpu, SlotsAreReusedAndTheBoundIsKept) {
  std::vector<unsigned char> data(1 << 16, 0x3c);
  DeviceBuffer device(data);
  const TensorRef tensor{device.at(0), data.size() / 2, DType::kFloat16};
  const auto expected = trainscope::stats::compute_stats_host(data.data(), tensor.count, tensor.dtype);
  for (int i = 0; i < 200; ++i) {
    const auto results = run_batch({tensor});
    ASSERT_EQ(1u, results.size());
    expect_same(expected, results[0], "sequential " + std::to_string(i));
  }
  // Abandoned batches (dropped before ready) come back once the GPU is done with them.
  for (int i = 0; i < 10; ++i) {
    auto launch = GpuStats::instance().enqueue(cu().stream, {&tensor, 1});
    EXPECT_EQ(GpuStatus::kOk, launch.status);
  }
  cu().cuStreamSynchronize(cu().stream);
  // More in flight than the bound: the extra ones are refused and counted, never queued without end.
  const std::uint64_t dropped_before = GpuStats::instance().dropped_batches();
  std::vector<trainscope::stats::GpuLaunch> in_flight;
  for (int i = 0; i < GpuStats::kMaxSlotsPerContext + 8; ++i) {
    in_flight.push_back(GpuStats::instance().enqueue(cu().stream, {&tensor, 1}));
  }
  EXPECT_GE(GpuStats::instance().dropped_batches(), dropped_before + 8);
  for (auto& launch : in_flight) {
    if (launch.status != GpuStatus::kOk) continue;
    ASSERT_TRUE(launch.pending->wait()) << launch.pending->error();
    expect_same(expected, launch.pending->results()[0], "concurrent");
  }
}

}  // namespace
