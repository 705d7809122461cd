// Strided views (kernels/tensor_view.h): their merged dimensions, their statistics on the host, and the statistics
// kernel's element-by-element walk of a strided view (stats_kernel_abi.h), replayed here on the CPU with the same
// per-element rules, since no GPU runs the kernel in CI (tests/gpu checks the kernel itself where one is lent).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kernels/gpu_stats.h"
#include "kernels/stats.h"
#include "kernels/stats_kernel_abi.h"
#include "kernels/tensor_view.h"
#include "support/tensor_stats.h"

namespace trainscope::stats {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

struct View {
  const char* what;
  std::int64_t offset;  // of the view's first element in the storage
  std::vector<std::int64_t> sizes;
  std::vector<std::int64_t> strides;
};

// Offsets of a view's elements in logical order, by an odometer over its unmerged dimensions: the definition.
std::vector<std::int64_t> element_offsets(const std::vector<std::int64_t>& sizes,
                                          const std::vector<std::int64_t>& strides) {
  std::vector<std::int64_t> out;
  std::vector<std::int64_t> at(sizes.size(), 0);
  std::int64_t count = 1;
  for (const std::int64_t s : sizes) count *= s;
  for (std::int64_t n = 0; n < count; ++n) {
    std::int64_t offset = 0;
    for (std::size_t d = 0; d < sizes.size(); ++d) offset += at[d] * strides[d];
    out.push_back(offset);
    for (std::size_t d = sizes.size(); d > 0; --d) {
      if (++at[d - 1] < sizes[d - 1]) break;
      at[d - 1] = 0;
    }
  }
  return out;
}

template <typename T>
std::vector<T> materialise(const T* data, const View& view) {
  std::vector<T> out;
  for (const std::int64_t offset : element_offsets(view.sizes, view.strides)) out.push_back(data[offset]);
  return out;
}

// A 6 x 5000 float matrix (bigger than one gather buffer per column), with an inf and a NaN in known places, and
// views of it as PyTorch makes them.
class StridedViews : public ::testing::Test {
 protected:
  static constexpr std::int64_t kRows = 6;
  static constexpr std::int64_t kCols = 5000;

  void SetUp() override {
    storage_.resize(static_cast<std::size_t>(kRows * kCols));
    for (std::size_t i = 0; i < storage_.size(); ++i) storage_[i] = static_cast<float>(i % 97) - 48.5f;
    storage_[3 * kCols + 17] = kInf;
    storage_[5 * kCols + 4001] = kNan;
  }

