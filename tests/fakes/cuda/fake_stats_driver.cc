// A CPU stand-in libcuda.so.1 with one GPU, for the statistics launcher's device path (kernels/gpu_stats.h) and
// everything above it: the GPU test binaries (tests/gpu) and the frame reports of device buffers run on it here.
//
// - Device memory (cuMemAlloc) is host memory whose ranges the driver knows: cuPointerGetAttribute calls it device
//   memory, pinned memory (cuMemHostAlloc) host memory, anything else CUDA_ERROR_INVALID_VALUE, as the real driver.
// - Copies, memsets and kernels run at once, in the calling thread: a stream's order is the call order. An event is
//   done at its record but says CUDA_ERROR_NOT_READY to the first query after each record, so pollers poll
//   (TSFAKE_CUDA_EVENT_POLLS=N: to the first N).
// - cuModuleLoadData takes any image; the one kernel is the statistics kernel (kStatsKernelName). Its launch is
//   replayed on the host by the launch contract of kernels/stats_kernel_abi.h: the same chunks handed out in order,
//   the same descriptor search, layouts and strided offsets, the per-element rules of stats_elements.h; the last
//   block's publication and reset of the scratch and counters. It checks what the real kernel takes for granted and
//   would fault or silently err on: counters zero and scratch empty at launch, and every element inside one
//   allocation (else the context gets the sticky CUDA_ERROR_ILLEGAL_ADDRESS, as after a GPU fault).
// - Stream capture: cuStreamBeginCapture/EndCapture and cuStreamIsCapturing; a capture records nothing.
// What it cannot show is the CUDA code itself (vector loads, warp shuffles, atomics): tests/gpu on a real GPU does.
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/stats_kernel_abi.h"

#define TSFAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

namespace ts = trainscope::stats;

struct FakeStream {
  bool capturing = false;
};
struct FakeEvent {
  int queries_until_done = 0;
};
struct FakeModule {
  int unused = 0;
};
struct FakeFunction {
  int unused = 0;
};
struct FakeGraph {
  int unused = 0;
};

int g_context_storage = 0;
FakeFunction g_stats_kernel;
FakeStream g_legacy_stream;
std::mutex g_mutex;  // guards the allocations and the streams' state
// Start of each allocation -> its size and whether it is pinned host memory (cuMemHostAlloc).
struct Allocation {
  size_t size = 0;
  bool host = false;
};
std::map<uintptr_t, Allocation> g_allocations;
std::atomic<int> g_sticky{CUDA_SUCCESS};
thread_local int t_context_depth = 0;

CUcontext fake_context() { return reinterpret_cast<CUcontext>(&g_context_storage); }
FakeStream* stream_of(CUstream stream) {
  const auto handle = reinterpret_cast<uintptr_t>(stream);
  return handle == 0 || handle == 2 ? &g_legacy_stream : reinterpret_cast<FakeStream*>(stream);
}
CUresult sticky() { return static_cast<CUresult>(g_sticky.load(std::memory_order_relaxed)); }

// The allocation holding [address, address + bytes), or nullptr.
const Allocation* allocation_of(uintptr_t address, size_t bytes) {
  auto next = g_allocations.upper_bound(address);
  if (next == g_allocations.begin()) return nullptr;
  const auto found = std::prev(next);
  return address + bytes <= found->first + found->second.size ? &found->second : nullptr;
}

