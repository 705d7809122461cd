// Reads a run directory's report files into a RunSummary and renders the summary as text and JSON.
#include "analysis/run_summary.h"

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

namespace trainscope::reports {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using recorder::ProcessOverview;
using recorder::ProcessRef;

constexpr uint64_t kMaxReportBytes = 64ull << 20;     // a report larger than this is not a report of ours
constexpr uint64_t kMaxTraceScanBytes = 16ull << 20;  // larger traces are listed, not scanned for batches
constexpr size_t kMaxJsonDepth = 256;                 // deeper nesting is refused before parsing (stack)
constexpr uint64_t kUnknownTime = std::numeric_limits<uint64_t>::max();
constexpr size_t kShownItems = 4;  // entries a summary line names before "and N more"

struct KindInfo {
  ReportKind kind;
  const char* prefix;                // of the base name
  const char* name;                  // report_kind_name
  const char* json_kind;             // the JSON's "kind"
  const char* rank_key;              // the JSON key holding the rank of a per-rank report; nullptr: not per rank
  const char* pid_prefix = nullptr;  // of the base name of a process whose rank is not known ("nonfinite-pid")
};

constexpr KindInfo kKinds[] = {
    {ReportKind::kOrigin, "origin", "origin", "nonfinite_origin", nullptr},
    {ReportKind::kMismatch, "mismatch-", "mismatch", "mismatch", nullptr},
    {ReportKind::kDesync, "desync-", "desync", "desync", nullptr},
    {ReportKind::kVanished, "vanished-rank", "vanished", "vanished", "process"},
    {ReportKind::kNonfinite, "nonfinite-rank", "nonfinite", "inf_nan_detected", "rank", "nonfinite-pid"},
    {ReportKind::kOverflowStreak, "overflow-streak-rank", "overflow_streak", "overflow_streak", "rank",
     "overflow-streak-pid"},
    {ReportKind::kNearOverflow, "near-overflow-rank", "near_overflow", "near_overflow", "rank", "near-overflow-pid"},
    {ReportKind::kStop, "stop-rank", "stop", "stop", "rank", "stop-pid"},
    {ReportKind::kCudaError, "cuda-error-rank", "cuda_error", "cuda_error", "process"},
    {ReportKind::kStepSkipped, "step-skipped-rank", "step_skipped", "step_skipped", "rank", "step-skipped-pid"},
};

const KindInfo& info_of(ReportKind kind) {
  for (const KindInfo& info : kKinds)
    if (info.kind == kind) return info;
  return kKinds[0];
}

// The kind a report's base name says it is: "origin", "origin-2", "mismatch-...", "nonfinite-rank3", ...
const KindInfo* kind_of_name(std::string_view base) {
  if (base == "origin" || base.starts_with("origin-")) return &kKinds[0];
  for (const KindInfo& info : kKinds) {
    if (info.kind == ReportKind::kOrigin) continue;
    if (base.starts_with(info.prefix) && base.size() > std::strlen(info.prefix)) return &info;
    if (info.pid_prefix != nullptr && base.starts_with(info.pid_prefix) && base.size() > std::strlen(info.pid_prefix))
      return &info;
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

// Reads a whole regular file of at most `limit` bytes.
bool read_file(const fs::path& path, uint64_t limit, std::string* out, std::string* error) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec) {
    *error = "cannot access: " + ec.message();
    return false;
  }
  if (!fs::is_regular_file(status)) {
    *error = "not a regular file";
    return false;
  }
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) {
    *error = "cannot access: " + ec.message();
    return false;
  }
  if (size > limit) {
    *error = "larger than " + std::to_string(limit >> 20) + " MiB, not read";
    return false;
  }
  FILE* file = std::fopen(path.c_str(), "rbe");
  if (file == nullptr) {
    *error = std::string("cannot open: ") + std::strerror(errno);
    return false;
  }
  out->clear();
  char buffer[65536];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, file)) > 0 && out->size() <= limit) out->append(buffer, n);
  const bool failed = std::ferror(file) != 0;
  std::fclose(file);
  if (failed) {
    *error = "read error";
    return false;
  }
  if (out->size() > limit) {
    *error = "larger than " + std::to_string(limit >> 20) + " MiB, not read";
    return false;
  }
  return true;
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
std::string ranks_phrase(std::vector<int32_t> ranks, std::vector<int32_t> unknown_pids = {}) {
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

// ---- The summary: lines and their JSON, made together so they agree -----------------------------------------------

struct Analysis {
  std::vector<std::string> lines;  // without the indentation
  bool nothing_wrong = true;
  json fields = json::object();
};

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

// ---- Verdicts the recorders know of: the ranks that trainscope stopped say which verdict and about which call -------

struct StoppedVerdict {
  std::string communicator;  // 6 hex digits; "" when the verdict names none (a vanished rank)
  uint64_t seq = 0;
  std::vector<ProcessRef> who;
  bool report_missing = false;  // the coordinator could not write its report
};

std::vector<StoppedVerdict> stopped_by(const RunSummary& summary, recorder::StopReason reason) {
  std::vector<StoppedVerdict> out;
  if (!summary.processes) return out;
  for (const recorder::ProcessDetail& d : summary.processes->details) {
    if (d.state != "stopped" || d.stop_reason != static_cast<uint32_t>(reason)) continue;
    const std::string comm = d.stop_comm_id != 0 ? recorder::short_hex_id(d.stop_comm_id) : std::string();
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const StoppedVerdict& v) { return v.communicator == comm && v.seq == d.stop_seq; });
    if (it == out.end()) it = out.insert(out.end(), StoppedVerdict{comm, d.stop_seq, {}, false});
    it->who.push_back(d.who);
    it->report_missing |= d.stop_report_missing;
  }
  return out;
}

// With no report of its kind on disk, the verdicts that stopped ranks still make the line: "mismatches: 1
// (communicator 3f2a9c call #5; its report could not be written; it stopped ranks 0–3)". Returns whether it said so.
bool verdict_without_report(const RunSummary& summary, recorder::StopReason reason, const char* label, json* items,
                            Analysis* a) {
  const std::vector<StoppedVerdict> verdicts = stopped_by(summary, reason);
  if (verdicts.empty()) return false;
  std::string first;
  for (const StoppedVerdict& v : verdicts) {
    items->push_back({{"file", nullptr},
                      {"communicator", string_or_null(v.communicator)},
                      {"seq", v.seq != 0 ? json(v.seq) : json(nullptr)},
                      {"report_missing", v.report_missing},
                      {"stopped", refs_json(v.who)}});
    if (!first.empty()) continue;
    if (!v.communicator.empty()) first = "communicator " + v.communicator + " call #" + std::to_string(v.seq) + "; ";
    first += v.report_missing ? "its report could not be written" : "its report is not in this directory";
    first += "; it stopped " + processes_phrase(v.who);
  }
  a->nothing_wrong = false;
  a->lines.push_back(std::string(label) + std::to_string(verdicts.size()) + " (" +
                     (verdicts.size() > 1 ? "first: " : "") + first + ")");
  return true;
}

// inf/nan origin; returns whether an origin call is known.
bool origin_line(const RunSummary& summary, bool any_nonfinite, Analysis* a) {
  const std::vector<const ReportFiles*> origins = reports_of(summary, ReportKind::kOrigin);
  json& field = a->fields["origin"] = nullptr;
  for (const ReportFiles* r : origins) {
    std::string text;
    const json* details = nullptr;
    if (r->has_json) {
      details = member(r->json, "origin");
      if (details == nullptr || !details->is_object()) continue;  // no origin: the firsts were empty
      text = string_member(r->json, "text");
    }
    if (text.empty() && r->has_text) text = r->text;
    // The analysis only: the stack of the call the value came from follows it (reports/frame_report.h).
    text = text.substr(0, text.find("\nStack of the call it came from ("));
    std::vector<std::string> lines = non_empty_lines(text);
    if (lines.empty() && details == nullptr) continue;
    field = json::object();
    field["file"] = source_file(*r);
    field["text"] = lines;
    if (details != nullptr) {
      for (const char* key :
           {"batch_number", "communicator", "call_number", "op", "produced_by_collective", "senders", "receivers"}) {
        const json* v = member(*details, key);
        field[key] = v != nullptr ? *v : json(nullptr);
      }
    }
    std::string line;
    if (!lines.empty()) {
      line = lines.front();
      if (lines.size() > 1)
        line += "; " + plural(lines.size() - 1, "more line", "more lines") + " in " + r->text_file();
    } else {
      line = "batch " + std::to_string(uint_member(*details, "batch_number").value_or(0)) + ", communicator " +
             short_comm(string_member(*details, "communicator")) + " " +
             collective_phrase(string_member(*details, "op")) + " call #" +
             std::to_string(uint_member(*details, "call_number").value_or(0));
    }
    a->lines.push_back("inf/nan origin: " + line);
    a->nothing_wrong = false;
    return true;
  }
  std::string why = "none";
  if (!origins.empty()) {
    const ReportFiles& r = *origins.front();
    why = r.has_json || r.has_text ? "none (" + source_file(r) + " names no call)"
                                   : "unknown (" + r.base_name + " could not be read)";
  } else if (any_nonfinite && summary.processes && summary.processes->recorded == 1 &&
             summary.ranks_with_communicators.size() <= 1) {
    // A one-process job: there is no other rank to have come first.
    why = "one process in this run: its first inf/nan is the origin";
  } else if (any_nonfinite) {
    why = "not reported (no origin.txt: it needs the coordinator)";
  }
  a->lines.push_back("inf/nan origin: " + why);
  return false;
}

