// Summarises a run directory's flight recorders: ranks, communicators and their last calls, as text and JSON.
#include "reports/recorder_report.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <vector>

#include "base/hex_text.h"
#include "base/printable.h"
#include "reports/cuda_error_report.h"
#include "reports/cuda_launches.h"

namespace trainscope::recorder {
namespace {

using nlohmann::json;
using reports::printable;

// What the report says about one file's process; computed once so text and JSON agree.
struct RankState {
  std::string key;    // JSON value: running, exited, crashed_or_killed, running_unverified, unknown
  std::string text;   // for the header line
  bool gone = false;  // the process no longer runs: a pending call "did not return"
};

RankState rank_state(const RecorderFile& file, const ReportOptions& options) {
  const FileHeader& h = file.header;
  // trainscope stopped it: said in the header before _exit(), whatever came after.
  if ((h.end_flags & kEndStopped) != 0) {
    return {"stopped", stop_text(h) + (h.exit_ns != 0 ? " " + utc_time_of_day(h.exit_ns) : std::string()), true};
  }
  if (h.state == static_cast<uint32_t>(ProcessState::kExited)) {
    if ((h.end_flags & kEndExec) != 0) return {"exited", "replaced by exec() " + utc_time_of_day(h.exit_ns), true};
    std::string text = "exited " + utc_time_of_day(h.exit_ns);
    if ((h.end_flags & kEndExitStatus) != 0) text += " (status " + std::to_string(h.exit_status) + ")";
    return {"exited", text, true};
  }
  if (h.state == static_cast<uint32_t>(ProcessState::kRunning)) {
    const Liveness live = options.liveness ? options.liveness(h) : Liveness::kCannotTell;
    if (live == Liveness::kAlive) return {"running", "running", false};
    if (live == Liveness::kGone) {
      return {"crashed_or_killed", "CRASHED OR KILLED (pid gone, never exited cleanly)", true};
    }
    return {"running_unverified", "running? (cannot check pid " + std::to_string(h.pid) + " from this host)", false};
  }
  return {"unknown", "unknown state " + std::to_string(h.state), false};
}

// "Python 3.12"; "Python 3.14: stacks not available: <note>"; "Python stacks not available: <note>" when the version
// is not known; "" for a process that runs no Python.
std::string python_text(const FileHeader& h) {
  const std::string note = printable(std::string_view(h.python_note, strnlen(h.python_note, sizeof(h.python_note))));
  if (h.python_major > 0) {
    std::string text = "Python " + std::to_string(h.python_major) + "." + std::to_string(h.python_minor);
    if (!note.empty()) text += ": stacks not available: " + note;
    return text;
  }
  return note.empty() ? "" : "Python stacks not available: " + note;
}

std::string rank_label(const FileHeader& h) {
  return h.global_rank >= 0 ? "rank " + std::to_string(h.global_rank) : std::string("rank ?");
}

std::string call_result(const Record& r, const RankState& state) {
  if (r.result == kResultPending) return state.gone ? "did not return" : "pending";
  return result_name(r.result);
}

bool has_count(Op op) { return is_collective(op) || is_point_to_point(op); }

bool has_root(Op op) {
  return op == Op::kReduce || op == Op::kBroadcast || op == Op::kBcast || op == Op::kGather || op == Op::kScatter;
}

std::string op_label(uint16_t op) {
  const char* name = op_name(static_cast<Op>(op));
  return std::strcmp(name, "unknown") == 0 ? "op#" + std::to_string(op) : std::string(name);
}

std::string int_or_dash(int64_t v) { return v < 0 ? "-" : std::to_string(v); }

std::vector<std::string> flag_names(uint8_t flags) {
  std::vector<std::string> names;
  if (flags & kFlagInPlace) names.emplace_back("in_place");
  if (flags & kFlagInGroup) names.emplace_back("in_group");
  if (flags & kFlagUnavailable) names.emplace_back("unavailable");
  if (flags & kFlagNonBlocking) names.emplace_back("non_blocking");
  return names;
}

// A call the process waits in: an NCCL call without a result. A launch collector's record is appended at its API
// call's exit; one without a result is a process that died between the two stores, not a wait.
bool waits(const RecordedCall& call) { return call.pending() && !is_cuda_record(static_cast<Op>(call.record.op)); }

bool is_nccl_call(const RecordedCall& call) { return !is_cuda_record(static_cast<Op>(call.record.op)); }

// The calls the report shows for one file are its newest `last` NCCL calls (the launches have a section of their
// own), oldest first: those of records[first_shown()...] for which is_nccl_call().
size_t first_shown(const RecorderFile& file, size_t last) {
  size_t k = file.records.size();
  for (size_t found = 0; k > 0 && found < last; --k) found += is_nccl_call(file.records[k - 1]) ? 1 : 0;
  return k;
}

size_t nccl_calls_held(const RecorderFile& file) {
  return static_cast<size_t>(std::count_if(file.records.begin(), file.records.end(), is_nccl_call));
}

// Whether a rank's section shows launches: the launch collector ran (or said why it could not), or left records.
bool shows_launches(const RecorderFile& file) {
  return file.header.launch_mode != static_cast<uint32_t>(LaunchMode::kNone) || !file.streams.empty() ||
         file.header.cuda_errors != 0 ||
         std::any_of(file.records.begin(), file.records.end(),
                     [](const RecordedCall& c) { return is_launch(c.record); });
}

// The launches shown per stream: as many as calls are shown, at least one, and with `--last all` no more than a
// thousand (the report is built whole per rank, not streamed as the calls are).
size_t launches_per_stream(size_t last) { return std::clamp<size_t>(last, 1, 1000); }

// Aligned columns: numbers right, text left, two spaces between. Every row is measured first (the header is), then
// rendered one at a time, so that a table of many rows is never held whole.
class Table {
 public:
  Table(std::vector<std::string> header, std::vector<bool> right)
      : header_(std::move(header)), right_(std::move(right)), width_(header_.size(), 0) {
    measure(header_);
  }
  // Widens the columns to fit `row` (as many cells as columns, or more: those past the last column are ignored).
  void measure(const std::vector<std::string>& row) {
    for (size_t c = 0; c < width_.size(); ++c) width_[c] = std::max(width_[c], row[c].size());
  }
  // Drops the columns past the first `n`.
  void keep_columns(size_t n) {
    header_.resize(n);
    right_.resize(n);
    width_.resize(n);
  }
  void render_header(const std::string& indent, std::string& out) const { render(header_, indent, out); }
  // Appends one line: `row` at the measured widths.
  void render(const std::vector<std::string>& row, const std::string& indent, std::string& out) const {
    const size_t line_start = out.size();
    out += indent;
    for (size_t c = 0; c < width_.size(); ++c) {
      const size_t pad = width_[c] - row[c].size();
      const bool last = c + 1 == width_.size();
      if (right_[c]) out.append(pad, ' ');
      out += row[c];
      if (!right_[c] && !last) out.append(pad, ' ');
      if (!last) out += "  ";
    }
    while (out.size() > line_start && out.back() == ' ') out.pop_back();
    out += "\n";
  }

