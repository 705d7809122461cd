// GPU benchmark of the statistics kernel: GB/s against the device's own copy bandwidth and a multi-pass baseline,
// and one launch for 1,000 small tensors against 1,000 launches. Prints a table; `--json FILE` also writes the figures.
// Without a GPU it says so and exits 0.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu/cuda_driver.h"
#include "kernels/gpu_stats.h"
#include "kernels/tensor_view.h"

extern const unsigned char trainscope_bench_fatbin[];
extern const std::size_t trainscope_bench_fatbin_size;

namespace {

using trainscope::stats::DType;
using trainscope::stats::GpuStats;
using trainscope::stats::TensorRef;

trainscope::gpu_testing::Driver& cu() { return trainscope::gpu_testing::driver(); }

#define CHECK_CU(call)                                                                                          \
  do {                                                                                                          \
    const CUresult check_result = (call);                                                                       \
    if (check_result != CUDA_SUCCESS) {                                                                         \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cu().error_text(check_result).c_str()); \
      std::exit(1);                                                                                             \
    }                                                                                                           \
  } while (0)

// Milliseconds per repetition of `body` on the stream (events around `repetitions` runs, best of 3 rounds).
template <typename Body>
double time_ms(int repetitions, Body body) {
  CUevent start = nullptr;
  CUevent stop = nullptr;
  CHECK_CU(cu().cuEventCreate(&start, CU_EVENT_DEFAULT));
  CHECK_CU(cu().cuEventCreate(&stop, CU_EVENT_DEFAULT));
  body();  // warm-up (module loading, first-touch)
  CHECK_CU(cu().cuStreamSynchronize(cu().stream));
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    CHECK_CU(cu().cuEventRecord(start, cu().stream));
    for (int i = 0; i < repetitions; ++i) body();
    CHECK_CU(cu().cuEventRecord(stop, cu().stream));
    CHECK_CU(cu().cuEventSynchronize(stop));
    float ms = 0;
    CHECK_CU(cu().cuEventElapsedTime(&ms, start, stop));
    best = std::min(best, static_cast<double>(ms) / repetitions);
  }
  return best;
}

void stats_once(const std::vector<TensorRef>& tensors) {
  auto launch = GpuStats::instance().enqueue(cu().stream, tensors);
  if (launch.status == trainscope::stats::GpuStatus::kBusy) {
    // Every result slot is in flight (the benchmark queues faster than a poller would collect): let them finish.
    CHECK_CU(cu().cuStreamSynchronize(cu().stream));
    launch = GpuStats::instance().enqueue(cu().stream, tensors);
  }
  if (launch.status != trainscope::stats::GpuStatus::kOk) {
    std::fprintf(stderr, "enqueue: %s\n", launch.message.c_str());
    std::exit(1);
  }
  // Dropping the pending batch is fine: its slot is reused once its event has passed.
}