  const std::vector<View> views_ = {
      {"contiguous", 0, {kRows, kCols}, {kCols, 1}},
      {"transposed", 0, {kCols, kRows}, {1, kCols}},
      {"a column slice", 10, {kRows, 3000}, {kCols, 1}},
      {"every other column", 1, {kRows, kCols / 2}, {kCols, 2}},
      {"expanded (stride 0)", 3 * kCols, {4, 50}, {0, 1}},
      {"one column, with the inf", 17, {kRows}, {kCols}},
      {"with dimensions of size 1", 0, {1, kRows, 1, kCols}, {7, kCols, 3, 1}},
      {"three dimensions, permuted", 0, {10, kRows, 500}, {500, kCols, 1}},
      {"four dimensions, transposed inner pair", 0, {2, 3, 500, 10}, {3 * kCols, kCols, 1, 500}},
      {"a scalar", 3 * kCols + 17, {}, {}},
  };
  std::vector<float> storage_;
};

TEST_F(StridedViews, TheHostGivesTheStatisticsOfTheElementsInLogicalOrder) {
  for (const View& view : views_) {
    const float* data = storage_.data() + view.offset;
    const std::vector<float> elements = materialise(data, view);
    const TensorStats want = compute_stats_host(elements.data(), elements.size(), DType::kFloat32, ChecksumMode::kSkip);
    const TensorStats got = strided_host_stats(data, DType::kFloat32, static_cast<std::int64_t>(view.sizes.size()),
                                               view.sizes.data(), view.strides.data());
    trainscope::testing::expect_same_statistics(got, want, view.what);
  }
  const std::int64_t empty_sizes[] = {3, 0};
  const std::int64_t empty_strides[] = {0, 1};
  EXPECT_EQ(strided_host_stats(nullptr, DType::kFloat16, 2, empty_sizes, empty_strides).count, 0u);
}

TEST_F(StridedViews, MergingKeepsEveryElementsOffsetAndOrder) {
  for (const View& view : views_) {
    const std::vector<ViewDim> dims =
        merge_view_dims(static_cast<std::int64_t>(view.sizes.size()), view.sizes.data(), view.strides.data());
    std::vector<std::int64_t> sizes;
    std::vector<std::int64_t> strides;
    for (const ViewDim& dim : dims) {
      sizes.push_back(dim.size);
      strides.push_back(dim.stride);
    }
    EXPECT_EQ(element_offsets(sizes, strides), element_offsets(view.sizes, view.strides)) << view.what;
    for (const ViewDim& dim : dims) EXPECT_GE(dim.size, 2) << view.what;
  }
}

TEST(ViewDims, DenseViewsAreOneRunAndOthersAreNot) {
  auto dims = [](std::vector<std::int64_t> sizes, std::vector<std::int64_t> strides) {
    return merge_view_dims(static_cast<std::int64_t>(sizes.size()), sizes.data(), strides.data());
  };
  EXPECT_TRUE(is_dense(dims({4, 8, 16}, {128, 16, 1})));
  EXPECT_TRUE(is_dense(dims({1, 8, 1}, {99, 1, 5})));  // size-1 dimensions' strides do not matter
  EXPECT_TRUE(is_dense(dims({}, {})));
  EXPECT_EQ(1u, dims({4, 8, 16}, {128, 16, 1}).size());
  EXPECT_FALSE(is_dense(dims({8, 4}, {1, 8})));   // transposed
  EXPECT_FALSE(is_dense(dims({4, 8}, {16, 1})));  // a slice of columns
  EXPECT_FALSE(is_dense(dims({4, 8}, {0, 1})));   // expanded
  EXPECT_FALSE(is_dense(dims({8}, {2})));         // every other element
}

TEST(ViewDims, TheKernelsShapeHoldsUpToItsDimensionLimit) {
  std::vector<ViewDim> dims;
  std::int64_t stride = 1;
  for (std::uint32_t d = 0; d < kMaxStridedDims; ++d) {
    dims.insert(dims.begin(), {2, stride * 3});  // a gap between dimensions: nothing merges
    stride *= 6;
  }
  const std::optional<StridedShape> shape = strided_shape(dims);
  ASSERT_TRUE(shape.has_value());
  EXPECT_EQ(kMaxStridedDims, shape->ndim);
  EXPECT_EQ(dims.front().stride, shape->strides[0]);
  EXPECT_EQ(2, shape->sizes[kMaxStridedDims - 1]);
  dims.insert(dims.begin(), {2, stride * 3});
  EXPECT_FALSE(strided_shape(dims).has_value());
}

// The kernel's strided walk, replayed: the chunks of strided_layout, each element's offset from
// strided_element_offset, the same per-element rules. Its statistics, checksum included, are those of a copy.
TEST(StridedKernelWalk, EveryViewEveryTypeGivesTheStatisticsOfItsCopy) {
  std::mt19937_64 rng(7);
  for (const DType type :
       {DType::kFloat64, DType::kFloat32, DType::kFloat16, DType::kBfloat16, DType::kFloat8E4M3, DType::kFloat8E5M2,
        DType::kInt8, DType::kUint8, DType::kInt32, DType::kUint32, DType::kInt64, DType::kUint64}) {
    const DTypeRules rules = dtype_rules(type);
    // A 3 x 40 x 70 storage of random bits (NaNs and infs included for the float types).
    const std::int64_t elements = 3 * 40 * 70;
    std::vector<unsigned char> storage(static_cast<std::size_t>(elements) * rules.size);
    for (auto& byte : storage) byte = static_cast<unsigned char>(rng());
    const std::vector<View> views = {
        {"transposed", 0, {70, 120}, {1, 70}},
        {"permuted", 5, {40, 3, 60}, {70, 2800, 1}},
        {"expanded", 0, {9, 70}, {0, 1}},
        {"strided by 3", 1, {2799}, {3}},
    };
    for (const View& view : views) {
      const std::string what = std::string(dtype_name(type)) + ", " + view.what;
      const unsigned char* data = storage.data() + view.offset * rules.size;
      const std::vector<ViewDim> dims =
          merge_view_dims(static_cast<std::int64_t>(view.sizes.size()), view.sizes.data(), view.strides.data());
      ASSERT_FALSE(is_dense(dims)) << what;
      const std::optional<StridedShape> shape = strided_shape(dims);
      ASSERT_TRUE(shape.has_value()) << what;

      std::vector<unsigned char> copy;
      for (const std::int64_t offset : element_offsets(view.sizes, view.strides)) {
        copy.insert(copy.end(), data + offset * rules.size, data + (offset + 1) * rules.size);
      }
      const std::uint64_t count = copy.size() / rules.size;
      TensorRef tensor{data, count, type, *shape};
      EXPECT_EQ("", strided_shape_error(tensor)) << what;

      StatsDescriptor descriptor{reinterpret_cast<std::uint64_t>(data), count, 0, static_cast<std::uint32_t>(type), 1};
      const DescriptorLayout layout = descriptor_layout(descriptor, rules.size);
      ASSERT_TRUE(layout.strided) << what;
      StatsPartial partial = empty_partial();
      for (std::uint64_t chunk = 0; chunk < layout.chunk_count; ++chunk) {
        const std::uint64_t first = chunk * kStatsScalarChunkElements;
        for (std::uint64_t i = first; i < count && i < first + kStatsScalarChunkElements; ++i) {
          std::uint64_t bits = 0;
          std::memcpy(&bits, data + strided_element_offset(*shape, i) * rules.size, rules.size);
          add_element(partial, rules, i, bits);
        }
      }
      const TensorStats got = finalize_stats(type, count, partial);
      const TensorStats want = compute_stats_host(copy.data(), count, type, ChecksumMode::kCompute);
      trainscope::testing::expect_same_statistics(got, want, what);
      EXPECT_EQ(got.checksum, want.checksum) << what;
    }
  }
}

TEST(StridedKernelWalk, ChunksCoverEveryElementOnce) {
  for (const std::uint64_t count : {1ull, 2047ull, 2048ull, 2049ull, 1ull << 33}) {
    const DescriptorLayout layout = strided_layout(count);
    EXPECT_TRUE(layout.strided);
    EXPECT_GE(layout.chunk_count * kStatsScalarChunkElements, count);
    EXPECT_LT((layout.chunk_count - 1) * kStatsScalarChunkElements, count);
  }
  EXPECT_EQ(0u, strided_layout(0).chunk_count);
}

TEST(StridedShapeError, TheLauncherRefusesAShapeThatDoesNotDescribeItsTensor) {
  float element = 0;
  const std::vector<ViewDim> transposed = {{4, 1}, {3, 4}};
  TensorRef tensor{&element, 12, DType::kFloat32, *strided_shape(transposed)};
  EXPECT_EQ("", strided_shape_error(tensor));
  tensor.count = 13;
  EXPECT_EQ("a strided shape of 12 elements for a tensor of 13", strided_shape_error(tensor));
  tensor.count = 12;
  tensor.shape.sizes[1] = 0;
  EXPECT_EQ("a strided shape with a dimension of size 0", strided_shape_error(tensor));
  tensor.shape.ndim = kMaxStridedDims + 1;
  EXPECT_EQ("a strided shape of 9 dimensions (at most 8)", strided_shape_error(tensor));
  // enqueue checks it before it needs a GPU, so this holds on every machine.
  const GpuLaunch launch = GpuStats::instance().enqueue(nullptr, {&tensor, 1});
  EXPECT_EQ(GpuStatus::kInvalidArgument, launch.status);
  EXPECT_EQ("a strided shape of 9 dimensions (at most 8)", launch.message);
  EXPECT_EQ(nullptr, launch.pending);
}

}  // namespace
}  // namespace trainscope::stats