 private:
  std::vector<std::string> header_;
  std::vector<bool> right_;
  std::vector<size_t> width_;
};

constexpr size_t kCallColumns = 13;                  // the call table's, the Python location's last
constexpr size_t kTextBatchBytes = size_t{1} << 16;  // the text report goes out in batches of lines of this size

// The call table's row for one call, its Python location last ("-" when its site has none). Returns whether it has
// one.
bool call_row(const RecorderFile& file, const RecordedCall& call, const RankState& state,
              std::vector<std::string>* row) {
  const Record& r = call.record;
  const Op op = static_cast<Op>(r.op);
  const bool counted = has_count(op);
  const bool rooted = has_root(op) || is_point_to_point(op);
  std::string location = python_location(file.site(r.site));
  const bool has_location = !location.empty();
  row->assign({std::to_string(call.index), utc_time_of_day(r.start_ns), op_label(r.op), short_hex_id(r.comm_id),
               counted ? std::to_string(r.seq) : "-", counted ? std::to_string(r.count) : "-",
               counted ? dtype_name(r.dtype) : "-", is_collective(op) ? redop_name(r.redop) : "-",
               rooted ? int_or_dash(r.peer) : "-", r.group == 0 ? "-" : std::to_string(r.group), call_result(r, state),
               call.pending() || r.end_ns < r.start_ns ? "-" : duration_string(r.end_ns - r.start_ns),
               has_location ? std::move(location) : "-"});
  return has_location;
}

// Start time of a live process in seconds since the epoch, from /proc; nullopt when it cannot be told.
std::optional<uint64_t> process_start_seconds(int32_t pid) {
  std::ifstream stat_file("/proc/" + std::to_string(pid) + "/stat");
  std::string stat_line;
  if (!std::getline(stat_file, stat_line)) return std::nullopt;
  // Field 22 (starttime, clock ticks after boot); the command name (field 2) may hold spaces and ')'.
  const size_t close = stat_line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(stat_line.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i < 22) continue;
    std::ifstream boot_file("/proc/stat");
    std::string key;
    uint64_t boot_time = 0;
    while (boot_file >> key) {
      if (key == "btime" && boot_file >> boot_time) break;
    }
    const long ticks = sysconf(_SC_CLK_TCK);
    if (boot_time == 0 || ticks <= 0) return std::nullopt;
    char* end = nullptr;
    const uint64_t start_ticks = std::strtoull(field.c_str(), &end, 10);
    if (end == field.c_str() || *end != '\0') return std::nullopt;
    return boot_time + start_ticks / static_cast<uint64_t>(ticks);
  }
  return std::nullopt;
}

}  // namespace

