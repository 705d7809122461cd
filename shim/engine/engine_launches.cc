// The CUPTI adapter (see engine_launches.h): the only code that knows CUPTI's callback ids and *_params structs.
#include "shim/engine/engine_launches.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti.h>
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/clocks.h"
#include "base/flight_recorder_reader.h"
#include "base/flight_recorder_writer.h"
#include "base/launch_event.h"
#include "base/printable.h"
#include "collectors/launches/launch_collector.h"
#include "kernels/gpu_stats.h"
#include "reports/cuda_error_report.h"
#include "shim/engine/engine_logging.h"
#include "shim/engine/engine_threads.h"
#include "shim/engine/job_thread/engine_batches.h"
#include "shim/engine/job_thread/engine_kernel_frames.h"

namespace trainscope::engine {
namespace {

using launches::ApiCall;
using launches::CallClass;
using recorder::CudaDomain;
using recorder::LaunchKind;
using recorder::LaunchMode;

// Every CUpti_ActivityKernelN from 4 on (CUDA 9) to 10 (CUDA 13) keeps these fields where they were: the records of
// whichever CUPTI is loaded are read through the oldest layout.
static_assert(offsetof(CUpti_ActivityKernel4, correlationId) == offsetof(CUpti_ActivityKernel10, correlationId));
static_assert(offsetof(CUpti_ActivityKernel4, end) == offsetof(CUpti_ActivityKernel10, end));
// __cudaLaunchKernel (CUDA 13's <<<>>>) has no params struct of its own in the toolkit's headers: its arguments are
// cudaLaunchKernel's, with a cudaKernel_t where cudaLaunchKernel has the host function (both pointers).
static_assert(sizeof(cudaKernel_t) == sizeof(const void*));

constexpr auto kFlushPeriod = std::chrono::milliseconds(500);
constexpr size_t kActivityBufferBytes = size_t{256} << 10;
constexpr int kMaxActivityBuffers = 16;  // in CUPTI's hands at once; beyond, CUPTI drops records (and counts them)

// ---- libcupti, loaded at run time -----------------------------------------------------------------------------------
#define TS_CUPTI_FUNCTIONS(X)       \
  X(cuptiSubscribe)                 \
  X(cuptiUnsubscribe)               \
  X(cuptiEnableDomain)              \
  X(cuptiGetResultString)           \
  X(cuptiGetTimestamp)              \
  X(cuptiActivityRegisterCallbacks) \
  X(cuptiActivityEnable)            \
  X(cuptiActivityFlushAll)          \
  X(cuptiActivityGetNextRecord)

struct Cupti {
#define TS_CUPTI_MEMBER(name) decltype(&::name) name = nullptr;
  TS_CUPTI_FUNCTIONS(TS_CUPTI_MEMBER)
#undef TS_CUPTI_MEMBER
  std::string path;

