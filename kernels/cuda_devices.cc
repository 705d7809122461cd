// The CUDA driver's version and its devices, through dlopen (see cuda_devices.h).
#include "kernels/cuda_devices.h"

#include <cuda.h>
#include <dlfcn.h>

namespace trainscope::stats {

CudaDriver query_cuda_driver(const std::string& library, int ordinal) {
  CudaDriver driver;
  void* cuda = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (cuda == nullptr) {
    const char* why = dlerror();
    driver.error = library + " cannot be loaded: " + (why != nullptr ? why : "?");
    return driver;
  }
  // cuda.h maps some names to versioned symbols (cuDeviceTotalMem -> cuDeviceTotalMem_v2): the symbol is named as
  // a program linked against libcuda would call it.
  auto find = [cuda](auto* fn, const char* name) {
    *fn = reinterpret_cast<std::remove_reference_t<decltype(*fn)>>(dlsym(cuda, name));
    return *fn != nullptr;
  };
  decltype(&::cuDriverGetVersion) driver_version = nullptr;
  decltype(&::cuInit) init = nullptr;
  decltype(&::cuDeviceGetCount) device_count = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDeviceGetName) name = nullptr;
  decltype(&::cuDeviceGetAttribute) attribute = nullptr;
  decltype(&::cuDeviceTotalMem) memory = nullptr;
  decltype(&::cuDeviceGetPCIBusId) bus = nullptr;
  if (find(&driver_version, "cuDriverGetVersion") && driver_version(&driver.version) != CUDA_SUCCESS)
    driver.version = 0;
  find(&memory, "cuDeviceTotalMem_v2");
  find(&bus, "cuDeviceGetPCIBusId");
  if (!find(&init, "cuInit") || !find(&device_count, "cuDeviceGetCount") || !find(&device_get, "cuDeviceGet") ||
      !find(&name, "cuDeviceGetName") || !find(&attribute, "cuDeviceGetAttribute")) {
    driver.error = library + " lacks the device functions";
    return driver;
  }
  int count = 0;
  if (const CUresult rc = init(0); rc != CUDA_SUCCESS) {
    driver.error = "cuInit failed with CUDA error " + std::to_string(static_cast<int>(rc));
    return driver;
  }
  if (device_count(&count) != CUDA_SUCCESS || count <= 0) {
    driver.error = "the driver sees no GPU";
    return driver;
  }
  const int first = ordinal >= 0 ? ordinal % count : 0;
  const int last = ordinal >= 0 ? first : count - 1;
  for (int i = first; i <= last; ++i) {
    CUdevice device = 0;
    char text[256] = {};
    CudaDevice info;
    if (device_get(&device, i) != CUDA_SUCCESS || name(text, sizeof(text) - 1, device) != CUDA_SUCCESS ||
        attribute(&info.major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device) != CUDA_SUCCESS ||
        attribute(&info.minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device) != CUDA_SUCCESS)
      continue;
    info.name = text;
    if (memory != nullptr && memory(&info.memory_bytes, device) != CUDA_SUCCESS) info.memory_bytes = 0;
    char bus_id[64] = {};
    if (bus != nullptr && bus(bus_id, sizeof(bus_id) - 1, device) == CUDA_SUCCESS) info.bus_id = bus_id;
    driver.devices.push_back(std::move(info));
  }
  return driver;
}

}  // namespace trainscope::stats
