// CPU stand-in libcuda.so.1: just enough of the CUDA driver API for the launch collector's tests to run real
// processes without a GPU, with the driver's own header (cuda.h) and CUPTI's callback structs.
//
// - cuInit loads CUDA_INJECTION64_PATH and calls its InitializeInjection, once, as the real driver does.
// - There is no device (cuDeviceGetCount says 0), so trainscope's statistics take the host path; "device" memory
//   from cuMemAlloc is host memory the driver knows the range of (cuPointerGetAttribute answers for it as host
//   memory, and CUDA_ERROR_INVALID_VALUE for anything else, like the real driver).
// - Modules are text: cuModuleLoadData takes lines "<mangled name> <param sizes, comma separated> [fault|hang]";
//   cuModuleGetFunction finds a kernel by name and cuFuncGetParamInfo answers from the sizes. A kernel runs (does
//   nothing) and finishes at its launch; a `fault` kernel leaves the context with the sticky error 700
//   (CUDA_ERROR_ILLEGAL_ADDRESS), returned by every later call that touches it; a `hang` kernel never finishes, nor
//   anything after it on its stream, and synchronising that stream blocks forever, as on a GPU.
// - Every API call is reported to the installed tool (fake_cuda_tool.h: the stand-in CUPTI) on enter and exit with
//   a real CUpti_CallbackData and the call's *_params struct; every finished kernel as kernel activity.
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <cupti.h>

#include "fake_cuda_tool.h"

#define TSFAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

struct FakeFunction {
  std::string name;
  std::vector<size_t> param_sizes;
  bool fault = false;
  bool hang = false;
};

struct FakeModule {
  std::vector<FakeFunction*> functions;
};

struct FakeStream {
  uint32_t id = 0;
  bool capturing = false;
  bool hung = false;  // a kernel on it never finishes: nothing after it does either
};

struct FakeContext {
  int unused = 0;
};

FakeContext g_context;
FakeStream g_legacy_stream{1, false, false};
std::atomic<const TsfakeCudaTool*> g_tool{nullptr};
std::atomic<uint32_t> g_correlation{0};
std::atomic<uint32_t> g_stream_ids{8};
std::atomic<int> g_sticky{CUDA_SUCCESS};
std::mutex g_mutex;  // guards the allocations and the init state
std::map<uintptr_t, size_t> g_allocations;
bool g_initialised = false;
thread_local uint32_t t_runtime_correlation = 0;  // see tsfake_cuda_runtime_call

CUcontext fake_context() { return reinterpret_cast<CUcontext>(&g_context); }

FakeStream* stream_of(CUstream stream) {
  // 0 is the legacy default stream, 2 the per-thread default one: both the one legacy stream here.
  const auto handle = reinterpret_cast<uintptr_t>(stream);
  return handle == 0 || handle == 2 ? &g_legacy_stream : reinterpret_cast<FakeStream*>(stream);
}

// A driver API call (fake_cuda_tool.h).
class ApiCall : public TsfakeApiCall<CUresult> {
 public:
  ApiCall(CUpti_driver_api_trace_cbid cbid, const char* name, const void* params, const char* symbol = nullptr)
      : TsfakeApiCall(CUPTI_CB_DOMAIN_DRIVER_API, cbid, name, params, symbol) {}
};

CUresult sticky() { return static_cast<CUresult>(g_sticky.load(std::memory_order_relaxed)); }

void kernel_ran(uint32_t correlation, FakeStream* stream, const char* name, bool hang) {
  if (stream->capturing) return;  // recorded into a graph, not run
  if (hang) stream->hung = true;
  if (stream->hung) return;
  const uint64_t now = tsfake_cuda_timestamp();
  if (const TsfakeCudaTool* tool = g_tool.load(std::memory_order_acquire);
      tool != nullptr && tool->kernel_completed != nullptr)
    tool->kernel_completed(t_runtime_correlation != 0 ? t_runtime_correlation : correlation, fake_context(), stream->id,
                           name, now, now);
}

[[noreturn]] void block_forever() {
  for (;;) pause();
}

