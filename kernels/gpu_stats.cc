// The statistics kernel's launcher: libcuda through dlopen, the embedded fatbin, pooled result slots, event polling.
#include "kernels/gpu_stats.h"
#include "base/thread_fence.h"

#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <mutex>

#include "base/launch_event.h"
#include "kernels/stats_kernel_abi.h"

// Generated from the fatbin by kernels/embed_file.cmake (an empty array when TRAINSCOPE_BUILD_KERNELS is OFF).
extern const unsigned char trainscope_stats_fatbin[];
extern const std::size_t trainscope_stats_fatbin_size;

namespace trainscope::stats {

// ---- The driver, loaded at run time ---------------------------------------------------------------------------------
// cuda.h maps several names to versioned symbols (cuMemAlloc -> cuMemAlloc_v2); expanding the macro before
// stringifying looks up exactly the symbol a program linked against libcuda would call.
#define TRAINSCOPE_CU_STRING2(name) #name
#define TRAINSCOPE_CU_STRING(name) TRAINSCOPE_CU_STRING2(name)
#define TRAINSCOPE_CU_FUNCTIONS(X)               \
  X(cuInit)                                      \
  X(cuDriverGetVersion)                          \
  X(cuGetErrorString)                            \
  X(cuDeviceGetCount)                            \
  X(cuStreamGetCtx)                              \
  X(cuStreamIsCapturing)                         \
  X(cuThreadExchangeStreamCaptureMode)           \
  X(cuCtxPushCurrent)                            \
  X(cuCtxPopCurrent)                             \
  X(cuCtxGetDevice)                              \
  X(cuDeviceGetAttribute)                        \
  X(cuModuleLoadData)                            \
  X(cuModuleGetFunction)                         \
  X(cuFuncGetAttribute)                          \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor) \
  X(cuLaunchKernel)                              \
  X(cuMemAlloc)                                  \
  X(cuMemHostAlloc)                              \
  X(cuMemHostGetDevicePointer)                   \
  X(cuMemcpyHtoDAsync)                           \
  X(cuEventCreate)                               \
  X(cuEventRecord)                               \
  X(cuEventQuery)                                \
  X(cuEventSynchronize)                          \
  X(cuPointerGetAttribute)

struct Driver {
#define TRAINSCOPE_CU_MEMBER(name) decltype(&::name) name = nullptr;
  TRAINSCOPE_CU_FUNCTIONS(TRAINSCOPE_CU_MEMBER)
#undef TRAINSCOPE_CU_MEMBER
  void* handle = nullptr;  // libcuda.so.1, open for the life of the process

  std::string error_text(CUresult result) const {
    const char* text = nullptr;
    if (cuGetErrorString != nullptr) cuGetErrorString(result, &text);
    return text != nullptr ? std::string(text) : "CUDA error " + std::to_string(static_cast<int>(result));
  }
};

namespace {

// Marks this thread as inside our own driver calls for the scope: the launch collector's own-call mark, so one
// thread-local says it to both (see inside_own_launch()).
using InsideScope = launches::OwnCudaCalls;

// Our driver calls must not invalidate another thread's graph capture in global mode (cuMemAlloc is not allowed then);
// relaxed mode for this thread while we are inside, restored afterwards.
class RelaxedCaptureScope {
 public:
  explicit RelaxedCaptureScope(const Driver& driver) : driver_(driver) {
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    active_ = driver_.cuThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS;
    previous_ = mode;
  }
  ~RelaxedCaptureScope() {
    if (active_) driver_.cuThreadExchangeStreamCaptureMode(&previous_);
  }
  RelaxedCaptureScope(const RelaxedCaptureScope&) = delete;
  RelaxedCaptureScope& operator=(const RelaxedCaptureScope&) = delete;

 private:
  const Driver& driver_;
  CUstreamCaptureMode previous_ = CU_STREAM_CAPTURE_MODE_RELAXED;
  bool active_ = false;
};

class ContextScope {
 public:
  ContextScope(const Driver& driver, CUcontext context) : driver_(driver) {
    pushed_ = driver_.cuCtxPushCurrent(context) == CUDA_SUCCESS;
  }
  ~ContextScope() {
    CUcontext ignored = nullptr;
    if (pushed_) driver_.cuCtxPopCurrent(&ignored);
  }
  bool ok() const { return pushed_; }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  const Driver& driver_;
  bool pushed_ = false;
};

constexpr std::uint64_t kCountersBytes = 16;
constexpr std::uint64_t kMinSlotCapacity = 64;

enum SlotState : int { kSlotFree = 0, kSlotInFlight = 1, kSlotAbandoned = 2 };

}  // namespace