struct FirstNonfinite {
  int32_t rank = -1;
  int32_t pid = 0;  // when the rank is not known
  std::optional<uint64_t> batch;
  std::string frame;
  std::string label;
  std::string file;
};

// The oldest frame of a detection report that holds a non-finite value, and its first such row.
void first_nonfinite_frame(const json& report, std::string* frame, std::string* label) {
  for (const json* f : objects_in(report, "frames")) {
    if (!bool_member(*f, "has_nonfinite", false)) continue;
    *frame = string_member(*f, "name");
    // A module is named by its qualified name and class, as its frame's header names it.
    if (bool_member(*f, "module", false)) *frame = module_title(*frame, string_member(*f, "kind"));
    for (const json* row : objects_in(*f, "rows")) {
      const bool nonfinite = uint_member(*row, "nan_count").value_or(0) != 0 ||
                             uint_member(*row, "pos_inf_count").value_or(0) != 0 ||
                             uint_member(*row, "neg_inf_count").value_or(0) != 0;
      if (nonfinite) {
        *label = string_member(*row, "label");
        break;
      }
    }
    return;
  }
}

// The batches whose optimizer step a loss scaler skipped, by rank (step-skipped-rank<R>: "batches"); an unknown
// rank's by its pid (step-skipped-pid<P>).
struct SkippedSteps {
  int32_t pid = 0;
  std::vector<uint64_t> batches;
};
std::map<std::pair<int32_t, int32_t>, SkippedSteps> skipped_steps(const RunSummary& summary) {
  std::map<std::pair<int32_t, int32_t>, SkippedSteps> skipped;
  for (const ReportFiles* r : reports_of(summary, ReportKind::kStepSkipped)) {
    SkippedSteps& steps = skipped[{r->rank, r->rank < 0 ? r->pid : 0}];
    steps.pid = r->pid;
    std::vector<uint64_t>& batches = steps.batches;
    if (!r->has_json) continue;
    if (const json* list = member(r->json, "batches"); list != nullptr && list->is_array()) {
      for (const json& b : *list)
        if (b.is_number_unsigned()) batches.push_back(b.get<uint64_t>());
    }
  }
  return skipped;
}

void first_nonfinite_line(const RunSummary& summary, bool origin_known, Analysis* a) {
  std::vector<FirstNonfinite> firsts;
  for (const ReportFiles* r : reports_of(summary, ReportKind::kNonfinite)) {
    FirstNonfinite f;
    f.rank = r->rank;
    f.pid = r->pid;
    f.file = source_file(*r);
    if (r->has_json) {
      f.batch = uint_member(r->json, "batch_number");
      first_nonfinite_frame(r->json, &f.frame, &f.label);
    } else if (r->has_text) {
      f.batch = batch_in_text(r->text);
    }
    firsts.push_back(std::move(f));
  }
  std::sort(firsts.begin(), firsts.end(), [](const FirstNonfinite& x, const FirstNonfinite& y) {
    const uint64_t bx = x.batch.value_or(kUnknownTime), by = y.batch.value_or(kUnknownTime);
    return std::make_tuple(bx, x.rank < 0, x.rank) < std::make_tuple(by, y.rank < 0, y.rank);
  });
  json items = json::array();
  for (const FirstNonfinite& f : firsts) {
    items.push_back({{"rank", rank_json(f.rank)},
                     {"batch_number", optional_json(f.batch)},
                     {"frame", string_or_null(f.frame)},
                     {"label", string_or_null(f.label)},
                     {"file", f.file}});
  }
  a->fields["first_nonfinite"] = std::move(items);
  if (firsts.empty()) {
    a->lines.push_back("first inf/nan: none");
    return;
  }
  a->nothing_wrong = false;
  // One group per batch, earliest first.
  struct Group {
    std::optional<uint64_t> batch;
    std::vector<int32_t> ranks, unknown_pids;
  };
  std::vector<Group> groups;
  for (const FirstNonfinite& f : firsts) {
    if (groups.empty() || groups.back().batch != f.batch) groups.push_back({f.batch, {}, {}});
    groups.back().ranks.push_back(f.rank);
    if (f.rank < 0) groups.back().unknown_pids.push_back(f.pid);
  }
  std::vector<std::string> parts;
  for (const Group& g : groups)
    parts.push_back((g.batch ? "batch " + std::to_string(*g.batch) : std::string("batch ?")) + " on " +
                    ranks_phrase(g.ranks, g.unknown_pids));
  std::string line = "first inf/nan: " + join_capped(parts, ", ");
  const FirstNonfinite& earliest = firsts.front();
  if (!origin_known && !earliest.frame.empty()) {
    line += "; " + who_word(earliest.rank, earliest.pid) + " saw it in " + earliest.frame +
            (earliest.label.empty() ? "" : " " + earliest.label);
  }
  // In gradients a loss scaler then threw away: what it is for (fp16 loss scaling finds its scale so), not a fault.
  const auto skipped = skipped_steps(summary);
  const auto was_skipped = [&](const FirstNonfinite& f) {
    const auto it = skipped.find({f.rank, f.rank < 0 ? f.pid : 0});
    return f.batch && it != skipped.end() &&
           std::find(it->second.batches.begin(), it->second.batches.end(), *f.batch) != it->second.batches.end();
  };
  if (std::all_of(firsts.begin(), firsts.end(), was_skipped))
    line += "; the loss scaler skipped that batch's optimizer step (see skipped steps)";
  a->lines.push_back(line);
}

void skipped_steps_line(const RunSummary& summary, Analysis* a) {
  json items = json::array();
  std::vector<std::string> parts;
  for (const auto& [key, steps] : skipped_steps(summary)) {
    items.push_back({{"rank", rank_json(key.first)}, {"batches", steps.batches}});
    parts.push_back(who_word(key.first, steps.pid) + ", " + batches_phrase(steps.batches));
  }
  a->fields["skipped_steps"] = std::move(items);
  if (parts.empty()) return;
  a->lines.push_back("skipped steps: " + join_capped(parts, "; ") +
                     " (the loss scaler found inf/nan in the gradients and skipped the optimizer step, then lowered "
                     "its scale: how loss scaling works, not a failure)");
}

// "mismatch-3f2a9c-24", "mismatch-p2p-3f2a9c-2", "desync-3f2a9c-813-2" -> communicator and call number.
void parse_call_name(std::string_view base, std::string_view prefix, std::string* comm, std::optional<uint64_t>* seq) {
  base.remove_prefix(prefix.size());
  const size_t dash = base.find('-');
  if (dash == std::string_view::npos) return;
  *comm = std::string(base.substr(0, dash));
  *seq = leading_number(base.substr(dash + 1));
}

// Which processes had their calls compared across ranks, and why the others did not (or had not started when the
// process went), from each recorder's header: processes that had nothing to compare with say nothing.
struct CrossRankChecks {
  size_t ran = 0;
  std::vector<std::pair<std::string, std::vector<ProcessRef>>> not_run;  // why -> processes, in order of appearance
  json items = json::array();
};

CrossRankChecks cross_rank_checks(const RunSummary& summary) {
  CrossRankChecks checks;
  if (!summary.processes) return checks;
  for (const recorder::ProcessDetail& d : summary.processes->details) {
    const auto state = static_cast<recorder::ExchangeState>(d.exchange_state);
    if (state == recorder::ExchangeState::kRan) ++checks.ran;
    if (state != recorder::ExchangeState::kDidNotRun && state != recorder::ExchangeState::kWaiting) continue;
    const std::string why = d.exchange_note.empty() ? "no reason recorded" : d.exchange_note;
    checks.items.push_back({{"rank", rank_json(d.who.rank)},
                            {"pid", d.who.pid},
                            {"state", state == recorder::ExchangeState::kWaiting ? "waiting" : "did_not_run"},
                            {"why", why}});
    auto it = std::find_if(checks.not_run.begin(), checks.not_run.end(), [&](const auto& r) { return r.first == why; });
    if (it == checks.not_run.end()) it = checks.not_run.insert(checks.not_run.end(), {why, {}});
    it->second.push_back(d.who);
  }
  return checks;
}

// Checks that did not run: a mismatch or a desync there went unreported, so the run is not clean.
void checks_line(const CrossRankChecks& checks, Analysis* a) {
  a->fields["cross_rank_checks"] = {{"ran", checks.ran}, {"did_not_run", checks.items}};
  if (checks.not_run.empty()) return;
  a->nothing_wrong = false;
  std::vector<std::string> parts;
  for (const auto& [why, who] : checks.not_run) parts.push_back(processes_phrase(who) + ": " + why);
  a->lines.push_back("cross-rank checks: did not run on " + join_capped(parts, "; ") +
                     " (a mismatch or desync there was not looked for)");
}