void* allocate(size_t bytes, bool host) {
  void* memory = aligned_alloc(256, (std::max<size_t>(bytes, 1) + 255) / 256 * 256);
  if (memory == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_allocations[reinterpret_cast<uintptr_t>(memory)] = {bytes, host};
  return memory;
}

void fail(const char* what) {
  fprintf(stderr, "fake CUDA driver: the statistics kernel %s\n", what);
  g_sticky.store(CUDA_ERROR_ILLEGAL_ADDRESS, std::memory_order_relaxed);
}

// The lowest and highest element offset a descriptor's walk reads, for the bounds check.
void offset_range(const ts::StatsDescriptor& tensor, const ts::StridedShape* shape, int64_t* low, int64_t* high) {
  *low = 0;
  *high = static_cast<int64_t>(tensor.count) - 1;
  if (shape == nullptr) return;
  *high = 0;
  for (uint64_t d = 0; d < shape->ndim; ++d) {
    const int64_t reach = (shape->sizes[d] - 1) * shape->strides[d];
    (reach < 0 ? *low : *high) += reach;
  }
}

uint64_t read_bits(const unsigned char* element, uint32_t size) {
  uint64_t bits = 0;
  memcpy(&bits, element, size);  // little-endian, as the GPU stores it
  return bits;
}

// One chunk of one tensor, as process_chunk walks it (stats_kernels.cu), element by element.
void replay_chunk(const ts::StatsDescriptor& tensor, const ts::StridedShape* shape, uint64_t chunk,
                  ts::StatsPartial& partial) {
  const auto type = static_cast<ts::DType>(tensor.dtype);
  const ts::DTypeRules rules = ts::dtype_rules(type);
  const ts::DescriptorLayout layout = ts::descriptor_layout(tensor, rules.size);
  const auto* bytes = reinterpret_cast<const unsigned char*>(tensor.address);
  auto add = [&](uint64_t index, int64_t offset) {
    ts::add_element(partial, rules, index, read_bits(bytes + offset * static_cast<int64_t>(rules.size), rules.size));
  };
  if (layout.scalar || layout.strided) {
    const uint64_t first = chunk * ts::kStatsScalarChunkElements;
    const uint64_t end = std::min<uint64_t>(first + ts::kStatsScalarChunkElements, tensor.count);
    for (uint64_t i = first; i < end; ++i)
      add(i, layout.strided ? ts::strided_element_offset(*shape, i) : static_cast<int64_t>(i));
    return;
  }
  const uint64_t per_vector = 16 / rules.size;
  if (chunk == 0) {
    for (uint64_t i = 0; i < layout.head_elements + layout.tail_elements; ++i) {
      const uint64_t index = i < layout.head_elements ? i : i + layout.body_vectors * per_vector;
      add(index, static_cast<int64_t>(index));
    }
  }
  const uint64_t first_vector = chunk * ts::kStatsVectorsPerChunk;
  const uint64_t end_vector = std::min<uint64_t>(first_vector + ts::kStatsVectorsPerChunk, layout.body_vectors);
  if ((tensor.address + layout.head_elements * rules.size) % 16 != 0 && end_vector > first_vector) {
    fail("was given a body that is not 16-byte aligned");
    return;
  }
  for (uint64_t v = first_vector; v < end_vector; ++v) {
    for (uint64_t j = 0; j < per_vector; ++j) {
      const uint64_t index = layout.head_elements + v * per_vector + j;
      add(index, static_cast<int64_t>(index));
    }
  }
}

bool same_partial(const ts::StatsPartial& a, const ts::StatsPartial& b) {
  return a.min_finite_key == b.min_finite_key && a.max_finite_key == b.max_finite_key && a.nan_count == b.nan_count &&
         a.pos_inf_count == b.pos_inf_count && a.neg_inf_count == b.neg_inf_count &&
         a.first_nonfinite == b.first_nonfinite && a.checksum == b.checksum;
}

// The statistics kernel's launch, replayed (see the file comment).
void replay_stats_kernel(const ts::StatsKernelParams& params) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (params.counters[0] != 0 || params.counters[1] != 0) return fail("found its counters not zero at launch");
  for (uint64_t i = 0; i < params.descriptor_count; ++i) {
    if (!same_partial(params.scratch[i], ts::empty_partial())) return fail("found a scratch entry not empty at launch");
    const ts::StatsDescriptor& tensor = params.descriptors[i];
    if (!ts::dtype_valid(tensor.dtype)) return fail("was given an unknown dtype");
    const ts::StridedShape* shape = tensor.shape != 0 ? &params.shapes[tensor.shape - 1] : nullptr;
    if (tensor.count == 0) continue;
    int64_t low = 0;
    int64_t high = 0;
    offset_range(tensor, shape, &low, &high);
    const int64_t size = ts::dtype_rules(static_cast<ts::DType>(tensor.dtype)).size;
    const auto first = static_cast<uintptr_t>(static_cast<int64_t>(tensor.address) + low * size);
    const auto* holder = allocation_of(first, static_cast<size_t>((high - low + 1) * size));
    if (holder == nullptr || holder->host) return fail("would read outside device memory (an illegal address)");
  }
  for (uint64_t chunk = 0; chunk < params.total_chunks; ++chunk) {
    const uint64_t d = ts::find_descriptor(params.descriptors, params.descriptor_count, chunk);
    const ts::StatsDescriptor& tensor = params.descriptors[d];
    const ts::StridedShape* shape = tensor.shape != 0 ? &params.shapes[tensor.shape - 1] : nullptr;
    ts::StatsPartial partial = ts::empty_partial();
    replay_chunk(tensor, shape, chunk - tensor.first_chunk, partial);
    ts::merge_partial(params.scratch[d], partial);
  }
  for (uint64_t i = 0; i < params.descriptor_count; ++i) {
    params.results[i] = params.scratch[i];
    params.scratch[i] = ts::empty_partial();
  }
  params.counters[0] = 0;
  params.counters[1] = 0;
}

}  // namespace

