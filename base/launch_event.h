// The launch collector's input: one CUDA API call as a CUPTI callback saw it, in plain C++ terms.
//
// The CUPTI adapter's callbacks (shim/engine/job_thread/launch_callbacks.cc) are the only code that knows CUPTI's
// callback ids and parameter structs; they turn each callback into an ApiCall and hand it to the LaunchCollector
// (launch_collector.h), which is plain C++ tested on CPU with synthetic streams of these. Everything a report needs
// must be in here: the collector never calls CUDA itself, it asks the CudaQueries interface below (the driver in the
// engine, a table in tests).
#pragma once

#include <cstdint>
#include <string_view>

#include "base/flight_record_format.h"

namespace trainscope::launches {

using recorder::CudaDomain;
using recorder::LaunchKind;

// What kind of call it is, as far as the collector cares.
enum class CallClass : uint8_t {
  kOther = 0,    // any other API call: only its result matters (the first error)
  kLaunch,       // a kernel or graph launch (kind says which)
  kStreamSync,   // cudaStreamSynchronize, cuStreamSynchronize: `stream` is done when it returns success
  kContextSync,  // cudaDeviceSynchronize, cuCtxSynchronize: every stream of `context` is done
  kEventSync,    // cudaEventSynchronize, cuEventSynchronize: recorded, not a stream's completion
};

enum class Phase : uint8_t { kEnter, kExit };

// One callback. Strings and `params` are valid for the duration of the callback only.
struct ApiCall {
  Phase phase = Phase::kEnter;
  CudaDomain domain = CudaDomain::kUnknown;
  CallClass klass = CallClass::kOther;
  uint32_t cbid = 0;          // CUPTI's callback id (per domain)
  std::string_view function;  // the API function's name: "cudaLaunchKernel", "cuStreamSynchronize"
  uint32_t correlation = 0;   // CUPTI's correlation id: the same for a call's enter and exit, and in the
                              // kernel activity record of the launch it made
  uint64_t context = 0;       // CUcontext
  uint64_t stream = 0;        // the call's stream (0: legacy default; 2: per-thread default), if it has one
  int32_t result = 0;         // kExit only: the call's return value (cudaError_t or CUresult by domain)
  uint64_t time_ns = 0;       // CLOCK_REALTIME when the callback ran; 0 for a kOther call that succeeded (nothing
                              // is recorded for it, so the adapter reads no clock)

  // kLaunch only.
  LaunchKind kind = LaunchKind::kUnknown;
  uint64_t function_handle = 0;  // CUfunction (0 for a graph launch)
  std::string_view symbol;       // the kernel's (mangled) symbol name as CUPTI gives it; may be empty
  uint32_t grid[3] = {0, 0, 0};
  uint32_t block[3] = {0, 0, 0};
  uint32_t shared_bytes = 0;  // dynamic shared memory
  void** params = nullptr;    // the kernel's arguments, one pointer per parameter (kernelParams / args)
  uint64_t graph_exec = 0;    // kGraph: the CUgraphExec
  bool capturing = false;     // the stream is under graph capture (the adapter asked cuStreamIsCapturing)
};

// One parameter of a kernel, as cuFuncGetParamInfo reports it.
struct ParamInfo {
  uint64_t offset = 0;
  uint64_t size = 0;
};

// The allocation a device address falls in (cuPointerGetAttribute RANGE_START_ADDR / RANGE_SIZE).
struct Allocation {
  uint64_t base = 0;
  uint64_t bytes = 0;
  bool device = false;  // device or managed memory (the statistics kernel can read it)
};

// What the collector needs to know from the driver. The engine implements it with the driver API (each answer
// cached where it cannot change, per CUfunction); tests with tables.
class CudaQueries {
 public:
  virtual ~CudaQueries() = default;
  // The kernel's parameters in order; false when the driver cannot say (older than CUDA 12.4, or a graph launch).
  virtual bool param_layout(uint64_t function_handle, ParamInfo* out, uint32_t max, uint32_t* count) = 0;
  // The allocation `address` falls in; false when it is no address the driver knows.
  virtual bool allocation_of(uint64_t address, Allocation* out) = 0;
};

// True on the thread while trainscope itself calls CUDA (the statistics kernel, queries): those calls are never
// recorded, watched or counted as the job's errors. Set by the engine around its own CUDA use, by the statistics
// launcher (kernels/gpu_stats.cc, where the one thread-local behind both lives: stats::inside_own_launch() reads it
// too) and by the collector around its CudaQueries, LaunchWatcher and first-error handler calls.
bool own_cuda_call_active();
class OwnCudaCalls {
 public:
  OwnCudaCalls();
  ~OwnCudaCalls();
  OwnCudaCalls(const OwnCudaCalls&) = delete;
  OwnCudaCalls& operator=(const OwnCudaCalls&) = delete;
};

}  // namespace trainscope::launches