void mismatch_line(const RunSummary& summary, const CrossRankChecks& checks, Analysis* a) {
  json items = json::array();
  std::string first;
  for (const ReportFiles* r : reports_of(summary, ReportKind::kMismatch)) {
    std::string comm;
    std::optional<uint64_t> seq;
    std::string operation;
    bool p2p = std::string_view(r->base_name).starts_with("mismatch-p2p-");
    std::vector<std::string> differences;
    std::optional<uint64_t> detected;
    if (r->has_json) {
      comm = string_member(r->json, "communicator");
      seq = uint_member(r->json, "seq");
      operation = string_member(r->json, "operation");
      p2p = bool_member(r->json, "point_to_point", p2p);
      const json* d = member(r->json, "differences");
      if (d != nullptr && d->is_array()) {
        for (const json& e : *d)
          if (e.is_string()) differences.push_back(e.get<std::string>());
      }
      detected = uint_member(r->json, "detected_ns");
    } else {
      parse_call_name(r->base_name, p2p ? "mismatch-p2p-" : "mismatch-", &comm, &seq);
    }
    items.push_back({{"file", source_file(*r)},
                     {"communicator", string_or_null(comm)},
                     {"seq", optional_json(seq)},
                     {"operation", string_or_null(operation)},
                     {"point_to_point", p2p},
                     {"differences", differences},
                     {"detected_ns", optional_json(detected)}});
    if (!first.empty()) continue;
    first = "communicator " + short_comm(comm) + (p2p ? " send #" : " call #") + (seq ? std::to_string(*seq) : "?");
    if (!operation.empty()) first += " `" + operation + "`";
    if (!differences.empty())
      first += ": " + join_words(differences) + (differences.size() == 1 ? " differs" : " differ");
  }
  const size_t n = items.size();
  if (n == 0) {
    if (!verdict_without_report(summary, recorder::StopReason::kMismatch, "mismatches: ", &items, a))
      a->lines.push_back(checks.not_run.empty() ? "mismatches: none"
                         : checks.ran == 0      ? "mismatches: not looked for (the cross-rank checks did not run)"
                                                : "mismatches: none found where the cross-rank checks ran");
    a->fields["mismatches"] = std::move(items);
    return;
  }
  a->fields["mismatches"] = std::move(items);
  a->nothing_wrong = false;
  a->lines.push_back("mismatches: " + std::to_string(n) + " (" + (n > 1 ? "first: " : "") + first + ")");
}

// "desync-3f2a9c-send-0-1-7" -> a send/recv desync: send #7 from communicator rank 0 to communicator rank 1.
bool parse_send_name(std::string_view base, int32_t* sender, int32_t* receiver, std::optional<uint64_t>* seq) {
  const size_t at = base.find("-send-");
  if (at == std::string_view::npos) return false;
  std::string_view rest = base.substr(at + std::strlen("-send-"));
  std::optional<uint64_t> numbers[3];
  for (std::optional<uint64_t>& n : numbers) {
    n = leading_number(rest);
    const size_t dash = rest.find('-');
    rest = dash == std::string_view::npos ? std::string_view() : rest.substr(dash + 1);
  }
  const auto rank = [](std::optional<uint64_t> n) {
    return n && *n <= static_cast<uint64_t>(std::numeric_limits<int32_t>::max()) ? static_cast<int32_t>(*n) : -1;
  };
  *sender = rank(numbers[0]);
  *receiver = rank(numbers[1]);
  *seq = numbers[2];
  return true;
}

void desync_line(const RunSummary& summary, Analysis* a) {
  json items = json::array();
  // Distinct stuck calls: (communicator, number, send/recv pair or -1, -1).
  std::vector<std::tuple<std::string, std::optional<uint64_t>, int32_t, int32_t>> calls;
  std::string first;
  for (const ReportFiles* r : reports_of(summary, ReportKind::kDesync)) {
    std::string comm;
    std::optional<uint64_t> seq;
    bool p2p = false;  // a send/recv whose other side has not come: seq is the send's number
    int32_t sender = -1;
    int32_t receiver = -1;
    std::string operation;
    std::vector<int32_t> waiting;
    std::vector<std::pair<std::string, std::vector<int32_t>>> missing_by_state;  // in order of appearance
    json missing = json::array();
    bool certain = false;
    bool creation = std::string_view(r->base_name).ends_with("-creation");
    std::optional<uint64_t> repeat;
    if (r->has_json) {
      creation = bool_member(r->json, "creation", creation);
      comm = string_member(r->json, "communicator");
      seq = uint_member(r->json, "seq");
      operation = string_member(r->json, "operation");
      certain = bool_member(r->json, "certain", false);
      repeat = uint_member(r->json, "repeat");
      p2p = bool_member(r->json, "point_to_point", false);
      if (p2p) {
        sender = rank_member(r->json, "sender");
        receiver = rank_member(r->json, "receiver");
      }
      for (const json* w : objects_in(r->json, "waiting")) waiting.push_back(rank_member(*w, "process"));
      for (const json* m : objects_in(r->json, "missing")) {
        const int32_t rank = rank_member(*m, "process");
        std::string state = string_member(*m, "state");
        missing.push_back({{"rank", rank_json(rank)},
                           {"state", string_or_null(state)},
                           {"process_gone", bool_member(*m, "process_gone", false)}});
        if (state.empty()) state = "state unknown";
        auto it = std::find_if(missing_by_state.begin(), missing_by_state.end(),
                               [&](const auto& group) { return group.first == state; });
        if (it == missing_by_state.end()) it = missing_by_state.insert(missing_by_state.end(), {state, {}});
        it->second.push_back(rank);
      }
    } else {
      parse_call_name(r->base_name, "desync-", &comm, &seq);
      p2p = parse_send_name(r->base_name, &sender, &receiver, &seq);
    }
    if (creation) seq = 0;
    items.push_back({{"file", source_file(*r)},
                     {"communicator", string_or_null(comm)},
                     {"seq", optional_json(seq)},
                     {"operation", string_or_null(operation)},
                     {"point_to_point", p2p},
                     {"creation", creation},
                     {"sender", rank_json(sender)},
                     {"receiver", rank_json(receiver)},
                     {"certain", certain},
                     {"repeat", optional_json(repeat)},
                     {"waiting", waiting},
                     {"missing", std::move(missing)}});
    const auto call =
        std::make_tuple(comm.substr(0, std::min<size_t>(comm.size(), 6)), seq, p2p ? sender : -1, p2p ? receiver : -1);
    if (std::find(calls.begin(), calls.end(), call) == calls.end()) calls.push_back(call);
    if (!first.empty()) continue;
    first = "communicator " + short_comm(comm) +
            (creation ? std::string(" at its creation")
                      : (p2p ? " send #" : " call #") + (seq ? std::to_string(*seq) : std::string("?")));
    if (!operation.empty()) first += " `" + operation + "`";
    std::vector<std::string> missing_parts;
    for (const auto& [state, ranks] : missing_by_state)
      missing_parts.push_back(ranks_phrase(ranks) + " (" + state + ")");
    const std::string missing_text = join_words(missing_parts);
    if (!waiting.empty() && !missing_text.empty()) {
      first += ": " + ranks_phrase(waiting) + (waiting.size() == 1 ? " waits" : " wait") + " for " + missing_text;
    } else if (!waiting.empty()) {
      first += ": " + ranks_phrase(waiting) + " waiting";
    } else if (!missing_text.empty()) {
      first += ": " + missing_text + " not arrived";
    }
  }
  if (calls.empty()) {
    if (!verdict_without_report(summary, recorder::StopReason::kDesync, "desyncs: ", &items, a))
      a->lines.push_back("desyncs: none");
    a->fields["desyncs"] = std::move(items);
    return;
  }
  a->fields["desyncs"] = std::move(items);
  a->nothing_wrong = false;
  a->lines.push_back("desyncs: " + std::to_string(calls.size()) + " (" + (calls.size() > 1 ? "first: " : "") + first +
                     ")");
}

void vanished_line(const RunSummary& summary, Analysis* a) {
  json items = json::array();
  std::vector<std::string> parts;
  for (const ReportFiles* r : reports_of(summary, ReportKind::kVanished)) {
    std::string who = rank_word(r->rank);
    json item = {{"file", source_file(*r)}, {"rank", rank_json(r->rank)}};
    if (!r->has_json) {
      item["host"] = nullptr;
      item["pid"] = nullptr;
      item["last_call"] = nullptr;
      items.push_back(std::move(item));
      parts.push_back(who);
      continue;
    }
    const std::string host = string_member(r->json, "host");
    const std::optional<int64_t> pid = int_member(r->json, "pid");
    item["host"] = string_or_null(host);
    item["pid"] = pid ? json(*pid) : json(nullptr);
    std::vector<std::string> details;
    if (!host.empty()) details.push_back("host " + host);
    if (pid) details.push_back("pid " + std::to_string(*pid));
    std::string detail = join(details, ", ");
    const json* last = member(r->json, "last_call");
    if (last != nullptr && last->is_object()) {
      const std::string op = string_member(*last, "op");
      const std::optional<uint64_t> seq = uint_member(*last, "seq");
      const std::string comm = string_member(r->json, "last_call_communicator");
      item["last_call"] = {
          {"op", string_or_null(op)}, {"seq", optional_json(seq)}, {"communicator", string_or_null(comm)}};
      std::string call = "last call #" + (seq ? std::to_string(*seq) : std::string("?"));
      if (!op.empty()) call += " `" + op + "`";
      if (!comm.empty()) call += " on communicator " + short_comm(comm);
      detail += (detail.empty() ? "" : "; ") + call;
    } else {
      item["last_call"] = nullptr;
      detail += (detail.empty() ? "" : "; ") + std::string("no call seen");
    }
    items.push_back(std::move(item));
    parts.push_back(who + " (" + detail + ")");
  }
  if (parts.empty()) {
    if (!verdict_without_report(summary, recorder::StopReason::kVanishedRank, "vanished ranks: ", &items, a))
      a->lines.push_back("vanished ranks: none");
    a->fields["vanished"] = std::move(items);
    return;
  }
  a->fields["vanished"] = std::move(items);
  a->nothing_wrong = false;
  a->lines.push_back("vanished ranks: " + join_capped(parts, "; "));
}