// Everything one batch needs, allocated once and reused (allocating or freeing per batch would cost a device
// synchronisation for cuMemFree). Device memory: [counters | scratch | descriptors | strided shapes]; pinned host
// memory: the same image (copied to the device before each launch: all of it the first time, then the descriptors and
// the shapes the batch uses) and the results.
class GpuStatsSlot {
 public:
  const Driver* driver = nullptr;
  CUcontext context = nullptr;
  CUevent event = nullptr;
  std::uint64_t capacity = 0;
  CUdeviceptr device = 0;
  unsigned char* host_image = nullptr;
  StatsPartial* host_results = nullptr;
  CUdeviceptr mapped_results = 0;
  bool initialised_on_device = false;
  std::atomic<int> state{kSlotFree};

  std::uint64_t scratch_offset() const { return kCountersBytes; }
  std::uint64_t descriptors_offset() const { return kCountersBytes + capacity * sizeof(StatsPartial); }
  std::uint64_t shapes_offset() const { return descriptors_offset() + capacity * sizeof(StatsDescriptor); }
  std::uint64_t image_bytes() const { return shapes_offset() + capacity * sizeof(StridedShape); }
  StatsDescriptor* host_descriptors() const {
    return reinterpret_cast<StatsDescriptor*>(host_image + descriptors_offset());
  }
  StridedShape* host_shapes() const { return reinterpret_cast<StridedShape*>(host_image + shapes_offset()); }
};

struct ContextEntry {
  CUcontext context = nullptr;
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  int grid_limit = 0;   // blocks that fit on the device at once
  std::string failure;  // non-empty: the kernel cannot run in this context (e.g. a driver too old for the fatbin)
  std::vector<std::unique_ptr<GpuStatsSlot>> slots;
};

struct GpuStats::State {
  std::mutex mutex;  // guards everything below; held only for the few driver calls of one enqueue
  bool loaded = false;
  std::string unavailable;         // empty: the driver is usable
  bool host_only = false;          // no driver or no GPU: every buffer of this process is host memory
  std::atomic<bool> ready{false};  // loaded, unavailable and host_only are final
  Driver driver;
  std::vector<std::unique_ptr<ContextEntry>> contexts;
  std::atomic<std::uint64_t> dropped{0};
};

namespace {

// Opens libcuda.so.1 and resolves every function; the reason on failure. *host_only is set when this process
// cannot have device memory at all (no driver, cuInit failing, no GPU), so every buffer is host memory.
std::string load_driver(Driver& driver, bool* host_only) {
  *host_only = false;
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    *host_only = true;
    const char* error = dlerror();
    return std::string("no CUDA driver: cannot open libcuda.so.1 (") + (error != nullptr ? error : "?") + ")";
  }
  driver.handle = handle;
  std::string missing;
#define TRAINSCOPE_CU_RESOLVE(name)                                                                 \
  driver.name = reinterpret_cast<decltype(driver.name)>(dlsym(handle, TRAINSCOPE_CU_STRING(name))); \
  if (driver.name == nullptr) missing += std::string(missing.empty() ? "" : ", ") + TRAINSCOPE_CU_STRING(name);
  TRAINSCOPE_CU_FUNCTIONS(TRAINSCOPE_CU_RESOLVE)
#undef TRAINSCOPE_CU_RESOLVE
  // The handle stays open for the life of the process: the resolved pointers point into it.
  if (driver.cuInit == nullptr || driver.cuDeviceGetCount == nullptr) {
    *host_only = true;
    return "the CUDA driver is too old: libcuda.so.1 lacks " + missing;
  }
  CUresult result = driver.cuInit(0);
  if (result != CUDA_SUCCESS) {
    *host_only = true;
    return "cuInit failed: " + driver.error_text(result);
  }
  int devices = 0;
  result = driver.cuDeviceGetCount(&devices);
  if (result != CUDA_SUCCESS || devices == 0) {
    *host_only = true;
    return result != CUDA_SUCCESS ? "cuDeviceGetCount failed: " + driver.error_text(result)
                                  : "no GPU visible to the CUDA driver";
  }
  if (!missing.empty()) return "the CUDA driver is too old: libcuda.so.1 lacks " + missing;
  if (trainscope_stats_fatbin_size == 0) return "this build has no GPU kernels (TRAINSCOPE_BUILD_KERNELS=OFF)";
  return {};
}