std::string human_bytes(std::uint64_t bytes) {
  char text[32];
  if (bytes >= (1ull << 30)) {
    std::snprintf(text, sizeof text, "%llu GiB", static_cast<unsigned long long>(bytes >> 30));
  } else if (bytes >= (1ull << 20)) {
    std::snprintf(text, sizeof text, "%llu MiB", static_cast<unsigned long long>(bytes >> 20));
  } else {
    std::snprintf(text, sizeof text, "%llu KiB", static_cast<unsigned long long>(bytes >> 10));
  }
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) json_path = argv[++i];
  }
  const std::string& reason = trainscope::gpu_testing::driver_unavailable_reason();
  if (!reason.empty()) {
    std::printf("stats_gpu_bench: skipped, no GPU: %s\n", reason.c_str());
    return 0;
  }
  if (!GpuStats::instance().available()) {
    std::printf("stats_gpu_bench: skipped: %s\n", GpuStats::instance().unavailable_reason().c_str());
    return 0;
  }
  CUmodule module = nullptr;
  CHECK_CU(cu().cuModuleLoadData(&module, trainscope_bench_fatbin));
  CUfunction passes[4] = {};
  const char* pass_names[4] = {"baseline_count_nan", "baseline_count_inf", "baseline_abs_min", "baseline_abs_max"};
  for (int i = 0; i < 4; ++i) CHECK_CU(cu().cuModuleGetFunction(&passes[i], module, pass_names[i]));

  nlohmann::json out;
  out["device"] = cu().device_name;
  std::printf("device: %s\n\n", cu().device_name.c_str());
  std::printf("%10s %6s %12s %12s %9s %14s %9s\n", "size", "dtype", "stats GB/s", "copy GB/s*", "of copy",
              "4-pass GB/s", "speed-up");

  const std::uint64_t max_bytes = 4ull << 30;
  CUdeviceptr source = 0;
  CUdeviceptr target = 0;
  CUdeviceptr scalars = 0;
  CHECK_CU(cu().cuMemAlloc(&source, max_bytes));
  CHECK_CU(cu().cuMemAlloc(&target, max_bytes));
  CHECK_CU(cu().cuMemAlloc(&scalars, 64));
  // 0x3c in every byte is a finite value of every float type: the common case, no element takes the slow path.
  CHECK_CU(cu().cuMemsetD8Async(source, 0x3c, max_bytes, cu().stream));
  CHECK_CU(cu().cuStreamSynchronize(cu().stream));

  struct TypeCase {
    DType type;
    bool all_sizes;
  };
  const TypeCase cases[] = {{DType::kFloat32, true},
                            {DType::kFloat16, false},
                            {DType::kBfloat16, false},
                            {DType::kFloat8E4M3, false},
                            {DType::kFloat64, false}};
  for (const TypeCase& c : cases) {
    for (std::uint64_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
      if (!c.all_sizes && bytes != (256ull << 20) && bytes != (4ull << 30)) continue;
      const int repetitions = bytes <= (1u << 20) ? 200 : (bytes <= (256u << 20) ? 20 : 3);
      const std::uint64_t count = bytes / trainscope::stats::dtype_size(c.type);
      const std::vector<TensorRef> one = {{reinterpret_cast<const void*>(source), count, c.type}};
      const double stats_ms = time_ms(repetitions, [&] { stats_once(one); });
      CHECK_CU(cu().cuStreamSynchronize(cu().stream));
      // Copy: reads `bytes` and writes `bytes`; the bus moves twice the size.
      const double copy_ms =
          time_ms(repetitions, [&] { CHECK_CU(cu().cuMemcpyDtoDAsync(target, source, bytes, cu().stream)); });
      const double stats_gbps = bytes / stats_ms / 1e6;
      const double copy_gbps = 2.0 * bytes / copy_ms / 1e6;
      double baseline_gbps = 0;
      if (c.type == DType::kFloat32) {
        std::uint64_t vectors = bytes / 16;
        CUdeviceptr data = source;
        const double baseline_ms = time_ms(repetitions, [&] {
          for (int p = 0; p < 4; ++p) {
            CUdeviceptr slot = scalars + 8 * p;
            void* args[] = {&data, &vectors, &slot};
            const unsigned grid = static_cast<unsigned>(std::min<std::uint64_t>((vectors + 255) / 256, 132 * 8));
            CHECK_CU(
                cu().cuLaunchKernel(passes[p], std::max(1u, grid), 1, 1, 256, 1, 1, 0, cu().stream, args, nullptr));
          }
        });
        baseline_gbps = bytes / baseline_ms / 1e6;
      }
      std::printf("%10s %6s %12.1f %12.1f %8.1f%% %14.1f %8.2fx\n", human_bytes(bytes).c_str(),
                  trainscope::stats::dtype_name(c.type), stats_gbps, copy_gbps, 100.0 * stats_gbps / copy_gbps,
                  baseline_gbps, baseline_gbps > 0 ? stats_gbps / baseline_gbps : 0.0);
      out["sizes"].push_back({{"bytes", bytes},
                              {"dtype", trainscope::stats::dtype_name(c.type)},
                              {"stats_gbps", stats_gbps},
                              {"copy_bus_gbps", copy_gbps},
                              {"fraction_of_copy", stats_gbps / copy_gbps},
                              {"multipass_gbps", baseline_gbps},
                              {"speedup_vs_multipass", baseline_gbps > 0 ? stats_gbps / baseline_gbps : 0.0}});
    }
  }
  std::printf("* copy GB/s counts bytes read plus bytes written (the bus figure); stats reads each byte once.\n\n");

  // A strided view (a module frame's transposed activation): 4096 x 8192 fp16 read as its transpose, against the
  // same elements contiguous. The strided walk reads one element per thread with an index division per dimension.
  {
    const std::uint64_t rows = 4096;
    const std::uint64_t cols = 8192;
    const std::vector<trainscope::stats::ViewDim> dims = {
        {static_cast<std::int64_t>(cols), 1}, {static_cast<std::int64_t>(rows), static_cast<std::int64_t>(cols)}};
    TensorRef transposed{reinterpret_cast<const void*>(source), rows * cols, DType::kFloat16};
    transposed.shape = *trainscope::stats::strided_shape(dims);
    const std::vector<TensorRef> strided = {transposed};
    const std::vector<TensorRef> dense = {{reinterpret_cast<const void*>(source), rows * cols, DType::kFloat16}};
    const double strided_ms = time_ms(5, [&] { stats_once(strided); });
    const double dense_ms = time_ms(5, [&] { stats_once(dense); });
    CHECK_CU(cu().cuStreamSynchronize(cu().stream));
    const double bytes = static_cast<double>(rows * cols * 2);
    std::printf("transposed 4096 x 8192 fp16 view: %.3f ms (%.1f GB/s), contiguous %.3f ms (%.1f GB/s)\n\n", strided_ms,
                bytes / strided_ms / 1e6, dense_ms, bytes / dense_ms / 1e6);
    out["transposed_view_64MiB_fp16"] = {{"strided_ms", strided_ms}, {"contiguous_ms", dense_ms}};
  }

  // 1,000 tensors of 4 KiB: one launch for all of them against one launch each.
  std::vector<TensorRef> many;
  for (int i = 0; i < 1000; ++i) {
    many.push_back({reinterpret_cast<const void*>(source + static_cast<CUdeviceptr>(i) * 4096), 1024, DType::kFloat32});
  }
  const double batch_ms = time_ms(5, [&] { stats_once(many); });
  CHECK_CU(cu().cuStreamSynchronize(cu().stream));
  const double separate_ms = time_ms(1, [&] {
    for (int i = 0; i < 1000; ++i) stats_once({many[i]});
  });
  std::printf("1000 x 4 KiB fp32: one launch %.3f ms, 1000 launches %.3f ms (%.1fx)\n", batch_ms, separate_ms,
              separate_ms / batch_ms);
  out["batch_1000x4KiB"] = {{"one_launch_ms", batch_ms}, {"separate_launches_ms", separate_ms}};

  if (!json_path.empty()) {
    FILE* file = std::fopen(json_path.c_str(), "w");
    if (file != nullptr) {
      std::fprintf(file, "%s\n", out.dump(2).c_str());
      std::fclose(file);
    }
  }
  return 0;
}
