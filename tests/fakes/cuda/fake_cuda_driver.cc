// A stand-in libcuda.so.1 for `trainscope doctor`'s tests: the driver's CUDA version and the GPUs (name, compute
// capability) come from TSFAKE_CUDA_DRIVER ("12040") and TSFAKE_CUDA_GPUS ("NVIDIA A100=8.0;NVIDIA H100=9.0").
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct FakeGpu {
  std::string name;
  int major = 0;
  int minor = 0;
};

std::vector<FakeGpu> gpus() {
  std::vector<FakeGpu> list;
  const char* text = std::getenv("TSFAKE_CUDA_GPUS");
  std::string all = text != nullptr ? text : "";
  size_t start = 0;
  while (start < all.size()) {
    size_t end = all.find(';', start);
    if (end == std::string::npos) end = all.size();
    const std::string entry = all.substr(start, end - start);
    const size_t eq = entry.rfind('=');
    FakeGpu gpu;
    if (eq != std::string::npos && std::sscanf(entry.c_str() + eq + 1, "%d.%d", &gpu.major, &gpu.minor) == 2) {
      gpu.name = entry.substr(0, eq);
      list.push_back(gpu);
    }
    start = end + 1;
  }
  return list;
}

constexpr int kSuccess = 0;
constexpr int kInvalidValue = 1;
constexpr int kNoDevice = 100;

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int cuDriverGetVersion(int* version) {
  const char* text = std::getenv("TSFAKE_CUDA_DRIVER");
  if (version == nullptr || text == nullptr) return kInvalidValue;
  *version = std::atoi(text);
  return kSuccess;
}

__attribute__((visibility("default"))) int cuInit(unsigned flags) {
  (void)flags;
  return gpus().empty() ? kNoDevice : kSuccess;
}

__attribute__((visibility("default"))) int cuDeviceGetCount(int* count) {
  if (count == nullptr) return kInvalidValue;
  *count = static_cast<int>(gpus().size());
  return kSuccess;
}

__attribute__((visibility("default"))) int cuDeviceGet(int* device, int ordinal) {
  if (device == nullptr || ordinal < 0 || ordinal >= static_cast<int>(gpus().size())) return kInvalidValue;
  *device = ordinal;
  return kSuccess;
}

__attribute__((visibility("default"))) int cuDeviceGetName(char* name, int length, int device) {
  const std::vector<FakeGpu> list = gpus();
  if (name == nullptr || length <= 0 || device < 0 || device >= static_cast<int>(list.size())) return kInvalidValue;
  std::snprintf(name, static_cast<size_t>(length), "%s", list[static_cast<size_t>(device)].name.c_str());
  return kSuccess;
}

__attribute__((visibility("default"))) int cuDeviceGetAttribute(int* value, int attribute, int device) {
  const std::vector<FakeGpu> list = gpus();
  constexpr int kComputeCapabilityMajor = 75;
  constexpr int kComputeCapabilityMinor = 76;
  if (value == nullptr || device < 0 || device >= static_cast<int>(list.size())) return kInvalidValue;
  if (attribute == kComputeCapabilityMajor)
    *value = list[static_cast<size_t>(device)].major;
  else if (attribute == kComputeCapabilityMinor)
    *value = list[static_cast<size_t>(device)].minor;
  else
    return kInvalidValue;
  return kSuccess;
}

}  // extern "C"
