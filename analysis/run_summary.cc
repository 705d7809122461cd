// Renders a run's summary as text and JSON: one line per kind of failure, the worst first (the parts are in
// summary_*.cc; run_scan.cc reads the run directory).
#include "analysis/run_summary.h"

#include "analysis/summary_detail.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>

#include "reports/cuda_error_report.h"
#include "reports/frame_report.h"
#include "reports/json_members.h"

namespace trainscope::reports::summary_detail {

Analysis analyse(const RunSummary& summary) {
  Analysis a;
  const bool any_nonfinite = !reports_of(summary, ReportKind::kNonfinite).empty();
  const bool origin_known = origin_line(summary, any_nonfinite, &a);
  first_nonfinite_line(summary, origin_known, &a);
  const CrossRankChecks checks = cross_rank_checks(summary);
  mismatch_line(summary, checks, &a);
  desync_line(summary, &a);
  vanished_line(summary, &a);
  streak_line(summary, &a);
  near_overflow_line(summary, &a);
  skipped_steps_line(summary, &a);
  stop_line(summary, &a);
  cuda_error_lines(summary, &a);
  launches_line(summary, &a);
  checks_line(checks, &a);
  job_line(summary, only_requested_stops(summary), &a);
  processes_line(summary, &a);
  folders_line(summary, &a);
  missing_recorders_line(summary, &a);
  unwritten_line(summary, &a);
  nccl_calls_line(summary, &a);
  setup_line(summary, &a);
  traces_line(summary, &a);
  unreadable_line(summary, &a);
  if (a.nothing_wrong) {
    // Built anew rather than inserted at the front: GCC 12's -Wnull-dereference misreads vector::insert here.
    std::vector<std::string> lines{"nothing went wrong: no inf/nan, mismatch, desync, vanished rank or crash found"};
    lines.insert(lines.end(), std::make_move_iterator(a.lines.begin()), std::make_move_iterator(a.lines.end()));
    a.lines = std::move(lines);
  }
  return a;
}

}  // namespace trainscope::reports::summary_detail

namespace trainscope::reports {

using namespace summary_detail;

void note_recorders(RunSummary* summary, const recorder::RunDirectory& run, const recorder::ReportOptions& options) {
  summary->processes = recorder::process_overview(run, options);
  summary->ranks_with_communicators.clear();
  summary->recorders_with_communicators = 0;
  for (const recorder::RecorderFile& file : run.files) {
    if (file.comms.empty()) continue;
    ++summary->recorders_with_communicators;
    if (file.header.launcher_rank >= 0) summary->ranks_with_communicators.push_back(file.header.launcher_rank);
  }
  // Only the launcher's world (WORLD_SIZE and the like) says which ranks should have a recorder: a communicator's
  // size does not (one process may hold every rank of ncclCommInitAll). A world past any sane job is not believed.
  constexpr int32_t kMaxWorld = 1 << 20;
  summary->launcher_world = 0;
  std::set<int32_t> present;
  for (const recorder::RecorderFile& file : run.files) {
    if (file.header.launcher_world > 0 && file.header.launcher_world <= kMaxWorld)
      summary->launcher_world = std::max(summary->launcher_world, file.header.launcher_world);
    if (file.header.launcher_rank >= 0) present.insert(file.header.launcher_rank);
  }
  summary->missing_ranks.clear();
  for (int32_t rank = 0; rank < summary->launcher_world; ++rank)
    if (!present.contains(rank)) summary->missing_ranks.push_back(rank);
}

std::string format_summary_text(const RunSummary& summary) {
  const Analysis a = analyse(summary);
  std::string out = "Summary of run " + summary.name + "\n";
  for (const std::string& line : a.lines) out += "  " + line + "\n";
  return out;
}

json summary_json(const RunSummary& summary) {
  Analysis a = analyse(summary);
  json out = {{"run", summary.name}, {"run_dir", summary.path}, {"nothing_wrong", a.nothing_wrong}, {"lines", a.lines}};
  for (auto& [key, value] : a.fields.items()) out[key] = std::move(value);
  return out;
}

std::string format_report_texts(const RunSummary& summary) {
  std::string out;
  for (const ReportFiles& r : summary.reports) {
    const std::string where = r.folder.empty() ? "" : r.folder + "/";
    if (r.has_text) {
      out += "\n=== " + where + r.text_file() + " ===\n" + r.text;
      if (r.text.back() != '\n') out += '\n';
    } else if (r.has_json) {
      const std::string text = string_member(r.json, "text");
      out += "\n=== " + where + r.json_file() + " (" + r.text_file() + " " +
             (r.text_exists ? "unreadable" : "missing") + ") ===\n";
      out += text.empty() ? r.json.dump(2, ' ', false, json::error_handler_t::replace) + "\n" : text;
      if (!out.empty() && out.back() != '\n') out += '\n';
    } else {
      out += "\n=== " + where + r.base_name + ": no readable file (see \"could not read\" in the summary) ===\n";
    }
  }
  return out;
}

json reports_json(const RunSummary& summary) {
  json out = json::array();
  for (const ReportFiles& r : summary.reports) {
    json entry = {{"file", r.json_file()},
                  {"kind", report_kind_name(r.kind)},
                  {"report", r.has_json ? r.json : json(nullptr)},
                  {"text_file", r.text_exists ? json(r.text_file()) : json(nullptr)}};
    if (!r.has_json) {
      std::string error = r.json_exists ? "unreadable" : "missing";
      for (const UnreadableFile& u : summary.unreadable)
        if (u.file == r.json_file()) error = u.error;
      entry["error"] = error;
      entry["text"] = r.has_text ? json(r.text) : json(nullptr);
    }
    out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace trainscope::reports
