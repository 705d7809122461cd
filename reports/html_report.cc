// The self-contained HTML page of a run: static HTML for the text, inline JavaScript for the timeline and the plots.
#include "reports/html_report.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "reports/flight_record_format.h"
#include "reports/json_members.h"
#include "reports/printable.h"
#include "reports/private_files.h"
#include "reports/recorder_report.h"
#include "reports/run_timeline.h"

namespace trainscope::reports {
namespace {

using nlohmann::json;

// ---- Reading the per-batch traces --------------------------------------------------------------------------------

// The first `limit` bytes of a regular file (never blocking on a FIFO, never through a link). False, with `error`,
// when it cannot be read; `truncated` when it is longer.
bool read_prefix(const std::string& path, size_t limit, std::string* out, bool* truncated, std::string* error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    *error = std::strerror(errno);
    return false;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    *error = "not a regular file";
    ::close(fd);
    return false;
  }
  out->clear();
  *truncated = false;
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *error = std::strerror(errno);
      ::close(fd);
      return false;
    }
    if (n == 0) break;
    const size_t room = limit - out->size();
    out->append(buffer, std::min(room, static_cast<size_t>(n)));
    if (static_cast<size_t>(n) > room) {
      *truncated = true;
      break;
    }
  }
  ::close(fd);
  return true;
}

// One point's value: a finite abs max, or "inf" / "nan".
struct Value {
  double abs_max = 0;
  const char* nonfinite = nullptr;  // "inf" / "nan"
  json to_json() const { return nonfinite != nullptr ? json(nonfinite) : json(abs_max); }
};

// A text row "%8.2e %8.2e <label>": its label and value; false for "None", "not a tensor" and "empty" rows.
bool parse_text_row(const std::string& row, std::string* label, Value* value) {
  size_t pos = 0;
  double numbers[2] = {0, 0};
  for (double& number : numbers) {
    while (pos < row.size() && row[pos] == ' ') ++pos;
    const size_t end = row.find(' ', pos);
    if (end == std::string::npos) return false;
    const std::string token = row.substr(pos, end - pos);
    char* parsed_end = nullptr;
    number = std::strtod(token.c_str(), &parsed_end);
    if (token.empty() || parsed_end != token.c_str() + token.size()) return false;
    pos = end + 1;
  }
  *label = row.substr(pos);
  while (!label->empty() && (label->back() == '\n' || label->back() == '\r' || label->back() == ' ')) label->pop_back();
  if (std::isnan(numbers[0]) || std::isnan(numbers[1])) {
    value->nonfinite = "nan";
  } else if (std::isinf(numbers[0]) || std::isinf(numbers[1])) {
    value->nonfinite = "inf";
  } else {
    value->abs_max = numbers[1];
  }
  return true;
}

// A JSON row of frame_json(): its label and value; false for anything but a tensor row with an abs max.
bool parse_stats_row(const json& row, std::string* label, Value* value) {
  if (string_member(row, "kind") != "tensor") return false;
  const auto l = row.find("label");
  const auto max = row.find("abs_max");
  if (l == row.end() || !l->is_string() || max == row.end()) return false;
  *label = l->get<std::string>();
  auto count = [&](const char* key) {
    const auto it = row.find(key);
    return it != row.end() && it->is_number_unsigned() ? it->get<uint64_t>() : uint64_t{0};
  };
  if (max->is_number()) {
    value->abs_max = max->get<double>();
  } else if (max->is_string()) {
    value->nonfinite = *max == "nan" ? "nan" : "inf";
  } else {
    return false;
  }
  if (count("nan_count") > 0) {
    value->nonfinite = "nan";
  } else if (count("pos_inf_count") + count("neg_inf_count") > 0 && value->nonfinite == nullptr) {
    value->nonfinite = "inf";
  }
  return true;
}

struct Series {
  std::string label;
  std::vector<std::pair<double, Value>> points;
  bool nonfinite = false;
  double max = 0;
};

// A batch number or frame place as an integer when it is one.
json x_json(double x) { return x >= 0 && x == std::floor(x) && x < 9e15 ? json(static_cast<uint64_t>(x)) : json(x); }

// Series in first-seen order, capped: those with inf/nan first, then the largest abs max.
json plot_json(int32_t rank, const std::string& source, const char* x_label, std::vector<Series> series,
               const std::set<double>& nonfinite_x, std::string note) {
  const size_t total = series.size();
  if (series.size() > kMaxPlotSeries) {
    std::vector<size_t> order(series.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return std::make_tuple(!series[a].nonfinite, -series[a].max) <
             std::make_tuple(!series[b].nonfinite, -series[b].max);
    });
    order.resize(kMaxPlotSeries);
    std::sort(order.begin(), order.end());
    std::vector<Series> kept;
    for (size_t i : order) kept.push_back(std::move(series[i]));
    series = std::move(kept);
    note += std::string(note.empty() ? "" : "; ") + std::to_string(total - kMaxPlotSeries) +
            " more series not shown (those with inf/nan first, then the largest are)";
  }
  json out = {{"rank", rank},          {"source", source},
              {"x_label", x_label},    {"series", json::array()},
              {"series_total", total}, {"nonfinite_x", json::array()},
              {"note", note}};
  for (const Series& s : series) {
    json points = json::array();
    for (const auto& [x, value] : s.points) points.push_back({x_json(x), value.to_json()});
    out["series"].push_back({{"label", s.label}, {"points", std::move(points)}, {"nonfinite", s.nonfinite}});
  }
  for (double x : nonfinite_x) out["nonfinite_x"].push_back(x_json(x));
  return out;
}

void add_point(std::vector<Series>* series, std::map<std::string, size_t>* index, const std::string& key,
               const std::string& label, double x, const Value& value) {
  auto [it, added] = index->emplace(key, series->size());
  if (added) series->push_back(Series{label, {}, false, 0});
  Series& s = (*series)[it->second];
  s.points.emplace_back(x, value);
  if (value.nonfinite != nullptr) {
    s.nonfinite = true;
  } else {
    s.max = std::max(s.max, value.abs_max);
  }
}