ContextEntry* find_or_add_context(GpuStats::State& state, CUcontext context);

}  // namespace

const char* gpu_status_name(GpuStatus status) {
  switch (status) {
    case GpuStatus::kOk:
      return "ok";
    case GpuStatus::kUnavailable:
      return "unavailable";
    case GpuStatus::kSkippedCapturing:
      return "skipped (stream is capturing a CUDA graph)";
    case GpuStatus::kBusy:
      return "busy";
    case GpuStatus::kInvalidArgument:
      return "invalid argument";
    case GpuStatus::kError:
      return "error";
  }
  return "?";
}

bool inside_own_launch() { return launches::own_cuda_call_active(); }
bool kernels_built() { return trainscope_stats_fatbin_size != 0; }
std::size_t embedded_fatbin_size() { return trainscope_stats_fatbin_size; }

GpuStats& GpuStats::instance() {
  static GpuStats* instance = new GpuStats();  // leaked: usable until the very end of the process
  return *instance;
}

GpuStats::State* GpuStats::state() {
  static State* state = new State();
  // Once loaded, nothing here changes again: every later call (one per watched buffer) skips the lock.
  if (state->ready.load(std::memory_order_acquire)) return state;
  std::lock_guard<std::mutex> lock(state->mutex);
  if (!state->loaded) {
    InsideScope inside;
    state->unavailable = load_driver(state->driver, &state->host_only);
    state->loaded = true;
    state->ready.store(true, std::memory_order_release);
  }
  return state;
}

bool GpuStats::available() { return state()->unavailable.empty(); }

void* GpuStats::driver_library() { return state()->driver.handle; }

MemoryKind GpuStats::memory_kind(const void* address) {
  State* s = state();
  if (s->host_only) return MemoryKind::kHost;
  if (s->driver.cuPointerGetAttribute == nullptr) return MemoryKind::kUnknown;
  InsideScope inside;
  unsigned int type = 0;
  const CUresult result =
      s->driver.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, reinterpret_cast<CUdeviceptr>(address));
  if (result == CUDA_ERROR_INVALID_VALUE) return MemoryKind::kHost;  // memory CUDA never saw: plain host memory
  if (result != CUDA_SUCCESS) return MemoryKind::kUnknown;
  return type == CU_MEMORYTYPE_HOST ? MemoryKind::kHost : MemoryKind::kDevice;
}

std::string GpuStats::unavailable_reason() {
  State* s = state();
  std::lock_guard<std::mutex> lock(s->mutex);
  return s->unavailable;
}

std::uint64_t GpuStats::dropped_batches() const {
  return const_cast<GpuStats*>(this)->state()->dropped.load(std::memory_order_relaxed);
}

namespace {

ContextEntry* find_or_add_context(GpuStats::State& state, CUcontext context) {
  for (auto& entry : state.contexts) {
    if (entry->context == context) return entry.get();
  }
  const Driver& d = state.driver;
  auto entry = std::make_unique<ContextEntry>();
  entry->context = context;
  CUresult result = d.cuModuleLoadData(&entry->module, trainscope_stats_fatbin);
  if (result != CUDA_SUCCESS) {
    entry->failure = "cannot load the statistics kernels for this GPU (" + d.error_text(result) +
                     "); the driver may be older than CUDA 13.0 or the GPU older than sm_80";
  } else if ((result = d.cuModuleGetFunction(&entry->function, entry->module, kStatsKernelName)) != CUDA_SUCCESS) {
    entry->failure = std::string("the fatbin lacks ") + kStatsKernelName + ": " + d.error_text(result);
  } else {
    // Asking for an attribute loads the function now (lazy loading would otherwise do it inside the first launch).
    int registers = 0;
    d.cuFuncGetAttribute(&registers, CU_FUNC_ATTRIBUTE_NUM_REGS, entry->function);
    CUdevice device = 0;
    int sms = 0;
    int per_sm = 0;
    if (d.cuCtxGetDevice(&device) != CUDA_SUCCESS ||
        d.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device) != CUDA_SUCCESS ||
        d.cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, entry->function, kStatsBlockThreads, 0) !=
            CUDA_SUCCESS) {
      sms = 1;
      per_sm = 1;
    }
    entry->grid_limit = std::max(1, sms * std::max(1, per_sm));
  }
  state.contexts.push_back(std::move(entry));
  return state.contexts.back().get();
}