void streak_line(const RunSummary& summary, Analysis* a) {
  json items = json::array();
  std::vector<std::string> parts;
  for (const ReportFiles* r : reports_of(summary, ReportKind::kOverflowStreak)) {
    const std::string who = who_word(r->rank, r->pid);
    std::vector<uint64_t> batches;
    if (r->has_json) {
      for (const json* b : objects_in(r->json, "batches")) {
        if (const std::optional<uint64_t> n = uint_member(*b, "batch_number")) batches.push_back(*n);
      }
    }
    items.push_back({{"file", source_file(*r)}, {"rank", rank_json(r->rank)}, {"batches", batches}});
    if (batches.empty()) {
      parts.push_back(who);
    } else {
      const size_t n = batches.size();
      parts.push_back(who + ", " + batches_phrase(batches) + (n > 1 ? " (" + std::to_string(n) + " in a row)" : ""));
    }
  }
  a->fields["overflow_streaks"] = std::move(items);
  if (parts.empty()) {
    a->lines.push_back("overflow streaks: none");
    return;
  }
  a->nothing_wrong = false;
  a->lines.push_back("overflow streaks: " + join_capped(parts, "; "));
}

struct NearWarning {
  int32_t rank = -1;
  int32_t pid = 0;   // when the rank is not known
  size_t order = 0;  // in the file
  std::optional<uint64_t> batch;
  std::string frame;
  std::string label;
  std::optional<double> abs_max;
  std::optional<double> limit;
  std::optional<double> fraction;
  std::string dtype;
  std::string text;  // the text line, when the JSON could not be read
  std::string file;
};

std::string near_text(const NearWarning& w, bool name_rank) {
  if (!w.text.empty()) return (name_rank ? who_word(w.rank, w.pid) + ": " : "") + w.text;
  std::vector<std::string> parts;
  if (name_rank) parts.push_back(who_word(w.rank, w.pid));
  if (w.batch) parts.push_back("batch " + std::to_string(*w.batch));
  std::string what = w.frame;
  if (!w.label.empty()) what += (what.empty() ? "" : " ") + w.label;
  if (w.abs_max) {
    what += (what.empty() ? "" : " ") + format_number(*w.abs_max);
    std::optional<double> fraction = w.fraction;
    if ((!fraction || !(*fraction > 0)) && w.limit && *w.limit > 0) fraction = *w.abs_max / *w.limit;
    if (fraction && !(*fraction > 0)) fraction.reset();
    if (fraction)
      what += " = " + percent(*fraction) + " of " + (w.dtype.empty() ? "its type" : w.dtype + "'s") + " max";
  }
  if (!what.empty()) parts.push_back(what);
  return join(parts, ", ");
}

void near_overflow_line(const RunSummary& summary, Analysis* a) {
  std::vector<NearWarning> warnings;
  for (const ReportFiles* r : reports_of(summary, ReportKind::kNearOverflow)) {
    size_t order = 0;
    if (r->has_json) {
      for (const json* w : objects_in(r->json, "warnings")) {
        NearWarning n;
        n.rank = r->rank;
        n.pid = r->pid;
        n.order = order++;
        n.batch = uint_member(*w, "batch_number");
        n.frame = string_member(*w, "frame");
        n.label = string_member(*w, "label");
        n.abs_max = number_member(*w, "abs_max");
        n.limit = number_member(*w, "limit");
        n.fraction = number_member(*w, "fraction");
        n.dtype = string_member(*w, "dtype");
        n.file = source_file(*r);
        warnings.push_back(std::move(n));
      }
    } else if (r->has_text) {
      for (const std::string& line : non_empty_lines(r->text)) {
        NearWarning n;
        n.rank = r->rank;
        n.pid = r->pid;
        n.order = order++;
        n.text = line;
        n.batch = batch_in_text(line);
        n.file = source_file(*r);
        warnings.push_back(std::move(n));
      }
    }
  }
  json items = json::array();
  for (const NearWarning& w : warnings) {
    items.push_back({{"file", w.file},
                     {"rank", rank_json(w.rank)},
                     {"batch_number", optional_json(w.batch)},
                     {"frame", string_or_null(w.frame)},
                     {"label", string_or_null(w.label)},
                     {"abs_max", optional_json(w.abs_max)},
                     {"limit", optional_json(w.limit)},
                     {"fraction", optional_json(w.fraction)},
                     {"dtype", string_or_null(w.dtype)},
                     {"text", string_or_null(w.text)}});
  }
  a->fields["near_overflow"] = std::move(items);
  if (warnings.empty()) {
    a->lines.push_back("near overflow: none");
    return;
  }
  a->nothing_wrong = false;
  std::vector<int32_t> ranks, unknown_pids;
  for (const NearWarning& w : warnings) {
    ranks.push_back(w.rank);
    if (w.rank < 0) unknown_pids.push_back(w.pid);
  }
  const auto first = std::min_element(warnings.begin(), warnings.end(), [](const NearWarning& x, const NearWarning& y) {
    return std::make_tuple(x.batch.value_or(kUnknownTime), x.rank < 0, x.rank, x.order) <
           std::make_tuple(y.batch.value_or(kUnknownTime), y.rank < 0, y.rank, y.order);
  });
  std::sort(ranks.begin(), ranks.end());
  std::sort(unknown_pids.begin(), unknown_pids.end());
  const bool one_rank =
      ranks.front() == ranks.back() && (ranks.front() >= 0 || unknown_pids.front() == unknown_pids.back());
  std::string line =
      "near overflow: " + plural(warnings.size(), "warning", "warnings") + " on " + ranks_phrase(ranks, unknown_pids);
  const std::string detail = near_text(*first, !one_rank);
  if (!detail.empty()) line += " (" + std::string(warnings.size() > 1 ? "first: " : "") + detail + ")";
  a->lines.push_back(line);
}

std::string stop_phrase(const recorder::ProcessDetail& d);
bool requested_stop(const recorder::ProcessDetail& d);

void stop_line(const RunSummary& summary, Analysis* a) {
  json items = json::array();
  // (reason, batch) -> ranks, in order of appearance.
  std::vector<std::pair<std::pair<std::string, std::optional<uint64_t>>, std::vector<int32_t>>> groups;
  for (const ReportFiles* r : reports_of(summary, ReportKind::kStop)) {
    std::string reason;
    std::optional<uint64_t> batch;
    std::string message;
    if (r->has_json) {
      reason = string_member(r->json, "reason");
      batch = uint_member(r->json, "batch_number");
      message = string_member(r->json, "message");
    } else if (r->has_text) {
      if (r->text.find(kAbortAfterBatchVariable) != std::string::npos) reason = "abort_after_batch";
      if (r->text.find(kAbortOnNonfiniteVariable) != std::string::npos) reason = "nonfinite";
      batch = batch_in_text(r->text);
    }
    items.push_back({{"file", source_file(*r)},
                     {"rank", rank_json(r->rank)},
                     {"reason", string_or_null(reason)},
                     {"batch_number", optional_json(batch)},
                     {"message", string_or_null(message)}});
    if (reason != "abort_after_batch") a->nothing_wrong = false;  // stopping after batch N is what was asked for
    const auto key = std::make_pair(reason, batch);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == key; });
    if (it == groups.end()) it = groups.insert(groups.end(), {key, {}});
    it->second.push_back(r->rank);
  }
  // The ranks trainscope stopped that left no stop report (a verdict stops every rank; a full disk keeps the report
  // from being written): their recorders say so.
  std::vector<std::pair<std::string, std::vector<ProcessRef>>> recorded;  // "by trainscope (...)" -> processes
  if (summary.processes) {
    for (const recorder::ProcessDetail& d : summary.processes->details) {
      if (d.state != "stopped") continue;
      const bool reported =
          d.who.rank >= 0 && std::find_if(groups.begin(), groups.end(), [&](const auto& g) {
                               return std::find(g.second.begin(), g.second.end(), d.who.rank) != g.second.end();
                             }) != groups.end();
      if (reported) continue;
      const std::string text = stop_phrase(d).substr(std::strlen("stopped "));
      auto it = std::find_if(recorded.begin(), recorded.end(), [&](const auto& g) { return g.first == text; });
      if (it == recorded.end()) it = recorded.insert(recorded.end(), {text, {}});
      it->second.push_back(d.who);
      items.push_back({{"file", nullptr},
                       {"rank", rank_json(d.who.rank)},
                       {"reason", recorder::stop_reason_name(d.stop_reason)},
                       {"batch_number", d.stop_batch_known ? json(d.stop_batch) : json(nullptr)},
                       {"message", text}});
      if (!requested_stop(d)) a->nothing_wrong = false;
    }
  }
  a->fields["stops"] = std::move(items);
  if (groups.empty() && recorded.empty()) {
    a->lines.push_back("stopped: none");
    return;
  }
  std::vector<std::string> parts;
  for (const auto& [key, ranks] : groups) {
    const auto& [reason, batch] = key;
    const std::string n = batch ? std::to_string(*batch) : std::string("?");
    std::string text = ranks_phrase(ranks);
    if (reason == "abort_after_batch") {
      text += " after batch " + n + " (" + kAbortAfterBatchVariable + ")";
    } else if (reason == "nonfinite") {
      text += " on inf/nan in batch " + n + " (" + kAbortOnNonfiniteVariable + ")";
    } else if (reason.empty() && !batch) {
      text += " (reason unknown)";
    } else {
      text += " in batch " + n + (reason.empty() ? "" : " (" + reason + ")");
    }
    parts.push_back(text);
  }
  for (const auto& [text, who] : recorded) parts.push_back(processes_phrase(who) + " " + text);
  a->lines.push_back("stopped: " + join_capped(parts, "; "));
}

