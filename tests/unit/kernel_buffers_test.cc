// A watched launch's buffers (collectors/launches/kernel_buffers.h) from synthetic arguments, a fake parameter layout
// and fake device allocations.
#include "collectors/launches/kernel_buffers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "kernels/stats.h"
#include "shim/config.h"
#include "tests/unit/fake_cuda_queries.h"

namespace trainscope::launches {
namespace {

using stats::DType;

// One launch's argument values and the pointers to them that kernelParams holds.
struct Arguments {
  std::vector<uint64_t> values;
  std::vector<void*> pointers;
  explicit Arguments(std::vector<uint64_t> v) : values(std::move(v)) {
    for (uint64_t& value : values) pointers.push_back(&value);
  }
};

ApiCall launch_of(uint64_t function, Arguments& args) {
  ApiCall call;
  call.klass = CallClass::kLaunch;
  call.kind = LaunchKind::kKernel;
  call.function_handle = function;
  call.stream = 0x5000;
  call.params = args.pointers.data();
  return call;
}

constexpr uint64_t kFunction = 0xF00D;

TEST(KernelBuffers, PointersIntoDeviceMemoryAreBuffersTypedByTheSignature) {
  FakeCudaQueries queries;
  queries.layouts[kFunction] = {{0, 8}, {8, 8}, {16, 4}, {24, 8}};
  queries.allocations.push_back({0x10000, 4096, true});  // output: 1024 floats
  queries.allocations.push_back({0x20000, 1024, true});  // input: 512 halves
  Arguments args({0x10000, 0x20000, 7, 0x20000 + 512});
  const KernelSignature kernel =
      describe_kernel("void scale_kernel<float>(float*, c10::Half const*, int, c10::Half const*)");
  const WatchedLaunch launch = watched_launch(launch_of(kFunction, args), kernel, queries, BufferOptions{});
  EXPECT_EQ(launch.short_name, "scale_kernel");
  EXPECT_EQ(launch.stream, 0x5000u);
  ASSERT_EQ(launch.buffers.size(), 3u) << launch.note;
  EXPECT_EQ(launch.buffers[0].label, "output[0]");
  EXPECT_TRUE(launch.buffers[0].output);
  EXPECT_EQ(launch.buffers[0].tensor.dtype, DType::kFloat32);
  EXPECT_EQ(launch.buffers[0].tensor.count, 1024u);
  // Two parameters in one allocation: the first runs to where the second starts.
  EXPECT_EQ(launch.buffers[1].label, "input[1]");
  EXPECT_FALSE(launch.buffers[1].output);
  EXPECT_EQ(launch.buffers[1].tensor.dtype, DType::kFloat16);
  EXPECT_EQ(launch.buffers[1].tensor.count, 256u);
  EXPECT_EQ(launch.buffers[2].label, "input[3]");  // labelled by parameter index, not buffer index
  EXPECT_EQ(launch.buffers[2].tensor.address, reinterpret_cast<const void*>(0x20000 + 512));
  EXPECT_EQ(launch.buffers[2].tensor.count, 256u);
  EXPECT_EQ(launch.note, "");
}

TEST(KernelBuffers, TemplateTypeThenConfiguredTypeThenSkippedWithANote) {
  FakeCudaQueries queries;
  queries.layouts[kFunction] = {{0, 8}, {8, 8}};
  queries.allocations.push_back({0x10000, 4096, true});
  queries.allocations.push_back({0x20000, 4096, true});
  Arguments args({0x10000, 0x20000});
  // char* and void* say nothing: the kernel's template argument does.
  KernelSignature kernel = describe_kernel("void copy_kernel<c10::BFloat16>(char*, void const*)");
  WatchedLaunch launch = watched_launch(launch_of(kFunction, args), kernel, queries, BufferOptions{});
  ASSERT_EQ(launch.buffers.size(), 2u);
  EXPECT_EQ(launch.buffers[0].tensor.dtype, DType::kBfloat16);
  EXPECT_EQ(launch.buffers[0].tensor.count, 2048u);
  EXPECT_EQ(launch.buffers[1].label, "input[1]");

  // A Triton kernel (extern "C"): no signature, every buffer an output, the type from TRAINSCOPE_KERNEL_DTYPE.
  kernel = describe_kernel("triton_poi_fused_add_0");
  BufferOptions options;
  options.has_default_type = true;
  options.default_type = DType::kFloat16;
  launch = watched_launch(launch_of(kFunction, args), kernel, queries, options);
  ASSERT_EQ(launch.buffers.size(), 2u);
  EXPECT_EQ(launch.buffers[0].label, "output[0]");
  EXPECT_EQ(launch.buffers[1].label, "output[1]");
  EXPECT_EQ(launch.buffers[1].tensor.dtype, DType::kFloat16);

  // Without it, skipped, and the note says how to get them.
  launch = watched_launch(launch_of(kFunction, args), kernel, queries, BufferOptions{});
  EXPECT_TRUE(launch.buffers.empty());
  EXPECT_NE(launch.note.find("output[0] skipped: its element type is not in the kernel's name (set "
                             "TRAINSCOPE_KERNEL_DTYPE)"),
            std::string::npos)
      << launch.note;
}

TEST(KernelBuffers, HostPointersScalarsAndArraysOfPointersAreNotBuffers) {
  FakeCudaQueries queries;
  queries.layouts[kFunction] = {{0, 8}, {8, 8}, {16, 8}, {24, 8}, {32, 8}};
  queries.allocations.push_back({0x10000, 4096, true});
  queries.allocations.push_back({0x30000, 4096, false});  // pinned host memory
  // A long whose value falls in the allocation, a host pointer, a null pointer, an array of pointers.
  Arguments args({0x10000 + 64, 0x30000, 0, 0x10000, 0x10000 + 128});
  const KernelSignature kernel = describe_kernel("void k(long, float*, float*, float**, double*)");
  const WatchedLaunch launch = watched_launch(launch_of(kFunction, args), kernel, queries, BufferOptions{});
  ASSERT_EQ(launch.buffers.size(), 1u) << launch.note;
  EXPECT_EQ(launch.buffers[0].label, "output[4]");
  EXPECT_EQ(launch.buffers[0].tensor.dtype, DType::kFloat64);
  EXPECT_EQ(launch.buffers[0].tensor.count, (4096u - 128u) / 8u);
  EXPECT_NE(launch.note.find("output[3] skipped: an array of pointers"), std::string::npos) << launch.note;
}

TEST(KernelBuffers, LargeBuffersAreCutAndSaySo) {
  FakeCudaQueries queries;
  queries.layouts[kFunction] = {{0, 8}};
  queries.allocations.push_back({0x100000, uint64_t{1} << 32, true});
  Arguments args({0x100000});
  BufferOptions options;
  options.max_buffer_bytes = 1 << 20;
  const WatchedLaunch launch =
      watched_launch(launch_of(kFunction, args), describe_kernel("void k(float*)"), queries, options);
  ASSERT_EQ(launch.buffers.size(), 1u);
  EXPECT_EQ(launch.buffers[0].tensor.count, (1u << 20) / 4);
  EXPECT_EQ(launch.note, "output[0] cut to its first 1048576 of 4294967296 bytes");
}

TEST(KernelBuffers, NoLayoutOrNoArgumentsSayWhy) {
  FakeCudaQueries queries;  // knows no layout: a driver older than CUDA 12.4
  Arguments args({0x10000});
  WatchedLaunch launch = watched_launch(launch_of(kFunction, args), describe_kernel("void k(float*)"), queries, {});
  EXPECT_TRUE(launch.buffers.empty());
  EXPECT_NE(launch.note.find("CUDA 12.4"), std::string::npos) << launch.note;
  ApiCall call = launch_of(kFunction, args);
  call.params = nullptr;
  launch = watched_launch(call, describe_kernel("void k(float*)"), queries, {});
  EXPECT_EQ(launch.note, "no kernel arguments were passed to the launch");
}

TEST(KernelBuffers, ASignatureThatDisagreesWithTheLayoutIsNotTrusted) {
  FakeCudaQueries queries;
  queries.layouts[kFunction] = {{0, 8}, {8, 8}};  // two parameters; the name lists one
  queries.allocations.push_back({0x10000, 4096, true});
  Arguments args({0x10000, 0x10000 + 1024});
  BufferOptions options;
  options.has_default_type = true;
  options.default_type = DType::kUint8;
  const WatchedLaunch launch =
      watched_launch(launch_of(kFunction, args), describe_kernel("void k(int const*)"), queries, options);
  ASSERT_EQ(launch.buffers.size(), 2u);
  EXPECT_EQ(launch.buffers[0].label, "output[0]");
  EXPECT_EQ(launch.buffers[0].tensor.dtype, DType::kUint8);
  EXPECT_EQ(launch.buffers[0].tensor.count, 1024u);
}

TEST(KernelBuffers, EveryKernelDtypeTheConfigurationAcceptsIsAStatisticsType) {
  // The collector reads TRAINSCOPE_KERNEL_DTYPE with stats::parse_dtype: every accepted value must parse there.
  const std::string accepted = config_vars()[kVarKernelDtype].accepted;
  size_t begin = 0;
  int names = 0;
  while (begin <= accepted.size()) {
    const size_t end = std::min(accepted.find('|', begin), accepted.size());
    const std::string name = accepted.substr(begin, end - begin);
    EXPECT_TRUE(stats::parse_dtype(name).has_value()) << name;
    ++names;
    begin = end + 1;
  }
  EXPECT_EQ(names, stats::kDTypeCount);
}

}  // namespace
}  // namespace trainscope::launches