// A free slot of at least `count` entries (reusing abandoned ones whose batch has finished), or a new one within the
// bound; nullptr with `error` set when none can be had.
GpuStatsSlot* acquire_slot(const Driver& d, ContextEntry& entry, std::uint64_t count, std::string& error) {
  for (auto& slot : entry.slots) {
    if (slot->capacity < count) continue;
    int expected = kSlotFree;
    if (slot->state.compare_exchange_strong(expected, kSlotInFlight)) return slot.get();
    if (expected == kSlotAbandoned && d.cuEventQuery(slot->event) == CUDA_SUCCESS &&
        slot->state.compare_exchange_strong(expected, kSlotInFlight)) {
      return slot.get();
    }
  }
  if (entry.slots.size() >= static_cast<std::size_t>(GpuStats::kMaxSlotsPerContext)) {
    error = "all " + std::to_string(GpuStats::kMaxSlotsPerContext) + " result slots of this context are in flight";
    return nullptr;
  }
  auto slot = std::make_unique<GpuStatsSlot>();
  slot->driver = &d;
  slot->context = entry.context;
  slot->capacity = std::max(kMinSlotCapacity, std::bit_ceil(count));
  void* host_image = nullptr;
  void* host_results = nullptr;
  CUresult result = d.cuEventCreate(&slot->event, CU_EVENT_DISABLE_TIMING);
  if (result == CUDA_SUCCESS) result = d.cuMemAlloc(&slot->device, slot->image_bytes());
  if (result == CUDA_SUCCESS) {
    result = d.cuMemHostAlloc(&host_image, slot->image_bytes(), CU_MEMHOSTALLOC_PORTABLE);
  }
  if (result == CUDA_SUCCESS) {
    result = d.cuMemHostAlloc(&host_results, slot->capacity * sizeof(StatsPartial),
                              CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
  }
  if (result == CUDA_SUCCESS) result = d.cuMemHostGetDevicePointer(&slot->mapped_results, host_results, 0);
  if (result != CUDA_SUCCESS) {
    // Whatever was allocated is kept by the process (freeing device memory would synchronise the device).
    error = "cannot allocate result buffers: " + d.error_text(result);
    return nullptr;
  }
  slot->host_image = static_cast<unsigned char*>(host_image);
  slot->host_results = static_cast<StatsPartial*>(host_results);
  // The device-side counters and scratch start as the kernel leaves them: zero counters, empty partials.
  std::memset(slot->host_image, 0, kCountersBytes);
  auto* scratch = reinterpret_cast<StatsPartial*>(slot->host_image + slot->scratch_offset());
  for (std::uint64_t i = 0; i < slot->capacity; ++i) scratch[i] = empty_partial();
  slot->state.store(kSlotInFlight);
  entry.slots.push_back(std::move(slot));
  return entry.slots.back().get();
}

}  // namespace

std::string strided_shape_error(const TensorRef& tensor) {
  const StridedShape& shape = tensor.shape;
  if (shape.ndim == 0) return {};
  if (shape.ndim > kMaxStridedDims) {
    return "a strided shape of " + std::to_string(shape.ndim) + " dimensions (at most " +
           std::to_string(kMaxStridedDims) + ")";
  }
  std::uint64_t product = 1;
  for (std::uint64_t d = 0; d < shape.ndim; ++d) {
    if (shape.sizes[d] <= 0) return "a strided shape with a dimension of size " + std::to_string(shape.sizes[d]);
    if (__builtin_mul_overflow(product, static_cast<std::uint64_t>(shape.sizes[d]), &product)) {
      return "a strided shape of more than 2^64 elements";
    }
  }
  if (product != tensor.count) {
    return "a strided shape of " + std::to_string(product) + " elements for a tensor of " +
           std::to_string(tensor.count);
  }
  return {};
}