// "ncclAllReduce (communicator 3f2a9c, call #5)", "ncclRecv (communicator 3f2a9c, call #10 with peer 0)",
// "ncclCommInitRank".
std::string call_phrase(const recorder::Record& r) {
  const recorder::Op op = static_cast<recorder::Op>(r.op);
  const char* name = recorder::op_name(op);
  std::string text = std::strcmp(name, "unknown") == 0 ? "op#" + std::to_string(r.op) : std::string(name);
  std::vector<std::string> details;
  if (r.comm_id != 0) details.push_back("communicator " + recorder::short_hex_id(r.comm_id));
  if (recorder::is_collective(op) || recorder::is_point_to_point(op)) {
    std::string number = "call #" + std::to_string(r.seq);
    if (recorder::is_point_to_point(op) && r.peer >= 0) number += " with peer " + std::to_string(r.peer);
    details.push_back(number);
  }
  if (!details.empty()) text += " (" + join(details, ", ") + ")";
  return text;
}

// What the summary says about one process, in parts: processes said the same way are one line.
struct ProcessLine {
  std::string end;       // "stopped by trainscope (mismatch, status 86)", "exited with status 3", ...
  std::string call;      // "waiting in ncclAllReduce (...)" / "was waiting in ..." ("" when every call returned)
  std::string more;      // "(and 2 more calls that had not returned)"
  std::string records;   // "records unreadable (all 12 torn)", "3 torn records skipped"
  bool notable = false;  // worth a line (a plain "exited" or "running" with nothing else is not)
  bool clean = true;     // counts for "nothing went wrong"
  uint64_t since_ns = 0;
};

// The end of a process that trainscope stopped, from its recorder: "stopped by trainscope (mismatch, status 86)".
std::string stop_phrase(const recorder::ProcessDetail& d) {
  std::string why = recorder::stop_reason_name(d.stop_reason);
  if (d.stop_reason == static_cast<uint32_t>(recorder::StopReason::kAbortAfterBatch) && d.stop_batch_known)
    why += " " + std::to_string(d.stop_batch);
  if (d.exit_status_known) why += ", status " + std::to_string(d.exit_status);
  return "stopped by trainscope (" + why + ")";
}

bool requested_stop(const recorder::ProcessDetail& d) {
  return d.state == "stopped" && d.stop_reason == static_cast<uint32_t>(recorder::StopReason::kAbortAfterBatch);
}

ProcessLine describe(const recorder::ProcessDetail& d, const std::optional<JobEnd>& job) {
  ProcessLine line;
  if (d.state == "stopped") {
    line.end = stop_phrase(d);
    line.notable = true;
    line.clean = requested_stop(d);  // stopping after batch N is what was asked for
  } else if (d.state == "exited") {
    line.end = "exited";
    if (d.exit_status_known && d.exit_status != 0) {
      line.end = "exited with status " + std::to_string(d.exit_status);
      line.notable = true;
      line.clean = false;
    }
  } else if (d.state == "crashed_or_killed") {
    // The job's only process, whose wait status `trainscope run` has, is named with its signal.
    if (job && job->signaled && job->pid == d.who.pid) {
      line.end = "killed by " + signal_name(job->signal);
    } else {
      line.end = "crashed or killed (no clean exit; its process is gone)";
    }
    line.notable = true;
    line.clean = false;
  } else if (d.state == "running") {
    line.end = "running";
  } else if (d.state == "running_unverified") {
    line.end = "on another host (cannot tell whether it runs)";
  } else {
    line.end = "in an unknown state";
    line.notable = true;
    line.clean = false;
  }
  if (d.pending_calls > 0) {
    line.call = std::string(d.gone ? "was waiting in " : "waiting in ") + call_phrase(d.newest_pending.record);
    line.since_ns = d.newest_pending.record.start_ns;
    if (d.pending_calls > 1) {
      line.more = "(and " + plural(d.pending_calls - 1, "more call", "more calls") + " that had not returned)";
    }
    line.notable = true;
    line.clean &= requested_stop(d);  // a stop the user asked for cuts the call it meets short
  }
  if (d.torn_records > 0) {
    line.records = d.records_held == 0
                       ? "records unreadable (all " + std::to_string(d.torn_records) + " torn)"
                       : plural(d.torn_records, "torn record", "torn records") + " skipped (unreadable)";
    line.notable = true;
    // A stop the user asked for can meet a thread half-way through its record, as it can meet it inside a call.
    line.clean &= requested_stop(d) && d.records_held > 0;
  }
  return line;
}

json detail_json(const recorder::ProcessDetail& d, const ProcessLine& line) {
  json waiting = nullptr;
  if (d.pending_calls > 0) {
    const recorder::Record& r = d.newest_pending.record;
    const char* name = recorder::op_name(static_cast<recorder::Op>(r.op));
    waiting = {{"op", name},
               {"communicator", r.comm_id != 0 ? json(recorder::hex_id(r.comm_id)) : json(nullptr)},
               {"seq", r.seq},
               {"record", d.newest_pending.index},
               {"since_ns", r.start_ns},
               {"process_gone", d.gone},
               {"calls", d.pending_calls}};
  }
  json stop = nullptr;
  if (d.state == "stopped") {
    stop = {{"reason", recorder::stop_reason_name(d.stop_reason)},
            {"communicator", d.stop_comm_id != 0 ? json(recorder::hex_id(d.stop_comm_id)) : json(nullptr)},
            {"seq", d.stop_seq != 0 ? json(d.stop_seq) : json(nullptr)},
            {"batch_number", d.stop_batch_known ? json(d.stop_batch) : json(nullptr)},
            {"report_missing", d.stop_report_missing}};
  }
  return {{"rank", rank_json(d.who.rank)},
          {"pid", d.who.pid},
          {"file", d.file},
          {"state", d.state},
          {"text", line.end},
          {"exit_status", d.exit_status_known ? json(d.exit_status) : json(nullptr)},
          {"stop", std::move(stop)},
          {"waiting", std::move(waiting)},
          {"records_total", d.records_total},
          {"records_held", d.records_held},
          {"torn_records", d.torn_records},
          {"reports_unwritten", d.reports_unwritten}};
}

constexpr size_t kShownProcessLines = 8;  // process lines shown before "and N more"

