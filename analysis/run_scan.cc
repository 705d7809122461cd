// Reads a run directory: its report files, notes, traces and job end, into a RunSummary.
#include "analysis/summary_detail.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>

#include "base/bounded_file.h"
#include "reports/cuda_error_report.h"
#include "reports/frame_report.h"
#include "reports/json_members.h"

namespace trainscope::reports::summary_detail {

constexpr uint64_t kMaxReportBytes = 64ull << 20;     // a report larger than this is not a report of ours
constexpr uint64_t kMaxTraceScanBytes = 16ull << 20;  // larger traces are listed, not scanned for batches
constexpr size_t kMaxJsonDepth = 256;                 // deeper nesting is refused before parsing (stack)

// The kind a report's base name says it is: "origin", "origin-2", "mismatch-...", "nonfinite-rank3", ...
const KindInfo* kind_of_name(std::string_view base) {
  for (const KindInfo& info : run_files::kReportKinds) {
    const auto named = [&](const std::string& prefix) {
      return base.starts_with(prefix) && base.size() > prefix.size();
    };
    switch (info.naming) {
      case run_files::ReportNaming::kFixed:
        if (base == info.stem || named(run_files::call_prefix(info))) return &info;
        break;
      case run_files::ReportNaming::kPerCall:
        if (named(run_files::call_prefix(info))) return &info;
        break;
      case run_files::ReportNaming::kPerRank:
        if (named(run_files::rank_prefix(info))) return &info;
        break;
      case run_files::ReportNaming::kPerRankOrPid:
        if (named(run_files::rank_prefix(info)) || named(run_files::pid_prefix(info))) return &info;
        break;
    }
  }
  return nullptr;
}

// The whole number that starts at `text` (at most 18 digits); nullopt when none does.
std::optional<uint64_t> leading_number(std::string_view text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0 || digits > 18) return std::nullopt;
  uint64_t value = 0;
  for (size_t i = 0; i < digits; ++i) value = value * 10 + static_cast<uint64_t>(text[i] - '0');
  return value;
}

// "nonfinite-rank3" -> 3; -1 when the name holds no rank.
int32_t rank_of_name(std::string_view base, std::string_view prefix) {
  if (!base.starts_with(prefix)) return -1;
  const std::optional<uint64_t> n = leading_number(base.substr(prefix.size()));
  return n && *n <= static_cast<uint64_t>(std::numeric_limits<int32_t>::max()) ? static_cast<int32_t>(*n) : -1;
}

// Natural order: "mismatch-3f2a9c-3" before "mismatch-3f2a9c-24".
bool natural_less(std::string_view a, std::string_view b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const bool da = std::isdigit(static_cast<unsigned char>(a[i])) != 0;
    const bool db = std::isdigit(static_cast<unsigned char>(b[j])) != 0;
    if (da && db) {
      size_t ei = i, ej = j;
      while (ei < a.size() && std::isdigit(static_cast<unsigned char>(a[ei]))) ++ei;
      while (ej < b.size() && std::isdigit(static_cast<unsigned char>(b[ej]))) ++ej;
      std::string_view na = a.substr(i, ei - i), nb = b.substr(j, ej - j);
      while (na.size() > 1 && na.front() == '0') na.remove_prefix(1);
      while (nb.size() > 1 && nb.front() == '0') nb.remove_prefix(1);
      if (na.size() != nb.size()) return na.size() < nb.size();
      if (na != nb) return na < nb;
      i = ei;
      j = ej;
      continue;
    }
    if (a[i] != b[j]) return a[i] < b[j];
    ++i;
    ++j;
  }
  return a.size() - i < b.size() - j;
}

// ---- Reading -----------------------------------------------------------------------------------------------------