// trace-rank<R>.jsonl: a line per frame {batch_number, name, kind, rows: [text rows], stats?: [JSON rows], launch?}.
std::optional<json> trace_plot(const std::string& dir, const TraceFile& trace) {
  std::string base = trace.file.substr(0, trace.file.rfind('.'));
  const std::string file = base + ".jsonl";
  std::string text;
  bool truncated = false;
  std::string error;
  if (!read_prefix(dir + "/" + file, kMaxTraceBytesRead, &text, &truncated, &error)) {
    if (error == std::strerror(ENOENT)) return std::nullopt;  // a trace in text only
    return plot_json(trace.rank, file, "batch", {}, {}, "cannot read " + file + ": " + error);
  }
  std::vector<Series> series;
  std::map<std::string, size_t> index;
  std::map<uint64_t, size_t> frames_in_batch;
  std::set<double> nonfinite_x;
  size_t bad_lines = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    if (line.empty()) continue;
    const json frame = json::parse(line.begin(), line.end(), nullptr, false);
    if (!frame.is_object() || !frame.contains("batch_number") || !frame["batch_number"].is_number_unsigned()) {
      ++bad_lines;
      continue;
    }
    const uint64_t batch = frame["batch_number"].get<uint64_t>();
    const size_t position = ++frames_in_batch[batch];
    const std::string kind = string_member(frame, "kind");
    const std::string prefix = "#" + std::to_string(position) + " " + kind + " ";
    const auto stats = frame.find("stats");
    const auto rows = frame.find("rows");
    auto add = [&](const std::string& label, const Value& value) {
      add_point(&series, &index, prefix + label, prefix + label, static_cast<double>(batch), value);
      if (value.nonfinite != nullptr) nonfinite_x.insert(static_cast<double>(batch));
    };
    std::string label;
    Value value;
    if (stats != frame.end() && stats->is_array()) {
      for (const json& row : *stats) {
        value = Value{};
        if (parse_stats_row(row, &label, &value)) add(label, value);
      }
    } else if (rows != frame.end() && rows->is_array()) {
      for (const json& row : *rows) {
        value = Value{};
        if (row.is_string() && parse_text_row(row.get<std::string>(), &label, &value)) add(label, value);
      }
    }
  }
  std::string note;
  if (truncated) note = "only the first " + std::to_string(kMaxTraceBytesRead >> 20) + " MiB of the file are plotted";
  if (bad_lines > 0)
    note += std::string(note.empty() ? "" : "; ") + std::to_string(bad_lines) + " unreadable line(s) skipped";
  return plot_json(trace.rank, file, "batch", std::move(series), nonfinite_x, note);
}

// nonfinite-rank<R>.json: the frames before the first inf/nan; x is the frame's place in that window.
std::optional<json> detection_plot(const ReportFiles& report) {
  if (!report.has_json) return std::nullopt;
  const auto frames = report.json.find("frames");
  if (frames == report.json.end() || !frames->is_array() || frames->empty()) return std::nullopt;
  std::vector<Series> series;
  std::map<std::string, size_t> index;
  std::set<double> nonfinite_x;
  json names = json::array();
  double x = 0;
  for (const json& frame : *frames) {
    ++x;
    names.push_back(string_member(frame, "name"));
    const auto rows = frame.is_object() ? frame.find("rows") : frame.end();
    if (!frame.is_object() || rows == frame.end() || !rows->is_array()) continue;
    for (const json& row : *rows) {
      std::string label;
      Value value;
      if (!parse_stats_row(row, &label, &value)) continue;
      add_point(&series, &index, label, label, x, value);
      if (value.nonfinite != nullptr) nonfinite_x.insert(x);
    }
  }
  std::string note =
      "no trace of this rank: the frames of " + report.json_file() + " (the last ones before the inf/nan";
  if (report.json.contains("batch_number") && report.json["batch_number"].is_number_unsigned())
    note += ", batch " + std::to_string(report.json["batch_number"].get<uint64_t>());
  note += ")";
  json out = plot_json(report.rank, report.json_file(), "frame", std::move(series), nonfinite_x, note);
  out["x_names"] = std::move(names);
  return out;
}

// ---- HTML --------------------------------------------------------------------------------------------------------

// JSON text that is safe inside <script type="application/json">: no '<' at all (JSON has it only inside strings,
// where \u003c means the same), so no "</script>" or "<!--" from a file can end or bend the block.
void append_script_json(std::string* out, std::string_view json_text) {
  for (char c : json_text) {
    if (c == '<') {
      *out += "\\u003c";
    } else {
      *out += c;
    }
  }
}

std::string dump(const json& value) {
  return printable_json(value.dump(-1, ' ', false, json::error_handler_t::replace));
}

// How a summary line reads: "bad" (something went wrong), "warn" (worth a look), "good", or "" (plain).
const char* summary_line_class(const std::string& line) {
  if (line.starts_with("  nothing went wrong")) return "good";
  if (!line.starts_with("  ") || line.starts_with("   ")) return "";
  const size_t colon = line.find(": ");
  if (colon == std::string::npos) return "";
  const std::string key = line.substr(2, colon - 2);
  const std::string value = line.substr(colon + 2);
  if (value == "none" || value.starts_with("none ")) return "";
  static const std::set<std::string> kBad = {"inf/nan origin",    "first inf/nan",   "mismatches",
                                             "desyncs",           "vanished ranks",  "overflow streaks",
                                             "first CUDA errors", "could not write", "stopped"};
  static const std::set<std::string> kWarn = {"near overflow", "NCCL calls", "could not read"};
  if (kBad.contains(key)) return "bad";
  if (kWarn.contains(key)) return "warn";
  if (key == "job")
    return value.find("status 0") != std::string::npos && value.find("killed") == std::string::npos ? "" : "bad";
  if (key == "processes" &&
      (value.find("crashed") != std::string::npos || value.find("never returned") != std::string::npos ||
       value.find("stopped") != std::string::npos))
    return "bad";
  if (key == "setup" && value.find("no warnings") == std::string::npos) return "warn";
  if (key == "traces" && value.find("inf/nan in") != std::string::npos) return "bad";
  return "";
}

std::string summary_html(const RunSummary& summary) {
  const std::string text = format_summary_text(summary);
  std::string out = "<pre class=\"summary\">";
  const char* current = "";
  bool first = true;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    // A detail line (deeper indent) reads as the line it belongs to.
    if (!line.starts_with("   ")) current = summary_line_class(line);
    if (first && line.starts_with("Summary of run")) {
      first = false;
      out += "<span class=\"title\">" + html_escape(line) + "</span>\n";
      continue;
    }
    out += std::string("<span class=\"line") + (*current != '\0' ? std::string(" ") + current : "") + "\">" +
           html_escape(line) + "</span>\n";
  }
  out += "</pre>\n";
  return out;
}