// "name 8,8,4 fault" -> a function; false for a malformed line.
bool parse_function(const std::string& line, FakeFunction* out) {
  char name[512];
  char sizes[256] = "";
  char behaviour[16] = "";
  const int fields = sscanf(line.c_str(), "%511s %255s %15s", name, sizes, behaviour);
  if (fields < 1) return false;
  out->name = name;
  for (char* token = strtok(sizes, ","); token != nullptr; token = strtok(nullptr, ","))
    out->param_sizes.push_back(static_cast<size_t>(strtoull(token, nullptr, 10)));
  out->fault = strcmp(behaviour, "fault") == 0;
  out->hang = strcmp(behaviour, "hang") == 0;
  return fields < 3 || out->fault || out->hang;
}

}  // namespace

TSFAKE_EXPORT void tsfake_cuda_set_tool(const TsfakeCudaTool* tool) { g_tool.store(tool, std::memory_order_release); }

TSFAKE_EXPORT void tsfake_cuda_report(CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                      const CUpti_CallbackData* data) {
  if (const TsfakeCudaTool* tool = g_tool.load(std::memory_order_acquire); tool != nullptr && tool->api != nullptr)
    tool->api(domain, cbid, data);
}

TSFAKE_EXPORT void tsfake_cuda_runtime_call(uint32_t correlation) { t_runtime_correlation = correlation; }

TSFAKE_EXPORT uint32_t tsfake_cuda_next_correlation(void) {
  return g_correlation.fetch_add(1, std::memory_order_relaxed) + 1;
}

TSFAKE_EXPORT CUcontext tsfake_cuda_context(void) { return fake_context(); }

TSFAKE_EXPORT uint64_t tsfake_cuda_timestamp(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

TSFAKE_EXPORT CUresult cuInit(unsigned int flags) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_initialised) return CUDA_SUCCESS;
    g_initialised = true;
  }
  // The real driver loads the injection library at its first initialisation, before cuInit returns.
  if (const char* path = getenv("CUDA_INJECTION64_PATH"); path != nullptr && path[0] != '\0') {
    if (void* library = dlopen(path, RTLD_NOW | RTLD_GLOBAL); library != nullptr) {
      using Initialize = int (*)(void);
      if (auto initialize = reinterpret_cast<Initialize>(dlsym(library, "InitializeInjection")); initialize != nullptr)
        initialize();
    }
  }
  cuInit_params params{flags};
  ApiCall call(CUPTI_DRIVER_TRACE_CBID_cuInit, "cuInit", &params);
  return call.finish(CUDA_SUCCESS);
}

TSFAKE_EXPORT CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = 13000;
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuDeviceGetCount(int* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = 0;  // no GPU: trainscope's statistics run on the host
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuGetErrorString(CUresult error, const char** text) {
  if (text == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
    case CUDA_SUCCESS:
      *text = "no error";
      return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_VALUE:
      *text = "invalid argument";
      return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_FOUND:
      *text = "named symbol not found";
      return CUDA_SUCCESS;
    case CUDA_ERROR_ILLEGAL_ADDRESS:
      *text = "an illegal memory access was encountered";
      return CUDA_SUCCESS;
    default:
      *text = nullptr;
      return CUDA_ERROR_INVALID_VALUE;
  }
}

TSFAKE_EXPORT CUresult cuGetErrorName(CUresult error, const char** text) {
  if (text == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *text = error == CUDA_SUCCESS                 ? "CUDA_SUCCESS"
          : error == CUDA_ERROR_ILLEGAL_ADDRESS ? "CUDA_ERROR_ILLEGAL_ADDRESS"
                                                : "CUDA_ERROR_UNKNOWN";
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  cuModuleLoadData_params params{module, image};
  ApiCall call(CUPTI_DRIVER_TRACE_CBID_cuModuleLoadData, "cuModuleLoadData", &params);
  if (module == nullptr || image == nullptr) return call.finish(CUDA_ERROR_INVALID_VALUE);
  if (sticky() != CUDA_SUCCESS) return call.finish(sticky());
  auto* loaded = new FakeModule();
  const std::string text(static_cast<const char*>(image));
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    if (line.empty()) continue;
    auto* function = new FakeFunction();
    if (!parse_function(line, function)) {
      delete function;
      return call.finish(CUDA_ERROR_INVALID_IMAGE);
    }
    loaded->functions.push_back(function);
  }
  *module = reinterpret_cast<CUmodule>(loaded);
  return call.finish(CUDA_SUCCESS);
}

TSFAKE_EXPORT CUresult cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
  cuModuleGetFunction_params params{function, module, name};
  ApiCall call(CUPTI_DRIVER_TRACE_CBID_cuModuleGetFunction, "cuModuleGetFunction", &params);
  if (function == nullptr || module == nullptr || name == nullptr) return call.finish(CUDA_ERROR_INVALID_VALUE);
  for (FakeFunction* candidate : reinterpret_cast<FakeModule*>(module)->functions) {
    if (candidate->name == name) {
      *function = reinterpret_cast<CUfunction>(candidate);
      return call.finish(CUDA_SUCCESS);
    }
  }
  return call.finish(CUDA_ERROR_NOT_FOUND);
}