// Reads a whole regular file of at most `limit` bytes (links followed, a FIFO never waited on).
bool read_file(const fs::path& path, uint64_t limit, std::string* out, std::string* error) {
  const files::BoundedRead read = files::read_bounded(path.string(), limit, /*follow_links=*/true, out);
  switch (read.outcome) {
    case files::ReadOutcome::kRead:
      if (!read.truncated) return true;
      out->clear();
      *error = "larger than " + std::to_string(limit >> 20) + " MiB, not read";
      return false;
    case files::ReadOutcome::kMissing:
      *error = std::string("cannot access: ") + std::strerror(read.error);
      return false;
    case files::ReadOutcome::kNotRegular:
      *error = std::string("not a regular file (") + files::file_type_name(read.mode) + ")";
      return false;
    case files::ReadOutcome::kFailed:
      *error = std::string("cannot read: ") + std::strerror(read.error);
      return false;
  }
  return false;
}

// Whether the JSON text nests no deeper than kMaxJsonDepth (nlohmann's parser recurses per level).
bool nesting_ok(std::string_view text) {
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return false;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return true;
}

bool parse_json(const std::string& text, json* out, std::string* error) {
  if (text.empty()) {
    *error = "empty file";
    return false;
  }
  if (!nesting_ok(text)) {
    *error = "not valid JSON: nested deeper than " + std::to_string(kMaxJsonDepth) + " levels";
    return false;
  }
  try {
    *out = json::parse(text);
    return true;
  } catch (const json::parse_error& e) {
    if (e.byte >= text.size()) {
      *error = "truncated JSON: ends after " + std::to_string(text.size()) + " bytes";
    } else {
      *error = "not valid JSON: error at byte " + std::to_string(e.byte);
    }
  } catch (const json::exception&) {
    *error = "not valid JSON";
  }
  return false;
}

// ---- Directory scan ----------------------------------------------------------------------------------------------

using run_files::kNoCallsSuffix;  // shim/nccl_presence.h writes these

// trace-rank<R> and trace-pid<P> (engine_frames.cc names them like the per-rank reports).
std::string trace_rank_prefix() { return std::string(run_files::kTraceStem) + "-rank"; }
std::string trace_pid_prefix() { return std::string(run_files::kTraceStem) + "-pid"; }

fs::path root_of(const std::string& dir) { return fs::path(dir); }

// A process's note that it loaded NCCL and made no communicator; an unreadable note is named, like any report.
void read_no_calls_note(const fs::path& dir, const std::string& name, RunSummary* out) {
  std::string raw, error;
  json parsed;
  if (!read_file(dir / name, kMaxReportBytes, &raw, &error) || !parse_json(raw, &parsed, &error)) {
    out->unreadable.push_back({name, error});
    return;
  }
  if (!parsed.is_object() || string_member(parsed, "kind") != "nccl_without_calls") {
    out->unreadable.push_back({name, "not a note of a process that loaded NCCL without calling it"});
    return;
  }
  NcclWithoutCalls note;
  note.file = name;
  note.rank = rank_member(parsed, "rank");
  note.pid = static_cast<int32_t>(uint_member(parsed, "pid").value_or(0));
  note.host = string_member(parsed, "host");
  note.exe = string_member(parsed, "exe");
  note.nccl = string_member(parsed, "nccl");
  note.calls = uint_member(parsed, "calls").value_or(0);
  if (const auto it = parsed.find("cuda_driver"); it != parsed.end() && it->is_boolean())
    note.cuda_driver = it->get<bool>();
  out->nccl_without_calls.push_back(std::move(note));
}