std::string state_text(const recorder::ProcessDetail& d, const recorder::FileHeader& header) {
  std::string state = d.state;
  if (state == "exited") {
    state = d.exit_status_known ? "exited (status " + std::to_string(d.exit_status) + ")" : "exited";
  } else if (state == "crashed_or_killed") {
    state = "crashed or killed";
  } else if (state == "running_unverified") {
    state = "running? (another host)";
  } else if (state == "stopped") {
    state = recorder::stop_text(header);
  }
  return state;
}

bool is_nccl_call(uint16_t op) {
  return op >= static_cast<uint16_t>(recorder::Op::kGetUniqueId) && op <= static_cast<uint16_t>(recorder::Op::kRecv);
}

std::string call_text(const recorder::RecorderFile& file, const recorder::Record& r) {
  std::string text = recorder::op_name(static_cast<recorder::Op>(r.op));
  if (r.comm_id != 0) text += " comm " + recorder::short_hex_id(r.comm_id);
  if (r.seq != 0) text += " #" + std::to_string(r.seq);
  if (r.count != 0 || r.dtype != recorder::kUnknown)
    text += " (" + std::to_string(r.count) + " " + recorder::dtype_name(r.dtype) + ")";
  const std::string where = recorder::python_location(file.site(r.site));
  if (!where.empty()) text += " at " + where;
  return text;
}

// Where each rank was at the end: its state, its last NCCL call, the call it waits in.
std::string end_table_html(const recorder::RunDirectory& run, const RunSummary& summary) {
  if (run.files.empty()) return "<p class=\"note\">No flight recorder (*.tsrec) in the run directory.</p>\n";
  std::string out =
      "<table class=\"ends\"><thead><tr><th>rank</th><th>process</th><th>state</th><th>last collective or "
      "send/recv</th>"
      "<th>waiting in (never returned)</th></tr></thead><tbody>\n";
  for (const recorder::RecorderFile& file : run.files) {
    const recorder::ProcessDetail* detail = nullptr;
    if (summary.processes) {
      for (const recorder::ProcessDetail& d : summary.processes->details) {
        if (d.who.pid == file.pid() && d.who.rank == file.global_rank()) detail = &d;
      }
    }
    // The newest collective or send/recv (where the rank was in the job's work), else the newest NCCL call.
    const recorder::RecordedCall* last = nullptr;
    const recorder::RecordedCall* last_any = nullptr;
    for (auto it = file.records.rbegin(); it != file.records.rend() && last == nullptr; ++it) {
      if (is_nccl_call(it->record.op) && last_any == nullptr) last_any = &*it;
      if (it->record.op >= static_cast<uint16_t>(recorder::Op::kAllReduce) &&
          it->record.op <= static_cast<uint16_t>(recorder::Op::kRecv))
        last = &*it;
    }
    if (last == nullptr) last = last_any;
    std::string last_text = "none recorded";
    if (last != nullptr) {
      last_text = call_text(file, last->record) + ", " + recorder::utc_time_of_day(last->record.start_ns) + " UTC";
      if (last->pending() && detail != nullptr && detail->pending_calls > 0 &&
          detail->newest_pending.index == last->index) {
        last_text = "the call it waits in";
      } else if (!last->pending()) {
        last_text +=
            ", " + recorder::result_name(last->record.result) + " after " +
            recorder::duration_string(last->record.end_ns - std::min(last->record.end_ns, last->record.start_ns));
      }
    }
    std::string waiting;
    bool pending = false;
    if (detail != nullptr && detail->pending_calls > 0) {
      pending = true;
      waiting = call_text(file, detail->newest_pending.record) + " since " +
                recorder::utc_time_of_day(detail->newest_pending.record.start_ns) + " UTC";
      if (detail->pending_calls > 1) waiting += " (and " + std::to_string(detail->pending_calls - 1) + " more)";
    }
    const std::string state = detail != nullptr ? state_text(*detail, file.header) : "?";
    const bool bad_state = detail != nullptr && (detail->state == "crashed_or_killed" || detail->state == "stopped" ||
                                                 (detail->exit_status_known && detail->exit_status != 0));
    const std::string rank = file.global_rank() >= 0 ? std::to_string(file.global_rank()) : "?";
    out += std::string("<tr") + (pending || bad_state ? " class=\"bad\"" : "") + "><td>" + rank + "</td><td>pid " +
           std::to_string(file.pid()) + " on " + html_escape(printable(file.header.host)) + "</td><td>" +
           html_escape(state) + "</td><td>" + html_escape(printable(last_text)) + "</td><td>" +
           html_escape(printable(waiting)) + "</td></tr>\n";
  }
  out += "</tbody></table>\n";
  for (const recorder::FileError& e : run.errors)
    out += "<p class=\"note bad\">" + html_escape(printable(e.message)) + "</p>\n";
  return out;
}

std::string reports_html(const recorder::RunDirectory& run, const RunSummary& summary) {
  std::string out;
  for (const ReportFiles& r : summary.reports) {
    std::string title;
    std::string body;
    if (r.has_text) {
      title = r.text_file();
      body = r.text;
    } else if (r.has_json) {
      title = r.json_file() + " (" + r.text_file() + (r.text_exists ? " unreadable)" : " missing)");
      const auto text = r.json.find("text");
      body = text != r.json.end() && text->is_string() ? text->get<std::string>()
                                                       : r.json.dump(2, ' ', false, json::error_handler_t::replace);
    } else {
      title = r.base_name;
      body = "no readable file (see \"could not read\" in the summary)";
    }
    out += std::string("<details class=\"report\" open><summary>") + html_escape(printable(title)) +
           " <span class=\"kind\">" + report_kind_name(r.kind) + "</span></summary><pre>" + html_escape(body) +
           "</pre></details>\n";
  }
  if (summary.reports.empty()) out += "<p class=\"note\">No report in the run directory.</p>\n";
  if (!run.files.empty()) {
    out += "<details class=\"report\"><summary>flight recorders (the last 10 calls of every process)</summary><pre>" +
           html_escape(recorder::format_text_report(run)) + "</pre></details>\n";
  }
  return out;
}

