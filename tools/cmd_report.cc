// `trainscope report RUN_DIR... [--json] [--summary] [--last N] [--trace FILE] [--html FILE]`: what went wrong in one
// run (the summary), then what the flight recorders hold, then every report in full; or the run as a timeline
// (Chrome trace-event JSON) or as one self-contained page. A run of several hosts is read from each host's copy of
// its run folder, as one run.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "analysis/html_report.h"
#include "analysis/multi_folder_run.h"
#include "analysis/run_output_guard.h"
#include "analysis/run_summary.h"
#include "analysis/run_timeline.h"
#include "base/flight_recorder_reader.h"
#include "base/printable.h"
#include "reports/cuda_error_report.h"
#include "reports/json_stream.h"
#include "reports/recorder_report.h"
#include "tools/commands.h"

namespace trainscope::tools {
namespace {

constexpr const char* kUsage =
    "usage: trainscope report RUN_DIR... [--json] [--summary] [--last N] [--trace FILE] [--html FILE]\n"
    "  RUN_DIR    a run directory (one sub-folder of TRAINSCOPE_DIR): *.tsrec flight recorders and reports;\n"
    "             several (each host's copy of the run folder of a job of several hosts) are read as one run,\n"
    "             and a folder above them (TRAINSCOPE_DIR, or where the copies were collected) is searched two\n"
    "             levels down for the copies of one run\n"
    "  --json     print JSON instead of text: {\"summary\", \"reports\", \"manifest\", the recorders' \"ranks\"}\n"
    "  --summary  print only the summary: what went wrong (inf/nan origin, first batch, mismatches, desyncs,\n"
    "             vanished ranks, ...), where and when\n"
    "  --last N   calls shown per rank, newest last (default 10; 'all' for every held call)\n"
    "  --trace FILE  write the run as a timeline to FILE (Chrome trace-event JSON: open it in ui.perfetto.dev or\n"
    "             chrome://tracing): a process per rank, a track per communicator and CUDA stream, each NCCL call a\n"
    "             slice, verdicts and the first inf/nan as instant events\n"
    "  --html FILE   write the whole run to FILE as one self-contained page: the summary, every rank's timeline,\n"
    "             every report and the per-batch abs-max of the watched tensors as plots\n"
    "With --trace or --html the files are written and only the summary is printed; FILE is never RUN_DIR or one of\n"
    "its files (a recorder, a report, the manifest, a log), nor a new name that would be read as one of them.\n"
    "Prints the summary, then the recorders' table (ranks, communicators, last calls, last launches per stream), then\n"
    "every report in full, with the first CUDA error of each process that had one (rebuilt from its flight recorder\n"
    "when the process did not write its cuda-error-rank<R> report).\n";

void print(std::string_view text) { std::fwrite(text.data(), 1, text.size(), stdout); }

// The first CUDA error of every process that had one but whose cuda-error report is not in the run directory (it died
// before writing it, or could not), rebuilt from its flight recorder, as format_report_texts() shows the others.
std::string rebuilt_cuda_error_texts(const recorder::RunDirectory& run, const reports::RunSummary& summary) {
  std::string out;
  for (const recorder::RecorderFile& file : run.files) {
    reports::CudaErrorReport report;
    if (!reports::build_cuda_error_report(file, &report)) continue;
    const std::string base = reports::cuda_error_base_name(report);
    const bool written = std::any_of(summary.reports.begin(), summary.reports.end(),
                                     [&](const reports::ReportFiles& r) { return r.base_name == base; });
    if (written) continue;
    out += "\n=== " + base + " (rebuilt from " + reports::printable(file.path) + ": not written by the process) ===\n";
    out += reports::format_cuda_error_text(report);
  }
  return out;
}

int usage_error(const std::string& message) {
  std::fprintf(stderr, "trainscope report: %s\n", message.c_str());
  return 2;
}

// Accepts a whole number 0..1000000000 or "all".
bool parse_last(const char* text, size_t* out) {
  if (std::strcmp(text, "all") == 0) {
    *out = std::numeric_limits<size_t>::max();
    return true;
  }
  if (text[0] < '0' || text[0] > '9') return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || v > 1000000000ull) return false;
  *out = static_cast<size_t>(v);
  return true;
}

struct ReportArguments {
  std::vector<std::string> folders;  // as given: run folders, or folders above them
  bool as_json = false;
  bool summary_only = false;
  const char* trace_path = nullptr;
  const char* html_path = nullptr;
  recorder::ReportOptions options;
};

// Every early exit below returns the status to exit with; nullopt means "go on".
using ExitCode = std::optional<int>;

ExitCode parse_report_arguments(int argc, char** argv, ReportArguments* a) {
  for (int i = 1; i < argc; ++i) {
    const char* arg = argv[i];
    const char* last_value = nullptr;
    if (std::strcmp(arg, "--help") == 0 || std::strcmp(arg, "-h") == 0) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (std::strcmp(arg, "--json") == 0) {
      a->as_json = true;
      continue;
    }
    if (std::strcmp(arg, "--summary") == 0) {
      a->summary_only = true;
      continue;
    }
    if (std::strcmp(arg, "--trace") == 0 || std::strcmp(arg, "--html") == 0) {
      if (i + 1 >= argc || argv[i + 1][0] == '\0') {
        return usage_error(std::string(arg) + " needs a file name: where to write the " +
                           (arg[2] == 't' ? "timeline (Chrome trace-event JSON)" : "page (HTML)"));
      }
      (arg[2] == 't' ? a->trace_path : a->html_path) = argv[++i];
      continue;
    }
    if (std::strcmp(arg, "--last") == 0) {
      if (i + 1 >= argc) return usage_error("--last needs a value; accepted: a whole number 0..1000000000 or 'all'");
      last_value = argv[++i];
    } else if (std::strncmp(arg, "--last=", 7) == 0) {
      last_value = arg + 7;
    } else if (arg[0] == '-' && arg[1] != '\0') {
      return usage_error(std::string("unknown option '") + arg +
                         "'; accepted: --json, --summary, --last N, --trace FILE, --html FILE, "
                         "--help");
    } else {
      a->folders.push_back(arg);
      continue;
    }
    if (!parse_last(last_value, &a->options.last)) {
      return usage_error(std::string("--last '") + last_value +
                         "' is not valid; accepted: a whole number 0..1000000000 or 'all'");
    }
  }
  if (a->as_json && (a->trace_path != nullptr || a->html_path != nullptr))
    return usage_error("--json cannot be combined with --trace or --html: they write files of their own");
  if (a->folders.empty()) {
    std::fputs(kUsage, stderr);
    return usage_error("missing RUN_DIR: the run directory (a sub-folder of TRAINSCOPE_DIR) holding *.tsrec files");
  }
  return std::nullopt;
}

// What the run left is what this command reads: a file it writes is never one of them.
ExitCode refuse_outputs_in_the_run(const std::vector<std::string>& folders, const ReportArguments& a) {
  for (const auto& [option, path] : {std::pair{"--trace", a.trace_path}, std::pair{"--html", a.html_path}}) {
    if (path == nullptr) continue;
    for (const std::string& dir : folders) {
      const std::string overwrites = reports::output_overwrites_run(dir, path);
      if (!overwrites.empty()) {
        return usage_error(std::string(option) + " " + overwrites +
                           "; choose a path outside the run directory, or a new name in it");
      }
    }
  }
  return std::nullopt;
}

// --trace and --html: the files, then only the summary. 1 when a file could not be written.
int write_files(const recorder::RunDirectory& run, const reports::RunSummary& summary, const ReportArguments& a) {
  std::string error;
  bool written = true;
  if (a.trace_path != nullptr) {
    if (!reports::write_run_timeline_file(run, summary, a.trace_path, &error)) {
      std::fprintf(stderr, "trainscope report: %s\n", reports::printable(error).c_str());
      written = false;
    } else {
      std::fprintf(stderr, "trainscope report: timeline written to %s (open it in ui.perfetto.dev)\n",
                   reports::printable(a.trace_path).c_str());
    }
  }
  if (a.html_path != nullptr) {
    if (!reports::write_html_report(run, summary, a.html_path, &error)) {
      std::fprintf(stderr, "trainscope report: %s\n", reports::printable(error).c_str());
      written = false;
    } else {
      std::fprintf(stderr, "trainscope report: page written to %s\n", reports::printable(a.html_path).c_str());
    }
  }
  print(reports::printable_text(reports::format_summary_text(summary)));
  return written ? 0 : 1;
}

// Written as it is made, a batch of records at a time: `--last all` on a big run never holds the whole document.
// Strings from the files keep their values, JSON-escaped; DEL and the C1 controls are escaped too.
void print_json(const recorder::RunDirectory& run, const reports::RunSummary& summary, const ReportArguments& a) {
  reports::JsonStream out([](std::string_view json) { print(reports::printable_json(json)); });
  if (a.summary_only) {
    out.value({{"summary", reports::summary_json(summary)}});
  } else {
    recorder::write_json_report(run, a.options,
                                {{"summary", reports::summary_json(summary)},
                                 {"reports", reports::reports_json(summary)},
                                 {"manifest", summary.has_manifest ? summary.manifest : nlohmann::json(nullptr)}},
                                out);
  }
  out.finish();
  print("\n");
}

// Everything printed comes from files anyone with access to the run directory could have crafted, and from the
// ranks: control characters are escaped (the reports' own text too). The recorders' table is written a batch of
// lines at a time, as the JSON is.
void print_text(const reports::RunRead& read, const ReportArguments& a) {
  print(reports::printable_text(reports::format_summary_text(read.summary)));
  if (a.summary_only) return;
  if (read.has_recorders) {
    print("\n");
    recorder::write_text_report(read.run, a.options,
                                [](std::string_view lines) { print(reports::printable_text(lines)); });
  }
  print(reports::printable_text(reports::format_report_texts(read.summary)));
  print(reports::printable_text(rebuilt_cuda_error_texts(read.run, read.summary)));
}

}  // namespace

int cmd_report(int argc, char** argv) {
  ReportArguments a;
  if (const ExitCode exit = parse_report_arguments(argc, argv, &a)) return *exit;
  std::string error;
  std::vector<std::string> folders;
  if (!reports::find_run_folders(a.folders, &folders, &error)) return usage_error(error);
  if (const ExitCode exit = refuse_outputs_in_the_run(folders, a)) return *exit;
  reports::RunRead read;
  if (!reports::read_run(folders, a.options, &read, &error)) return usage_error(error);
  const recorder::RunDirectory& run = read.run;
  const reports::RunSummary& summary = read.summary;

  if (a.trace_path != nullptr || a.html_path != nullptr) return write_files(run, summary, a);
  if (a.as_json) {
    print_json(run, summary, a);
  } else {
    print_text(read, a);
  }
  if (read.has_recorders && run.files.empty()) {
    std::fprintf(stderr, "trainscope report: none of the %zu *.tsrec files in '%s' could be read\n", run.errors.size(),
                 reports::printable(run.path).c_str());
    // Still a report when the run left reports: the summary says what went wrong.
    if (summary.reports.empty()) return 1;
  }
  return 0;
}

}  // namespace trainscope::tools