  std::string error_text(CUptiResult result) const {
    const char* text = nullptr;
    if (cuptiGetResultString != nullptr && cuptiGetResultString(result, &text) == CUPTI_SUCCESS && text != nullptr)
      return text;
    return "CUPTI error " + std::to_string(static_cast<int>(result));
  }
};

// The libcupti already in the process (Kineto's, Nsight's): a second copy would be a second CUPTI in one process.
int find_loaded_cupti(dl_phdr_info* info, size_t, void* data) {
  const char* name = info->dlpi_name;
  const char* base = name != nullptr ? std::strrchr(name, '/') : nullptr;
  if (base != nullptr && std::strncmp(base + 1, "libcupti.so", 11) == 0) {
    *static_cast<std::string*>(data) = name;
    return 1;
  }
  return 0;
}

// The site-packages folder of a loaded Python package's library (torch, the nvidia-* wheels), "" if none.
int find_site_packages(dl_phdr_info* info, size_t, void* data) {
  const char* name = info->dlpi_name;
  const char* found = name != nullptr ? std::strstr(name, "/site-packages/") : nullptr;
  if (found == nullptr) return 0;
  *static_cast<std::string*>(data) = std::string(name, static_cast<size_t>(found - name)) + "/site-packages";
  return 1;
}

std::vector<std::string> cupti_candidates() {
  std::vector<std::string> candidates;
  std::string loaded;
  dl_iterate_phdr(find_loaded_cupti, &loaded);
  if (!loaded.empty()) return {loaded};
  static const char* const kNames[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so"};
  for (const char* name : kNames) candidates.emplace_back(name);  // LD_LIBRARY_PATH, the ld.so cache
  std::vector<std::string> roots;
  if (const char* home = std::getenv("CUDA_HOME"); home != nullptr && home[0] != '\0') roots.emplace_back(home);
  roots.emplace_back("/usr/local/cuda");
  for (const std::string& root : roots)
    for (const char* folder : {"/lib64/", "/extras/CUPTI/lib64/"})
      for (const char* name : kNames) candidates.push_back(root + folder + name);
  std::string site_packages;
  dl_iterate_phdr(find_site_packages, &site_packages);
  if (!site_packages.empty())
    for (const char* name : kNames) candidates.push_back(site_packages + "/nvidia/cuda_cupti/lib/" + name);
  return candidates;
}

// Loads libcupti and resolves what we use; the reason when it cannot.
std::string load_cupti(Cupti& cupti) {
  void* handle = nullptr;
  for (const std::string& candidate : cupti_candidates()) {
    handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      cupti.path = candidate;
      break;
    }
  }
  if (handle == nullptr)
    return "no CUPTI library found (libcupti.so.13/.12 on the library path, under $CUDA_HOME or /usr/local/cuda, or "
           "in the nvidia-cuda-cupti wheel)";
  std::string missing;
#define TS_CUPTI_RESOLVE(name)                                               \
  cupti.name = reinterpret_cast<decltype(cupti.name)>(dlsym(handle, #name)); \
  if (cupti.name == nullptr) missing += std::string(missing.empty() ? "" : ", ") + #name;
  TS_CUPTI_FUNCTIONS(TS_CUPTI_RESOLVE)
#undef TS_CUPTI_RESOLVE
  // The handle stays open for the life of the process: CUPTI keeps calling us.
  if (!missing.empty()) return cupti.path + " lacks " + missing;
  return {};
}

// ---- The driver, through the statistics kernel's libcuda handle -----------------------------------------------------
struct DriverCalls {
  decltype(&::cuStreamIsCapturing) stream_is_capturing = nullptr;
  decltype(&::cuFuncGetParamInfo) func_get_param_info = nullptr;  // CUDA 12.4 and later
  decltype(&::cuPointerGetAttribute) pointer_get_attribute = nullptr;
};

// Resolved at the first launch (never inside cuInit, where InitializeInjection runs: loading the driver for the
// statistics kernel calls cuInit itself).
const DriverCalls& driver_calls() {
  static const DriverCalls* calls = [] {
    auto* resolved = new DriverCalls();  // leaked: callbacks may run until the very end of the process
    launches::OwnCudaCalls own;
    void* handle = stats::GpuStats::instance().driver_library();
    if (handle != nullptr) {
      resolved->stream_is_capturing =
          reinterpret_cast<decltype(resolved->stream_is_capturing)>(dlsym(handle, "cuStreamIsCapturing"));
      resolved->func_get_param_info =
          reinterpret_cast<decltype(resolved->func_get_param_info)>(dlsym(handle, "cuFuncGetParamInfo"));
      resolved->pointer_get_attribute =
          reinterpret_cast<decltype(resolved->pointer_get_attribute)>(dlsym(handle, "cuPointerGetAttribute"));
    }
    return resolved;
  }();
  return *calls;
}

// Whether `stream` is capturing a graph. An error (a legacy-stream question during another stream's global capture)
// counts as capturing: nothing may be enqueued then either.
bool stream_capturing(uint64_t stream) {
  const DriverCalls& d = driver_calls();
  if (d.stream_is_capturing == nullptr) return false;
  launches::OwnCudaCalls own;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult result = d.stream_is_capturing(reinterpret_cast<CUstream>(stream), &status);
  return result != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE;
}

// CudaQueries with the driver: parameter layouts cached per CUfunction (they cannot change), allocations asked each
// time (they can).
class DriverQueries final : public launches::CudaQueries {
 public:
  bool param_layout(uint64_t function_handle, launches::ParamInfo* out, uint32_t max, uint32_t* count) override {
    if (function_handle == 0 || count == nullptr) return false;
    std::vector<launches::ParamInfo> layout;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto found = layouts_.find(function_handle);
      if (found == layouts_.end()) found = layouts_.emplace(function_handle, ask_layout(function_handle)).first;
      if (!found->second.known) return false;
      layout = found->second.params;
    }
    *count = static_cast<uint32_t>(layout.size() < max ? layout.size() : max);
    for (uint32_t i = 0; i < *count; ++i) out[i] = layout[i];
    return true;
  }

  bool allocation_of(uint64_t address, launches::Allocation* out) override {
    const DriverCalls& d = driver_calls();
    if (d.pointer_get_attribute == nullptr || out == nullptr) return false;
    launches::OwnCudaCalls own;
    CUdeviceptr base = 0;
    size_t bytes = 0;
    unsigned int type = 0;
    const auto pointer = static_cast<CUdeviceptr>(address);
    if (d.pointer_get_attribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, pointer) != CUDA_SUCCESS ||
        d.pointer_get_attribute(&bytes, CU_POINTER_ATTRIBUTE_RANGE_SIZE, pointer) != CUDA_SUCCESS ||
        d.pointer_get_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, pointer) != CUDA_SUCCESS)
      return false;
    out->base = static_cast<uint64_t>(base);
    out->bytes = static_cast<uint64_t>(bytes);
    out->device = type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED;
    return true;
  }