void processes_line(const RunSummary& summary, Analysis* a) {
  if (!summary.processes) {
    a->fields["processes"] = nullptr;
    a->lines.push_back("processes: no flight recorder (*.tsrec) in the run directory");
    return;
  }
  const ProcessOverview& p = *summary.processes;
  // The processes that exited by themselves, by status (0 or not said: plain "exited").
  std::map<int32_t, std::vector<ProcessRef>> by_status;
  size_t exited_plainly = p.exited;
  for (const recorder::ProcessDetail& d : p.details) {
    if (d.state == "exited" && d.exit_status_known && d.exit_status != 0) {
      by_status[d.exit_status].push_back(d.who);
      --exited_plainly;
    }
  }
  // One line per way of ending that needs a look; processes that ended the same way share it.
  struct Group {
    ProcessLine line;
    std::vector<ProcessRef> who;
  };
  std::vector<Group> groups;
  json details = json::array();
  bool clean = true;
  for (const recorder::ProcessDetail& d : p.details) {
    const ProcessLine line = describe(d, summary.job);
    details.push_back(detail_json(d, line));
    clean &= line.clean;
    if (!line.notable) continue;
    auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) {
      return std::tie(g.line.end, g.line.call, g.line.more, g.line.records) ==
             std::tie(line.end, line.call, line.more, line.records);
    });
    if (it == groups.end()) it = groups.insert(groups.end(), Group{line, {}});
    it->line.since_ns = std::min(it->line.since_ns, line.since_ns);
    it->who.push_back(d.who);
  }
  json unreadable = json::array();
  for (const recorder::FileError& e : p.errors) {
    const std::string name = e.path.substr(e.path.rfind('/') + 1);
    const std::string what = e.message.starts_with(e.path + ": ") ? e.message.substr(e.path.size() + 2) : e.message;
    unreadable.push_back({{"file", name}, {"error", what}});
  }
  a->fields["processes"] = {{"recorded", p.recorded},
                            {"unreadable", p.unreadable},
                            {"exited", p.exited},
                            {"stopped", refs_json(p.stopped)},
                            {"running", p.running},
                            {"running_unverified", p.running_unverified},
                            {"unknown_state", p.unknown_state},
                            {"crashed_or_killed", refs_json(p.crashed)},
                            {"did_not_return", refs_json(p.did_not_return)},
                            {"pending", refs_json(p.pending)},
                            {"details", std::move(details)},
                            {"unreadable_files", unreadable}};
  // A call cut short by a stop the user asked for (TRAINSCOPE_ABORT_AFTER_BATCH) is what a stop does.
  const bool unexplained_calls =
      std::any_of(p.did_not_return.begin(), p.did_not_return.end(), [&](const ProcessRef& r) {
        return std::none_of(p.details.begin(), p.details.end(), [&](const recorder::ProcessDetail& d) {
          return d.who.pid == r.pid && d.who.rank == r.rank && requested_stop(d);
        });
      });
  if (!clean || !p.crashed.empty() || unexplained_calls || !p.pending.empty() || p.unreadable != 0)
    a->nothing_wrong = false;
  std::string line = "processes: " + std::to_string(p.recorded) + " recorded";
  if (p.unreadable != 0) line += ", " + plural(p.unreadable, "recorder file", "recorder files") + " unreadable";
  std::vector<std::string> states;
  if (exited_plainly != 0) states.push_back(std::to_string(exited_plainly) + " exited");
  for (const auto& [status, who] : by_status) {
    states.push_back(std::to_string(who.size()) + " exited with status " + std::to_string(status) + " (" +
                     processes_phrase(who) + ")");
  }
  if (!p.stopped.empty())
    states.push_back(std::to_string(p.stopped.size()) + " stopped by trainscope (" + processes_phrase(p.stopped) + ")");
  if (!p.crashed.empty())
    states.push_back(std::to_string(p.crashed.size()) + " crashed or killed (" + processes_phrase(p.crashed) + ")");
  if (p.running != 0) states.push_back(std::to_string(p.running) + " running");
  if (p.running_unverified != 0)
    states.push_back(std::to_string(p.running_unverified) + " on other hosts, state unknown");
  if (p.unknown_state != 0) states.push_back(std::to_string(p.unknown_state) + " in an unknown state");
  if (!states.empty()) line += ": " + join(states, ", ");
  std::vector<std::string> calls;
  if (!p.did_not_return.empty()) {
    calls.push_back((p.did_not_return.size() == 1 ? "a call never returned on " : "calls never returned on ") +
                    processes_phrase(p.did_not_return));
  }
  if (!p.pending.empty()) calls.push_back("calls still pending on " + processes_phrase(p.pending));
  if (calls.empty() && p.recorded != 0) calls.push_back("every call returned");
  if (!calls.empty()) line += "; " + join(calls, "; ");
  a->lines.push_back(line);

  // Then each way of ending that needs a look, and each recorder that could not be read: indented under it.
  std::vector<std::string> sub;
  for (const Group& g : groups) {
    std::vector<std::string> parts = {g.line.end};
    if (!g.line.call.empty()) {
      std::string call = g.line.call + " since " + recorder::utc_time_of_day(g.line.since_ns) + " UTC";
      if (!g.line.more.empty()) call += " " + g.line.more;
      parts.push_back(call);
    }
    if (!g.line.records.empty()) parts.push_back(g.line.records);
    sub.push_back("  " + processes_phrase(g.who) + ": " + join(parts, "; "));
  }
  for (const json& u : unreadable)
    sub.push_back("  " + u["file"].get<std::string>() + ": unreadable (" + u["error"].get<std::string>() + ")");
  if (sub.size() > kShownProcessLines + 1) {
    const size_t more = sub.size() - kShownProcessLines;
    sub.resize(kShownProcessLines);
    sub.push_back("  and " + std::to_string(more) + " more (trainscope report lists every process)");
  }
  for (std::string& s : sub) a->lines.push_back(std::move(s));
}

// How the job `trainscope run` started ended.
void job_line(const RunSummary& summary, bool only_requested_stops, Analysis* a) {
  if (!summary.job) {
    a->fields["job"] = nullptr;
    return;
  }
  const JobEnd& job = *summary.job;
  json field = job_end_json(job);
  field.erase("kind");
  a->fields["job"] = std::move(field);
  if (job.signaled) {
    a->nothing_wrong = false;
    a->lines.push_back("job: killed by " + signal_name(job.signal));
    return;
  }
  const int status = job.exit_status;
  std::string line = "job: exited with status " + std::to_string(status);
  constexpr int kVerdictStatus = 86;  // the engine's kVerdictExitCode and kStopExitCode
  constexpr int kStopStatus = 87;
  if (status == kVerdictStatus) {
    line += " (trainscope stopped it: a mismatch, desync or vanished rank)";
  } else if (status == kStopStatus) {
    line += " (trainscope stopped it: inf/nan abort or TRAINSCOPE_ABORT_AFTER_BATCH)";
  } else if (status > 128 && status <= 128 + 64) {
    line += " (128 + " + std::to_string(status - 128) + ": a process was killed by " + signal_name(status - 128) +
            ", as launchers and shells report it)";
  }
  if (status != 0 && !(status == kStopStatus && only_requested_stops)) a->nothing_wrong = false;
  a->lines.push_back(line);
}

// Reports that could not be written: the coordinator's (`trainscope run` heard it say so, or rank 0's recorder
// holds what the coordinator it hosted said), each rank's own, and the verdicts that came without their report.
void unwritten_line(const RunSummary& summary, Analysis* a) {
  std::vector<UnwrittenReport> items = summary.unwritten;
  std::vector<ProcessRef> missing_verdict_report;
  if (summary.processes) {
    for (const recorder::ProcessDetail& d : summary.processes->details) {
      if (d.stop_report_missing) missing_verdict_report.push_back(d.who);
      if (d.reports_unwritten == 0) continue;
      UnwrittenReport u;
      u.report = d.unwritten_report.empty() ? std::string("a report") : d.unwritten_report;
      u.cause = d.unwritten_cause;
      u.by = d.who.rank >= 0 ? "rank " + std::to_string(d.who.rank) : "pid " + std::to_string(d.who.pid);
      if (d.reports_unwritten > 1) u.by += ", and " + std::to_string(d.reports_unwritten - 1) + " more";
      items.push_back(std::move(u));
    }
  }
  // A verdict that came without its report, with nothing here to say why: the coordinator's log does.
  if (items.empty() && !missing_verdict_report.empty()) {
    items.push_back({"the report of the verdict that stopped " + processes_phrase(missing_verdict_report), "",
                     "the coordinator; its log says why"});
  }
  // The same file failing for several processes (rank 0's coordinator and trainscope run's) is named once.
  std::vector<UnwrittenReport> unique;
  for (UnwrittenReport& u : items) {
    auto it = std::find_if(unique.begin(), unique.end(),
                           [&](const UnwrittenReport& v) { return v.report == u.report && v.cause == u.cause; });
    if (it == unique.end()) unique.push_back(std::move(u));
  }
  json field = json::array();
  std::vector<std::string> parts;
  for (const UnwrittenReport& u : unique) {
    field.push_back({{"report", u.report}, {"cause", string_or_null(u.cause)}, {"by", u.by}});
    parts.push_back(u.report + ": " + (u.cause.empty() ? std::string("cause not known") : u.cause) + " (" + u.by + ")");
  }
  a->fields["unwritten"] = std::move(field);
  if (parts.empty()) return;
  a->nothing_wrong = false;
  a->lines.push_back("could not write " + join_capped(parts, "; "));
}

// "pid 812 (python3.11 on node7)"
std::string note_process(const NcclWithoutCalls& n) {
  std::string text = (n.rank >= 0 ? "rank " + std::to_string(n.rank) + " pid " : "pid ") + std::to_string(n.pid);
  const std::string exe = n.exe.empty() ? std::string() : fs::path(n.exe).filename().string();
  if (!exe.empty() || !n.host.empty())
    text += " (" + exe + (exe.empty() || n.host.empty() ? "" : " on ") + n.host + ")";
  return text;
}

