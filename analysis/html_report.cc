// The self-contained HTML page of a run: static HTML for the text, inline JavaScript for the timeline and the plots.
#include "analysis/html_report.h"

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

#include "analysis/html_page_assets.h"
#include "analysis/run_timeline.h"
#include "base/bounded_file.h"
#include "base/flight_record_format.h"
#include "base/printable.h"
#include "base/private_files.h"
#include "reports/json_members.h"
#include "reports/recorder_report.h"

namespace trainscope::reports {
namespace {

using nlohmann::json;

// ---- Reading the per-batch traces --------------------------------------------------------------------------------

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
  const files::BoundedRead read = files::read_bounded(dir + "/" + file, kMaxTraceBytesRead, false, &text);
  if (read.outcome == files::ReadOutcome::kMissing) return std::nullopt;  // a trace in text only
  if (read.outcome != files::ReadOutcome::kRead) {
    const std::string why = read.outcome == files::ReadOutcome::kNotRegular
                                ? std::string("not a regular file (") + files::file_type_name(read.mode) + ")"
                                : std::strerror(read.error);
    return plot_json(trace.rank, file, "batch", {}, {}, "cannot read " + file + ": " + why);
  }
  const bool truncated = read.truncated;
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
      html_escape(printable(summary.name)) + "</title>\n<style>" + kPageStyle + "</style>\n</head>\n<body>\n";
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
  page += kPageScript;
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