 private:
  struct Layout {
    bool known = false;
    std::vector<launches::ParamInfo> params;
  };

  static Layout ask_layout(uint64_t function_handle) {
    Layout layout;
    const DriverCalls& d = driver_calls();
    if (d.func_get_param_info == nullptr) return layout;  // a driver older than CUDA 12.4
    launches::OwnCudaCalls own;
    for (size_t index = 0;; ++index) {
      size_t offset = 0;
      size_t size = 0;
      const CUresult result =
          d.func_get_param_info(reinterpret_cast<CUfunction>(function_handle), index, &offset, &size);
      if (result == CUDA_ERROR_INVALID_VALUE) break;  // past the last parameter
      if (result != CUDA_SUCCESS) return layout;
      layout.params.push_back({offset, size});
    }
    layout.known = true;
    return layout;
  }

  std::mutex mutex_;
  std::unordered_map<uint64_t, Layout> layouts_;
};

// ---- Callback translation -------------------------------------------------------------------------------------------
using clocks::realtime_ns;

template <typename T>
uint64_t handle_value(T handle) {
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(handle));
}

// A _ptsz entry point's stream 0 is the per-thread default stream (CU_STREAM_PER_THREAD, 2).
uint64_t stream_value(void* stream, bool per_thread) {
  const uint64_t value = handle_value(stream);
  return value == 0 && per_thread ? 2 : value;
}

void set_launch(ApiCall& call, LaunchKind kind, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t bx, uint32_t by,
                uint32_t bz, uint64_t shared, uint64_t stream) {
  call.klass = CallClass::kLaunch;
  call.kind = kind;
  call.grid[0] = gx;
  call.grid[1] = gy;
  call.grid[2] = gz;
  call.block[0] = bx;
  call.block[1] = by;
  call.block[2] = bz;
  call.shared_bytes = static_cast<uint32_t>(shared);
  call.stream = stream;
}

template <typename Params>
void runtime_launch(ApiCall& call, const void* raw, LaunchKind kind, bool per_thread) {
  const auto* p = static_cast<const Params*>(raw);
  set_launch(call, kind, p->gridDim.x, p->gridDim.y, p->gridDim.z, p->blockDim.x, p->blockDim.y, p->blockDim.z,
             p->sharedMem, stream_value(p->stream, per_thread));
  call.params = p->args;
}

template <typename Params>
void driver_launch(ApiCall& call, const void* raw, LaunchKind kind, bool per_thread) {
  const auto* p = static_cast<const Params*>(raw);
  set_launch(call, kind, p->gridDimX, p->gridDimY, p->gridDimZ, p->blockDimX, p->blockDimY, p->blockDimZ,
             p->sharedMemBytes, stream_value(p->hStream, per_thread));
  call.function_handle = handle_value(p->f);
  call.params = p->kernelParams;
}

template <typename Params>
void driver_launch_ex(ApiCall& call, const void* raw, bool per_thread) {
  const auto* p = static_cast<const Params*>(raw);
  call.klass = CallClass::kLaunch;
  call.kind = LaunchKind::kExtended;
  if (const CUlaunchConfig* c = p->config; c != nullptr)
    set_launch(call, LaunchKind::kExtended, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY,
               c->blockDimZ, c->sharedMemBytes, stream_value(c->hStream, per_thread));
  call.function_handle = handle_value(p->f);
  call.params = p->kernelParams;
}

