// What the reports say about the launch collector's records (flight_record_format.h, "Launch records"): CUDA result
// names and messages, one launch as a line, and a process's last launches per stream with whether they finished.
// Shared by `trainscope report`, the cuda-error report, the run summary and the desync report.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/flight_recorder_reader.h"

namespace trainscope::recorder {

// "cudaErrorIllegalAddress" (runtime), "CUDA_ERROR_ILLEGAL_ADDRESS" (driver), "cudaSuccess"; "error 12345" for a code
// the table does not know (and for an unknown domain, but for 0: "success").
std::string cuda_result_name(CudaDomain domain, int32_t result);
// "an illegal memory access was encountered"; "" when the table does not know the code.
std::string cuda_result_message(CudaDomain domain, int32_t result);
// "700 cudaErrorIllegalAddress (an illegal memory access was encountered)"; "error 12345" alone when unknown.
std::string cuda_result_text(CudaDomain domain, int32_t result);

// A launch record's kernel: its demangled name from the name table, "graph 0x..." for a graph launch without one,
// "kernel 0x<CUfunction>" when the name is not known. As the file holds it: text output escapes it (launch_row does).
std::string launch_kernel_name(const RecorderFile& file, const Record& launch);
// "128x2x1" (z and y shown only when not 1: "128", "128x2").
std::string dim3_text(Dim3 d);
// "cudaLaunchKernel"-like API kind: "runtime kernel", "driver cooperative", "runtime graph", ...
std::string launch_api_text(int16_t redop);
// "finished by 12:00:01.123456", "not finished as of 12:00:01.123456", "unknown".
std::string launch_progress_text(const LaunchProgress& progress);
// The same as a JSON key: "finished", "not_finished", "unknown".
const char* launch_progress_key(LaunchState state);

// One launch as the reports show it.
struct LaunchLine {
  uint64_t index = 0;  // ring index of its record
  Record record{};
  std::string kernel;  // launch_kernel_name
  LaunchProgress progress;
};
LaunchLine launch_line(const RecorderFile& file, const RecordedCall& call);
// Columns of a launch table: index, time (UTC), kernel, grid, block, shared, api, result, finished.
std::vector<std::string> launch_row(const LaunchLine& line);
std::vector<std::string> launch_row_header();
nlohmann::json launch_json(const LaunchLine& line);

// One stream of a process and its newest launches (oldest first).
struct StreamLaunches {
  uint64_t stream = 0;
  uint64_t context = 0;
  const StreamEntry* entry = nullptr;  // its stream table entry, nullptr when the table had no room for it
  uint64_t held = 0;                   // its launches held in the ring
  std::vector<LaunchLine> last;        // the newest `per_stream` of them
};
// Every stream with a launch held in the file, by the time of its newest launch (the most recent last), with its
// newest `per_stream` launches.
std::vector<StreamLaunches> last_launches_per_stream(const RecorderFile& file, size_t per_stream);

// A stream's last launch, as the desync report names it for a rank that waits or did not arrive.
struct StreamLastLaunch {
  uint64_t stream = 0;
  std::string kernel;  // launch_kernel_name
  uint64_t launch_ns = 0;
  LaunchProgress progress;
};
// The last launch held on each stream of `file`, by launch time (the most recent last).
std::vector<StreamLastLaunch> last_launch_per_stream(const RecorderFile& file);
// "stream 0x7f3a5c001200: gemm launched 12:00:00.010000, not finished as of 12:00:00.060000" (printable).
std::string stream_last_launch_text(const StreamLastLaunch& launch);
nlohmann::json stream_last_launch_json(const StreamLastLaunch& launch);

// "0x7f3a5c001200"; the default streams by name: "0 (legacy default)", "2 (per-thread default)".
std::string stream_text(uint64_t stream);

// What a successful kStreamSync record synchronised, by the API function its name id names.
enum class SyncScope { kStream, kContext, kEvent };
SyncScope sync_scope(const RecorderFile& file, const Record& sync);

bool is_launch(const Record& r);  // kKernelLaunch or kGraphLaunch

}  // namespace trainscope::recorder
