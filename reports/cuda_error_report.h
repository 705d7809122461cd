// The first CUDA error of one process (`cuda-error-rank<R>`, text and JSON), built from its flight recorder alone: the
// first API call that returned an error (its kCudaError record, header.first_error_index), with its time and stream,
// and the launches on that stream since its last successful synchronisation — the kernels that may have caused it.
// One implementation for both writers: the engine, from its own live recorder file when the error happens (and again
// at stop, when more launches are known finished), and `trainscope report`, for a process that died before writing it.
//
// Text (every string from the file escaped, reports::printable):
//   First CUDA error on rank 3 (pid 4242, host node-17): cudaStreamSynchronize returned 700 cudaErrorIllegalAddress
//   (an illegal memory access was encountered)
//   Time: 2026-12-01 12:00:01.123456 UTC (record #812)
//   Stream: 0x7f3a5c001200 (context 0x5581aa00)       / "none (a call without a stream: launches on every stream)"
//   CUDA errors in this process: 3 (only the first is described; errors are sticky: later calls may fail too)
//   Launches: completions (CUPTI callbacks and kernel activity)  / "callbacks: kernel completion not tracked" / ...
//   Last successful synchronisation of the stream: cudaStreamSynchronize at 12:00:00.900000 (record #790)
//                                              / "none held (the recorder holds records from #512 on)"
//   Launches on the stream since then (2):
//     index  time (UTC)       kernel       grid  block  shared  api             result       finished
//     800    12:00:01.000000  vectorAdd    128   256    0       runtime kernel  cudaSuccess  not finished as of ...
//   (and "N earlier launches not listed" when more than kMaxLaunchesShown)
//   The error came after kernel vectorAdd on stream 0x7f3a5c001200 (launched 12:00:01.000000, record #800).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/flight_recorder_reader.h"
#include "reports/cuda_launches.h"
#include "reports/report_files.h"

namespace trainscope::reports {

inline constexpr size_t kMaxLaunchesShown = 32;  // launches listed in a cuda-error report (the newest)

struct CudaErrorReport {
  int32_t rank = -1;  // global rank, -1 when the file does not know it
  int32_t pid = 0;
  std::string host;
  uint64_t record_index = 0;  // ring index of the kCudaError record
  std::string api;            // the API function's name ("cudaStreamSynchronize"); "CUDA API call #<cbid>" if unknown
  recorder::CudaDomain domain = recorder::CudaDomain::kUnknown;
  int32_t result = 0;
  uint64_t time_ns = 0;
  uint64_t stream = 0;
  uint64_t context = 0;
  bool streamless = false;   // stream 0: a call without a stream (or the legacy default one): every stream counts
  uint32_t cuda_errors = 0;  // all errors the process counted
  uint32_t launch_mode = 0;  // recorder::LaunchMode
  std::string launch_note;
  // The last successful synchronisation that covers the stream(s), when the recorder holds one.
  bool has_sync = false;
  std::string sync_api;
  uint64_t sync_ns = 0;
  uint64_t sync_index = 0;
  uint64_t oldest_held_index = 0;  // records from this index on are held (earlier launches may be missing)
  bool history_cut = false;        // no sync held and the ring has lapped: launches before oldest_held_index unknown
  std::vector<recorder::LaunchLine> launches;  // since that synchronisation, oldest first, at most kMaxLaunchesShown
  size_t launches_not_listed = 0;              // older ones beyond kMaxLaunchesShown
};

// Builds the report of `file`'s first CUDA error. False when the file has none (or its record was overwritten).
bool build_cuda_error_report(const recorder::RecorderFile& file, CudaErrorReport* out);

// "cudaStreamSynchronize returned 700 cudaErrorIllegalAddress (an illegal memory access was encountered) at
// 12:00:01.123456 UTC, after kernel vectorAdd on stream 0x7f3a5c001200": the run summary's words (no rank).
std::string cuda_error_summary(const CudaErrorReport& report);
std::string format_cuda_error_text(const CudaErrorReport& report);
// {"kind": "cuda_error", "process", "pid", "host", "api", "domain", "result", "result_name", "message", "time_ns",
//  "record_index", "stream", "context", "streamless", "cuda_errors", "launch_mode", "launch_note", "since",
//  "launches", "launches_not_listed", "history_cut", "summary"}: the same content as the text.
nlohmann::json cuda_error_json(const CudaErrorReport& report);
// "cuda-error-rank3"; "cuda-error-pid4242" when the rank is not known.
std::string cuda_error_base_name(const CudaErrorReport& report);
// "callbacks and kernel completion", "callbacks only: kernel completion not tracked", "not collected: <note>", ...
std::string launch_mode_text(uint32_t mode, const std::string& note);

using CudaErrorFiles = WrittenReport;  // report_files.h: the paths, or the error and the unwritten file
// Builds the report from `file` and writes <run_dir>/<base>.json then <base>.txt (mode 0600, the folder made private
// as every report's is), each replaced whole (files::replace_file: never through a link, never over a file trainscope
// did not create), so that the engine can write it at the error and again at stop. Returns the paths, or in `error`
// why not, path first (also when the file holds no first error).
CudaErrorFiles write_cuda_error_report(const std::string& run_dir, const recorder::RecorderFile& file);
// The same from a recorder file's path (the engine's own, live: read, then written as above).
CudaErrorFiles write_cuda_error_report(const std::string& run_dir, const std::string& recorder_path);

}  // namespace trainscope::reports
