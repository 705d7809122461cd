// The GPU launcher where no GPU can run (a clear status, never a crash) and the kernel's chunking arithmetic.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/gpu_stats.h"
#include "kernels/stats_kernel_abi.h"

namespace {

using trainscope::stats::descriptor_layout;
using trainscope::stats::DescriptorLayout;

TEST(StatsLauncher, WithoutAUsableGpuEveryCallSaysUnavailable) {
  auto& gpu = trainscope::stats::GpuStats::instance();
  if (gpu.available()) GTEST_SKIP() << "a GPU is usable here; tests/gpu covers this machine";
  EXPECT_FALSE(gpu.unavailable_reason().empty());
  std::vector<float> host(16, 1.0f);
  const trainscope::stats::TensorRef tensor{host.data(), host.size(), trainscope::stats::DType::kFloat32};
  const trainscope::stats::GpuLaunch launch = gpu.enqueue(nullptr, {&tensor, 1});
  EXPECT_EQ(trainscope::stats::GpuStatus::kUnavailable, launch.status);
  EXPECT_EQ(gpu.unavailable_reason(), launch.message);
  EXPECT_EQ(nullptr, launch.pending);
  EXPECT_FALSE(trainscope::stats::inside_own_launch());
}

TEST(StatsLauncher, RejectsEmptyBatchesAndUnknownTypes) {
  auto& gpu = trainscope::stats::GpuStats::instance();
  EXPECT_EQ(trainscope::stats::GpuStatus::kInvalidArgument, gpu.enqueue(nullptr, {}).status);
  const trainscope::stats::TensorRef bad{nullptr, 1, static_cast<trainscope::stats::DType>(99)};
  EXPECT_EQ(trainscope::stats::GpuStatus::kInvalidArgument, gpu.enqueue(nullptr, {&bad, 1}).status);
}

TEST(StatsLauncher, EmbedsTheFatbinWhenBuiltWithKernels) {
  if (!trainscope::stats::kernels_built()) GTEST_SKIP() << "built with TRAINSCOPE_BUILD_KERNELS=OFF";
  EXPECT_GT(trainscope::stats::embedded_fatbin_size(), 1000u);
}

// Every element lands in exactly one of head, body and tail, whatever the alignment and size.
TEST(StatsLauncher, LayoutCoversEveryElementOnce) {
  for (std::uint32_t size : {1u, 2u, 4u, 8u}) {
    for (std::uint64_t address = 0x1000; address < 0x1000 + 16; address += size) {
      for (std::uint64_t count : {1ull, 2ull, 3ull, 7ull, 8ull, 15ull, 16ull, 17ull, 4095ull, 100000ull, 1ull << 31}) {
        const DescriptorLayout layout = descriptor_layout(address, count, size);
        ASSERT_FALSE(layout.scalar);
        EXPECT_EQ(count, layout.head_elements + layout.body_vectors * (16 / size) + layout.tail_elements);
        EXPECT_LT(layout.head_elements * size, 16u);
        EXPECT_LT(layout.tail_elements * size, 16u);
        if (layout.body_vectors > 0) {
          EXPECT_EQ(0u, (address + layout.head_elements * size) % 16);
        }
        const std::uint64_t chunks = (layout.body_vectors + trainscope::stats::kStatsVectorsPerChunk - 1) /
                                     trainscope::stats::kStatsVectorsPerChunk;
        EXPECT_EQ(chunks == 0 ? 1 : chunks, layout.chunk_count);
      }
    }
  }
}

TEST(StatsLauncher, MisalignedElementsAndEmptyTensors) {
  EXPECT_EQ(0u, descriptor_layout(0x1000, 0, 4).chunk_count);
  const DescriptorLayout odd = descriptor_layout(0x1001, 5000, 4);
  EXPECT_TRUE(odd.scalar);
  EXPECT_EQ((5000 + trainscope::stats::kStatsScalarChunkElements - 1) / trainscope::stats::kStatsScalarChunkElements,
            odd.chunk_count);
  EXPECT_FALSE(descriptor_layout(0x1001, 5000, 1).scalar);  // bytes are always element-aligned
}

}  // namespace
