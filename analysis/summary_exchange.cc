// The summary's cross-rank lines: which checks ran, mismatches, desyncs, vanished ranks.
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

void parse_call_name(std::string_view base, std::string_view prefix, std::string* comm, std::optional<uint64_t>* seq) {
  base.remove_prefix(prefix.size());
  const size_t dash = base.find('-');
  if (dash == std::string_view::npos) return;
  *comm = std::string(base.substr(0, dash));
  *seq = leading_number(base.substr(dash + 1));
}

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
    const std::string prefix = run_files::call_prefix(info_of(ReportKind::kMismatch));
    const std::string p2p_prefix = prefix + run_files::kPointToPoint;
    bool p2p = std::string_view(r->base_name).starts_with(p2p_prefix);
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
      parse_call_name(r->base_name, p2p ? p2p_prefix : prefix, &comm, &seq);
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
      parse_call_name(r->base_name, run_files::call_prefix(info_of(ReportKind::kDesync)), &comm, &seq);
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

}  // namespace trainscope::reports::summary_detail