Liveness probe_liveness(const FileHeader& header) {
  char host[256] = {};
  const size_t recorded = strnlen(header.host, sizeof(header.host));
  // The writer truncates long host names to the field; compare only what it kept in that case.
  const size_t compare = recorded == sizeof(header.host) - 1 ? recorded : sizeof(header.host);
  if (gethostname(host, sizeof(host) - 1) != 0 || std::strncmp(host, header.host, compare) != 0) {
    return Liveness::kCannotTell;
  }
  if (header.pid <= 0) return Liveness::kCannotTell;
  if (kill(header.pid, 0) != 0 && errno != EPERM) return errno == ESRCH ? Liveness::kGone : Liveness::kCannotTell;
  // The pid exists; if that process started after the recorder did, the pid was reused and ours is gone.
  const std::optional<uint64_t> started = process_start_seconds(header.pid);
  if (started && header.start_ns != 0 && *started > header.start_ns / 1000000000ull + 2) return Liveness::kGone;
  return Liveness::kAlive;
}

std::string nccl_version_string(int32_t code) {
  if (code <= 0) return "unknown";
  // NCCL_VERSION(): X*1000 + Y*100 + Z up to 2.8, X*10000 + Y*100 + Z from 2.9 on.
  const int32_t major = code >= 10000 ? code / 10000 : code / 1000;
  const int32_t minor = code >= 10000 ? code % 10000 / 100 : code % 1000 / 100;
  const int32_t patch = code % 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

std::string dtype_name(int32_t dtype) {
  static constexpr const char* kNames[] = {"int8",    "uint8",   "int32",   "uint32",   "int64",      "uint64",
                                           "float16", "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2"};
  if (dtype == kUnknown) return "-";
  if (dtype >= 0 && dtype < static_cast<int32_t>(std::size(kNames))) return kNames[dtype];
  return "dtype#" + std::to_string(dtype);
}

std::string redop_name(int32_t redop) {
  static constexpr const char* kNames[] = {"sum", "prod", "max", "min", "avg"};
  if (redop == kUnknown) return "-";
  if (redop >= 0 && redop < static_cast<int32_t>(std::size(kNames))) return kNames[redop];
  if (redop >= 5) return "premulsum#" + std::to_string(redop);  // ncclRedOpCreatePreMulSum hands out ids >= 5
  return "redop#" + std::to_string(redop);
}

std::string result_name(int32_t result) {
  static constexpr const char* kNames[] = {"ncclSuccess",       "ncclUnhandledCudaError", "ncclSystemError",
                                           "ncclInternalError", "ncclInvalidArgument",    "ncclInvalidUsage",
                                           "ncclRemoteError",   "ncclInProgress"};
  if (result == kResultPending) return "pending";
  if (result >= 0 && result < static_cast<int32_t>(std::size(kNames))) return kNames[result];
  return "ncclResult#" + std::to_string(result);
}

std::string comm_state_name(uint16_t state) {
  switch (static_cast<CommState>(state)) {
    case CommState::kLive:
      return "live";
    case CommState::kFinalized:
      return "finalized";
    case CommState::kDestroyed:
      return "destroyed";
    case CommState::kAborted:
      return "aborted";
    case CommState::kRevoked:
      return "revoked";
  }
  return "state#" + std::to_string(state);
}

std::string utc_time_of_day(uint64_t ns) {
  const time_t seconds = static_cast<time_t>(ns / 1000000000ull);
  struct tm tm {};
  gmtime_r(&seconds, &tm);
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%02d:%02d:%02d.%06u", tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<unsigned>(ns % 1000000000ull / 1000));
  return buffer;
}

std::string utc_date_time(uint64_t ns) {
  const time_t seconds = static_cast<time_t>(ns / 1000000000ull);
  struct tm tm {};
  gmtime_r(&seconds, &tm);
  char buffer[48];
  std::snprintf(buffer, sizeof(buffer), "%04d-%02d-%02d %02d:%02d:%02d.%06u UTC", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<unsigned>(ns % 1000000000ull / 1000));
  return buffer;
}

std::string duration_string(uint64_t ns) {
  char buffer[32];
  if (ns < 1000) {
    std::snprintf(buffer, sizeof(buffer), "%" PRIu64 "ns", ns);
  } else if (ns < 1000000) {
    std::snprintf(buffer, sizeof(buffer), "%.1fus", static_cast<double>(ns) / 1e3);
  } else if (ns < 1000000000) {
    std::snprintf(buffer, sizeof(buffer), "%.2fms", static_cast<double>(ns) / 1e6);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%.2fs", static_cast<double>(ns) / 1e9);
  }
  return buffer;
}

std::string hex_id(uint64_t id) { return text::hex_id(id); }

std::string short_hex_id(uint64_t id) { return id == 0 ? "-" : hex_id(id).substr(0, 6); }

std::string frame_file(const SiteFrame& frame) {
  return std::string(frame.file, strnlen(frame.file, sizeof(frame.file)));
}

std::string frame_location(const SiteFrame& frame) {
  std::string text = frame_file(frame);
  if (frame.line > 0) text += ":" + std::to_string(frame.line);
  const size_t function_length = strnlen(frame.function, sizeof(frame.function));
  if (function_length > 0) text += " in " + std::string(frame.function, function_length);
  return text;
}

// The frame a person wants to see: the job's own line (the innermost frame outside the Python installation and
// installed packages), else the innermost frame. nullptr when the site has no Python frame.
const SiteFrame* own_frame(const SiteEntry* site) {
  if (site == nullptr || site->python_frames == 0) return nullptr;
  for (uint32_t i = 0; i < site->python_frames && i < 2; ++i)
    if (!is_library_python_file(frame_file(site->frames[i]).c_str())) return &site->frames[i];
  return &site->frames[0];
}

// "train.py:88 in backward"; when the innermost frame is a library's, where the job's line called into it too:
// "train.py:88 in reduce_gradients (innermost: .../distributed_c10d.py:2501 in all_reduce)".
std::string python_location(const SiteEntry* site) {
  const SiteFrame* own = own_frame(site);
  if (own == nullptr) return "";
  std::string text = frame_location(*own);
  if (own != &site->frames[0]) text += " (innermost: " + frame_location(site->frames[0]) + ")";
  return printable(text);
}

json frame_json(const SiteFrame* frame) {
  if (frame == nullptr) return nullptr;
  return {{"file", frame_file(*frame)},
          {"line", frame->line},
          {"function", std::string(frame->function, strnlen(frame->function, sizeof(frame->function)))}};
}

std::string stop_text(const FileHeader& h) {
  std::string why = stop_reason_name(h.stop_reason);
  if (h.stop_reason == static_cast<uint32_t>(StopReason::kAbortAfterBatch) && (h.end_flags & kEndStopBatch) != 0)
    why += " " + std::to_string(h.stop_batch);
  if ((h.end_flags & kEndExitStatus) != 0) why += ", status " + std::to_string(h.exit_status);
  return "stopped by trainscope (" + why + ")";
}

ProcessOverview process_overview(const RunDirectory& run, const ReportOptions& options) {
  ProcessOverview overview;
  overview.recorded = run.files.size();
  overview.unreadable = run.errors.size();
  overview.errors = run.errors;
  for (const RecorderFile& file : run.files) {
    const RankState state = rank_state(file, options);
    const FileHeader& h = file.header;
    const ProcessRef who{h.global_rank, h.pid};
    ProcessDetail detail;
    detail.who = who;
    detail.file = file.path.substr(file.path.rfind('/') + 1);
    detail.state = state.key;
    detail.gone = state.gone;
    detail.exit_status_known = (h.end_flags & kEndExitStatus) != 0;
    detail.exit_status = h.exit_status;
    detail.stop_reason = h.stop_reason;
    detail.stop_comm_id = h.stop_comm_id;
    detail.stop_seq = h.stop_seq;
    detail.stop_batch_known = (h.end_flags & kEndStopBatch) != 0;
    detail.stop_batch = h.stop_batch;
    detail.stop_report_missing = (h.end_flags & kEndReportMissing) != 0;
    for (const RecordedCall& call : file.records) {
      if (!waits(call)) continue;
      ++detail.pending_calls;
      detail.newest_pending = call;  // records are in index order: the last one is the newest
    }
    detail.records_total = file.records_total();
    detail.records_held = file.records.size();
    detail.torn_records = file.torn_records;
    detail.reports_unwritten = h.reports_unwritten;
    detail.unwritten_report = h.unwritten_report;
    detail.unwritten_cause = h.unwritten_cause;
    detail.launch_mode = h.launch_mode;
    detail.launch_note = h.launch_note;
    detail.cuda_errors = h.cuda_errors;
    detail.exchange_state = h.exchange_state;
    detail.exchange_note = h.exchange_note;
    if (reports::CudaErrorReport error; reports::build_cuda_error_report(file, &error)) {
      detail.first_cuda_error = reports::cuda_error_summary(error);
    }
    overview.details.push_back(std::move(detail));
    if (state.key == "stopped") {
      overview.stopped.push_back(who);
    } else if (state.key == "exited") {
      ++overview.exited;
    } else if (state.key == "running") {
      ++overview.running;
    } else if (state.key == "crashed_or_killed") {
      overview.crashed.push_back(who);
    } else if (state.key == "running_unverified") {
      ++overview.running_unverified;
    } else {
      ++overview.unknown_state;
    }
    const bool pending = std::any_of(file.records.begin(), file.records.end(), waits);
    if (pending) (state.gone ? overview.did_not_return : overview.pending).push_back(who);
  }
  return overview;
}

namespace {

// One rank's last NCCL calls.
void write_calls(const RecorderFile& file, const RankState& state, const ReportOptions& options, std::string& out,
                 const std::function<void()>& flush_lines) {
  const size_t first = first_shown(file, options.last);
  const size_t held = nccl_calls_held(file);
  const size_t shown = static_cast<size_t>(
      std::count_if(file.records.begin() + static_cast<std::ptrdiff_t>(first), file.records.end(), is_nccl_call));
  if (shown == 0) {
    out += "  calls: none held\n";
    return;
  }
  out += "  last " + std::to_string(shown) + " of " + std::to_string(held) + " held calls\n";
  // The innermost Python location of each call's site, in a last column that is there only when some call shown
  // has one (a job that runs no Python keeps the table it always had). Measured in a first pass over the calls,
  // rendered in a second.
  Table table({"index", "time (UTC)", "op", "comm", "seq", "count", "dtype", "redop", "root/peer", "group", "result",
               "duration", "python (the job's own line)"},
              {true, false, false, false, true, true, false, false, true, true, false, true, false});
  std::vector<std::string> row;
  bool any_location = false;
  for (size_t k = first; k < file.records.size(); ++k) {
    if (!is_nccl_call(file.records[k])) continue;
    any_location |= call_row(file, file.records[k], state, &row);
    table.measure(row);
  }
  if (!any_location) table.keep_columns(kCallColumns - 1);
  table.render_header("    ", out);
  for (size_t k = first; k < file.records.size(); ++k) {
    if (!is_nccl_call(file.records[k])) continue;
    call_row(file, file.records[k], state, &row);
    table.render(row, "    ", out);
    flush_lines();
  }
}

// One rank's launch mode, its last launches per stream and whether they finished, and its first CUDA error.
void write_launches(const RecorderFile& file, const ReportOptions& options, std::string& out) {
  const FileHeader& h = file.header;
  out += "  launches: " + reports::launch_mode_text(h.launch_mode, h.launch_note);
  if (h.completions_ns != 0) out += "; completion known as of " + utc_time_of_day(h.completions_ns);
  if (h.dropped_launches != 0) out += "; " + std::to_string(h.dropped_launches) + " launches not recorded";
  out += "\n";
  const std::vector<StreamLaunches> streams = last_launches_per_stream(file, launches_per_stream(options.last));
  for (const StreamLaunches& s : streams) {
    out += "    stream " + stream_text(s.stream) + " (context " + hex_id(s.context) + "): last " +
           std::to_string(s.last.size()) + " of " + std::to_string(s.held) + " held launches";
    if (s.entry == nullptr) out += " (not in the stream table: completion unknown)";
    out += "\n";
    std::vector<std::vector<std::string>> rows{launch_row_header()};
    for (const LaunchLine& line : s.last) rows.push_back(launch_row(line));
    out += aligned_table(rows, "      ");
  }
  if (streams.empty()) out += "    no launch held\n";
  if (reports::CudaErrorReport error; reports::build_cuda_error_report(file, &error)) {
    out += "  first CUDA error: " + reports::cuda_error_summary(error) + " (" + reports::cuda_error_base_name(error) +
           ")\n";
  }
}

void write_run_heading(const RunDirectory& run, std::string& out) {
  std::string run_id;
  for (const RecorderFile& file : run.files) {
    if (file.header.run_id[0] != '\0') {
      run_id = printable(file.header.run_id);
      break;
    }
  }
  out += "trainscope report: " + printable(run.path) + (run_id.empty() ? "" : "  (run " + run_id + ")") + "\n";
  out += std::to_string(run.files.size()) + " recorder file" + (run.files.size() == 1 ? "" : "s") + " read";
  if (!run.errors.empty()) out += ", " + std::to_string(run.errors.size()) + " unreadable";
  if (!run.files.empty()) out += "; first start " + utc_date_time(run.files.front().header.start_ns);
  out += "\n";
}

// The newest few calls that never returned; a hung rank has one per thread, more is noise.
void note_pending_calls(const RecorderFile& file, const RankState& state, const std::string& who,
                        std::vector<std::string>* attention) {
  constexpr size_t kPendingShown = 3;
  std::vector<const RecordedCall*> pending;
  for (const RecordedCall& call : file.records) {
    if (waits(call)) pending.push_back(&call);
  }
  if (pending.size() > kPendingShown) {
    attention->push_back(who + ": " + std::to_string(pending.size() - kPendingShown) +
                         " older call(s) without a result, not listed");
    pending.erase(pending.begin(), pending.end() - kPendingShown);
  }
  for (const RecordedCall* pending_call : pending) {
    const RecordedCall& call = *pending_call;
    const Record& r = call.record;
    std::string what = who + ": " + op_label(r.op);
    if (r.comm_id != 0) what += " comm " + short_hex_id(r.comm_id);
    if (has_count(static_cast<Op>(r.op))) what += " seq " + std::to_string(r.seq);
    what += " (#" + std::to_string(call.index) + ", " + utc_time_of_day(r.start_ns) + ") " + call_result(r, state);
    // Where in the job's Python the stuck call was made, when its site knows.
    if (const std::string location = python_location(file.site(r.site)); !location.empty())
      what += ", called from " + location;
    attention->push_back(what);
  }
}

// What in one rank's recorder needs a look first, before the detail.
void note_rank_attention(const RecorderFile& file, const RankState& state, std::vector<std::string>* attention) {
  const FileHeader& h = file.header;
  const std::string who = rank_label(h) + " (pid " + std::to_string(h.pid) + ", " + printable(h.host) + ")";
  if (state.key == "crashed_or_killed") attention->push_back(who + ": crashed or was killed");
  if (state.key == "stopped") attention->push_back(who + ": " + stop_text(h));
  if ((h.end_flags & kEndExitStatus) != 0 && state.key == "exited" && h.exit_status != 0)
    attention->push_back(who + ": exited with status " + std::to_string(h.exit_status));
  if (file.records.empty() && file.torn_records > 0)
    attention->push_back(who + ": records unreadable (all " + std::to_string(file.torn_records) + " torn)");
  if (h.reports_unwritten > 0) {
    attention->push_back(
        who + ": could not write " + std::string(h.unwritten_report) +
        (h.unwritten_cause[0] != '\0' ? ": " + std::string(h.unwritten_cause) : std::string()) +
        (h.reports_unwritten > 1 ? " (and " + std::to_string(h.reports_unwritten - 1) + " more)" : std::string()));
  }
  note_pending_calls(file, state, who, attention);
  if (reports::CudaErrorReport error; reports::build_cuda_error_report(file, &error)) {
    attention->push_back(who + ": first CUDA error: " + reports::cuda_error_summary(error));
  } else if (h.cuda_errors > 0) {
    attention->push_back(who + ": " + std::to_string(h.cuda_errors) +
                         " CUDA error(s), the first one's record no longer held");
  }
  if (file.torn_records > 0) {
    attention->push_back(who + ": " + std::to_string(file.torn_records) + " torn record(s) skipped");
  }
  if (file.torn_comms > 0) {
    attention->push_back(who + ": " + std::to_string(file.torn_comms) + " unfinished communicator entr" +
                         (file.torn_comms == 1 ? "y" : "ies") + " skipped");
  }
  if (file.torn_sites > 0) {
    attention->push_back(who + ": " + std::to_string(file.torn_sites) + " unfinished call site entr" +
                         (file.torn_sites == 1 ? "y" : "ies") + " skipped");
  }
}

void write_attention(const RunDirectory& run, const std::vector<RankState>& states, std::string& out) {
  std::vector<std::string> attention;
  for (size_t i = 0; i < run.files.size(); ++i) note_rank_attention(run.files[i], states[i], &attention);
  for (const FileError& e : run.errors) attention.push_back("unreadable " + printable(e.message));
  if (!attention.empty()) {
    out += "\nATTENTION\n";
    for (const std::string& line : attention) out += "  ! " + line + "\n";
  }
}

void write_communicators(const RecorderFile& file, std::string& out) {
  if (file.comms.empty()) {
    out += "  communicators: none recorded\n";
    return;
  }
  out += "  communicators (" + std::to_string(file.comms.size()) + ")\n";
  Table table({"id", "parent", "rank/n", "created by", "created", "state"}, {false, false, true, false, false, false});
  std::vector<std::vector<std::string>> rows;
  for (const CommEntry& c : file.comms) {
    std::string state = comm_state_name(c.state);
    if (c.ended_ns != 0) state += " " + utc_time_of_day(c.ended_ns);
    rows.push_back({hex_id(c.id), c.parent_id == 0 ? "-" : hex_id(c.parent_id),
                    int_or_dash(c.rank) + "/" + int_or_dash(c.nranks), op_label(c.origin),
                    utc_time_of_day(c.created_ns), state});
    table.measure(rows.back());
  }
  table.render_header("    ", out);
  for (const std::vector<std::string>& row : rows) table.render(row, "    ", out);
}

// One rank's section: its heading, communicators, last calls and launches.
void write_rank(const RecorderFile& file, const RankState& state, const ReportOptions& options, std::string& out,
                const std::function<void()>& flush_lines) {
  const FileHeader& h = file.header;
  out += "\n=== " + rank_label(h) + " | pid " + std::to_string(h.pid) + " | host " + printable(h.host) + " | NCCL " +
         nccl_version_string(h.nccl_version) + " | " + state.text + " | records " +
         std::to_string(file.records_total()) + " total, " + std::to_string(file.records.size()) + " held (ring " +
         std::to_string(h.capacity) + ") | torn " + std::to_string(file.torn_records) + "\n";
  out += "    file " + printable(file.path) + "  started " + utc_date_time(h.start_ns) + "\n";
  if (const std::string python = python_text(h); !python.empty()) out += "    " + python + "\n";
  write_communicators(file, out);
  flush_lines();

  write_calls(file, state, options, out, flush_lines);
  if (shows_launches(file)) write_launches(file, options, out);
  flush_lines();
}

}  // namespace

void write_text_report(const RunDirectory& run, const ReportOptions& options,
                       const std::function<void(std::string_view)>& sink) {
  std::string out;
  // Whole lines go to the sink, a batch at a time.
  const std::function<void()> flush_lines = [&] {
    if (out.size() < kTextBatchBytes) return;
    sink(out);
    out.clear();
  };
  std::vector<RankState> states;
  for (const RecorderFile& file : run.files) states.push_back(rank_state(file, options));
  write_run_heading(run, out);
  write_attention(run, states, out);
  for (size_t i = 0; i < run.files.size(); ++i) write_rank(run.files[i], states[i], options, out, flush_lines);
  if (!out.empty()) sink(out);
}

std::string aligned_table(const std::vector<std::vector<std::string>>& rows, const std::string& indent) {
  if (rows.empty()) return "";
  Table table(rows.front(), std::vector<bool>(rows.front().size(), false));
  for (const std::vector<std::string>& row : rows) table.measure(row);
  std::string out;
  for (const std::vector<std::string>& row : rows) table.render(row, indent, out);
  return out;
}

std::string format_text_report(const RunDirectory& run, const ReportOptions& options) {
  std::string out;
  write_text_report(run, options, [&out](std::string_view lines) { out += lines; });
  return out;
}

namespace {

// One record as the JSON report shows it.
json record_json(const RecorderFile& file, const RecordedCall& call, const RankState& state) {
  const Record& r = call.record;
  const bool pending = call.pending();
  const SiteEntry* site = file.site(r.site);
  const bool has_python = site != nullptr && site->python_frames > 0;
  json python = has_python ? frame_json(&site->frames[0]) : json(nullptr);
  json python_own = has_python ? frame_json(own_frame(site)) : json(nullptr);
  return {{"index", call.index},
          {"time", utc_time_of_day(r.start_ns)},
          {"start_ns", r.start_ns},
          {"end_ns", pending ? json(nullptr) : json(r.end_ns)},
          {"duration_ns", pending || r.end_ns < r.start_ns ? json(nullptr) : json(r.end_ns - r.start_ns)},
          {"op", op_label(r.op)},
          {"comm", r.comm_id == 0 ? json(nullptr) : json(hex_id(r.comm_id))},
          {"seq", r.seq},
          {"count", r.count},
          {"dtype", dtype_name(r.dtype)},
          {"redop", redop_name(r.redop)},
          {"peer", r.peer},
          {"rank", r.rank},
          {"nranks", r.nranks},
          {"group", r.group},
          {"flags", flag_names(r.flags)},
          {"result", call_result(r, state)},
          {"result_code", r.result},
          {"pending", pending},
          {"tid", r.tid},
          {"site", r.site},
          {"python", std::move(python)},
          {"python_own", std::move(python_own)}};
}

// A rank's launch collector in the JSON report: its mode, last launches per stream, first CUDA error.
json launches_json(const RecorderFile& file, const ReportOptions& options) {
  const FileHeader& h = file.header;
  json streams = json::array();
  for (const StreamLaunches& s : last_launches_per_stream(file, launches_per_stream(options.last))) {
    json launches = json::array();
    for (const LaunchLine& line : s.last) launches.push_back(launch_json(line));
    json entry = {
        {"stream", s.stream}, {"context", s.context}, {"held", s.held}, {"in_stream_table", s.entry != nullptr}};
    if (s.entry != nullptr) {
      entry["launched_seq"] = s.entry->launched_seq;
      entry["completed_seq"] = s.entry->completed_seq;
      entry["completed_ns"] = s.entry->completed_ns;
    }
    entry["launches"] = std::move(launches);
    streams.push_back(std::move(entry));
  }
  json first_error = nullptr;
  if (reports::CudaErrorReport error; reports::build_cuda_error_report(file, &error)) {
    first_error = reports::cuda_error_json(error);
  }
  return {{"mode", launch_mode_name(h.launch_mode)},
          {"note", h.launch_note},
          {"completions_ns", h.completions_ns == 0 ? json(nullptr) : json(h.completions_ns)},
          {"dropped", h.dropped_launches},
          {"cuda_errors", h.cuda_errors},
          {"streams", std::move(streams)},
          {"first_cuda_error", std::move(first_error)}};
}

// One rank as the JSON report shows it, but for its "records".
json rank_json(const RecorderFile& file, const RankState& state, const ReportOptions& options) {
  const FileHeader& h = file.header;
  json comms = json::array();
  for (const CommEntry& c : file.comms) {
    comms.push_back({{"id", hex_id(c.id)},
                     {"parent", c.parent_id == 0 ? json(nullptr) : json(hex_id(c.parent_id))},
                     {"rank", c.rank},
                     {"nranks", c.nranks},
                     {"color", c.color},
                     {"created_by", op_label(c.origin)},
                     {"created_ns", c.created_ns},
                     {"ended_ns", c.ended_ns},
                     {"state", comm_state_name(c.state)}});
  }
  // "3.12", or null for a process that runs no Python.
  json python_version = nullptr;
  if (h.python_major > 0) python_version = std::to_string(h.python_major) + "." + std::to_string(h.python_minor);
  // How the process ended, as its header says (null where it said nothing).
  const json exit_status = (h.end_flags & kEndExitStatus) != 0 ? json(h.exit_status) : json(nullptr);
  const json stopped_by = (h.end_flags & kEndStopped) != 0 ? json(stop_reason_name(h.stop_reason)) : json(nullptr);
  const json unwritten_report = h.reports_unwritten > 0 ? json(h.unwritten_report) : json(nullptr);
  const json unwritten_cause = h.unwritten_cause[0] != '\0' ? json(h.unwritten_cause) : json(nullptr);
  return {{"file", file.path},
          {"global_rank", h.global_rank},
          {"launcher_rank", h.launcher_rank},
          {"launcher_world", h.launcher_world},
          {"local_rank", h.local_rank},
          {"pid", h.pid},
          {"host", h.host},
          {"run_id", h.run_id},
          {"exe", h.exe},
          {"nccl_version", nccl_version_string(h.nccl_version)},
          {"nccl_version_code", h.nccl_version},
          {"state", state.key},
          {"state_text", state.text},
          {"exit_status", exit_status},
          {"stopped_by", stopped_by},
          {"stop_report_missing", (h.end_flags & kEndReportMissing) != 0},
          {"reports_unwritten", h.reports_unwritten},
          {"unwritten_report", unwritten_report},
          {"unwritten_cause", unwritten_cause},
          {"start_ns", h.start_ns},
          {"exit_ns", h.exit_ns == 0 ? json(nullptr) : json(h.exit_ns)},
          {"records_total", file.records_total()},
          {"records_held", file.records.size()},
          {"capacity", h.capacity},
          {"torn_records", file.torn_records},
          {"torn_comms", file.torn_comms},
          {"torn_sites", file.torn_sites},
          {"python", std::move(python_version)},
          {"python_note", h.python_note},
          {"launches", launches_json(file, options)},
          {"communicators", std::move(comms)}};
}

json errors_json(const RunDirectory& run) {
  json errors = json::array();
  for (const FileError& e : run.errors) errors.push_back({{"file", e.path}, {"error", e.message}});
  return errors;
}

}  // namespace

json make_json_report(const RunDirectory& run, const ReportOptions& options) {
  json ranks = json::array();
  for (const RecorderFile& file : run.files) {
    const RankState state = rank_state(file, options);
    json rank = rank_json(file, state, options);
    json records = json::array();
    for (size_t k = first_shown(file, options.last); k < file.records.size(); ++k)
      if (is_nccl_call(file.records[k])) records.push_back(record_json(file, file.records[k], state));
    rank["records"] = std::move(records);
    ranks.push_back(std::move(rank));
  }
  return {{"run_dir", run.path}, {"ranks", std::move(ranks)}, {"errors", errors_json(run)}};
}

void write_json_report(const RunDirectory& run, const ReportOptions& options, json more, reports::JsonStream& out) {
  json head = std::move(more);
  head["run_dir"] = run.path;
  head["errors"] = errors_json(run);
  out.begin_object();
  out.members(head, "ranks", [&] {
    out.begin_array();
    for (const RecorderFile& file : run.files) {
      const RankState state = rank_state(file, options);
      out.begin_object();
      out.members(rank_json(file, state, options), "records", [&] {
        out.begin_array();
        for (size_t k = first_shown(file, options.last); k < file.records.size(); ++k)
          if (is_nccl_call(file.records[k])) out.value(record_json(file, file.records[k], state));
        out.end_array();
      });
      out.end_object();
    }
    out.end_array();
  });
  out.end_object();
}

}  // namespace trainscope::recorder
