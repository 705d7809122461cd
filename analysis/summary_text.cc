// The summary's wording: lists, ranks, batches and numbers as its lines say them, and small JSON helpers.
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

#include "reports/cuda_error_report.h"
#include "reports/frame_report.h"
#include "reports/json_members.h"

namespace trainscope::reports::summary_detail {

json optional_json(const std::optional<uint64_t>& v) { return v ? json(*v) : json(nullptr); }
json optional_json(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }
json rank_json(int32_t rank) { return rank >= 0 ? json(rank) : json(nullptr); }
json string_or_null(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

// ---- Wording helpers ---------------------------------------------------------------------------------------------

std::string join(const std::vector<std::string>& parts, const char* separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? separator : "") + parts[i];
  return out;
}

// "a", "a and b", "a, b and c".
std::string join_words(const std::vector<std::string>& parts) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += i + 1 == parts.size() ? " and " : ", ";
    out += parts[i];
  }
  return out;
}

// The first kShownItems parts joined by `separator`, then "and N more".
std::string join_capped(const std::vector<std::string>& parts, const char* separator) {
  if (parts.size() <= kShownItems) return join(parts, separator);
  std::vector<std::string> shown(parts.begin(), parts.begin() + kShownItems);
  return join(shown, separator) + separator + "and " + std::to_string(parts.size() - kShownItems) + " more";
}

// {0,1,2,5} -> "ranks 0–2 and 5"; {3} -> "rank 3"; unknown ranks (-1) -> "an unknown rank", or by the pids of the
// processes they are when those are known (`unknown_pids`: "pid 4242", a one-process job started without a launcher).
std::string ranks_phrase(std::vector<int32_t> ranks, std::vector<int32_t> unknown_pids) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  const bool unknown = !ranks.empty() && ranks.front() < 0;
  if (unknown) ranks.erase(ranks.begin());
  std::erase_if(unknown_pids, [](int32_t pid) { return pid <= 0; });
  std::sort(unknown_pids.begin(), unknown_pids.end());
  unknown_pids.erase(std::unique(unknown_pids.begin(), unknown_pids.end()), unknown_pids.end());
  std::vector<std::string> pids;
  for (const int32_t pid : unknown_pids) pids.push_back(std::to_string(pid));
  std::string out;
  if (!ranks.empty()) out = (ranks.size() == 1 ? "rank " : "ranks ") + format_rank_list(ranks);
  if (unknown)
    out += (out.empty() ? "" : " and ") + (pids.empty()       ? std::string("an unknown rank")
                                           : pids.size() == 1 ? "pid " + pids.front()
                                                              : "pids " + join_capped(pids, ", "));
  return out;
}

// Processes: known ranks as a rank list, the others by pid.
std::string processes_phrase(const std::vector<ProcessRef>& processes) {
  std::vector<int32_t> ranks;
  std::vector<std::string> parts;
  for (const ProcessRef& p : processes)
    if (p.rank >= 0) ranks.push_back(p.rank);
  if (!ranks.empty()) parts.push_back(ranks_phrase(ranks));
  for (const ProcessRef& p : processes)
    if (p.rank < 0) parts.push_back("pid " + std::to_string(p.pid));
  return join_words(parts);
}

// Batch numbers as a list with runs of three or more as ranges: "40–44", "3 and 7".
std::string batch_list(std::vector<uint64_t> batches) {
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  std::vector<std::string> parts;
  for (size_t i = 0; i < batches.size();) {
    size_t j = i;
    while (j + 1 < batches.size() && batches[j + 1] == batches[j] + 1) ++j;
    if (j - i >= 2) {
      parts.push_back(std::to_string(batches[i]) + "\u2013" + std::to_string(batches[j]));
    } else {
      for (size_t k = i; k <= j; ++k) parts.push_back(std::to_string(batches[k]));
    }
    i = j + 1;
  }
  return join_words(parts);
}

// "rank 3"; "rank ?" when the rank is not known (-1).
std::string rank_word(int32_t rank) { return rank >= 0 ? "rank " + std::to_string(rank) : std::string("rank ?"); }
// A report's process: "rank 3"; "pid 4242" when its rank is not known but its pid is; else "rank ?".
std::string who_word(int32_t rank, int32_t pid) {
  return rank < 0 && pid > 0 ? "pid " + std::to_string(pid) : rank_word(rank);
}

std::string batches_phrase(const std::vector<uint64_t>& batches) {
  if (batches.empty()) return "no batch";
  const bool one = std::all_of(batches.begin(), batches.end(), [&](uint64_t b) { return b == batches.front(); });
  return (one ? "batch " : "batches ") + batch_list(batches);
}

std::string plural(size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string short_comm(const std::string& communicator) {
  return communicator.empty() ? std::string("?") : communicator.substr(0, 6);
}

std::vector<std::string> non_empty_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// "batch_number=N" in a report's text (the seed's detection header, the abort messages).
std::optional<uint64_t> batch_in_text(const std::string& text) {
  const size_t at = text.find("batch_number=");
  if (at == std::string::npos) return std::nullopt;
  return leading_number(std::string_view(text).substr(at + std::strlen("batch_number=")));
}

std::string format_number(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2e", value);
  return buffer;
}

std::string percent(double fraction) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.0f%%", fraction * 100.0);
  return buffer;
}

// The file a summary entry came from: the JSON when it was read, else the text.
std::string source_file(const ReportFiles& r) { return r.has_json ? r.json_file() : r.text_file(); }

std::vector<const ReportFiles*> reports_of(const RunSummary& summary, ReportKind kind) {
  std::vector<const ReportFiles*> out;
  for (const ReportFiles& r : summary.reports)
    if (r.kind == kind) out.push_back(&r);
  return out;
}

json refs_json(const std::vector<ProcessRef>& refs) {
  json out = json::array();
  for (const ProcessRef& p : refs) out.push_back({{"rank", rank_json(p.rank)}, {"pid", p.pid}});
  return out;
}

}  // namespace trainscope::reports::summary_detail