template <typename Params>
void graph_launch(ApiCall& call, const void* raw, uint64_t graph, void* stream, bool per_thread) {
  (void)raw;
  call.klass = CallClass::kLaunch;
  call.kind = LaunchKind::kGraph;
  call.graph_exec = graph;
  call.stream = stream_value(stream, per_thread);
}

void sync(ApiCall& call, CallClass klass, uint64_t stream) {
  call.klass = klass;
  call.stream = stream;
}

// Fills what the collector needs of a runtime API call from its params struct.
void describe_runtime(ApiCall& call, CUpti_CallbackId cbid, const void* p) {
  switch (cbid) {
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000:
    case CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000:
      return runtime_launch<cudaLaunchKernel_v7000_params>(call, p, LaunchKind::kKernel, false);
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000:
    case CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000:
      return runtime_launch<cudaLaunchKernel_v7000_params>(call, p, LaunchKind::kKernel, true);
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000:
      return runtime_launch<cudaLaunchCooperativeKernel_v9000_params>(call, p, LaunchKind::kCooperative, false);
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000:
      return runtime_launch<cudaLaunchCooperativeKernel_v9000_params>(call, p, LaunchKind::kCooperative, true);
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernelMultiDevice_v9000:
      // Removed from CUDA 13's runtime; older runtimes' calls reach the driver's MultiDevice launch, described there.
      call.klass = CallClass::kLaunch;
      call.kind = LaunchKind::kCooperative;
      return;
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060:
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060: {
      const bool per_thread = cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060;
      const auto* params = static_cast<const cudaLaunchKernelExC_v11060_params*>(p);
      call.klass = CallClass::kLaunch;
      call.kind = LaunchKind::kExtended;
      if (const cudaLaunchConfig_t* c = params->config; c != nullptr)
        set_launch(call, LaunchKind::kExtended, c->gridDim.x, c->gridDim.y, c->gridDim.z, c->blockDim.x, c->blockDim.y,
                   c->blockDim.z, c->dynamicSmemBytes, stream_value(c->stream, per_thread));
      call.params = params->args;
      return;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000: {
      const auto* params = static_cast<const cudaGraphLaunch_v10000_params*>(p);
      return graph_launch<cudaGraphLaunch_v10000_params>(call, p, handle_value(params->graphExec), params->stream,
                                                         cbid == CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000);
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020:
      return sync(call, CallClass::kStreamSync,
                  stream_value(static_cast<const cudaStreamSynchronize_v3020_params*>(p)->stream, false));
    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_ptsz_v7000:
      return sync(call, CallClass::kStreamSync,
                  stream_value(static_cast<const cudaStreamSynchronize_ptsz_v7000_params*>(p)->stream, true));
    case CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaThreadSynchronize_v3020:
      return sync(call, CallClass::kContextSync, 0);
    case CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020:
      return sync(call, CallClass::kEventSync, 0);
    default:
      return;
  }
}

void describe_driver(ApiCall& call, CUpti_CallbackId cbid, const void* p) {
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
      return driver_launch<cuLaunchKernel_params>(call, p, LaunchKind::kKernel, false);
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
      return driver_launch<cuLaunchKernel_ptsz_params>(call, p, LaunchKind::kKernel, true);
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
      return driver_launch<cuLaunchCooperativeKernel_params>(call, p, LaunchKind::kCooperative, false);
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
      return driver_launch<cuLaunchCooperativeKernel_ptsz_params>(call, p, LaunchKind::kCooperative, true);
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernelMultiDevice: {
      // One launch per device; the first one's kernel and stream stand for the call.
      const auto* params = static_cast<const cuLaunchCooperativeKernelMultiDevice_params*>(p);
      call.klass = CallClass::kLaunch;
      call.kind = LaunchKind::kCooperative;
      if (params->launchParamsList != nullptr && params->numDevices > 0) {
        const CUDA_LAUNCH_PARAMS& first = params->launchParamsList[0];
        set_launch(call, LaunchKind::kCooperative, first.gridDimX, first.gridDimY, first.gridDimZ, first.blockDimX,
                   first.blockDimY, first.blockDimZ, first.sharedMemBytes, handle_value(first.hStream));
        call.function_handle = handle_value(first.function);
        call.params = first.kernelParams;
      }
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
      return driver_launch_ex<cuLaunchKernelEx_params>(call, p, false);
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
      return driver_launch_ex<cuLaunchKernelEx_ptsz_params>(call, p, true);
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch:
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz: {
      const auto* params = static_cast<const cuGraphLaunch_params*>(p);  // the _ptsz struct is the same
      return graph_launch<cuGraphLaunch_params>(call, p, handle_value(params->hGraph), params->hStream,
                                                cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz);
    }
    case CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz:
      return sync(call, CallClass::kStreamSync,
                  stream_value(static_cast<const cuStreamSynchronize_params*>(p)->hStream,
                               cbid == CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz));
    case CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize:
      return sync(call, CallClass::kContextSync, 0);
    case CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize_v2: {
      const auto* params = static_cast<const cuCtxSynchronize_v2_params*>(p);
      sync(call, CallClass::kContextSync, 0);
      if (params->ctx != nullptr) call.context = handle_value(params->ctx);
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize:
      return sync(call, CallClass::kEventSync, 0);
    default:
      return;
  }
}

// Whether a launch's stream was capturing, asked once per launch and remembered for its exit. A runtime launch and
// the driver launch inside it are open at once on a thread: the inner one, on the same stream, reuses the outer one's
// answer (one driver question per launch, not two). A few slots cover any nesting seen in practice.
struct CaptureMemo {
  static constexpr unsigned kSlots = 4;
  uint32_t correlation[kSlots];
  uint64_t stream[kSlots];
  bool capturing[kSlots];
  bool open[kSlots];  // entered, exit not seen yet
  unsigned next;
};
thread_local CaptureMemo t_capture{};

bool capturing_at(const ApiCall& call) {
  CaptureMemo& memo = t_capture;
  if (call.phase == launches::Phase::kExit) {
    for (unsigned i = 0; i < CaptureMemo::kSlots; ++i) {
      if (memo.open[i] && memo.correlation[i] == call.correlation) {
        memo.open[i] = false;
        return memo.capturing[i];
      }
    }
    return stream_capturing(call.stream);  // its enter was not seen (the collector started in between)
  }
  bool capturing = false;
  bool known = false;
  for (unsigned i = 0; i < CaptureMemo::kSlots && !known; ++i) {
    if (memo.open[i] && memo.stream[i] == call.stream) {
      capturing = memo.capturing[i];
      known = true;
    }
  }
  if (!known) capturing = stream_capturing(call.stream);
  const unsigned slot = memo.next++ % CaptureMemo::kSlots;
  memo.correlation[slot] = call.correlation;
  memo.stream[slot] = call.stream;
  memo.capturing[slot] = capturing;
  memo.open[slot] = true;
  return capturing;
}

// Whether a launch is still open on this thread (the runtime launch around a driver launch that just returned).
bool outer_launch_open() {
  for (const bool open : t_capture.open)
    if (open) return true;
  return false;
}

// ---- The collector's state ------------------------------------------------------------------------------------------
struct Launches {
  LaunchesSetup setup;
  recorder::Writer writer;  // attached to the shim's live recorder mapping
  DriverQueries queries;
  launches::LaunchCollector* collector = nullptr;
  Cupti cupti;
  CUpti_SubscriberHandle subscriber = nullptr;
  bool activity = false;         // TRAINSCOPE_LAUNCHES=on and kernel activity enabled
  int64_t timestamp_offset = 0;  // CLOCK_REALTIME minus CUPTI's clock, at start
  std::atomic<uint64_t> launched{0};
  std::atomic<uint64_t> completed{0};
  std::atomic<int> buffers_out{0};
  std::mutex completion_mutex;  // CUPTI may hand buffers back on its own thread as well as in our flush
  // The first error: the collector's handler stores the record index + 1; the thread writes the report.
  std::atomic<uint64_t> first_error{0};
  bool error_report_written = false;  // written once (the log says so); rewritten at stop
  bool error_report_failed = false;   // said once
  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  std::thread thread;
};

std::mutex g_start_mutex;
Launches* g_launches = nullptr;            // leaked once created: CUPTI may call us until the process ends
std::atomic<Launches*> g_active{nullptr};  // null: callbacks are ignored (not started, stopped, a forked child)
bool g_prepared = false;
bool g_tried = false;  // subscription attempted (once per process)

void CUPTIAPI on_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  if (domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
  Launches* l = g_active.load(std::memory_order_acquire);
  if (l == nullptr || data == nullptr || launches::own_cuda_call_active() || stats::inside_own_launch()) return;
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  ApiCall call;
  call.phase = cb->callbackSite == CUPTI_API_ENTER ? launches::Phase::kEnter : launches::Phase::kExit;
  call.domain = domain == CUPTI_CB_DOMAIN_RUNTIME_API ? CudaDomain::kRuntime : CudaDomain::kDriver;
  call.cbid = cbid;
  call.function = cb->functionName != nullptr ? cb->functionName : "";
  call.correlation = cb->correlationId;
  call.context = handle_value(cb->context);
  if (call.phase == launches::Phase::kExit && cb->functionReturnValue != nullptr)
    call.result = *static_cast<const int32_t*>(cb->functionReturnValue);  // cudaError_t / CUresult: an int enum
  if (cb->functionParams != nullptr) {
    if (call.domain == CudaDomain::kRuntime) {
      describe_runtime(call, cbid, cb->functionParams);
    } else {
      describe_driver(call, cbid, cb->functionParams);
    }
  } else if (call.domain == CudaDomain::kDriver && cbid == CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize) {
    sync(call, CallClass::kContextSync, 0);
  }
  // Most API calls are neither launches nor synchronisations and succeed: no record, so no clock read (two per call
  // on the job's thread otherwise). A failing one is timed at its exit.
  if (call.klass != CallClass::kOther || call.result != 0) call.time_ns = realtime_ns();
  if (call.klass == CallClass::kLaunch) {
    if (cb->symbolName != nullptr) call.symbol = cb->symbolName;
    call.capturing = capturing_at(call);
    // Counted once per launch, at the outermost exit (its kernel activity carries that call's correlation id).
    if (call.phase == launches::Phase::kExit && call.result == 0 && !call.capturing && !outer_launch_open())
      l->launched.fetch_add(1, std::memory_order_relaxed);
  }
  try {
    l->collector->on_call(call);
  } catch (...) {
    // Never an exception into the CUDA call (the collector allocates only at a kernel's or a stream's first sight).
  }
}

// ---- Kernel activity ------------------------------------------------------------------------------------------------
void CUPTIAPI on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *max_records = 0;
  Launches* l = g_launches;
  if (l == nullptr || l->buffers_out.fetch_add(1) >= kMaxActivityBuffers) {
    if (l != nullptr) l->buffers_out.fetch_sub(1);
    *buffer = nullptr;  // CUPTI drops the records and counts them
    *size = 0;
    return;
  }
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kActivityBufferBytes));
  *size = *buffer != nullptr ? kActivityBufferBytes : 0;
  if (*buffer == nullptr) l->buffers_out.fetch_sub(1);
}

