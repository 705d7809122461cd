// CUPTI's API callbacks, translated: each runtime or driver call's params struct becomes the ApiCall the launch
// collector records (a launch's kind, grid, block, stream and arguments; a synchronisation's stream; any call's
// result), the only code that knows CUPTI's callback ids and *_params structs. It runs on the job's launching
// thread, inside every CUDA call the job makes, at its enter and at its exit: hence no clock read for a call that is
// neither a launch nor a synchronisation nor a failure, and one driver question per launch (whether its stream is
// capturing), remembered for its exit and for the driver launch inside a runtime one.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti.h>

#include <atomic>
#include <cstdint>

#include "base/clocks.h"
#include "base/launch_event.h"
#include "collectors/launches/launch_collector.h"
#include "kernels/gpu_stats.h"
#include "shim/engine/shared/cuda_driver_queries.h"
#include "shim/engine/shared/engine_launches_detail.h"

namespace trainscope::engine {
namespace {

using launches::ApiCall;
using launches::CallClass;
using recorder::CudaDomain;
using recorder::LaunchKind;

// __cudaLaunchKernel (CUDA 13's <<<>>>) has no params struct of its own in the toolkit's headers: its arguments are
// cudaLaunchKernel's, with a cudaKernel_t where cudaLaunchKernel has the host function (both pointers).
static_assert(sizeof(cudaKernel_t) == sizeof(const void*));

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

}  // namespace

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

}  // namespace trainscope::engine