TSFAKE_EXPORT CUresult cuFuncGetName(const char** name, CUfunction function) {
  if (name == nullptr || function == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *name = reinterpret_cast<FakeFunction*>(function)->name.c_str();
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuFuncGetParamInfo(CUfunction function, size_t index, size_t* offset, size_t* size) {
  cuFuncGetParamInfo_params params{function, index, offset, size};
  ApiCall call(CUPTI_DRIVER_TRACE_CBID_cuFuncGetParamInfo, "cuFuncGetParamInfo", &params);
  if (function == nullptr) return call.finish(CUDA_ERROR_INVALID_VALUE);
  const auto& sizes = reinterpret_cast<FakeFunction*>(function)->param_sizes;
  if (index >= sizes.size()) return call.finish(CUDA_ERROR_INVALID_VALUE);
  size_t at = 0;
  for (size_t i = 0; i < index; ++i) at = (at + sizes[i] + 7) / 8 * 8;  // every parameter 8-aligned here
  if (offset != nullptr) *offset = at;
  if (size != nullptr) *size = sizes[index];
  return call.finish(CUDA_SUCCESS);
}

TSFAKE_EXPORT CUresult cuStreamCreate(CUstream* stream, unsigned int flags) {
  cuStreamCreate_params params{stream, flags};
  ApiCall call(CUPTI_DRIVER_TRACE_CBID_cuStreamCreate, "cuStreamCreate", &params);
  if (stream == nullptr) return call.finish(CUDA_ERROR_INVALID_VALUE);
  if (sticky() != CUDA_SUCCESS) return call.finish(sticky());
  auto* created = new FakeStream();
  created->id = g_stream_ids.fetch_add(1, std::memory_order_relaxed);
  *stream = reinterpret_cast<CUstream>(created);
  return call.finish(CUDA_SUCCESS);
}

TSFAKE_EXPORT CUresult cuStreamGetCtx(CUstream, CUcontext* context) {
  if (context == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *context = fake_context();
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuStreamBeginCapture_v2(CUstream stream, CUstreamCaptureMode mode) {
  cuStreamBeginCapture_v2_params params{stream, mode};
  ApiCall call(CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2, "cuStreamBeginCapture_v2", &params);
  if (stream == nullptr) return call.finish(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  stream_of(stream)->capturing = true;
  return call.finish(CUDA_SUCCESS);
}

TSFAKE_EXPORT CUresult cuStreamEndCapture(CUstream stream, CUgraph* graph) {
  cuStreamEndCapture_params params{stream, graph};
  ApiCall call(CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture, "cuStreamEndCapture", &params);
  if (stream == nullptr || !stream_of(stream)->capturing) return call.finish(CUDA_ERROR_ILLEGAL_STATE);
  stream_of(stream)->capturing = false;
  if (graph != nullptr) *graph = reinterpret_cast<CUgraph>(new int(0));
  return call.finish(CUDA_SUCCESS);
}

TSFAKE_EXPORT CUresult cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus* status) {
  cuStreamIsCapturing_params params{stream, status};
  ApiCall call(CUPTI_DRIVER_TRACE_CBID_cuStreamIsCapturing, "cuStreamIsCapturing", &params);
  if (status == nullptr) return call.finish(CUDA_ERROR_INVALID_VALUE);
  *status = stream_of(stream)->capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return call.finish(CUDA_SUCCESS);
}

TSFAKE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* pointer, size_t bytes) {
  cuMemAlloc_v2_params params{pointer, bytes};
  ApiCall call(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, "cuMemAlloc_v2", &params);
  if (pointer == nullptr || bytes == 0) return call.finish(CUDA_ERROR_INVALID_VALUE);
  if (sticky() != CUDA_SUCCESS) return call.finish(sticky());
  void* memory = calloc(1, bytes);
  if (memory == nullptr) return call.finish(CUDA_ERROR_OUT_OF_MEMORY);
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_allocations[reinterpret_cast<uintptr_t>(memory)] = bytes;
  }
  *pointer = reinterpret_cast<CUdeviceptr>(memory);
  return call.finish(CUDA_SUCCESS);
}

TSFAKE_EXPORT CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr pointer) {
  cuPointerGetAttribute_params params{data, attribute, pointer};
  ApiCall call(CUPTI_DRIVER_TRACE_CBID_cuPointerGetAttribute, "cuPointerGetAttribute", &params);
  if (data == nullptr) return call.finish(CUDA_ERROR_INVALID_VALUE);
  uintptr_t base = 0;
  size_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto next = g_allocations.upper_bound(static_cast<uintptr_t>(pointer));
    if (next != g_allocations.begin()) {
      auto found = std::prev(next);
      if (pointer < found->first + found->second) {
        base = found->first;
        bytes = found->second;
      }
    }
  }
  if (bytes == 0) return call.finish(CUDA_ERROR_INVALID_VALUE);  // memory the driver never saw
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned int*>(data) = CU_MEMORYTYPE_HOST;
      return call.finish(CUDA_SUCCESS);
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      *static_cast<CUdeviceptr*>(data) = base;
      return call.finish(CUDA_SUCCESS);
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      *static_cast<size_t*>(data) = bytes;
      return call.finish(CUDA_SUCCESS);
    default:
      return call.finish(CUDA_ERROR_NOT_SUPPORTED);
  }
}

