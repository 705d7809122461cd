// Reads a run directory's report files into a RunSummary and renders the summary as text and JSON.
#include "reports/run_summary.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <string_view>
#include <tuple>
#include <utility>

#include "reports/frame_report.h"

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
  const char* prefix;     // of the base name
  const char* name;       // report_kind_name
  const char* json_kind;  // the JSON's "kind"
  const char* rank_key;   // the JSON key holding the rank of a per-rank report; nullptr: not per rank
};

constexpr KindInfo kKinds[] = {
    {ReportKind::kOrigin, "origin", "origin", "nonfinite_origin", nullptr},
    {ReportKind::kMismatch, "mismatch-", "mismatch", "mismatch", nullptr},
    {ReportKind::kDesync, "desync-", "desync", "desync", nullptr},
    {ReportKind::kVanished, "vanished-rank", "vanished", "vanished", "process"},
    {ReportKind::kNonfinite, "nonfinite-rank", "nonfinite", "inf_nan_detected", "rank"},
    {ReportKind::kOverflowStreak, "overflow-streak-rank", "overflow_streak", "overflow_streak", "rank"},
    {ReportKind::kNearOverflow, "near-overflow-rank", "near_overflow", "near_overflow", "rank"},
    {ReportKind::kStop, "stop-rank", "stop", "stop", "rank"},
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
    if (info.kind != ReportKind::kOrigin && base.starts_with(info.prefix) && base.size() > std::strlen(info.prefix))
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

// ---- Careful JSON access: a value of the wrong type reads as absent, never throws ----------------------------------

const json* member(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  const auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

std::optional<uint64_t> uint_member(const json& j, const char* key) {
  const json* v = member(j, key);
  if (v == nullptr) return std::nullopt;
  if (v->is_number_unsigned()) return v->get<uint64_t>();
  if (v->is_number_integer() && v->get<int64_t>() >= 0) return static_cast<uint64_t>(v->get<int64_t>());
  return std::nullopt;
}

std::optional<int64_t> int_member(const json& j, const char* key) {
  const json* v = member(j, key);
  if (v == nullptr || !v->is_number_integer()) return std::nullopt;
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  return v->get<int64_t>();
}

// A rank: a whole number 0..INT32_MAX, else -1.
int32_t rank_member(const json& j, const char* key) {
  const std::optional<int64_t> v = int_member(j, key);
  return v && *v >= 0 && *v <= std::numeric_limits<int32_t>::max() ? static_cast<int32_t>(*v) : -1;
}

std::optional<double> number_member(const json& j, const char* key) {
  const json* v = member(j, key);
  if (v == nullptr || !v->is_number()) return std::nullopt;
  return v->get<double>();
}

std::string string_member(const json& j, const char* key) {
  const json* v = member(j, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

bool bool_member(const json& j, const char* key, bool fallback) {
  const json* v = member(j, key);
  return v != nullptr && v->is_boolean() ? v->get<bool>() : fallback;
}

// The elements of an array that are objects; empty when it is not an array.
std::vector<const json*> objects_in(const json& j, const char* key) {
  std::vector<const json*> out;
  const json* v = member(j, key);
  if (v == nullptr || !v->is_array()) return out;
  for (const json& e : *v)
    if (e.is_object()) out.push_back(&e);
  return out;
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

// {0,1,2,5} -> "ranks 0–2 and 5"; {3} -> "rank 3"; unknown ranks (-1) -> "an unknown rank".
std::string ranks_phrase(std::vector<int32_t> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  const bool unknown = !ranks.empty() && ranks.front() < 0;
  if (unknown) ranks.erase(ranks.begin());
  std::string out;
  if (!ranks.empty()) out = (ranks.size() == 1 ? "rank " : "ranks ") + format_rank_list(ranks);
  if (unknown) out += (out.empty() ? "" : " and ") + std::string("an unknown rank");
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
  } else if (any_nonfinite) {
    why = "not reported (no origin.txt: it needs the coordinator)";
  }
  a->lines.push_back("inf/nan origin: " + why);
  return false;
}

struct FirstNonfinite {
  int32_t rank = -1;
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

void first_nonfinite_line(const RunSummary& summary, bool origin_known, Analysis* a) {
  std::vector<FirstNonfinite> firsts;
  for (const ReportFiles* r : reports_of(summary, ReportKind::kNonfinite)) {
    FirstNonfinite f;
    f.rank = r->rank;
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
  std::vector<std::pair<std::optional<uint64_t>, std::vector<int32_t>>> groups;
  for (const FirstNonfinite& f : firsts) {
    if (groups.empty() || groups.back().first != f.batch) groups.emplace_back(f.batch, std::vector<int32_t>{});
    groups.back().second.push_back(f.rank);
  }
  std::vector<std::string> parts;
  for (const auto& [batch, ranks] : groups)
    parts.push_back((batch ? "batch " + std::to_string(*batch) : std::string("batch ?")) + " on " +
                    ranks_phrase(ranks));
  std::string line = "first inf/nan: " + join_capped(parts, ", ");
  const FirstNonfinite& earliest = firsts.front();
  if (!origin_known && !earliest.frame.empty()) {
    line += "; " + (earliest.rank >= 0 ? "rank " + std::to_string(earliest.rank) : std::string("rank ?")) +
            " saw it in " + earliest.frame + (earliest.label.empty() ? "" : " " + earliest.label);
  }
  a->lines.push_back(line);
}

// "mismatch-3f2a9c-24", "mismatch-p2p-3f2a9c-2", "desync-3f2a9c-813-2" -> communicator and call number.
void parse_call_name(std::string_view base, std::string_view prefix, std::string* comm, std::optional<uint64_t>* seq) {
  base.remove_prefix(prefix.size());
  const size_t dash = base.find('-');
  if (dash == std::string_view::npos) return;
  *comm = std::string(base.substr(0, dash));
  *seq = leading_number(base.substr(dash + 1));
}

void mismatch_line(const RunSummary& summary, Analysis* a) {
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
  a->fields["mismatches"] = std::move(items);
  if (n == 0) {
    a->lines.push_back("mismatches: none");
    return;
  }
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
    std::optional<uint64_t> repeat;
    if (r->has_json) {
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
    items.push_back({{"file", source_file(*r)},
                     {"communicator", string_or_null(comm)},
                     {"seq", optional_json(seq)},
                     {"operation", string_or_null(operation)},
                     {"point_to_point", p2p},
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
    first = "communicator " + short_comm(comm) + (p2p ? " send #" : " call #") + (seq ? std::to_string(*seq) : "?");
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
  a->fields["desyncs"] = std::move(items);
  if (calls.empty()) {
    a->lines.push_back("desyncs: none");
    return;
  }
  a->nothing_wrong = false;
  a->lines.push_back("desyncs: " + std::to_string(calls.size()) + " (" + (calls.size() > 1 ? "first: " : "") + first +
                     ")");
}

void vanished_line(const RunSummary& summary, Analysis* a) {
  json items = json::array();
  std::vector<std::string> parts;
  for (const ReportFiles* r : reports_of(summary, ReportKind::kVanished)) {
    std::string who = r->rank >= 0 ? "rank " + std::to_string(r->rank) : std::string("rank ?");
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
  a->fields["vanished"] = std::move(items);
  if (parts.empty()) {
    a->lines.push_back("vanished ranks: none");
    return;
  }
  a->nothing_wrong = false;
  a->lines.push_back("vanished ranks: " + join_capped(parts, "; "));
}

void streak_line(const RunSummary& summary, Analysis* a) {
  json items = json::array();
  std::vector<std::string> parts;
  for (const ReportFiles* r : reports_of(summary, ReportKind::kOverflowStreak)) {
    const std::string who = r->rank >= 0 ? "rank " + std::to_string(r->rank) : std::string("rank ?");
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
  if (!w.text.empty()) return (name_rank ? "rank " + std::to_string(w.rank) + ": " : "") + w.text;
  std::vector<std::string> parts;
  if (name_rank) parts.push_back(w.rank >= 0 ? "rank " + std::to_string(w.rank) : std::string("rank ?"));
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
  std::vector<int32_t> ranks;
  for (const NearWarning& w : warnings) ranks.push_back(w.rank);
  const auto first = std::min_element(warnings.begin(), warnings.end(), [](const NearWarning& x, const NearWarning& y) {
    return std::make_tuple(x.batch.value_or(kUnknownTime), x.rank < 0, x.rank, x.order) <
           std::make_tuple(y.batch.value_or(kUnknownTime), y.rank < 0, y.rank, y.order);
  });
  std::sort(ranks.begin(), ranks.end());
  const bool one_rank = ranks.front() == ranks.back();
  std::string line = "near overflow: " + plural(warnings.size(), "warning", "warnings") + " on " + ranks_phrase(ranks);
  const std::string detail = near_text(*first, !one_rank);
  if (!detail.empty()) line += " (" + std::string(warnings.size() > 1 ? "first: " : "") + detail + ")";
  a->lines.push_back(line);
}

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
  a->fields["stops"] = std::move(items);
  if (groups.empty()) {
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
  a->lines.push_back("stopped: " + join_capped(parts, "; "));
}

json refs_json(const std::vector<ProcessRef>& refs) {
  json out = json::array();
  for (const ProcessRef& p : refs) out.push_back({{"rank", rank_json(p.rank)}, {"pid", p.pid}});
  return out;
}

void processes_line(const RunSummary& summary, Analysis* a) {
  if (!summary.processes) {
    a->fields["processes"] = nullptr;
    a->lines.push_back("processes: no flight recorder (*.tsrec) in the run directory");
    return;
  }
  const ProcessOverview& p = *summary.processes;
  a->fields["processes"] = {{"recorded", p.recorded},
                            {"unreadable", p.unreadable},
                            {"exited", p.exited},
                            {"running", p.running},
                            {"running_unverified", p.running_unverified},
                            {"unknown_state", p.unknown_state},
                            {"crashed_or_killed", refs_json(p.crashed)},
                            {"did_not_return", refs_json(p.did_not_return)},
                            {"pending", refs_json(p.pending)}};
  if (!p.crashed.empty() || !p.did_not_return.empty() || p.unreadable != 0) a->nothing_wrong = false;
  std::string line = "processes: " + std::to_string(p.recorded) + " recorded";
  if (p.unreadable != 0) line += ", " + plural(p.unreadable, "recorder file", "recorder files") + " unreadable";
  std::vector<std::string> states;
  if (p.exited != 0) states.push_back(std::to_string(p.exited) + " exited");
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
// data-loader worker that imported the framework) is expected, and only listed. And a job `trainscope run` started
// in which no process recorded a communicator at all is said to be so.
void nccl_calls_line(const RunSummary& summary, Analysis* a) {
  const bool none_recorded = summary.recorders_with_communicators == 0;
  std::vector<const NcclWithoutCalls*> unexplained, helpers;
  for (const NcclWithoutCalls& n : summary.nccl_without_calls) {
    const bool rank_used_nccl =
        n.rank >= 0 && std::find(summary.ranks_with_communicators.begin(), summary.ranks_with_communicators.end(),
                                 n.rank) != summary.ranks_with_communicators.end();
    const bool helper = rank_used_nccl || (n.rank < 0 && !none_recorded);
    (helper ? helpers : unexplained).push_back(&n);
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
                     {"helper", helper}});
  }
  const bool nothing_seen = summary.job_started && none_recorded && summary.nccl_without_calls.empty();
  a->fields["nccl_without_calls"] = {{"processes", std::move(notes)},
                                     {"unexplained", unexplained.size()},
                                     {"no_nccl_call_in_job", nothing_seen || (none_recorded && !unexplained.empty())}};
  std::vector<std::string> parts;
  if (!unexplained.empty()) {
    std::vector<std::string> who;
    for (const NcclWithoutCalls* n : unexplained) who.push_back(note_process(*n));
    parts.push_back(plural(unexplained.size(), "process", "processes") +
                    " loaded libnccl but no NCCL call was seen: NCCL may be linked statically into the job (" +
                    join_capped(who, ", ") + "; " + unexplained.front()->nccl + ")");
    a->nothing_wrong = false;
  }
  if (nothing_seen) {
    parts.push_back(
        "no process of this job recorded an NCCL call: NCCL may be linked statically into the job "
        "(trainscope sees calls into a shared libnccl only), or the job never reached NCCL");
    a->nothing_wrong = false;
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
                     {"batches", t.batches_known ? json(t.batches) : json(nullptr)}});
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
  a->lines.push_back("traces: " + join_capped(parts, "; "));
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

Analysis analyse(const RunSummary& summary) {
  Analysis a;
  const bool any_nonfinite = !reports_of(summary, ReportKind::kNonfinite).empty();
  const bool origin_known = origin_line(summary, any_nonfinite, &a);
  first_nonfinite_line(summary, origin_known, &a);
  mismatch_line(summary, &a);
  desync_line(summary, &a);
  vanished_line(summary, &a);
  streak_line(summary, &a);
  near_overflow_line(summary, &a);
  stop_line(summary, &a);
  processes_line(summary, &a);
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
  out->nccl_without_calls.push_back(std::move(note));
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
  for (size_t at = text.find(kMarker); at != std::string::npos; at = text.find(kMarker, at + 1)) {
    const std::optional<uint64_t> n = leading_number(std::string_view(text).substr(at + kMarker.size()));
    if (n && std::find(trace->batches.begin(), trace->batches.end(), *n) == trace->batches.end())
      trace->batches.push_back(*n);
  }
}

}  // namespace

const char* report_kind_name(ReportKind kind) { return info_of(kind).name; }

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
    if (name.ends_with(kNoCallsSuffix)) {
      read_no_calls_note(root_of(dir), name, out);
      continue;
    }
    if (base.starts_with("trace-rank") && (extension == ".txt" || extension == ".jsonl")) {
      const int32_t rank = rank_of_name(base, "trace-rank");
      TraceFile& trace = traces[rank];
      trace.rank = rank;
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
    if (r.has_text) {
      out += "\n=== " + r.text_file() + " ===\n" + r.text;
      if (r.text.back() != '\n') out += '\n';
    } else if (r.has_json) {
      const std::string text = string_member(r.json, "text");
      out += "\n=== " + r.json_file() + " (" + r.text_file() + " " + (r.text_exists ? "unreadable" : "missing") +
             ") ===\n";
      out += text.empty() ? r.json.dump(2, ' ', false, json::error_handler_t::replace) + "\n" : text;
      if (!out.empty() && out.back() != '\n') out += '\n';
    } else {
      out += "\n=== " + r.base_name + ": no readable file (see \"could not read\" in the summary) ===\n";
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