void CUPTIAPI on_buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  Launches* l = g_launches;
  if (l != nullptr && buffer != nullptr && g_active.load(std::memory_order_acquire) == l) {
    std::lock_guard<std::mutex> lock(l->completion_mutex);
    CUpti_Activity* record = nullptr;
    uint32_t previous = 0;
    while (l->cupti.cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
      if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
      const auto* kernel = reinterpret_cast<const CUpti_ActivityKernel4*>(record);
      const auto end_ns = static_cast<uint64_t>(static_cast<int64_t>(kernel->end) + l->timestamp_offset);
      try {
        l->collector->on_kernel_completed(kernel->correlationId, end_ns);
      } catch (...) {
      }
      // A graph launch's kernels share its correlation id: counted once, as its launch was.
      if (kernel->correlationId != previous) l->completed.fetch_add(1, std::memory_order_relaxed);
      previous = kernel->correlationId;
    }
  }
  std::free(buffer);
  if (l != nullptr) l->buffers_out.fetch_sub(1);
}

// Hands every finished kernel CUPTI holds to the collector, and says completion is up to date as of now.
void flush_activity(Launches& l) {
  const uint64_t checked = realtime_ns();
  l.cupti.cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard<std::mutex> lock(l.completion_mutex);
  try {
    l.collector->on_completions_checked(checked);
  } catch (...) {
  }
}