TSFAKE_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
                                      unsigned int block_x, unsigned int block_y, unsigned int block_z,
                                      unsigned int shared_bytes, CUstream stream, void** kernel_params, void** extra) {
  cuLaunchKernel_params params{f,       grid_x,       grid_y, grid_z,        block_x, block_y,
                               block_z, shared_bytes, stream, kernel_params, extra};
  auto* function = reinterpret_cast<FakeFunction*>(f);
  ApiCall call(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, "cuLaunchKernel", &params,
               function != nullptr ? function->name.c_str() : nullptr);
  if (function == nullptr) return call.finish(CUDA_ERROR_INVALID_HANDLE);
  if (sticky() != CUDA_SUCCESS) return call.finish(sticky());
  kernel_ran(call.correlation(), stream_of(stream), function->name.c_str(), function->hang);
  const CUresult result = call.finish(CUDA_SUCCESS);
  // The fault surfaces later, at the next call that touches the context, as on a GPU.
  if (function->fault && !stream_of(stream)->capturing) g_sticky.store(CUDA_ERROR_ILLEGAL_ADDRESS);
  return result;
}

TSFAKE_EXPORT CUresult cuGraphLaunch(CUgraphExec graph, CUstream stream) {
  cuGraphLaunch_params params{graph, stream};
  ApiCall call(CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, "cuGraphLaunch", &params);
  if (graph == nullptr) return call.finish(CUDA_ERROR_INVALID_VALUE);
  if (sticky() != CUDA_SUCCESS) return call.finish(sticky());
  kernel_ran(call.correlation(), stream_of(stream), "graph", false);
  return call.finish(CUDA_SUCCESS);
}

TSFAKE_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, unsigned long long) {
  if (exec == nullptr || graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *exec = reinterpret_cast<CUgraphExec>(graph);
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuStreamSynchronize(CUstream stream) {
  cuStreamSynchronize_params params{stream};
  ApiCall call(CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize, "cuStreamSynchronize", &params);
  if (sticky() != CUDA_SUCCESS) return call.finish(sticky());
  if (stream_of(stream)->hung) block_forever();
  return call.finish(CUDA_SUCCESS);
}

TSFAKE_EXPORT CUresult cuCtxSynchronize(void) {
  ApiCall call(CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize, "cuCtxSynchronize", nullptr);
  return call.finish(sticky());
}