// Processes that loaded NCCL and made no communicator. A rank's own process that did so hides its NCCL from us
// (linked statically): that run is not clean. A launcher (no rank) or a helper of a rank that did make one (a
// data-loader worker that imported the framework) is expected, and only listed. So is a process that never loaded
// the CUDA driver: it ran on the CPU (torch with gloo), where no NCCL runs, linked statically or not. And a job
// `trainscope run` started in which no process recorded a communicator at all is said to be so.
void nccl_calls_line(const RunSummary& summary, Analysis* a) {
  const bool none_recorded = summary.recorders_with_communicators == 0;
  std::vector<const NcclWithoutCalls*> unexplained, helpers, on_the_cpu;
  for (const NcclWithoutCalls& n : summary.nccl_without_calls) {
    const bool rank_used_nccl =
        n.rank >= 0 && std::find(summary.ranks_with_communicators.begin(), summary.ranks_with_communicators.end(),
                                 n.rank) != summary.ranks_with_communicators.end();
    if (rank_used_nccl || (n.rank < 0 && !none_recorded)) {
      helpers.push_back(&n);
    } else if (n.cuda_driver == false) {
      on_the_cpu.push_back(&n);
    } else {
      unexplained.push_back(&n);
    }
  }
  json notes = json::array();
  for (const NcclWithoutCalls& n : summary.nccl_without_calls) {
    const bool helper = std::find(helpers.begin(), helpers.end(), &n) != helpers.end();
    notes.push_back({{"file", n.file},
                     {"rank", rank_json(n.rank)},
                     {"pid", n.pid},
                     {"host", n.host},
                     {"exe", n.exe},
                     {"nccl", n.nccl},
                     {"calls", n.calls},
                     {"cuda_driver", n.cuda_driver ? json(*n.cuda_driver) : json(nullptr)},
                     {"helper", helper}});
  }
  const bool nothing_seen = summary.job_started && none_recorded && summary.nccl_without_calls.empty();
  a->fields["nccl_without_calls"] = {{"processes", std::move(notes)},
                                     {"unexplained", unexplained.size()},
                                     {"on_the_cpu", on_the_cpu.size()},
                                     {"no_nccl_call_in_job", nothing_seen || (none_recorded && !unexplained.empty())}};
  std::vector<std::string> parts;
  // A process whose recorder holds NCCL calls (ncclGetUniqueId) reached our hooks: its NCCL is not hidden from us, it
  // just made no communicator (a rank that ended, or failed, before creating one).
  std::vector<std::string> silent, ended_early;
  for (const NcclWithoutCalls* n : unexplained)
    (n->calls > 0 ? ended_early : silent)
        .push_back(note_process(*n) + (n->calls > 0 ? ", " + plural(n->calls, "call", "calls") : std::string()));
  if (!silent.empty()) {
    parts.push_back(plural(silent.size(), "process", "processes") +
                    " loaded libnccl but no NCCL call was seen: NCCL may be linked statically into the job (" +
                    join_capped(silent, ", ") + "; " + unexplained.front()->nccl + ")");
  }
  if (!ended_early.empty()) {
    parts.push_back(plural(ended_early.size(), "process", "processes") +
                    " called NCCL but made no communicator: it ended before creating one (" +
                    join_capped(ended_early, ", ") + ")");
  }
  if (!unexplained.empty()) a->nothing_wrong = false;
  if (nothing_seen) {
    parts.push_back(
        "no process of this job recorded an NCCL call: NCCL may be linked statically into the job "
        "(trainscope sees calls into a shared libnccl only), or the job never reached NCCL");
    a->nothing_wrong = false;
  }
  if (!on_the_cpu.empty()) {
    std::vector<std::string> who;
    for (const NcclWithoutCalls* n : on_the_cpu) who.push_back(note_process(*n));
    parts.push_back(plural(on_the_cpu.size(), "process", "processes") +
                    " loaded libnccl but never the CUDA driver, so ran no NCCL: a job on the CPU, whose collectives "
                    "(gloo, MPI) trainscope does not watch (" +
                    join_capped(who, ", ") + ")");
  }
  if (!helpers.empty()) {
    std::vector<std::string> who;
    for (const NcclWithoutCalls* n : helpers) who.push_back(note_process(*n));
    parts.push_back(plural(helpers.size(), "other process", "other processes") +
                    " loaded libnccl without calling it, as launchers and data-loader workers do (" +
                    join_capped(who, ", ") + ")");
  }
  if (!parts.empty()) a->lines.push_back("NCCL calls: " + join(parts, "; "));
}

void setup_line(const RunSummary& summary, Analysis* a) {
  if (!summary.manifest_exists || !summary.has_manifest) {
    a->fields["setup"] = nullptr;
    a->lines.push_back(summary.manifest_exists ? "setup: manifest.json could not be read" : "setup: no manifest.json");
    return;
  }
  const std::optional<uint64_t> world = uint_member(summary.manifest, "world_size");
  std::vector<std::string> warnings;
  const json* w = member(summary.manifest, "warnings");
  if (w != nullptr && w->is_array()) {
    for (const json& e : *w)
      if (e.is_string()) warnings.push_back(e.get<std::string>());
  }
  a->fields["setup"] = {{"world_size", optional_json(world)}, {"warnings", warnings}};
  std::string line = "setup: ";
  if (world) line += "world size " + std::to_string(*world) + (warnings.empty() ? ", " : "; ");
  line +=
      warnings.empty() ? "no warnings" : plural(warnings.size(), "warning", "warnings") + ": " + join(warnings, "; ");
  a->lines.push_back(line);
}

void traces_line(const RunSummary& summary, Analysis* a) {
  json items = json::array();
  std::vector<std::pair<std::string, std::vector<int32_t>>> groups;  // batches text -> ranks
  for (const TraceFile& t : summary.traces) {
    items.push_back({{"file", t.file},
                     {"rank", rank_json(t.rank)},
                     {"batches", t.batches_known ? json(t.batches) : json(nullptr)},
                     {"nonfinite_batches", t.batches_known ? json(t.nonfinite_batches) : json(nullptr)}});
    const std::string key = t.batches_known ? batches_phrase(t.batches) : std::string();
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == key; });
    if (it == groups.end()) it = groups.insert(groups.end(), {key, {}});
    it->second.push_back(t.rank);
  }
  a->fields["traces"] = std::move(items);
  if (groups.empty()) return;
  std::vector<std::string> parts;
  for (const auto& [batches, ranks] : groups)
    parts.push_back(batches.empty() ? ranks_phrase(ranks) : batches + " on " + ranks_phrase(ranks));
  // Detection is off in traced batches: an inf the trace shows is reported nowhere else, and is no clean run.
  std::vector<std::pair<std::string, std::vector<int32_t>>> nonfinite;  // batches text -> ranks
  for (const TraceFile& t : summary.traces) {
    if (t.nonfinite_batches.empty()) continue;
    const std::string key = "traced " + batches_phrase(t.nonfinite_batches);
    auto it = std::find_if(nonfinite.begin(), nonfinite.end(), [&](const auto& g) { return g.first == key; });
    if (it == nonfinite.end()) it = nonfinite.insert(nonfinite.end(), {key, {}});
    it->second.push_back(t.rank);
  }
  std::vector<std::string> seen;
  for (const auto& [batches, ranks] : nonfinite) seen.push_back(batches + " on " + ranks_phrase(ranks));
  std::string line = "traces: " + join_capped(parts, "; ");
  if (!seen.empty()) {
    line += "; inf/nan in " + join_capped(seen, "; ") + " (detection is off in traced batches)";
    a->nothing_wrong = false;
  }
  a->lines.push_back(line);
}

void unreadable_line(const RunSummary& summary, Analysis* a) {
  json items = json::array();
  std::vector<std::string> parts;
  for (const UnreadableFile& u : summary.unreadable) {
    items.push_back({{"file", u.file}, {"error", u.error}});
    parts.push_back(u.file + " (" + u.error + ")");
  }
  a->fields["unreadable"] = std::move(items);
  if (parts.empty()) return;
  a->nothing_wrong = false;
  a->lines.push_back("could not read: " + join(parts, "; "));
}

// A run read from several folders: which folder held which ranks, so that a wrong or stale copy shows.
void folders_line(const RunSummary& summary, Analysis* a) {
  if (summary.folders.empty()) {
    a->fields["folders"] = nullptr;
    return;
  }
  json items = json::array();
  std::vector<std::string> parts;
  for (const RunSummary::Folder& f : summary.folders) {
    std::vector<std::string> held;
    if (!f.ranks.empty()) held.push_back(ranks_phrase(f.ranks));
    if (f.recorders > f.ranks.size())
      held.push_back(plural(f.recorders - f.ranks.size(), "recorder", "recorders") + " without a launcher rank");
    if (f.reports > 0) held.push_back(plural(f.reports, "report", "reports"));
    if (held.empty()) held.push_back("nothing of the run");
    parts.push_back(f.path + " (" + join(held, ", ") + ")");
    items.push_back({{"path", f.path},
                     {"ranks", f.ranks},
                     {"recorders", f.recorders},
                     {"reports", f.reports},
                     {"run_ids", f.run_ids}});
  }
  std::set<std::string> run_ids;
  for (const RunSummary::Folder& f : summary.folders) run_ids.insert(f.run_ids.begin(), f.run_ids.end());
  std::string line =
      "run folders: " + std::to_string(summary.folders.size()) + " read as one run: " + join(parts, "; ");
  // Copies of one run share its run id: folders of different runs read together would mislead every line above.
  if (run_ids.size() > 1) {
    line += "; their recorders name different runs (" +
            join(std::vector<std::string>(run_ids.begin(), run_ids.end()), ", ") + "): are these copies of one run?";
  }
  a->fields["folders"] = std::move(items);
  a->lines.push_back(line);
}