GpuLaunch GpuStats::enqueue(void* stream_handle, std::span<const TensorRef> tensors) {
  GpuLaunch launch;
  if (inside_own_launch()) {
    launch.status = GpuStatus::kBusy;
    launch.message = "called from inside trainscope's own launch";
    return launch;
  }
  if (tensors.empty()) {
    launch.status = GpuStatus::kInvalidArgument;
    launch.message = "empty batch";
    return launch;
  }
  for (const TensorRef& tensor : tensors) {
    if (!dtype_valid(static_cast<std::uint32_t>(tensor.dtype))) {
      launch.status = GpuStatus::kInvalidArgument;
      launch.message = "unknown dtype " + std::to_string(static_cast<int>(tensor.dtype));
      return launch;
    }
    const std::string shape_error = strided_shape_error(tensor);
    if (!shape_error.empty()) {
      launch.status = GpuStatus::kInvalidArgument;
      launch.message = shape_error;
      return launch;
    }
  }
  State* s = state();
  std::lock_guard<std::mutex> lock(s->mutex);
  if (!s->unavailable.empty()) {
    launch.status = GpuStatus::kUnavailable;
    launch.message = s->unavailable;
    return launch;
  }
  InsideScope inside;
  const Driver& d = s->driver;
  RelaxedCaptureScope relaxed(d);
  auto stream = static_cast<CUstream>(stream_handle);

  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult result = d.cuStreamIsCapturing(stream, &capture);
  if (result != CUDA_SUCCESS) {
    launch.status = GpuStatus::kError;
    launch.message = "cuStreamIsCapturing: " + d.error_text(result);
    return launch;
  }
  if (capture != CU_STREAM_CAPTURE_STATUS_NONE) {
    launch.status = GpuStatus::kSkippedCapturing;
    launch.message = "the stream is capturing a CUDA graph; no statistics were enqueued";
    return launch;
  }
  CUcontext context = nullptr;
  result = d.cuStreamGetCtx(stream, &context);
  if (result != CUDA_SUCCESS || context == nullptr) {
    launch.status = GpuStatus::kError;
    launch.message = "cuStreamGetCtx: " + (result != CUDA_SUCCESS ? d.error_text(result) : "no context");
    return launch;
  }
  ContextScope scope(d, context);
  if (!scope.ok()) {
    launch.status = GpuStatus::kError;
    launch.message = "cannot make the stream's context current";
    return launch;
  }
  ContextEntry* entry = find_or_add_context(*s, context);
  if (!entry->failure.empty()) {
    launch.status = GpuStatus::kUnavailable;
    launch.message = entry->failure;
    return launch;
  }
  GpuStatsSlot* slot = acquire_slot(d, *entry, tensors.size(), launch.message);
  if (slot == nullptr) {
    s->dropped.fetch_add(1, std::memory_order_relaxed);
    launch.status = GpuStatus::kBusy;
    return launch;
  }

  std::uint64_t total_chunks = 0;
  std::uint32_t shapes = 0;
  StatsDescriptor* descriptors = slot->host_descriptors();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const TensorRef& tensor = tensors[i];
    const auto address = reinterpret_cast<std::uint64_t>(tensor.address);
    descriptors[i] = {address, tensor.count, total_chunks, static_cast<std::uint32_t>(tensor.dtype), 0};
    if (tensor.shape.ndim > 0) {
      slot->host_shapes()[shapes] = tensor.shape;
      descriptors[i].shape = ++shapes;
    }
    total_chunks += descriptor_layout(descriptors[i], dtype_size(tensor.dtype)).chunk_count;
  }
  // One copy: from the descriptors (everything, the first time) to the last one used, or to the last shape used.
  const std::uint64_t copy_from = slot->initialised_on_device ? slot->descriptors_offset() : 0;
  const std::uint64_t copy_end = shapes > 0 ? slot->shapes_offset() + shapes * sizeof(StridedShape)
                                            : slot->descriptors_offset() + tensors.size() * sizeof(StatsDescriptor);
  const std::uint64_t copy_bytes = copy_end - copy_from;
  result = d.cuMemcpyHtoDAsync(slot->device + copy_from, slot->host_image + copy_from, copy_bytes, stream);
  if (result == CUDA_SUCCESS) {
    slot->initialised_on_device = true;
    StatsKernelParams params{};
    params.counters = reinterpret_cast<unsigned long long*>(slot->device);
    params.scratch = reinterpret_cast<StatsPartial*>(slot->device + slot->scratch_offset());
    params.descriptors = reinterpret_cast<const StatsDescriptor*>(slot->device + slot->descriptors_offset());
    params.shapes = reinterpret_cast<const StridedShape*>(slot->device + slot->shapes_offset());
    params.results = reinterpret_cast<StatsPartial*>(slot->mapped_results);
    params.descriptor_count = tensors.size();
    params.total_chunks = total_chunks;
    const auto grid = static_cast<unsigned>(
        std::clamp<std::uint64_t>(total_chunks, 1, static_cast<std::uint64_t>(entry->grid_limit)));
    void* arguments[] = {&params};
    result = d.cuLaunchKernel(entry->function, grid, 1, 1, kStatsBlockThreads, 1, 1, 0, stream, arguments, nullptr);
    if (result != CUDA_SUCCESS) launch.message = "cuLaunchKernel: " + d.error_text(result);
  } else {
    launch.message = "cuMemcpyHtoDAsync: " + d.error_text(result);
  }
  // Recorded even after a failure: the slot is reused only once whatever did get queued has run.
  const CUresult recorded = d.cuEventRecord(slot->event, stream);
  if (result == CUDA_SUCCESS && recorded != CUDA_SUCCESS) {
    result = recorded;
    launch.message = "cuEventRecord: " + d.error_text(recorded);
  }
  if (result != CUDA_SUCCESS) {
    slot->state.store(kSlotAbandoned);
    launch.status = GpuStatus::kError;
    return launch;
  }
  launch.status = GpuStatus::kOk;
  launch.pending.reset(new PendingStats(slot, std::vector<TensorRef>(tensors.begin(), tensors.end())));
  return launch;
}