// How the job `trainscope run` started ended (kJobEndFile); an unreadable one is named, like any report.
void read_job_end(const fs::path& dir, RunSummary* out) {
  std::string raw, error;
  json parsed;
  if (!read_file(dir / kJobEndFile, kMaxReportBytes, &raw, &error) || !parse_json(raw, &parsed, &error)) {
    out->unreadable.push_back({kJobEndFile, error});
    return;
  }
  if (!parsed.is_object() || string_member(parsed, "kind") != "job_exit") {
    out->unreadable.push_back({kJobEndFile, "not the exit of a job trainscope run started"});
    return;
  }
  JobEnd job;
  job.pid = static_cast<int32_t>(int_member(parsed, "pid").value_or(0));
  const std::optional<int64_t> status = int_member(parsed, "exit_status");
  const std::optional<int64_t> signal = int_member(parsed, "signal");
  if (signal && *signal > 0 && *signal < 256) {
    job.signaled = true;
    job.signal = static_cast<int32_t>(*signal);
  } else if (status && *status >= 0 && *status < 256) {
    job.exit_status = static_cast<int32_t>(*status);
  } else {
    out->unreadable.push_back({kJobEndFile, "holds neither an exit status nor a signal"});
    return;
  }
  out->job = job;
  out->job_started = true;
}

void load_report(const fs::path& dir, const KindInfo& info, ReportFiles* r, std::vector<UnreadableFile>* unreadable) {
  if (r->text_exists) {
    std::string error;
    if (!read_file(dir / r->text_file(), kMaxReportBytes, &r->text, &error)) {
      unreadable->push_back({r->text_file(), error});
      r->text.clear();
    } else if (r->text.empty()) {
      unreadable->push_back({r->text_file(), "empty file"});
    } else {
      r->has_text = true;
    }
  }
  if (r->json_exists) {
    std::string raw, error;
    json parsed;
    if (read_file(dir / r->json_file(), kMaxReportBytes, &raw, &error) && parse_json(raw, &parsed, &error)) {
      const std::string kind = string_member(parsed, "kind");
      if (!parsed.is_object()) {
        error = "not a JSON object";
      } else if (kind != info.json_kind) {
        error = std::string("not a ") + info.name +
                " report: " + (kind.empty() ? std::string("no \"kind\"") : "\"kind\" is \"" + kind + "\"");
      } else {
        r->json = std::move(parsed);
        r->has_json = true;
      }
    }
    if (!r->has_json) unreadable->push_back({r->json_file(), error});
  } else if (r->has_text) {
    unreadable->push_back({r->json_file(), "missing: only the text was written"});
  }
  if (!r->text_exists && r->json_exists) unreadable->push_back({r->text_file(), "missing"});
  if (info.rank_key != nullptr) {
    r->rank = r->has_json ? rank_member(r->json, info.rank_key) : -1;
    if (r->rank < 0) r->rank = rank_of_name(r->base_name, run_files::rank_prefix(info));
    if (r->rank < 0 && info.naming == run_files::ReportNaming::kPerRankOrPid)
      r->pid = std::max(0, rank_of_name(r->base_name, run_files::pid_prefix(info)));
  }
}

// Sorts reports into display order: kind, then per kind the detection time, the rank, the natural name order.
void sort_reports(std::vector<ReportFiles>* reports) {
  const auto key = [](const ReportFiles& r) {
    uint64_t time = kUnknownTime;
    if (r.has_json && r.kind == ReportKind::kMismatch) time = uint_member(r.json, "detected_ns").value_or(kUnknownTime);
    if (r.has_json && r.kind == ReportKind::kDesync) time = uint_member(r.json, "detected_ns").value_or(kUnknownTime);
    const int64_t rank = r.rank < 0 ? std::numeric_limits<int64_t>::max() : r.rank;
    return std::make_tuple(static_cast<int>(r.kind), rank, time);
  };
  std::stable_sort(reports->begin(), reports->end(), [&](const ReportFiles& a, const ReportFiles& b) {
    const auto ka = key(a), kb = key(b);
    if (ka != kb) return ka < kb;
    return natural_less(a.base_name, b.base_name);
  });
}

