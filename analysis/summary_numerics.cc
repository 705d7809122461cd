// The summary's inf/nan lines: origin, first inf/nan, skipped steps, overflow streaks, near overflow; and the
// verdicts the recorders know of.
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
                     " (the loss scaler found inf/nan in the gradients and skipped the optimizer step: how loss "
                     "scaling works, not a failure)");
}

// "mismatch-3f2a9c-24", "mismatch-p2p-3f2a9c-2", "desync-3f2a9c-813-2" -> communicator and call number.
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

}  // namespace trainscope::reports::summary_detail
