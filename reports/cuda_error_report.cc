// The first CUDA error of a process, from its flight recorder, as text and JSON; and writing it to the run directory.
#include "reports/cuda_error_report.h"

#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "base/printable.h"
#include "base/private_files.h"
#include "base/run_files.h"
#include "reports/recorder_report.h"

namespace trainscope::reports {
namespace {

using nlohmann::json;
using recorder::Op;
using recorder::RecordedCall;
using recorder::RecorderFile;

std::string domain_text(recorder::CudaDomain domain) {
  switch (domain) {
    case recorder::CudaDomain::kRuntime:
      return "runtime";
    case recorder::CudaDomain::kDriver:
      return "driver";
    case recorder::CudaDomain::kUnknown:
      break;
  }
  return "unknown";
}

std::string who_text(const CudaErrorReport& report) {
  return (report.rank >= 0 ? "rank " + std::to_string(report.rank) : std::string("rank ?")) + " (pid " +
         std::to_string(report.pid) + (report.host.empty() ? "" : ", host " + printable(report.host)) + ")";
}

std::string scope_text(const CudaErrorReport& report) { return report.streamless ? "every stream" : "the stream"; }

}  // namespace

std::string launch_mode_text(uint32_t mode, const std::string& note) {
  const std::string why = note.empty() ? std::string() : ": " + printable(note);
  switch (static_cast<recorder::LaunchMode>(mode)) {
    case recorder::LaunchMode::kNone:
      return "not collected (no CUDA use seen, or TRAINSCOPE_LAUNCHES=off)" + why;
    case recorder::LaunchMode::kCallbacks:
      return "callbacks only: kernel completion not tracked" + why;
    case recorder::LaunchMode::kCompletions:
      return "callbacks and kernel completion" + why;
    case recorder::LaunchMode::kUnavailable:
      return "unavailable" + (why.empty() ? std::string(": reason not known") : why);
  }
  return "mode " + std::to_string(mode) + why;
}

bool build_cuda_error_report(const RecorderFile& file, CudaErrorReport* out) {
  *out = CudaErrorReport{};
  const RecordedCall* error = file.first_error();
  if (error == nullptr) return false;
  const recorder::FileHeader& h = file.header;
  const recorder::Record& r = error->record;
  out->rank = h.global_rank;
  out->pid = h.pid;
  out->host = h.host;
  out->record_index = error->index;
  out->api = file.name(static_cast<uint32_t>(r.peer));
  if (out->api.empty()) out->api = "CUDA API call #" + std::to_string(r.count);
  out->domain = static_cast<recorder::CudaDomain>(r.redop & 0xff);
  out->result = r.result;
  out->time_ns = r.start_ns;
  out->stream = r.stream;
  out->context = r.aux;
  out->streamless = r.stream == 0;
  out->cuda_errors = h.cuda_errors;
  out->launch_mode = h.launch_mode;
  out->launch_note = h.launch_note;
  out->oldest_held_index = file.records.empty() ? 0 : file.records.front().index;

  // Back from the error to the last successful synchronisation that covers the stream: a stream's own, or its
  // context's (cudaDeviceSynchronize, cuCtxSynchronize). For a call without a stream every stream counts; each stream
  // stops at its own synchronisation, all at the context's. An event's synchronisation says nothing of a stream.
  const auto same_context = [&](const recorder::Record& other) {
    return out->context == 0 || other.aux == out->context;
  };
  std::set<uint64_t> settled_streams;
  std::vector<recorder::LaunchLine> newest_first;
  const auto first = std::lower_bound(file.records.begin(), file.records.end(), error->index,
                                      [](const RecordedCall& c, uint64_t i) { return c.index < i; });
  for (auto it = std::make_reverse_iterator(first); it != file.records.rend(); ++it) {
    const recorder::Record& other = it->record;
    if (!same_context(other)) continue;
    if (other.op == static_cast<uint16_t>(Op::kStreamSync) && other.result == 0) {
      const recorder::SyncScope scope = recorder::sync_scope(file, other);
      if (scope == recorder::SyncScope::kEvent) continue;
      const bool covers = scope == recorder::SyncScope::kContext || (!out->streamless && other.stream == out->stream);
      if (covers) {
        out->has_sync = true;
        out->sync_api = file.name(static_cast<uint32_t>(other.peer));
        if (out->sync_api.empty()) out->sync_api = "a synchronisation";
        out->sync_ns = other.end_ns != 0 ? other.end_ns : other.start_ns;
        out->sync_index = it->index;
        break;
      }
      if (out->streamless) settled_streams.insert(other.stream);
      continue;
    }
    if (!recorder::is_launch(other)) continue;
    if (out->streamless ? settled_streams.count(other.stream) != 0 : other.stream != out->stream) continue;
    if (newest_first.size() < kMaxLaunchesShown) {
      newest_first.push_back(recorder::launch_line(file, *it));
    } else {
      ++out->launches_not_listed;
    }
  }
  out->launches.assign(newest_first.rbegin(), newest_first.rend());
  out->history_cut = !out->has_sync && out->oldest_held_index > 0;
  return true;
}

std::string cuda_error_summary(const CudaErrorReport& report) {
  std::string text = printable(report.api) + " returned " + recorder::cuda_result_text(report.domain, report.result) +
                     " at " + recorder::utc_date_time(report.time_ns);
  if (!report.launches.empty()) {
    const recorder::LaunchLine& last = report.launches.back();
    text += ", after kernel " + printable(last.kernel) + " on stream " + recorder::stream_text(last.record.stream);
  } else if (!report.streamless) {
    text += " on stream " + recorder::stream_text(report.stream) + " (no launch on it since its last synchronisation)";
  }
  return text;
}

std::string format_cuda_error_text(const CudaErrorReport& report) {
  std::string out = "First CUDA error on " + who_text(report) + ": " + printable(report.api) + " returned " +
                    recorder::cuda_result_text(report.domain, report.result) + "\n";
  out +=
      "Time: " + recorder::utc_date_time(report.time_ns) + " (record #" + std::to_string(report.record_index) + ")\n";
  if (report.streamless) {
    out += "Stream: none (a call without a stream, or the legacy default stream: launches on every stream)\n";
  } else {
    out += "Stream: " + recorder::stream_text(report.stream) + " (context " + recorder::hex_id(report.context) + ")\n";
  }
  out += "CUDA errors in this process: " + std::to_string(report.cuda_errors);
  if (report.cuda_errors > 1) out += " (only the first is described; later calls may fail from the same error)";
  out += "\n";
  out += "Launches: " + launch_mode_text(report.launch_mode, report.launch_note) + "\n";
  out += "Last successful synchronisation of " + scope_text(report) + ": ";
  if (report.has_sync) {
    out += printable(report.sync_api) + " at " + recorder::utc_time_of_day(report.sync_ns) + " (record #" +
           std::to_string(report.sync_index) + ")\n";
  } else if (report.history_cut) {
    out += "none held (the recorder holds records from #" + std::to_string(report.oldest_held_index) + " on)\n";
  } else {
    out += "none since the process started\n";
  }
  const size_t total = report.launches.size() + report.launches_not_listed;
  if (total == 0) {
    out += "Launches on " + scope_text(report) + " since then: none\n";
  } else {
    out += "Launches on " + scope_text(report) + " since then (" + std::to_string(total) + "):\n";
    if (report.launches_not_listed > 0)
      out += "  (" + std::to_string(report.launches_not_listed) + " earlier launches not listed)\n";
    std::vector<std::string> header = recorder::launch_row_header();
    if (report.streamless) header.insert(header.begin() + 3, "stream");
    std::vector<std::vector<std::string>> rows{header};
    for (const recorder::LaunchLine& line : report.launches) {
      rows.push_back(recorder::launch_row(line));
      if (report.streamless) rows.back().insert(rows.back().begin() + 3, recorder::stream_text(line.record.stream));
    }
    out += recorder::aligned_table(rows, "  ");
  }
  if (!report.launches.empty()) {
    const recorder::LaunchLine& last = report.launches.back();
    out += "The error came after kernel " + printable(last.kernel) + " on stream " +
           recorder::stream_text(last.record.stream) + " (launched " + recorder::utc_time_of_day(last.record.start_ns) +
           ", record #" + std::to_string(last.index) + ", " + recorder::launch_progress_text(last.progress) + ").\n";
  }
  return out;
}

json cuda_error_json(const CudaErrorReport& report) {
  json launches = json::array();
  for (const recorder::LaunchLine& line : report.launches) launches.push_back(recorder::launch_json(line));
  json since = nullptr;
  if (report.has_sync)
    since = {{"api", report.sync_api}, {"time_ns", report.sync_ns}, {"record_index", report.sync_index}};
  const std::string message = recorder::cuda_result_message(report.domain, report.result);
  return {{"kind", "cuda_error"},
          {"process", report.rank},
          {"pid", report.pid},
          {"host", report.host},
          {"api", report.api},
          {"domain", domain_text(report.domain)},
          {"result", report.result},
          {"result_name", recorder::cuda_result_name(report.domain, report.result)},
          {"message", message.empty() ? json(nullptr) : json(message)},
          {"time_ns", report.time_ns},
          {"record_index", report.record_index},
          {"stream", report.streamless ? json(nullptr) : json(report.stream)},
          {"context", report.context},
          {"streamless", report.streamless},
          {"cuda_errors", report.cuda_errors},
          {"launch_mode", recorder::launch_mode_name(report.launch_mode)},
          {"launch_note", report.launch_note},
          {"since", std::move(since)},
          {"oldest_held_index", report.oldest_held_index},
          {"history_cut", report.history_cut},
          {"launches", std::move(launches)},
          {"launches_not_listed", report.launches_not_listed},
          {"summary", cuda_error_summary(report)}};
}

std::string cuda_error_base_name(const CudaErrorReport& report) {
  return run_files::per_process_name(run_files::ReportKind::kCudaError, report.rank, report.pid);
}

CudaErrorFiles write_cuda_error_report(const std::string& run_dir, const RecorderFile& file) {
  CudaErrorFiles written;
  CudaErrorReport report;
  if (!build_cuda_error_report(file, &report)) {
    written.error = file.path + ": no first CUDA error recorded";
    return written;
  }
  if (const files::PrivateDirectory made = files::make_private_directory(run_dir.c_str()); made.error != 0) {
    written.error = "cannot use the run directory " + run_dir + ": " + files::error_text(made.error);
    return written;
  }
  return replace_report(run_dir, cuda_error_base_name(report), format_cuda_error_text(report), cuda_error_json(report));
}

CudaErrorFiles write_cuda_error_report(const std::string& run_dir, const std::string& recorder_path) {
  recorder::RecorderFile file;
  std::string error;
  if (!recorder::read_recorder_file(recorder_path, &file, &error)) {
    CudaErrorFiles written;
    written.error = std::move(error);
    return written;
  }
  return write_cuda_error_report(run_dir, file);
}

}  // namespace trainscope::reports