// ---- The first error's report ---------------------------------------------------------------------------------------
// Built from the live recorder file (reports/cuda_error_report.h), as `trainscope report` rebuilds it for a process
// that died first: at the error, on this thread, and again at stop, when more of its launches are known finished.
void write_error_report(Launches& l) {
  if (l.first_error.load() == 0) return;
  recorder::RecorderFile file;
  std::string error;
  reports::CudaErrorReport report;
  if (!recorder::read_recorder_file(l.setup.recorder_path, &file, &error) ||
      !reports::build_cuda_error_report(file, &report)) {
    if (!l.error_report_failed)
      log(LogLevel::kWarn, ("cannot write the cuda-error report: " +
                            (error.empty() ? "the first error's record was overwritten" : error))
                               .c_str());
    l.error_report_failed = true;
    return;
  }
  const reports::CudaErrorFiles files = reports::write_cuda_error_report(l.setup.run_dir, file);
  if (!files.error.empty()) {
    if (!l.error_report_failed) log(LogLevel::kWarn, ("cannot write the cuda-error report: " + files.error).c_str());
    l.error_report_failed = true;
    return;
  }
  if (!l.error_report_written)
    log(LogLevel::kError,
        ("first CUDA error: " + reports::cuda_error_summary(report) + " (report: " + files.text_path + ")").c_str());
  l.error_report_written = true;
}

