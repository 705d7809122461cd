// Module frames of CUDA tensors without PyTorch: what the hooks of TRAINSCOPE_WATCH=modules hand the library for a
// model on a GPU (shim/module_frame_abi.h), packed by hand, on device memory of the CUDA driver libcuda.so.1 finds
// (the CPU stand-in driver, tests/fakes/cuda/fake_stats_driver.cc, in the tests). Run under LD_PRELOAD=libtrainscope.so
// with TRAINSCOPE_WATCH=modules.
//
// Per batch: "encoder.fc Linear" with its fp16 weight (contiguous), input[0] a transposed fp32 view (a slice of a
// 48 x 40 storage read as its 32 x 48 transpose), output (fp32, contiguous; +inf at element 5 from batch 2 on), a
// host bias row (CPU), and a view of 9 dimensions that do not merge (no row: the kernel reads at most 8); then the
// root " Model" (its output, ending the batch).
//   device_module_frames_program [BATCHES]   (exit 0 when every frame was taken; 77 when no driver is found)
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gpu/cuda_driver.h"
#include "shim/module_frame_abi.h"

namespace {

using FrameFn = int (*)(const char*, const char*, const char*, uint64_t, const int64_t*, uint64_t);

constexpr int64_t kFloat32 = 1;  // stats::DType
constexpr int64_t kFloat16 = 2;
constexpr size_t kDeepElements = 9842;  // the 9-dimensional view's reach: (3^9 - 1) / 2 + 1

struct Row {
  std::string label;
  int64_t dtype;
  uint64_t data;
  int64_t device;  // -1: host memory
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
};

void pack(const std::vector<Row>& rows, int64_t flags, uint64_t stream, std::vector<int64_t>* words,
          std::string* labels) {
  words->assign({trainscope::kModuleFrameVersion, flags, static_cast<int64_t>(rows.size())});
  labels->clear();
  for (const Row& row : rows) {
    int64_t numel = 1;
    for (const int64_t size : row.sizes) numel *= size;
    words->insert(words->end(), {static_cast<int64_t>(trainscope::ModuleRowKind::kTensor), row.dtype,
                                 static_cast<int64_t>(row.data), numel, static_cast<int64_t>(row.sizes.size()),
                                 row.device, row.device < 0 ? 0 : static_cast<int64_t>(stream)});
    words->insert(words->end(), row.sizes.begin(), row.sizes.end());
    words->insert(words->end(), row.strides.begin(), row.strides.end());
    labels->append(row.label);
    labels->push_back('\0');
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int batches = argc > 1 ? std::atoi(argv[1]) : 4;
  trainscope::gpu_testing::Driver& cuda = trainscope::gpu_testing::driver();
  if (const std::string& why = trainscope::gpu_testing::driver_unavailable_reason(); !why.empty()) {
    std::fprintf(stderr, "device_module_frames_program: %s\n", why.c_str());
    return 77;
  }
  auto frame = reinterpret_cast<FrameFn>(dlsym(RTLD_DEFAULT, "trainscope_module_frame"));
  if (frame == nullptr) {
    std::fprintf(stderr, "device_module_frames_program: trainscope_module_frame not found (run under the shim)\n");
    return 2;
  }
  // The weight: 64 x 32 fp16, every element 0.5 but one 3.0 (0x4200).
  std::vector<uint16_t> weight(64 * 32, 0x3800);
  weight[100] = 0x4200;
  // The input's storage: 48 x 40 fp32, element (r, c) = r * 40 + c + 1; the view is columns 3..34 of it transposed:
  // 32 x 48, strides (1, 40) from element 3. Its abs min is 4 (row 0, column 3) and its abs max 48 * 40 - 40 + 35.
  std::vector<float> storage(48 * 40);
  for (size_t i = 0; i < storage.size(); ++i) storage[i] = static_cast<float>(i + 1);
  std::vector<float> output(48 * 64, -0.25f);
  output[7] = 2.0f;
  std::vector<float> bias(64, 0.125f);
  CUdeviceptr weight_d = 0, storage_d = 0, output_d = 0, deep_d = 0;
  if (cuda.cuMemAlloc(&weight_d, weight.size() * 2) != CUDA_SUCCESS ||
      cuda.cuMemAlloc(&storage_d, storage.size() * 4) != CUDA_SUCCESS ||
      cuda.cuMemAlloc(&output_d, output.size() * 4) != CUDA_SUCCESS ||
      cuda.cuMemAlloc(&deep_d, kDeepElements * 4) != CUDA_SUCCESS) {
    std::fprintf(stderr, "device_module_frames_program: cuMemAlloc failed\n");
    return 1;
  }
  cuda.cuMemcpyHtoD(weight_d, weight.data(), weight.size() * 2);
  cuda.cuMemcpyHtoD(storage_d, storage.data(), storage.size() * 4);
  const auto stream = reinterpret_cast<uint64_t>(cuda.stream);
  // Nine dimensions of size 2, strides 3^8 ... 3^0: no stride is the next one's times its size, so nothing merges.
  std::vector<int64_t> deep_sizes(9, 2);
  std::vector<int64_t> deep_strides(9);
  for (int d = 8, stride = 1; d >= 0; --d, stride *= 3) deep_strides[static_cast<size_t>(d)] = stride;
  const std::vector<float> zeros(kDeepElements, 0.0f);
  cuda.cuMemcpyHtoD(deep_d, zeros.data(), zeros.size() * 4);

  int refused = 0;
  std::vector<int64_t> words;
  std::string labels;
  for (int batch = 0; batch < batches; ++batch) {
    output[5] = batch >= 2 ? std::numeric_limits<float>::infinity() : 1.5f;
    cuda.cuMemcpyHtoD(output_d, output.data(), output.size() * 4);
    pack({{"weight", kFloat16, weight_d, 0, {64, 32}, {32, 1}},
          {"bias", kFloat32, reinterpret_cast<uint64_t>(bias.data()), -1, {64}, {1}},
          {"input[0]", kFloat32, storage_d + 3 * 4, 0, {32, 48}, {1, 40}},
          {"input[1]", kFloat32, deep_d, 0, deep_sizes, deep_strides},
          {"output", kFloat32, output_d, 0, {48, 64}, {64, 1}}},
         0, stream, &words, &labels);
    refused += frame("encoder.fc", "Linear", labels.data(), labels.size(), words.data(), words.size()) != 0;
    pack({{"output", kFloat32, output_d, 0, {48, 64}, {64, 1}}}, trainscope::kModuleFrameRoot, stream, &words, &labels);
    refused += frame("", "Model", labels.data(), labels.size(), words.data(), words.size()) != 0;
    cuda.cuStreamSynchronize(cuda.stream);
  }
  std::printf("device_module_frames_program: %d batches, %d frames refused\n", batches, refused);
  return refused == 0 ? 0 : 1;
}
