// CUDA result names, launch lines and the last launches per stream, for every report that shows launches.
#include "reports/cuda_launches.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "base/hex_text.h"
#include "base/printable.h"
#include "reports/recorder_report.h"

namespace trainscope::recorder {
namespace {

using nlohmann::json;

// The common cudaError_t and CUresult codes: the two share their numbers for these (a runtime-only or driver-only code
// has nullptr on the other side). Messages as cudaGetErrorString gives them.
struct CudaResultInfo {
  int32_t code;
  const char* runtime;
  const char* driver;
  const char* message;
};
constexpr CudaResultInfo kCudaResults[] = {
    {0, "cudaSuccess", "CUDA_SUCCESS", "no error"},
    {1, "cudaErrorInvalidValue", "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "cudaErrorMemoryAllocation", "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "cudaErrorInitializationError", "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {4, "cudaErrorCudartUnloading", "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {9, "cudaErrorInvalidConfiguration", nullptr, "invalid configuration argument"},
    {13, "cudaErrorInvalidSymbol", nullptr, "invalid device symbol"},
    {17, "cudaErrorInvalidDevicePointer", nullptr, "invalid device pointer"},
    {35, "cudaErrorInsufficientDriver", nullptr, "CUDA driver version is insufficient for CUDA runtime version"},
    {46, "cudaErrorDevicesUnavailable", "CUDA_ERROR_DEVICE_UNAVAILABLE",
     "CUDA-capable device(s) is/are busy or "
     "unavailable"},
    {98, "cudaErrorInvalidDeviceFunction", nullptr, "invalid device function"},
    {100, "cudaErrorNoDevice", "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "cudaErrorInvalidDevice", "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {200, "cudaErrorInvalidKernelImage", "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {201, "cudaErrorDeviceUninitialized", "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {209, "cudaErrorNoKernelImageForDevice", "CUDA_ERROR_NO_BINARY_FOR_GPU",
     "no kernel image is available for execution on the device"},
    {214, "cudaErrorECCUncorrectable", "CUDA_ERROR_ECC_UNCORRECTABLE", "uncorrectable ECC error encountered"},
    {400, "cudaErrorInvalidResourceHandle", "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {500, "cudaErrorSymbolNotFound", "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {600, "cudaErrorNotReady", "CUDA_ERROR_NOT_READY", "device not ready"},
    {700, "cudaErrorIllegalAddress", "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {701, "cudaErrorLaunchOutOfResources", "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
     "too many resources requested for launch"},
    {702, "cudaErrorLaunchTimeout", "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
    {709, "cudaErrorContextIsDestroyed", "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {710, "cudaErrorAssert", "CUDA_ERROR_ASSERT", "device-side assert triggered"},
    {714, "cudaErrorHardwareStackError", "CUDA_ERROR_HARDWARE_STACK_ERROR", "hardware stack error"},
    {715, "cudaErrorIllegalInstruction", "CUDA_ERROR_ILLEGAL_INSTRUCTION", "an illegal instruction was encountered"},
    {716, "cudaErrorMisalignedAddress", "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
    {717, "cudaErrorInvalidAddressSpace", "CUDA_ERROR_INVALID_ADDRESS_SPACE",
     "operation not supported on global/shared address space"},
    {718, "cudaErrorInvalidPc", "CUDA_ERROR_INVALID_PC", "invalid program counter"},
    {719, "cudaErrorLaunchFailure", "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {720, "cudaErrorCooperativeLaunchTooLarge", "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
     "too many blocks in cooperative launch"},
    {800, "cudaErrorNotPermitted", "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {801, "cudaErrorNotSupported", "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {900, "cudaErrorStreamCaptureUnsupported", "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {901, "cudaErrorStreamCaptureInvalidated", "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "operation failed due to a previous error during capture"},
    {999, "cudaErrorUnknown", "CUDA_ERROR_UNKNOWN", "unknown error"},
};

const CudaResultInfo* find_result(int32_t code) {
  for (const CudaResultInfo& info : kCudaResults)
    if (info.code == code) return &info;
  return nullptr;
}

const char* name_in_domain(const CudaResultInfo* info, CudaDomain domain) {
  if (info == nullptr) return nullptr;
  if (domain == CudaDomain::kRuntime) return info->runtime;
  if (domain == CudaDomain::kDriver) return info->driver;
  return nullptr;
}

using text::hex_address;

}  // namespace

std::string cuda_result_name(CudaDomain domain, int32_t result) {
  if (const char* name = name_in_domain(find_result(result), domain)) return name;
  if (result == 0) return "success";
  return "error " + std::to_string(result);
}

std::string cuda_result_message(CudaDomain domain, int32_t result) {
  const CudaResultInfo* info = find_result(result);
  return name_in_domain(info, domain) != nullptr ? info->message : "";
}

std::string cuda_result_text(CudaDomain domain, int32_t result) {
  const char* name = name_in_domain(find_result(result), domain);
  if (name == nullptr) return "error " + std::to_string(result);
  return std::to_string(result) + " " + name + " (" + cuda_result_message(domain, result) + ")";
}

bool is_launch(const Record& r) {
  return r.op == static_cast<uint16_t>(Op::kKernelLaunch) || r.op == static_cast<uint16_t>(Op::kGraphLaunch);
}

std::string launch_kernel_name(const RecorderFile& file, const Record& launch) {
  const std::string name = file.name(static_cast<uint32_t>(launch.peer));
  if (!name.empty()) return name;
  if (launch.op == static_cast<uint16_t>(Op::kGraphLaunch)) return "graph " + hex_address(launch.group);
  return "kernel " + hex_address(launch.caller);
}

std::string dim3_text(Dim3 d) {
  std::string text = std::to_string(d.x);
  if (d.y != 1 || d.z != 1) text += "x" + std::to_string(d.y);
  if (d.z != 1) text += "x" + std::to_string(d.z);
  return text;
}

std::string launch_api_text(int16_t redop) {
  std::string text;
  switch (launch_domain(redop)) {
    case CudaDomain::kRuntime:
      text = "runtime";
      break;
    case CudaDomain::kDriver:
      text = "driver";
      break;
    case CudaDomain::kUnknown:
      text = "?";
      break;
  }
  switch (launch_kind(redop)) {
    case LaunchKind::kKernel:
      return text + " kernel";
    case LaunchKind::kCooperative:
      return text + " cooperative";
    case LaunchKind::kExtended:
      return text + " extended";
    case LaunchKind::kGraph:
      return text + " graph";
    case LaunchKind::kUnknown:
      break;
  }
  return text;
}

std::string launch_progress_text(const LaunchProgress& progress) {
  switch (progress.state) {
    case LaunchState::kFinished:
      return progress.at_ns != 0 ? "finished by " + utc_time_of_day(progress.at_ns) : "finished";
    case LaunchState::kNotFinished:
      return "not finished as of " + utc_time_of_day(progress.at_ns);
    case LaunchState::kNotLaunched:
      return "not launched (the call failed)";
    case LaunchState::kNotKnown:
      break;
  }
  return "unknown";
}

const char* launch_progress_key(LaunchState state) {
  switch (state) {
    case LaunchState::kFinished:
      return "finished";
    case LaunchState::kNotFinished:
      return "not_finished";
    case LaunchState::kNotLaunched:
      return "not_launched";
    case LaunchState::kNotKnown:
      break;
  }
  return "unknown";
}

LaunchLine launch_line(const RecorderFile& file, const RecordedCall& call) {
  return {call.index, call.record, launch_kernel_name(file, call.record), file.launch_progress(call.record)};
}

std::vector<std::string> launch_row_header() {
  return {"index", "time (UTC)", "kernel", "grid", "block", "shared", "api", "result", "finished"};
}

std::vector<std::string> launch_row(const LaunchLine& line) {
  const Record& r = line.record;
  const bool graph = r.op == static_cast<uint16_t>(Op::kGraphLaunch);
  const std::string result =
      r.result == kResultPending ? "no result" : cuda_result_name(launch_domain(r.redop), r.result);
  return {std::to_string(line.index),
          utc_time_of_day(r.start_ns),
          reports::printable(line.kernel),
          graph ? "-" : dim3_text(unpack_grid(r.count)),
          graph ? "-" : dim3_text(unpack_block(r.sendbuff)),
          graph ? "-" : std::to_string(r.recvbuff),
          launch_api_text(r.redop),
          result,
          launch_progress_text(line.progress)};
}

json launch_json(const LaunchLine& line) {
  const Record& r = line.record;
  const Dim3 grid = unpack_grid(r.count);
  const Dim3 block = unpack_block(r.sendbuff);
  const bool pending = r.result == kResultPending;
  return {{"index", line.index},
          {"kind", r.op == static_cast<uint16_t>(Op::kGraphLaunch) ? "graph" : "kernel"},
          {"kernel", line.kernel},
          {"correlation", r.seq},
          {"start_ns", r.start_ns},
          {"end_ns", pending ? json(nullptr) : json(r.end_ns)},
          {"stream", r.stream},
          {"context", r.aux},
          {"function", r.caller},
          {"graph_exec", r.group},
          {"grid", {grid.x, grid.y, grid.z}},
          {"block", {block.x, block.y, block.z}},
          {"shared_bytes", r.recvbuff},
          {"api", launch_api_text(r.redop)},
          {"result", pending ? json(nullptr) : json(cuda_result_name(launch_domain(r.redop), r.result))},
          {"result_code", pending ? json(nullptr) : json(r.result)},
          {"capturing", (r.flags & kFlagCapturing) != 0},
          {"watched", (r.flags & kFlagWatched) != 0},
          {"finished", launch_progress_key(line.progress.state)},
          {"finished_at_ns", line.progress.at_ns == 0 ? json(nullptr) : json(line.progress.at_ns)}};
}

std::vector<StreamLaunches> last_launches_per_stream(const RecorderFile& file, size_t per_stream) {
  // One pass from the newest record back: each stream keeps its newest `per_stream` launches and counts the rest.
  std::map<std::pair<uint64_t, uint64_t>, StreamLaunches> streams;
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> newest;  // the start of each stream's newest launch
  for (auto it = file.records.rbegin(); it != file.records.rend(); ++it) {
    const Record& r = it->record;
    if (!is_launch(r)) continue;
    const auto key = std::make_pair(r.stream, r.aux);
    StreamLaunches& s = streams[key];
    if (s.held == 0) {
      s.stream = r.stream;
      s.context = r.aux;
      s.entry = file.stream_entry(r.stream, r.aux);
      newest[key] = r.start_ns;
    }
    ++s.held;
    if (s.last.size() < per_stream) s.last.push_back(launch_line(file, *it));
  }
  std::vector<StreamLaunches> out;
  for (auto& [key, s] : streams) {
    std::reverse(s.last.begin(), s.last.end());
    out.push_back(std::move(s));
  }
  std::stable_sort(out.begin(), out.end(), [&](const StreamLaunches& a, const StreamLaunches& b) {
    return newest[{a.stream, a.context}] < newest[{b.stream, b.context}];
  });
  return out;
}

std::vector<StreamLastLaunch> last_launch_per_stream(const RecorderFile& file) {
  std::vector<StreamLastLaunch> out;
  for (const StreamLaunches& s : last_launches_per_stream(file, 1)) {
    const LaunchLine& line = s.last.back();
    out.push_back({s.stream, line.kernel, line.record.start_ns, line.progress});
  }
  return out;
}

std::string stream_last_launch_text(const StreamLastLaunch& launch) {
  return "stream " + stream_text(launch.stream) + ": " + reports::printable(launch.kernel) + " launched " +
         utc_time_of_day(launch.launch_ns) + ", " + launch_progress_text(launch.progress);
}

json stream_last_launch_json(const StreamLastLaunch& launch) {
  return {{"stream", launch.stream},
          {"kernel", launch.kernel},
          {"start_ns", launch.launch_ns},
          {"finished", launch_progress_key(launch.progress.state)},
          {"finished_at_ns", launch.progress.at_ns == 0 ? json(nullptr) : json(launch.progress.at_ns)}};
}

std::string stream_text(uint64_t stream) {
  if (stream == 0) return "0 (legacy default)";
  if (stream == 2) return "2 (per-thread default)";
  return hex_address(stream);
}

SyncScope sync_scope(const RecorderFile& file, const Record& sync) {
  const std::string name = file.name(static_cast<uint32_t>(sync.peer));
  if (name.find("EventSynchronize") != std::string::npos) return SyncScope::kEvent;
  if (name.find("DeviceSynchronize") != std::string::npos || name.find("CtxSynchronize") != std::string::npos)
    return SyncScope::kContext;
  return SyncScope::kStream;
}

}  // namespace trainscope::recorder