// The first error happened and its report was neither written nor refused yet.
bool error_report_due(const Launches& l) {
  return l.first_error.load() != 0 && !l.error_report_written && !l.error_report_failed;
}

void thread_loop(Launches* l) {
  name_this_thread("ts-launches");
  std::unique_lock<std::mutex> lock(l->mutex);
  while (!l->stopping) {
    l->wake.wait_for(lock, kFlushPeriod, [l] { return l->stopping || error_report_due(*l); });
    if (l->stopping) break;
    lock.unlock();
    if (error_report_due(*l)) write_error_report(*l);
    // Only while some launch is not known finished: a process whose kernels all finished costs a wake-up and two
    // loads every period, never a CUPTI flush.
    if (l->activity && l->launched.load(std::memory_order_relaxed) > l->completed.load(std::memory_order_relaxed))
      flush_activity(*l);
    lock.lock();
  }
}

void warn_foreign_injection() {
  const char* tool = std::getenv("CUDA_INJECTION64_PATH");
  const char* base = tool != nullptr ? std::strrchr(tool, '/') : nullptr;
  if (tool != nullptr && std::strcmp(base != nullptr ? base + 1 : tool, "libtrainscope.so") != 0)
    log(LogLevel::kWarn, ("CUDA_INJECTION64_PATH is set to '" + reports::printable(tool) +
                          "' (another tool): CUDA launches are seen from trainscope's start on, not from cuInit")
                             .c_str());
}