TSFAKE_EXPORT CUresult cuInit(unsigned int) { return CUDA_SUCCESS; }

TSFAKE_EXPORT CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = 13000;
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuGetErrorString(CUresult error, const char** text) {
  if (text == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
    case CUDA_SUCCESS:
      *text = "no error";
      break;
    case CUDA_ERROR_INVALID_VALUE:
      *text = "invalid argument";
      break;
    case CUDA_ERROR_NOT_READY:
      *text = "device not ready";
      break;
    case CUDA_ERROR_NOT_FOUND:
      *text = "named symbol not found";
      break;
    case CUDA_ERROR_ILLEGAL_ADDRESS:
      *text = "an illegal memory access was encountered";
      break;
    case CUDA_ERROR_OUT_OF_MEMORY:
      *text = "out of memory";
      break;
    default:
      *text = "unknown error";
  }
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuDeviceGetCount(int* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = 1;
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (device == nullptr || ordinal != 0) return CUDA_ERROR_INVALID_VALUE;
  *device = 0;
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuDeviceGetName(char* name, int length, CUdevice) {
  if (name == nullptr || length <= 0) return CUDA_ERROR_INVALID_VALUE;
  snprintf(name, static_cast<size_t>(length), "%s", "trainscope stand-in GPU (host memory)");
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *value = attribute == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT ? 4 : 0;
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* context, CUdevice) {
  if (context == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *context = fake_context();
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuCtxSetCurrent(CUcontext) { return CUDA_SUCCESS; }

TSFAKE_EXPORT CUresult cuCtxPushCurrent(CUcontext context) {
  if (context != fake_context()) return CUDA_ERROR_INVALID_VALUE;
  ++t_context_depth;
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuCtxPopCurrent(CUcontext* context) {
  if (t_context_depth == 0) return CUDA_ERROR_INVALID_VALUE;
  --t_context_depth;
  if (context != nullptr) *context = fake_context();
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuCtxGetDevice(CUdevice* device) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *device = 0;
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuStreamCreate(CUstream* stream, unsigned int) {
  if (stream == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *stream = reinterpret_cast<CUstream>(new FakeStream());
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuStreamGetCtx(CUstream, CUcontext* context) {
  if (context == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *context = fake_context();
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuStreamSynchronize(CUstream) { return sticky(); }

TSFAKE_EXPORT CUresult cuStreamBeginCapture(CUstream stream, CUstreamCaptureMode) {
  std::lock_guard<std::mutex> lock(g_mutex);
  FakeStream* s = stream_of(stream);
  if (s->capturing) return CUDA_ERROR_ILLEGAL_STATE;
  s->capturing = true;
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuStreamEndCapture(CUstream stream, CUgraph* graph) {
  std::lock_guard<std::mutex> lock(g_mutex);
  FakeStream* s = stream_of(stream);
  if (!s->capturing || graph == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  s->capturing = false;
  *graph = reinterpret_cast<CUgraph>(new FakeGraph());
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus* status) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_mutex);
  *status = stream_of(stream)->capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  static thread_local CUstreamCaptureMode current = CU_STREAM_CAPTURE_MODE_GLOBAL;
  std::swap(current, *mode);
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode*, size_t* count) {
  if (graph == nullptr || count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = 0;  // a capture records nothing here
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuGraphDestroy(CUgraph graph) {
  delete reinterpret_cast<FakeGraph*>(graph);
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuMemAlloc(CUdeviceptr* pointer, size_t bytes) {
  if (pointer == nullptr) return CUDA_ERROR_INVALID_VALUE;
  void* memory = allocate(bytes, false);
  if (memory == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  *pointer = reinterpret_cast<CUdeviceptr>(memory);
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuMemFree(CUdeviceptr pointer) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_allocations.erase(static_cast<uintptr_t>(pointer)) == 0) return CUDA_ERROR_INVALID_VALUE;
  free(reinterpret_cast<void*>(pointer));
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuMemHostAlloc(void** pointer, size_t bytes, unsigned int) {
  if (pointer == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pointer = allocate(bytes, true);
  return *pointer != nullptr ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

TSFAKE_EXPORT CUresult cuMemHostGetDevicePointer(CUdeviceptr* device, void* host, unsigned int) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_mutex);
  const Allocation* holder = allocation_of(reinterpret_cast<uintptr_t>(host), 1);
  if (holder == nullptr || !holder->host) return CUDA_ERROR_INVALID_VALUE;
  *device = reinterpret_cast<CUdeviceptr>(host);  // mapped: the same address on both sides
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr pointer) {
  if (data == nullptr || attribute != CU_POINTER_ATTRIBUTE_MEMORY_TYPE) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_mutex);
  const Allocation* holder = allocation_of(static_cast<uintptr_t>(pointer), 1);
  if (holder == nullptr) return CUDA_ERROR_INVALID_VALUE;  // memory CUDA never saw
  *static_cast<unsigned int*>(data) = holder->host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuMemcpyHtoD(CUdeviceptr target, const void* source, size_t bytes) {
  memcpy(reinterpret_cast<void*>(target), source, bytes);
  return sticky();
}

TSFAKE_EXPORT CUresult cuMemcpyHtoDAsync(CUdeviceptr target, const void* source, size_t bytes, CUstream stream) {
  if (stream_of(stream)->capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  memcpy(reinterpret_cast<void*>(target), source, bytes);
  return sticky();
}

TSFAKE_EXPORT CUresult cuMemcpyDtoDAsync(CUdeviceptr target, CUdeviceptr source, size_t bytes, CUstream) {
  memmove(reinterpret_cast<void*>(target), reinterpret_cast<const void*>(source), bytes);
  return sticky();
}

TSFAKE_EXPORT CUresult cuMemsetD8Async(CUdeviceptr target, unsigned char value, size_t count, CUstream) {
  memset(reinterpret_cast<void*>(target), value, count);
  return sticky();
}

TSFAKE_EXPORT CUresult cuEventCreate(CUevent* event, unsigned int) {
  if (event == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *event = reinterpret_cast<CUevent>(new FakeEvent());
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuEventRecord(CUevent event, CUstream) {
  if (event == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // TSFAKE_CUDA_EVENT_POLLS: how many queries say "not ready" after each record (1 unless set).
  static const int polls = getenv("TSFAKE_CUDA_EVENT_POLLS") != nullptr ? atoi(getenv("TSFAKE_CUDA_EVENT_POLLS")) : 1;
  std::lock_guard<std::mutex> lock(g_mutex);
  reinterpret_cast<FakeEvent*>(event)->queries_until_done = polls;
  return sticky();
}

TSFAKE_EXPORT CUresult cuEventQuery(CUevent event) {
  if (event == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (sticky() != CUDA_SUCCESS) return sticky();
  std::lock_guard<std::mutex> lock(g_mutex);
  auto* e = reinterpret_cast<FakeEvent*>(event);
  if (e->queries_until_done > 0) {
    --e->queries_until_done;
    return CUDA_ERROR_NOT_READY;
  }
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuEventSynchronize(CUevent event) {
  if (event == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_mutex);
  reinterpret_cast<FakeEvent*>(event)->queries_until_done = 0;
  return sticky();
}

TSFAKE_EXPORT CUresult cuEventElapsedTime(float* milliseconds, CUevent, CUevent) {
  if (milliseconds == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *milliseconds = 0;
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *module = reinterpret_cast<CUmodule>(new FakeModule());
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuModuleGetFunction(CUfunction* function, CUmodule, const char* name) {
  if (function == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (strcmp(name, ts::kStatsKernelName) != 0) return CUDA_ERROR_NOT_FOUND;
  *function = reinterpret_cast<CUfunction>(&g_stats_kernel);
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuFuncGetAttribute(int* value, CUfunction_attribute, CUfunction) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *value = 32;
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, CUfunction, int, size_t) {
  if (blocks == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *blocks = 2;
  return CUDA_SUCCESS;
}

TSFAKE_EXPORT CUresult cuLaunchKernel(CUfunction function, unsigned int, unsigned int, unsigned int,
                                      unsigned int block_x, unsigned int, unsigned int, unsigned int, CUstream stream,
                                      void** parameters, void**) {
  if (sticky() != CUDA_SUCCESS) return sticky();
  if (function != reinterpret_cast<CUfunction>(&g_stats_kernel) || parameters == nullptr)
    return CUDA_ERROR_INVALID_VALUE;
  if (block_x != ts::kStatsBlockThreads) return CUDA_ERROR_INVALID_VALUE;
  if (stream_of(stream)->capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  replay_stats_kernel(*static_cast<const ts::StatsKernelParams*>(parameters[0]));
  return sticky();
}