void scan_trace(const fs::path& dir, TraceFile* trace, std::vector<UnreadableFile>* unreadable) {
  if (trace->file.size() < 4 || trace->file.compare(trace->file.size() - 4, 4, ".txt") != 0) return;
  std::error_code ec;
  const uintmax_t size = fs::file_size(dir / trace->file, ec);
  if (ec || size > kMaxTraceScanBytes) return;
  std::string text, error;
  if (!read_file(dir / trace->file, kMaxTraceScanBytes, &text, &error)) {
    unreadable->push_back({trace->file, error});
    return;
  }
  static constexpr std::string_view kMarker = " *** Starting batch number=";
  trace->batches_known = true;
  const auto add = [](std::vector<uint64_t>* batches, uint64_t n) {
    if (std::find(batches->begin(), batches->end(), n) == batches->end()) batches->push_back(n);
  };
  std::optional<uint64_t> batch;
  std::string_view rest = text;
  while (!rest.empty()) {
    const size_t end = rest.find('\n');
    const std::string_view line = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    if (const size_t at = line.find(kMarker); at != std::string_view::npos) {
      batch = leading_number(line.substr(at + kMarker.size()));
      if (batch) add(&trace->batches, *batch);
      continue;
    }
    // A frame's row: "%8s %8s <label>", abs min and abs max ("inf", "nan", a number or "None"); a frame's header
    // starts with 18 spaces, so both its "columns" are blank.
    if (!batch || line.size() < 18 || line[8] != ' ' || line[17] != ' ') continue;
    const auto nonfinite = [](std::string_view column) {
      const size_t first = column.find_first_not_of(' ');
      if (first == std::string_view::npos) return false;
      column.remove_prefix(first);
      return column == "inf" || column == "nan" || column == "-inf";
    };
    if (nonfinite(line.substr(0, 8)) || nonfinite(line.substr(9, 8))) add(&trace->nonfinite_batches, *batch);
  }
}

}  // namespace trainscope::reports::summary_detail

