// The run summary's parts (analysis/run_summary.cc, run_scan.cc, summary_text.cc, summary_numerics.cc,
// summary_exchange.cc, summary_processes.cc): what one part uses of another. Internal to analysis/.
#pragma once

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

#include <nlohmann/json.hpp>

#include "analysis/run_summary.h"

namespace trainscope::reports::summary_detail {

namespace fs = std::filesystem;
using nlohmann::json;
using recorder::ProcessOverview;
using recorder::ProcessRef;

constexpr uint64_t kUnknownTime = std::numeric_limits<uint64_t>::max();
constexpr size_t kShownItems = 4;  // entries a summary line names before "and N more"

using KindInfo = run_files::ReportKindInfo;
using run_files::info_of;

// One summary line per kind and its JSON field, made together so that they agree.
struct Analysis {
  std::vector<std::string> lines;  // without the indentation
  bool nothing_wrong = true;
  json fields = json::object();
};

// Which processes had their calls compared across ranks, and why the others did not (or had not started when the
// process went), from each recorder's header: processes that had nothing to compare with say nothing.
struct CrossRankChecks {
  size_t ran = 0;
  std::vector<std::pair<std::string, std::vector<ProcessRef>>> not_run;  // why -> processes, in order of appearance
  json items = json::array();
};

const KindInfo* kind_of_name(std::string_view base);
std::optional<uint64_t> leading_number(std::string_view text);
int32_t rank_of_name(std::string_view base, std::string_view prefix);
bool natural_less(std::string_view a, std::string_view b);
bool read_file(const fs::path& path, uint64_t limit, std::string* out, std::string* error);
bool parse_json(const std::string& text, json* out, std::string* error);
json optional_json(const std::optional<uint64_t>& v);
json optional_json(const std::optional<double>& v);
json rank_json(int32_t rank);
json string_or_null(const std::string& s);
std::string join(const std::vector<std::string>& parts, const char* separator);
std::string join_words(const std::vector<std::string>& parts);
std::string join_capped(const std::vector<std::string>& parts, const char* separator);
std::string ranks_phrase(std::vector<int32_t> ranks, std::vector<int32_t> unknown_pids = {});
std::string processes_phrase(const std::vector<ProcessRef>& processes);
std::string rank_word(int32_t rank);
std::string who_word(int32_t rank, int32_t pid);
std::string batches_phrase(const std::vector<uint64_t>& batches);
std::string plural(size_t n, const char* one, const char* many);
std::string short_comm(const std::string& communicator);
std::vector<std::string> non_empty_lines(const std::string& text);
std::optional<uint64_t> batch_in_text(const std::string& text);
std::string format_number(double value);
std::string percent(double fraction);
std::string source_file(const ReportFiles& r);
std::vector<const ReportFiles*> reports_of(const RunSummary& summary, ReportKind kind);
json refs_json(const std::vector<ProcessRef>& refs);
bool verdict_without_report(const RunSummary& summary, recorder::StopReason reason, const char* label, json* items,
                            Analysis* a);
bool origin_line(const RunSummary& summary, bool any_nonfinite, Analysis* a);
void first_nonfinite_line(const RunSummary& summary, bool origin_known, Analysis* a);
void skipped_steps_line(const RunSummary& summary, Analysis* a);
CrossRankChecks cross_rank_checks(const RunSummary& summary);
void checks_line(const CrossRankChecks& checks, Analysis* a);
void mismatch_line(const RunSummary& summary, const CrossRankChecks& checks, Analysis* a);
void desync_line(const RunSummary& summary, Analysis* a);
void vanished_line(const RunSummary& summary, Analysis* a);
void streak_line(const RunSummary& summary, Analysis* a);
void near_overflow_line(const RunSummary& summary, Analysis* a);
void stop_line(const RunSummary& summary, Analysis* a);
void processes_line(const RunSummary& summary, Analysis* a);
void job_line(const RunSummary& summary, bool only_requested_stops, Analysis* a);
void unwritten_line(const RunSummary& summary, Analysis* a);
void nccl_calls_line(const RunSummary& summary, Analysis* a);
void setup_line(const RunSummary& summary, Analysis* a);
void traces_line(const RunSummary& summary, Analysis* a);
void unreadable_line(const RunSummary& summary, Analysis* a);
void folders_line(const RunSummary& summary, Analysis* a);
void missing_recorders_line(const RunSummary& summary, Analysis* a);
bool only_requested_stops(const RunSummary& summary);
void cuda_error_lines(const RunSummary& summary, Analysis* a);
void launches_line(const RunSummary& summary, Analysis* a);
fs::path root_of(const std::string& dir);
void read_no_calls_note(const fs::path& dir, const std::string& name, RunSummary* out);
void read_job_end(const fs::path& dir, RunSummary* out);
void load_report(const fs::path& dir, const KindInfo& info, ReportFiles* r, std::vector<UnreadableFile>* unreadable);
void sort_reports(std::vector<ReportFiles>* reports);
void scan_trace(const fs::path& dir, TraceFile* trace, std::vector<UnreadableFile>* unreadable);

}  // namespace trainscope::reports::summary_detail