constexpr const char* kStyle = R"CSS(
:root { --bad: #c62828; --warn: #b26a00; --good: #2e7d32; --fg: #1d232a; --muted: #5f6b76; --line: #d8dee4; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       background: #f6f8fa; }
header { background: #1d232a; color: #fff; padding: 12px 24px; position: sticky; top: 0; z-index: 2; }
header h1 { margin: 0; font-size: 18px; font-weight: 600; }
header .path { color: #aab4be; font-size: 12px; }
header nav a { color: #9ecbff; margin-right: 16px; text-decoration: none; font-size: 13px; }
main { padding: 8px 24px 48px; max-width: 1500px; }
section { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 12px 16px; margin: 16px 0; }
h2 { font-size: 16px; margin: 0 0 8px; }
pre { font: 12px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; white-space: pre-wrap;
      word-break: break-all; margin: 0; }
pre.summary .title { font-weight: 700; }
pre.summary .line.bad { color: var(--bad); font-weight: 700; background: #fdecea; display: inline-block;
                        width: 100%; }
pre.summary .line.warn { color: var(--warn); font-weight: 600; }
pre.summary .line.good { color: var(--good); font-weight: 600; }
table.ends { border-collapse: collapse; width: 100%; font-size: 13px; }
table.ends th, table.ends td { border-bottom: 1px solid var(--line); padding: 4px 8px; text-align: left;
                               vertical-align: top; }
table.ends tr.bad td { background: #fdecea; }
table.ends td:nth-child(-n+3) { white-space: nowrap; }
.note { color: var(--muted); font-size: 12px; margin: 4px 0; }
.note.bad, .errors { color: var(--bad); }
details.report { border-top: 1px solid var(--line); padding: 6px 0; }
details.report summary { cursor: pointer; font-weight: 600; }
details.report .kind { color: var(--muted); font-weight: 400; font-size: 12px; margin-left: 8px; }
details.report pre { margin-top: 6px; max-height: 480px; overflow: auto; background: #f6f8fa; padding: 8px; }
.legend { font-size: 12px; margin: 6px 0; }
.zoom { margin: 4px 0 6px; }
.zoom button { font-size: 12px; margin-right: 6px; padding: 2px 8px; cursor: pointer; }
#timeline-svg { cursor: crosshair; user-select: none; }
.legend span { display: inline-block; margin-right: 12px; }
.legend i { display: inline-block; width: 12px; height: 10px; margin-right: 4px; vertical-align: middle; }
svg text { font: 11px system-ui, sans-serif; fill: var(--fg); }
svg .axis line, svg .axis path { stroke: #8c959f; }
svg .grid { stroke: #eaeef2; }
svg .rankhead { font-weight: 700; }
svg .pending { stroke: var(--bad); stroke-width: 2; }
svg .instant { fill: var(--bad); stroke: #fff; stroke-width: 0.5; }
svg .nonfinite-band { fill: #fdecea; }
svg .nonfinite-mark { fill: var(--bad); font-weight: 700; }
.plots { display: flex; flex-wrap: wrap; gap: 16px; }
.plot { flex: 1 1 600px; max-width: 760px; min-width: 0; }
.plot svg { display: block; height: auto; }
.plot h3 { font-size: 14px; margin: 4px 0; }
)CSS";

// The page's script: draws #timeline from #ts-timeline and #plots from #ts-plots. Every input is checked; an error
// anywhere is recorded (data-errors, shown on the page) and the rest still drawn.
constexpr const char* kScript = R"JS(
"use strict";
(function () {
  var errors = [];
  function fail(where, e) {
    errors.push(where + ": " + (e && e.message ? e.message : String(e)));
    document.body.setAttribute("data-errors", errors.join(" | "));
  }
  window.addEventListener("error", function (ev) { fail("script", ev.message || ev.error); });
  function esc(s) {
    return String(s).replace(/[&<>"']/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c];
    });
  }
  function num(v) { return typeof v === "number" && isFinite(v) ? v : null; }
  function data(id) {
    var el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }
  function fmtTime(us) {
    if (Math.abs(us) >= 1e6) return (us / 1e6).toFixed(us >= 1e7 ? 1 : 2) + " s";
    if (Math.abs(us) >= 1e3) return (us / 1e3).toFixed(us >= 1e4 ? 1 : 2) + " ms";
    return us.toFixed(0) + " µs";
  }
  function niceStep(range, ticks) {
    var raw = range / Math.max(1, ticks), p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
  }
  var OP_COLORS = {
    ncclAllReduce: "#4e79a7", ncclReduce: "#76b7b2", ncclBroadcast: "#59a14f", ncclBcast: "#59a14f",
    ncclReduceScatter: "#edc948", ncclAllGather: "#f28e2b", ncclAlltoAll: "#b07aa1", ncclGather: "#ff9da7",
    ncclScatter: "#9c755f", ncclSend: "#8cd17d", ncclRecv: "#86bcb6", ncclGroupStart: "#bab0ac",
    ncclGroupEnd: "#bab0ac", ncclCommInitRank: "#79706e", ncclCommInitRankConfig: "#79706e",
    ncclCommDestroy: "#79706e", ncclCommFinalize: "#79706e", ncclGetUniqueId: "#79706e"
  };
  var EXTRA = ["#d37295", "#a0cbe8", "#ffbe7d", "#8cd17d", "#f1ce63", "#499894", "#e15759", "#fabfd2", "#b6992d"];
  var SERIES_COLORS = ["#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#edc948", "#76b7b2", "#9c755f", "#ff9da7",
                       "#1b5e20", "#6a3d9a", "#17becf", "#7f7f7f"];
  function opColor(name, cat) {
    if (OP_COLORS.hasOwnProperty(name)) return OP_COLORS[name];
    if (cat === "launch") return "#a5acb3";
    var h = 0;
    for (var i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
    return EXTRA[h % EXTRA.length];
  }

  // ---- Timeline ----
  var instantsGlobal = [];
  function drawTimeline() {
    var host = document.getElementById("timeline");
    var trace = data("ts-timeline");
    var events = trace && Array.isArray(trace.traceEvents) ? trace.traceEvents : (Array.isArray(trace) ? trace : []);
    var procs = {}, order = [];
    function proc(pid) {
      var key = String(pid);
      if (!procs.hasOwnProperty(key)) {
        procs[key] = {pid: pid, name: null, sort: null, tracks: {}, trackOrder: [], instants: []};
        order.push(key);
      }
      return procs[key];
    }
    function track(p, tid) {
      var key = String(tid);
      if (!p.tracks.hasOwnProperty(key)) {
        p.tracks[key] = {tid: tid, name: null, sort: null, slices: [], instants: []};
        p.trackOrder.push(key);
      }
      return p.tracks[key];
    }
    var t0 = Infinity, t1 = -Infinity, slices = 0, skipped = 0, names = {};
    events.forEach(function (e) {
      if (!e || typeof e !== "object" || typeof e.ph !== "string") { skipped++; return; }
      var pid = (typeof e.pid === "number" || typeof e.pid === "string") ? e.pid : "?";
      var args = e.args && typeof e.args === "object" ? e.args : {};
      if (e.ph === "M") {
        var p = proc(pid);
        if (e.name === "process_name" && args.name != null) p.name = String(args.name);
        else if (e.name === "process_sort_index" && num(args.sort_index) !== null) p.sort = args.sort_index;
        else if (e.name === "thread_name" && args.name != null)
          track(p, e.tid != null ? e.tid : 0).name = String(args.name);
        else if (e.name === "thread_sort_index" && num(args.sort_index) !== null)
          track(p, e.tid != null ? e.tid : 0).sort = args.sort_index;
        return;
      }
      var ts = num(e.ts);
      if (ts === null) { skipped++; return; }
      var name = e.name != null ? String(e.name) : "?";
      if (e.ph === "X" || e.ph === "B") {
        var dur = num(e.dur);
        if (dur === null || dur < 0) dur = 0;
        var pending = typeof args.result === "string" && args.result.indexOf("pending") === 0;
        track(proc(pid), e.tid != null ? e.tid : 0).slices.push(
            {ts: ts, dur: dur, name: name, cat: String(e.cat || ""), args: args, pending: pending});
        names[name] = opColor(name, e.cat);
        slices++;
        t0 = Math.min(t0, ts); t1 = Math.max(t1, ts + dur);
      } else if (e.ph === "i" || e.ph === "I" || e.ph === "n") {
        var inst = {ts: ts, name: name, cat: String(e.cat || ""), args: args, scope: e.s};
        if (e.s === "g") instantsGlobal.push(inst);
        else if (e.s === "p" || e.tid == null) proc(pid).instants.push(inst);
        else track(proc(pid), e.tid).instants.push(inst);
        t0 = Math.min(t0, ts); t1 = Math.max(t1, ts);
      } else {
        skipped++;
      }
    });
    var summary = document.getElementById("timeline-note");
    if (!isFinite(t0)) {
      host.innerHTML = "<p class=\"note\">No timeline events" +
          (trace && trace.otherData && trace.otherData.note ? ": " + esc(trace.otherData.note) : "") +
          " (the flight recorders hold no call, or this page was written without them).</p>";
      host.setAttribute("data-slices", "0");
      return;
    }
    if (t1 <= t0) t1 = t0 + 1;
    order.sort(function (a, b) {
      var pa = procs[a], pb = procs[b];
      var sa = pa.sort !== null ? pa.sort : (typeof pa.pid === "number" ? pa.pid : 1e12);
      var sb = pb.sort !== null ? pb.sort : (typeof pb.pid === "number" ? pb.pid : 1e12);
      return sa - sb || (a < b ? -1 : a > b ? 1 : 0);
    });
    var labelW = 260, width = Math.max(600, Math.min(1400, host.clientWidth || 1200)), plotW = width - labelW - 40;
    var rowH = 18, headH = 20, axisH = 24, y = axisH, rows = [];
    order.forEach(function (key) {
      var p = procs[key];
      var tracks = p.trackOrder.map(function (k) { return p.tracks[k]; })
          .filter(function (t) { return t.slices.length || t.instants.length; });
      if (!tracks.length && !p.instants.length) return;
      tracks.sort(function (a, b) {
        var sa = a.sort !== null ? a.sort : 1e12, sb = b.sort !== null ? b.sort : 1e12;
        return sa - sb || String(a.tid).localeCompare(String(b.tid));
      });
      rows.push({head: true, p: p, y: y});
      y += headH;
      tracks.forEach(function (t) { rows.push({head: false, p: p, t: t, y: y}); y += rowH; });
      if (!tracks.length) y += rowH;
    });
    var height = y + 8;
    var legend = Object.keys(names).sort().map(function (n) {
      return "<span><i style=\"background:" + names[n] + "\"></i>" + esc(n) + "</span>";
    });
    legend.push("<span><i style=\"background:#fff;border:2px solid #c62828\"></i>never returned</span>");
    legend.push("<span><i style=\"background:#c62828;transform:rotate(45deg);width:9px;height:9px\"></i>" +
                "verdict, first inf/nan, CUDA error, stop</span>");
    if (summary) {
      summary.textContent = slices + " slices on " + rows.filter(function (r) { return !r.head; }).length +
          " tracks of " + rows.filter(function (r) { return r.head; }).length + " processes over " +
          fmtTime(t1 - t0) + (skipped ? "; " + skipped + " events not understood, skipped" : "") +
          ". Hover a slice or a marker for its details; calls thinner than a pixel are drawn merged.";
    }
    render(t0, t1);

    // Draws the window [v0, v1] of the run; dragging across it draws the part dragged over.
    function render(v0, v1) {
      function X(ts) { return labelW + (ts - v0) / (v1 - v0) * plotW; }
      function inView(ts) { return ts >= v0 && ts <= v1; }
      var out = [], drawn = 0, pendingDrawn = 0, instantsDrawn = 0;
      out.push("<svg id=\"timeline-svg\" width=\"" + width + "\" height=\"" + height + "\" viewBox=\"0 0 " + width +
               " " + height + "\">");
      var step = niceStep(v1 - v0, 8);
      out.push("<g class=\"axis\">");
      for (var tick = Math.ceil((v0 - t0) / step) * step; tick <= v1 - t0 + 1e-9; tick += step) {
        var tx = X(t0 + tick);
        out.push("<line class=\"grid\" x1=\"" + tx + "\" x2=\"" + tx + "\" y1=\"" + (axisH - 4) + "\" y2=\"" + height +
                 "\"/><text x=\"" + tx + "\" y=\"" + (axisH - 8) + "\" text-anchor=\"middle\">" + esc(fmtTime(tick)) +
                 "</text>");
      }
      out.push("</g>");
      rows.forEach(function (r) {
        if (r.head) {
          var label = r.p.name !== null ? r.p.name : "pid " + r.p.pid;
          out.push("<rect x=\"0\" y=\"" + r.y + "\" width=\"" + width + "\" height=\"" + headH +
                   "\" fill=\"#eef2f6\"/><text class=\"rankhead\" x=\"6\" y=\"" + (r.y + 14) + "\">" + esc(label) +
                   "</text>");
          r.p.instants.filter(function (i) { return inView(i.ts); }).forEach(function (i) {
            out.push(instantMark(i, X(i.ts), r.y + headH / 2));
          });
          return;
        }
        var t = r.t, tname = t.name !== null ? t.name : "track " + t.tid;
        var shown = tname.length > 40 ? tname.slice(0, 39) + "…" : tname;
        out.push("<text x=\"14\" y=\"" + (r.y + 13) + "\">" + esc(shown) +
                 "<title>" + esc(tname) + "</title></text>");
        t.slices.sort(function (a, b) { return a.ts - b.ts; });
        // Slices thinner than a pixel are merged per track: what is drawn is bounded by the width, not the calls.
        var bucket = null;
        function flush() {
          if (!bucket) return;
          var w = Math.max(1, bucket.x1 - bucket.x0);
          out.push("<rect class=\"slice\" x=\"" + bucket.x0.toFixed(2) + "\" y=\"" + (r.y + 2) + "\" width=\"" +
                   w.toFixed(2) + "\" height=\"" + (rowH - 4) + "\" fill=\"" + bucket.color + "\"><title>" +
                   esc(bucket.n > 1 ? bucket.n + " calls, " + bucket.first + " … " + bucket.last : bucket.title) +
                   "</title></rect>");
          drawn++;
          bucket = null;
        }
        t.slices.forEach(function (s) {
          if (s.ts > v1 || s.ts + s.dur < v0) return;
          var x0 = Math.max(labelW - 1, X(s.ts)), x1 = Math.min(labelW + plotW + 1, X(s.ts + s.dur));
          if (s.pending) {
            flush();
            out.push("<rect class=\"slice pending\" x=\"" + x0.toFixed(2) + "\" y=\"" + (r.y + 2) + "\" width=\"" +
                     Math.max(2, x1 - x0).toFixed(2) + "\" height=\"" + (rowH - 4) + "\" fill=\"" +
                     opColor(s.name, s.cat) + "\" fill-opacity=\"0.55\"><title>" + esc(sliceTitle(s)) +
                     "</title></rect>");
            var atEnd = x1 > width - 220;
            out.push("<text x=\"" + (atEnd ? x1 - 4 : x1 + 4).toFixed(2) + "\" y=\"" + (r.y + 13) +
                     "\" fill=\"#c62828\" text-anchor=\"" + (atEnd ? "end" : "start") +
                     "\" font-weight=\"700\" stroke=\"#fff\" stroke-width=\"3\" paint-order=\"stroke\">" +
                     esc("never returned: " + s.name + (s.args.seq != null ? " #" + s.args.seq : "")) + "</text>");
            drawn++;
            pendingDrawn++;
            return;
          }
          var color = opColor(s.name, s.cat);
          // Whatever their ops, calls within one pixel are one mark (coloured as the first; its title names them).
          if (bucket && x0 < bucket.x0 + 1 && x1 - x0 < 1) {
            bucket.x1 = Math.max(bucket.x1, x1);
            bucket.n++;
            bucket.last = s.name;
            return;
          }
          flush();
          bucket = {x0: x0, x1: x1, color: color, n: 1, first: s.name, last: s.name, title: sliceTitle(s)};
          if (x1 - x0 >= 1) flush();
        });
        flush();
        t.instants.filter(function (i) { return inView(i.ts); }).forEach(function (i) {
          out.push(instantMark(i, X(i.ts), r.y + rowH / 2));
        });
      });
      instantsGlobal.filter(function (i) { return inView(i.ts); }).forEach(function (i) {
        var x = X(i.ts);
        out.push("<line x1=\"" + x + "\" x2=\"" + x + "\" y1=\"" + axisH + "\" y2=\"" + height +
                 "\" stroke=\"#c62828\" stroke-dasharray=\"4 3\"/>" + instantMark(i, x, axisH + 4));
      });
      out.push("</svg>");
      function sliceTitle(s) {
        var lines = [s.name + "  " + fmtTime(s.ts - t0) +
                     (s.pending ? "  never returned" : "  took " + fmtTime(s.dur))];
        Object.keys(s.args).forEach(function (k) {
          var v = s.args[k];
          lines.push(k + ": " + (typeof v === "object" ? JSON.stringify(v) : String(v)));
        });
        return lines.join("\n");
      }
      function instantMark(i, x, cy) {
        instantsDrawn++;
        var lines = [i.name + " (" + i.cat + ")  " + fmtTime(i.ts - t0)];
        Object.keys(i.args).forEach(function (k) {
          var v = i.args[k];
          lines.push(k + ": " + (typeof v === "object" ? JSON.stringify(v) : String(v)));
        });
        return "<path class=\"instant\" d=\"M" + x.toFixed(2) + " " + (cy - 7) + " l6 7 l-6 7 l-6 -7 z\"><title>" +
               esc(lines.join("\n")) + "</title></path>";
      }
      var whole = v0 <= t0 && v1 >= t1;
      host.innerHTML = "<div class=\"legend\">" + legend.join("") + "</div><div class=\"zoom\">" +
          "<button type=\"button\" data-zoom=\"all\">whole run</button><button type=\"button\" data-zoom=\"end\">" +
          "the end (last 5 %)</button><span class=\"note\">" +
          (whole ? "the whole run" : esc(fmtTime(v0 - t0) + " to " + fmtTime(v1 - t0))) +
          "; drag across the bars to zoom in</span></div>" + out.join("");
      host.setAttribute("data-slices", String(drawn));
      host.setAttribute("data-pending", String(pendingDrawn));
      host.setAttribute("data-instants", String(instantsDrawn));
      host.querySelector("[data-zoom=all]").onclick = function () { render(t0, t1); };
      host.querySelector("[data-zoom=end]").onclick = function () { render(t1 - (t1 - t0) * 0.05, t1); };
      var svg = document.getElementById("timeline-svg"), band = null, from = 0;
      function at(ev) {
        var box = svg.getBoundingClientRect();
        return Math.min(labelW + plotW, Math.max(labelW, (ev.clientX - box.left) * width / box.width));
      }
      svg.addEventListener("mousedown", function (ev) {
        from = at(ev);
        band = document.createElementNS(svg.namespaceURI, "rect");
        band.setAttribute("y", "0");
        band.setAttribute("height", String(height));
        band.setAttribute("fill", "rgba(66,133,244,0.18)");
        band.setAttribute("x", String(from));
        band.setAttribute("width", "0");
        svg.appendChild(band);
        ev.preventDefault();
      });
      svg.addEventListener("mousemove", function (ev) {
        if (!band) return;
        var x = at(ev);
        band.setAttribute("x", String(Math.min(from, x)));
        band.setAttribute("width", String(Math.abs(x - from)));
      });
      function finish(ev) {
        if (!band) return;
        var a = Math.min(from, at(ev)), b = Math.max(from, at(ev));
        band = null;
        if (b - a < 4) { render(v0, v1); return; }
        var scale = (v1 - v0) / plotW;
        render(v0 + (a - labelW) * scale, v0 + (b - labelW) * scale);
      }
      svg.addEventListener("mouseup", finish);
      svg.addEventListener("mouseleave", finish);
    }
  }

  // ---- Plots ----
  function drawPlot(plot) {
    var series = Array.isArray(plot.series) ? plot.series : [];
    var W = 680, H = 300, L = 64, R = 12, T = 12, B = 40, pw = W - L - R, ph = H - T - B;
    var xs = [], ymin = Infinity, ymax = -Infinity;
    series.forEach(function (s) {
      (Array.isArray(s.points) ? s.points : []).forEach(function (p) {
        if (!Array.isArray(p) || num(p[0]) === null) return;
        xs.push(p[0]);
        var v = num(p[1]);
        if (v !== null && v > 0) { ymin = Math.min(ymin, v); ymax = Math.max(ymax, v); }
      });
    });
    if (!xs.length) return "<p class=\"note\">No tensor values in " + esc(plot.source || "?") + ".</p>";
    var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs);
    var pad = Math.max(0.5, (x1 - x0) * 0.03);
    x0 -= pad;
    x1 += pad;
    if (!isFinite(ymin)) { ymin = 1e-3; ymax = 1; }
    var lo = Math.floor(Math.log10(ymin)), hi = Math.ceil(Math.log10(ymax));
    if (hi <= lo) hi = lo + 1;
    var topBand = 16;  // inf/nan values are drawn in a band above the finite range
    function X(x) { return L + (x - x0) / (x1 - x0) * pw; }
    function Y(v) {
      if (typeof v !== "number" || !(v > 0)) return v === 0 ? T + ph : T + topBand / 2;
      return T + topBand + 8 + (1 - (Math.log10(v) - lo) / (hi - lo)) * (ph - topBand - 8);
    }
    var o = ["<svg class=\"plot-svg\" width=\"100%\" viewBox=\"0 0 " + W + " " + H + "\">"];
    o.push("<rect class=\"nonfinite-band\" x=\"" + L + "\" y=\"" + T + "\" width=\"" + pw + "\" height=\"" + topBand +
           "\"/><text x=\"" + (L - 6) + "\" y=\"" + (T + 12) + "\" text-anchor=\"end\" class=\"nonfinite-mark\">" +
           "inf/nan</text>");
    (Array.isArray(plot.nonfinite_x) ? plot.nonfinite_x : []).forEach(function (x) {
      if (num(x) === null) return;
      o.push("<line x1=\"" + X(x) + "\" x2=\"" + X(x) + "\" y1=\"" + T + "\" y2=\"" + (T + ph) +
             "\" stroke=\"#c62828\" stroke-opacity=\"0.35\" stroke-width=\"6\"><title>inf/nan at " +
             esc(plot.x_label) + " " + x + "</title></line>");
    });
    var decades = hi - lo, everyDecade = Math.max(1, Math.ceil(decades / 8));
    for (var e = lo; e <= hi; e++) {
      [1, 2, 5].forEach(function (m) {
        if (m !== 1 && (decades > 3 || e === hi)) return;
        if (m === 1 && (e - lo) % everyDecade !== 0) return;
        var gy = Y(m * Math.pow(10, e));
        o.push("<line class=\"grid\" x1=\"" + L + "\" x2=\"" + (L + pw) + "\" y1=\"" + gy + "\" y2=\"" + gy +
               "\"/><text x=\"" + (L - 6) + "\" y=\"" + (gy + 4) + "\" text-anchor=\"end\">" + m + "e" + e + "</text>");
      });
    }
    var xstep = Math.max(1, niceStep(x1 - x0 - 2 * pad, 8));
    for (var xt = Math.ceil(x0 / xstep) * xstep; xt <= x1; xt += xstep) {
      o.push("<line class=\"grid\" x1=\"" + X(xt) + "\" x2=\"" + X(xt) + "\" y1=\"" + (T + ph) + "\" y2=\"" +
             (T + ph + 4) + "\" stroke=\"#8c959f\"/><text x=\"" + X(xt) + "\" y=\"" + (T + ph + 16) +
             "\" text-anchor=\"middle\">" + xt + "</text>");
    }
    o.push("<text x=\"" + (L + pw / 2) + "\" y=\"" + (H - 6) + "\" text-anchor=\"middle\">" + esc(plot.x_label) +
           "</text><text x=\"12\" y=\"" + (T + ph / 2) + "\" transform=\"rotate(-90 12 " + (T + ph / 2) +
           ")\" text-anchor=\"middle\">abs max (log)</text>");
    o.push("<rect x=\"" + L + "\" y=\"" + T + "\" width=\"" + pw + "\" height=\"" + ph +
           "\" fill=\"none\" stroke=\"#8c959f\"/>");
    var legend = [], points = 0, xnames = Array.isArray(plot.x_names) ? plot.x_names : [];
    series.forEach(function (s, k) {
      var color = SERIES_COLORS[k % SERIES_COLORS.length];
      var pts = (Array.isArray(s.points) ? s.points : []).filter(function (p) {
        return Array.isArray(p) && num(p[0]) !== null;
      });
      var path = "", pen = false;
      pts.forEach(function (p) {
        var v = num(p[1]);
        if (v === null) { pen = false; return; }
        path += (pen ? " L" : " M") + X(p[0]).toFixed(2) + " " + Y(v).toFixed(2);
        pen = true;
      });
      if (path) o.push("<path d=\"" + path + "\" fill=\"none\" stroke=\"" + color + "\" stroke-width=\"1.5\"/>");
      pts.forEach(function (p) {
        var v = num(p[1]), label = s.label + ", " + plot.x_label + " " + p[0] +
            (xnames[p[0] - 1] ? " (" + xnames[p[0] - 1] + ")" : "") + ": " +
            (v === null ? String(p[1]) : v.toExponential(2));
        if (v === null) {
          o.push("<text class=\"nonfinite-mark point\" x=\"" + X(p[0]) + "\" y=\"" + (T + 12) +
                 "\" text-anchor=\"middle\">✕<title>" + esc(label) + "</title></text>");
        } else if (pts.length <= 400) {  // a long series is its line alone
          o.push("<circle class=\"point\" cx=\"" + X(p[0]).toFixed(2) + "\" cy=\"" + Y(v).toFixed(2) +
                 "\" r=\"3\" fill=\"" + color + "\"><title>" + esc(label) + "</title></circle>");
        }
        points++;
      });
      legend.push("<span><i style=\"background:" + color + "\"></i>" + esc(s.label) +
                  (s.nonfinite ? " <b style=\"color:#c62828\">inf/nan</b>" : "") + "</span>");
    });
    o.push("</svg>");
    return "<div data-points=\"" + points + "\">" + o.join("") + "</div><div class=\"legend\">" + legend.join("") +
           "</div>";
  }
  function drawPlots() {
    var host = document.getElementById("plots");
    var plots = data("ts-plots");
    if (!Array.isArray(plots) || !plots.length) {
      host.innerHTML = "<p class=\"note\">No watched tensors: the run has no trace-rank&lt;R&gt;.jsonl " +
          "(TRAINSCOPE_TRACE_BATCHES) and no nonfinite-rank&lt;R&gt; report.</p>";
      return;
    }
    host.innerHTML = plots.map(function (plot, k) {
      var html;
      try { html = drawPlot(plot); } catch (e) { fail("plot " + k, e); html = "<p class=\"errors\">not drawn</p>"; }
      return "<div class=\"plot\"><h3>rank " + esc(plot.rank) + " <span class=\"note\">" + esc(plot.source || "") +
          "</span></h3>" + html + (plot.note ? "<p class=\"note\">" + esc(plot.note) + "</p>" : "") + "</div>";
    }).join("");
  }

  try { drawTimeline(); } catch (e) { fail("timeline", e); }
  try { drawPlots(); } catch (e) { fail("plots", e); }
  if (errors.length) {
    var box = document.getElementById("page-errors");
    box.textContent = "This page could not draw everything: " + errors.join(" | ");
  }
  document.body.setAttribute("data-rendered", errors.length ? "errors" : "ok");
})();
)JS";

}  // namespace

std::string html_escape(std::string_view text) {
  const std::string clean = printable_text(text);
  std::string out;
  out.reserve(clean.size() + clean.size() / 8);
  for (char c : clean) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

json tensor_plots_json(const RunSummary& summary) {
  json out = json::array();
  std::set<int32_t> traced;
  for (const TraceFile& trace : summary.traces) {
    if (std::optional<json> plot = trace_plot(trace.dir.empty() ? summary.path : trace.dir, trace)) {
      traced.insert(trace.rank);
      out.push_back(std::move(*plot));
    }
  }
  for (const ReportFiles& report : summary.reports) {
    if (report.kind != ReportKind::kNonfinite || traced.contains(report.rank)) continue;
    if (std::optional<json> plot = detection_plot(report)) out.push_back(std::move(*plot));
  }
  return out;
}

std::string make_html_page(const recorder::RunDirectory& run, const RunSummary& summary,
                           const TimelineWriter& timeline) {
  std::string page =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      "<title>trainscope: run " +
      html_escape(printable(summary.name)) + "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n";
  page += "<header><h1>trainscope: run " + html_escape(printable(summary.name)) + "</h1><div class=\"path\">" +
          html_escape(printable(summary.path)) +
          "</div><nav><a href=\"#summary\">summary</a><a href=\"#ends\">where each rank was</a>"
          "<a href=\"#timeline-section\">timeline</a><a href=\"#tensors\">watched tensors</a>"
          "<a href=\"#reports\">reports</a></nav></header>\n<main>\n";
  page += "<p id=\"page-errors\" class=\"errors\"></p>\n";
  page += "<section id=\"summary\"><h2>Summary</h2>\n" + summary_html(summary) + "</section>\n";
  page +=
      "<section id=\"ends\"><h2>Where each rank was at the end</h2>\n" + end_table_html(run, summary) + "</section>\n";
  page +=
      "<section id=\"timeline-section\"><h2>Timeline of every rank</h2><p id=\"timeline-note\" class=\"note\"></p>"
      "<div id=\"timeline\"></div></section>\n";
  page +=
      "<section id=\"tensors\"><h2>Watched tensors: abs max</h2><p class=\"note\">Log scale. Per batch from a "
      "rank's trace (TRAINSCOPE_TRACE_BATCHES), else per frame from its inf/nan detection report (the last frames "
      "before it). Inf and nan are drawn as ✕ in the band at the top, their batches or frames shaded.</p>"
      "<div id=\"plots\" class=\"plots\"></div></section>\n";
  page += "<section id=\"reports\"><h2>Reports</h2>\n" + reports_html(run, summary) + "</section>\n</main>\n";

  page += "<script type=\"application/json\" id=\"ts-plots\">";
  append_script_json(&page, dump(tensor_plots_json(summary)));
  page += "</script>\n<script type=\"application/json\" id=\"ts-timeline\">";
  // The timeline is embedded as it is written, up to the cap: past it, an empty one that says why.
  const size_t start = page.size();
  bool too_big = false;
  timeline([&](std::string_view piece) {
    if (too_big) return;
    if (page.size() - start + piece.size() > kMaxEmbeddedTimelineBytes) {
      too_big = true;
      return;
    }
    append_script_json(&page, printable_json(piece));
  });
  if (too_big) {
    page.resize(start);
    append_script_json(
        &page, dump({{"traceEvents", json::array()},
                     {"otherData",
                      {{"note", "the timeline is larger than " + std::to_string(kMaxEmbeddedTimelineBytes >> 20) +
                                    " MiB: open the file of `trainscope report RUN_DIR --trace FILE` "
                                    "in ui.perfetto.dev instead"}}}}));
  }
  page += "</script>\n<script>";
  page += kScript;
  page += "</script>\n</body>\n</html>\n";
  return page;
}

bool write_html_report(const recorder::RunDirectory& run, const RunSummary& summary, const std::string& path,
                       std::string* error) {
  const std::string page = make_html_page(
      run, summary, [&](const std::function<void(std::string_view)>& sink) { write_run_timeline(run, summary, sink); });
  if (const int failed = files::replace_file(path.c_str(), page.data(), page.size()); failed != 0) {
    *error = path + ": " + files::error_text(failed);
    return false;
  }
  return true;
}

}  // namespace trainscope::reports