namespace trainscope::reports {

using namespace summary_detail;

const char* report_kind_name(ReportKind kind) { return info_of(kind).name; }

void sort_reports_for_display(std::vector<ReportFiles>* reports) { sort_reports(reports); }

std::string signal_name(int signal) {
  // Our own table rather than glibc's sigabbrev_np: that is glibc 2.32's, newer than the wheel's floor (2.28).
  static constexpr struct {
    int number;
    const char* name;
  } kSignals[] = {{SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},       {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
                  {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"},     {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
                  {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"},     {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
                  {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"},     {SIGTERM, "SIGTERM"}, {SIGSTKFLT, "SIGSTKFLT"},
                  {SIGCHLD, "SIGCHLD"}, {SIGCONT, "SIGCONT"},     {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"},
                  {SIGTTIN, "SIGTTIN"}, {SIGTTOU, "SIGTTOU"},     {SIGURG, "SIGURG"},   {SIGXCPU, "SIGXCPU"},
                  {SIGXFSZ, "SIGXFSZ"}, {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGWINCH, "SIGWINCH"},
                  {SIGIO, "SIGIO"},     {SIGPWR, "SIGPWR"},       {SIGSYS, "SIGSYS"}};
  for (const auto& known : kSignals) {
    if (known.number == signal) return known.name;
  }
  return "signal " + std::to_string(signal);
}

json job_end_json(const JobEnd& job) {
  return {{"kind", "job_exit"},
          {"pid", job.pid},
          {"exit_status", job.signaled ? json(nullptr) : json(job.exit_status)},
          {"signal", job.signaled ? json(job.signal) : json(nullptr)},
          {"signal_name", job.signaled ? json(signal_name(job.signal)) : json(nullptr)}};
}

bool is_run_file_name(std::string_view name) {
  // A temporary the writers rename into place: "<name>.tmp.<pid>.<n>", or ".<base>.<pid>.<n>.part-<ext>".
  if (name.starts_with('.')) return true;
  if (const size_t tmp = name.find(".tmp."); tmp != std::string_view::npos) name = name.substr(0, tmp);
  const fs::path path{std::string(name)};
  const std::string extension = path.extension().string();
  const std::string base = path.stem().string();
  if (extension == run_files::kRecorderExtension || extension == run_files::kLogExtension) return true;
  if (name == run_files::kManifestFile || name == kJobEndFile || name.ends_with(kNoCallsSuffix)) return true;
  if ((base.starts_with(trace_rank_prefix()) || base.starts_with(trace_pid_prefix())) &&
      (extension == ".txt" || extension == ".jsonl"))
    return true;
  return (extension == ".txt" || extension == ".json") && kind_of_name(base) != nullptr;
}

bool read_run_summary(const std::string& dir, RunSummary* out, std::string* error) {
  *out = RunSummary{};
  out->path = dir;
  std::string trimmed = dir;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  out->name = fs::path(trimmed).filename().string();
  if (out->name.empty() || out->name == ".") out->name = trimmed;

  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    *error = "cannot list '" + dir + "': " + ec.message();
    return false;
  }
  std::map<std::string, ReportFiles> reports;  // by base name
  std::map<int32_t, TraceFile> traces;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    std::error_code type_ec;
    if (it->is_directory(type_ec)) continue;
    const fs::path& path = it->path();
    const std::string name = path.filename().string();
    const std::string extension = path.extension().string();
    const std::string base = path.stem().string();
    if (name == run_files::kManifestFile) {
      out->manifest_exists = true;
      continue;
    }
    if (name == kJobEndFile) {
      read_job_end(root_of(dir), out);
      continue;
    }
    if (name.ends_with(kNoCallsSuffix)) {
      read_no_calls_note(root_of(dir), name, out);
      continue;
    }
    if ((base.starts_with(trace_rank_prefix()) || base.starts_with(trace_pid_prefix())) &&
        (extension == ".txt" || extension == ".jsonl")) {
      const int32_t rank = rank_of_name(base, trace_rank_prefix());
      TraceFile& trace = traces[rank];
      trace.rank = rank;
      trace.dir = dir;
      if (trace.file.empty() || extension == ".txt") trace.file = name;
      continue;
    }
    if (extension != ".txt" && extension != ".json") continue;
    const KindInfo* info = kind_of_name(base);
    if (info == nullptr) continue;
    ReportFiles& report = reports[base];
    report.kind = info->kind;
    report.base_name = base;
    (extension == ".txt" ? report.text_exists : report.json_exists) = true;
  }
  if (ec) out->unreadable.push_back({".", "listing stopped early: " + ec.message()});

  const fs::path root(dir);
  if (out->manifest_exists) {
    std::string raw, manifest_error;
    if (read_file(root / run_files::kManifestFile, kMaxReportBytes, &raw, &manifest_error) &&
        parse_json(raw, &out->manifest, &manifest_error)) {
      if (out->manifest.is_object()) {
        out->has_manifest = true;
      } else {
        manifest_error = "not a JSON object";
      }
    }
    if (!out->has_manifest) {
      out->manifest = nullptr;
      out->unreadable.push_back({run_files::kManifestFile, manifest_error});
    }
  }
  for (auto& [base, report] : reports) {
    load_report(root, info_of(report.kind), &report, &out->unreadable);
    out->reports.push_back(std::move(report));
  }
  sort_reports(&out->reports);
  for (auto& [rank, trace] : traces) {
    scan_trace(root, &trace, &out->unreadable);
    out->traces.push_back(std::move(trace));
  }
  std::stable_sort(out->traces.begin(), out->traces.end(),
                   [](const TraceFile& a, const TraceFile& b) { return (a.rank < 0) < (b.rank < 0); });
  std::sort(out->unreadable.begin(), out->unreadable.end(),
            [](const UnreadableFile& a, const UnreadableFile& b) { return natural_less(a.file, b.file); });
  std::sort(out->nccl_without_calls.begin(), out->nccl_without_calls.end(),
            [](const NcclWithoutCalls& a, const NcclWithoutCalls& b) {
              return std::make_tuple(a.rank < 0, a.rank, a.pid) < std::make_tuple(b.rank < 0, b.rank, b.pid);
            });
  return true;
}

}  // namespace trainscope::reports