// Ranks of the launcher's world with no flight recorder among the folders read: on a job of several hosts, a host
// whose copy of the run folder is missing. Named with their hosts where the manifest knows them.
void missing_recorders_line(const RunSummary& summary, Analysis* a) {
  if (summary.missing_ranks.empty()) {
    a->fields["missing_recorders"] = nullptr;
    return;
  }
  std::map<std::string, std::vector<int32_t>> by_host;
  std::set<int32_t> placed;
  const json* ranks = summary.has_manifest ? member(summary.manifest, "ranks") : nullptr;
  if (ranks != nullptr && ranks->is_array()) {
    const std::set<int32_t> missing(summary.missing_ranks.begin(), summary.missing_ranks.end());
    for (const json& r : *ranks) {
      const std::optional<uint64_t> rank = uint_member(r, "launcher_rank");
      const std::string host = string_member(r, "host");
      if (!rank || host.empty() || !missing.contains(static_cast<int32_t>(*rank))) continue;
      if (placed.insert(static_cast<int32_t>(*rank)).second) by_host[host].push_back(static_cast<int32_t>(*rank));
    }
  }
  std::vector<std::string> hosts;
  json hosts_json = json::object();
  for (const auto& [host, host_ranks] : by_host) {
    hosts.push_back(ranks_phrase(host_ranks) + " on " + host);
    hosts_json[host] = host_ranks;
  }
  a->fields["missing_recorders"] = {
      {"world_size", summary.launcher_world}, {"ranks", summary.missing_ranks}, {"hosts", hosts_json}};
  const bool several = summary.folders.size() > 1;
  // An unreadable recorder may be one of theirs: its rank cannot be told, so only a readable one is said missing.
  const size_t unreadable = summary.processes ? summary.processes->unreadable : 0;
  std::string line = "missing recorders: " + ranks_phrase(summary.missing_ranks) + " of a world of " +
                     std::to_string(summary.launcher_world) + " left no " + (unreadable > 0 ? "readable " : "") +
                     "flight recorder in " + (several ? "the folders read" : "this folder");
  if (!hosts.empty()) line += " (" + join(hosts, "; ") + ", by the manifest)";
  if (unreadable > 0) line += " (" + plural(unreadable, "recorder file", "recorder files") + " unreadable)";
  line +=
      ": on a job of several hosts, copy each host's run folder back and read them together: trainscope report "
      "DIR1 DIR2 ...";
  a->lines.push_back(line);
}

// Every stop was one the user asked for (TRAINSCOPE_ABORT_AFTER_BATCH), and there was one: a job status of 87 is
// then what was asked for.
bool only_requested_stops(const RunSummary& summary) {
  bool any = false;
  for (const ReportFiles* r : reports_of(summary, ReportKind::kStop)) {
    if (!r->has_json || string_member(r->json, "reason") != "abort_after_batch") return false;
    any = true;
  }
  if (summary.processes) {
    for (const recorder::ProcessDetail& d : summary.processes->details) {
      if (d.state != "stopped") continue;
      if (!requested_stop(d)) return false;
      any = true;
    }
  }
  return any;
}

// "rank 3: first CUDA error: <what, when, after which kernel>", one line per process that had one: from its recorder,
// else (its recorder gone or unreadable) from its cuda-error report's JSON "summary" or its text's first line.
void cuda_error_lines(const RunSummary& summary, Analysis* a) {
  std::vector<std::pair<int32_t, std::string>> errors;  // rank, what
  json items = json::array();
  std::set<int32_t> ranks_said;
  if (summary.processes) {
    for (const recorder::ProcessDetail& d : summary.processes->details) {
      if (d.first_cuda_error.empty()) continue;
      errors.emplace_back(d.who.rank, d.first_cuda_error);
      ranks_said.insert(d.who.rank);
      items.push_back({{"rank", rank_json(d.who.rank)},
                       {"pid", d.who.pid},
                       {"file", nullptr},
                       {"cuda_errors", d.cuda_errors},
                       {"first", d.first_cuda_error}});
    }
  }
  for (const ReportFiles* r : reports_of(summary, ReportKind::kCudaError)) {
    if (r->rank >= 0 && ranks_said.count(r->rank) != 0) continue;
    std::string what = r->has_json ? string_member(r->json, "summary") : std::string();
    if (what.empty() && r->has_text) {
      const std::vector<std::string> lines = non_empty_lines(r->text);
      if (!lines.empty()) what = lines.front();
    }
    if (what.empty()) what = "see " + source_file(*r);
    errors.emplace_back(r->rank, what);
    items.push_back(
        {{"rank", rank_json(r->rank)},
         {"pid", r->has_json ? json(int_member(r->json, "pid").value_or(0)) : json(nullptr)},
         {"file", source_file(*r)},
         {"cuda_errors", r->has_json ? json(uint_member(r->json, "cuda_errors").value_or(0)) : json(nullptr)},
         {"first", what}});
  }
  a->fields["cuda_errors"] = std::move(items);
  if (errors.empty()) return;
  a->nothing_wrong = false;
  // By rank, unknown ranks last.
  std::stable_sort(errors.begin(), errors.end(), [](const auto& x, const auto& y) {
    return std::make_pair(x.first < 0, x.first) < std::make_pair(y.first < 0, y.first);
  });
  a->lines.push_back("first CUDA errors: " + std::to_string(errors.size()));
  size_t shown = 0;
  for (const auto& [rank, what] : errors) {
    if (shown++ == kShownProcessLines) {
      a->lines.push_back("  and " + std::to_string(errors.size() - kShownProcessLines) + " more");
      break;
    }
    a->lines.push_back("  " + rank_word(rank) + ": first CUDA error: " + what);
  }
}

// What each process's launch collector could do, processes alike on one part: "launches: callbacks and kernel
// completion on ranks 0–3; unavailable on rank 4: CUPTI is in use by another tool". Only when one of them ran or said
// why it could not.
void launches_line(const RunSummary& summary, Analysis* a) {
  if (!summary.processes) {
    a->fields["launches"] = json::array();
    return;
  }
  std::vector<std::pair<std::string, std::vector<ProcessRef>>> modes;  // text -> processes, in order of appearance
  bool any = false;
  json items = json::array();
  for (const recorder::ProcessDetail& d : summary.processes->details) {
    any |= d.launch_mode != static_cast<uint32_t>(recorder::LaunchMode::kNone) || !d.launch_note.empty();
    const std::string text = launch_mode_text(d.launch_mode, d.launch_note);
    auto it = std::find_if(modes.begin(), modes.end(), [&](const auto& m) { return m.first == text; });
    if (it == modes.end()) it = modes.insert(modes.end(), {text, {}});
    it->second.push_back(d.who);
    items.push_back({{"rank", rank_json(d.who.rank)},
                     {"pid", d.who.pid},
                     {"mode", recorder::launch_mode_name(d.launch_mode)},
                     {"note", string_or_null(d.launch_note)}});
  }
  a->fields["launches"] = std::move(items);
  if (!any) return;
  std::vector<std::string> parts;
  for (const auto& [text, who] : modes) {
    // "unavailable: <why>" reads "unavailable on rank 4: <why>".
    const size_t colon = text.find(": ");
    parts.push_back(colon == std::string::npos
                        ? text + " on " + processes_phrase(who)
                        : text.substr(0, colon) + " on " + processes_phrase(who) + text.substr(colon));
  }
  a->lines.push_back("launches: " + join_capped(parts, "; "));
}

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
    a.lines.insert(a.lines.begin(), "nothing went wrong: no inf/nan, mismatch, desync, vanished rank or crash found");
  }
  return a;
}

// ---- Directory scan ----------------------------------------------------------------------------------------------

constexpr std::string_view kNoCallsSuffix = ".no-nccl-calls.json";  // shim/nccl_presence.h writes these

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
    if (r->rank < 0) r->rank = rank_of_name(r->base_name, info.prefix);
    if (r->rank < 0 && info.pid_prefix != nullptr) r->pid = std::max(0, rank_of_name(r->base_name, info.pid_prefix));
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

}  // namespace

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
  if (extension == ".tsrec" || extension == ".log") return true;  // recorders and the ranks' logs
  if (name == "manifest.json" || name == kJobEndFile || name.ends_with(kNoCallsSuffix)) return true;
  if (base.starts_with("trace-rank") && (extension == ".txt" || extension == ".jsonl")) return true;
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
    if (name == "manifest.json") {
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
    if ((base.starts_with("trace-rank") || base.starts_with("trace-pid")) &&
        (extension == ".txt" || extension == ".jsonl")) {
      const int32_t rank = rank_of_name(base, "trace-rank");
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
    if (read_file(root / "manifest.json", kMaxReportBytes, &raw, &manifest_error) &&
        parse_json(raw, &out->manifest, &manifest_error)) {
      if (out->manifest.is_object()) {
        out->has_manifest = true;
      } else {
        manifest_error = "not a JSON object";
      }
    }
    if (!out->has_manifest) {
      out->manifest = nullptr;
      out->unreadable.push_back({"manifest.json", manifest_error});
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