// Subscribes and enables what the mode needs; the launch mode the recorder then says, with its note.
void subscribe(Launches& l) {
  recorder::Writer& w = l.writer;
  const bool want_activity = l.setup.config->launches == LaunchesMode::kOn;
  if (const std::string why = load_cupti(l.cupti); !why.empty()) {
    w.set_launch_mode(LaunchMode::kUnavailable, why.c_str());
    log(LogLevel::kWarn, ("CUDA launches are not recorded: " + why).c_str());
    return;
  }
  CUptiResult result = l.cupti.cuptiSubscribe(&l.subscriber, on_callback, nullptr);
  if (result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    w.set_launch_mode(LaunchMode::kUnavailable, "CUPTI is in use by another tool (Nsight Systems, torch.profiler?)");
    log(LogLevel::kWarn,
        "CUDA launches are not recorded: CUPTI is in use by another tool (Nsight Systems, torch.profiler / Kineto); "
        "the job runs on, NCCL calls are recorded as usual");
    return;
  }
  if (result != CUPTI_SUCCESS) {
    const std::string why = "cuptiSubscribe failed: " + l.cupti.error_text(result);
    w.set_launch_mode(LaunchMode::kUnavailable, why.c_str());
    log(LogLevel::kWarn, ("CUDA launches are not recorded: " + why).c_str());
    return;
  }
  // Every call's result is wanted (the first error can be any call), not only the launches'.
  for (CUpti_CallbackDomain domain : {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_CB_DOMAIN_DRIVER_API}) {
    if ((result = l.cupti.cuptiEnableDomain(1, l.subscriber, domain)) != CUPTI_SUCCESS) {
      const std::string why = "cuptiEnableDomain failed: " + l.cupti.error_text(result);
      l.cupti.cuptiUnsubscribe(l.subscriber);
      w.set_launch_mode(LaunchMode::kUnavailable, why.c_str());
      log(LogLevel::kWarn, ("CUDA launches are not recorded: " + why).c_str());
      return;
    }
  }
  std::string note;
  if (want_activity) {
    uint64_t cupti_now = 0;
    l.cupti.cuptiGetTimestamp(&cupti_now);
    l.timestamp_offset = static_cast<int64_t>(realtime_ns()) - static_cast<int64_t>(cupti_now);
    result = l.cupti.cuptiActivityRegisterCallbacks(on_buffer_requested, on_buffer_completed);
    if (result == CUPTI_SUCCESS) result = l.cupti.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    l.activity = result == CUPTI_SUCCESS;
    if (!l.activity) note = "no kernel completion: CUPTI activity failed (" + l.cupti.error_text(result) + ")";
  }
  w.set_launch_mode(l.activity ? LaunchMode::kCompletions : LaunchMode::kCallbacks, note.c_str());
  if (!note.empty()) log(LogLevel::kWarn, ("CUDA launches are recorded with " + note).c_str());
  log(LogLevel::kDebug, ("CUDA launches recorded through " + l.cupti.path).c_str());
  l.collector->set_first_error_handler([l_ptr = &l](uint64_t index) {
    {
      std::lock_guard<std::mutex> lock(l_ptr->mutex);
      l_ptr->first_error.store(index + 1);
    }
    l_ptr->wake.notify_all();
  });
  g_active.store(&l, std::memory_order_release);
  l.thread = std::thread(thread_loop, &l);
  // exit() runs atexit handlers (static destructors included: CUPTI's own teardown) before the shim's destructor
  // stops the engine. Registered after libcupti's, ours runs before its teardown: no flush into a torn-down CUPTI.
  std::atexit(stop_launches);
}

void start_locked() {
  if (g_tried || !g_prepared) return;
  g_tried = true;
  Launches& l = *g_launches;
  if (!l.writer.attach(l.setup.recorder)) return;
  launches::CollectorOptions options;
  options.watch_kernels = l.setup.config->watch_kernels[0] != '\0' ? l.setup.config->watch_kernels : nullptr;
  options.kernel_dtype = l.setup.config->kernel_dtype[0] != '\0' ? l.setup.config->kernel_dtype : nullptr;
  l.collector = new launches::LaunchCollector(&l.writer, &l.queries, l.setup.watcher, options);  // leaked with l
  // TRAINSCOPE_STEP_MARKER=auto: optimizer kernels end batches, for the frame thread and the batch gate.
  const launches::LaunchCollector* collector = l.collector;
  set_optimizer_kernel_predicate([collector](uint64_t f) { return collector->is_optimizer_kernel(f); });
  l.collector->set_launch_handler(&batch_gate_launch);
  subscribe(l);
}

}  // namespace

void prepare_launches(const LaunchesSetup& setup) {
  std::lock_guard<std::mutex> lock(g_start_mutex);
  if (g_prepared || setup.config == nullptr || setup.config->launches == LaunchesMode::kOff ||
      setup.recorder == nullptr)
    return;
  g_launches = new Launches();
  g_launches->setup = setup;
  g_prepared = true;
  warn_foreign_injection();
  // The driver is already here (the job initialised CUDA before its first NCCL call, with no injection of ours).
  if (void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD); driver != nullptr) {
    dlclose(driver);
    start_locked();
  }
}

void start_launches() {
  std::lock_guard<std::mutex> lock(g_start_mutex);
  start_locked();
}

void stop_launches() {
  // From then on CUPTI's callbacks are ignored: what exit() tears down after this is not ours to touch.
  Launches* l = g_active.exchange(nullptr, std::memory_order_acq_rel);
  if (l == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(l->mutex);
    l->stopping = true;
  }
  l->wake.notify_all();
  if (l->thread.joinable()) l->thread.join();
  write_error_report(*l);
}

void abandon_launches() {
  Launches* l = g_active.exchange(nullptr, std::memory_order_acq_rel);
  if (l != nullptr && l->thread.joinable()) l->thread.detach();
  // The child never records launches: its CUDA (if any) is its parent's, unusable after fork. No lock: the child has
  // one thread, and another thread of the parent may have held g_start_mutex at the fork.
  g_tried = true;
}

}  // namespace trainscope::engine