PendingStats::PendingStats(GpuStatsSlot* slot, std::vector<TensorRef> tensors)
    : slot_(slot), tensors_(std::move(tensors)) {}

PendingStats::~PendingStats() {
  if (slot_ != nullptr) slot_->state.store(results_.empty() ? kSlotAbandoned : kSlotFree);
}

void PendingStats::collect() {
  TS_THREAD_FENCE(__ATOMIC_ACQUIRE);
  results_.reserve(tensors_.size());
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    results_.push_back(finalize_stats(tensors_[i].dtype, tensors_[i].count, slot_->host_results[i]));
  }
}

bool PendingStats::ready() {
  if (!results_.empty()) return true;
  if (slot_ == nullptr) return false;
  InsideScope inside;
  const CUresult result = slot_->driver->cuEventQuery(slot_->event);
  if (result == CUDA_ERROR_NOT_READY) return false;
  if (result != CUDA_SUCCESS) {
    error_ = "cuEventQuery: " + slot_->driver->error_text(result);
    return false;
  }
  collect();
  return true;
}

bool PendingStats::wait() {
  if (!results_.empty()) return true;
  if (slot_ == nullptr) return false;
  InsideScope inside;
  const CUresult result = slot_->driver->cuEventSynchronize(slot_->event);
  if (result != CUDA_SUCCESS) {
    error_ = "cuEventSynchronize: " + slot_->driver->error_text(result);
    return false;
  }
  collect();
  return true;
}

}  // namespace trainscope::stats

namespace trainscope::launches {

namespace {
// How deep this thread is inside trainscope's own CUDA calls (the statistics kernel's launches and queries, the
// engine's driver questions): one counter for the launch collector and the statistics launcher alike.
thread_local int t_own_cuda_depth = 0;
}  // namespace

bool own_cuda_call_active() { return t_own_cuda_depth > 0; }
OwnCudaCalls::OwnCudaCalls() { ++t_own_cuda_depth; }
OwnCudaCalls::~OwnCudaCalls() { --t_own_cuda_depth; }

}  // namespace trainscope::launches
