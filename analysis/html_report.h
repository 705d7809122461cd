// `trainscope report RUN_DIR --html FILE`: the whole run on one self-contained page (no network at view time): the
// summary, the timeline of every rank (where each one was when the job stopped), every report, and the per-batch
// abs-max of the watched tensors as plots (the seed's per-batch tracing, seen).
//
// The page is static HTML (summary, the table of where each rank was at the end, every report's text, HTML-escaped:
// the files are untrusted) with inline CSS and one inline script that draws, as SVG, the timeline from the trace
// events of analysis/run_timeline.h and the plots from per-rank series, both embedded as JSON blocks
// (<script type="application/json">, every '<' written as \u003c so no text from a file can close the block). The
// script copes with any event list (missing or ill-typed fields are skipped), bounds what it draws (slices thinner
// than a pixel are merged per track), records its own errors in <body data-errors> and sets
// <body data-rendered="ok"> when everything was drawn: the headless-browser test reads both.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "analysis/run_summary.h"
#include "base/flight_recorder_reader.h"

namespace trainscope::reports {

// Writes the page to `path` (created private, replaced if it exists). False, with `error` naming the file and why,
// when it cannot be written.
bool write_html_report(const recorder::RunDirectory& run, const RunSummary& summary, const std::string& path,
                       std::string* error);

// ---- The page's parts (for tests) --------------------------------------------------------------------------------

// Writes the run's trace-event JSON to the sink: write_run_timeline on the run in write_html_report; tests hand the
// page events of their own.
using TimelineWriter = std::function<void(const std::function<void(std::string_view)>& sink)>;

// The whole page, with the timeline that `timeline` writes (embedded up to kMaxEmbeddedTimelineBytes).
std::string make_html_page(const recorder::RunDirectory& run, const RunSummary& summary,
                           const TimelineWriter& timeline);
inline constexpr size_t kMaxEmbeddedTimelineBytes = size_t{64} << 20;

// The watched tensors' abs-max series, one plot per rank:
//   [{"rank", "source" (the file read), "x_label" ("batch" | "frame"), "x_names" (frame names, for "frame"),
//     "series": [{"label", "points": [[x, y]], "nonfinite"}], "series_total", "nonfinite_x": [x...], "note"}]
// y is the abs max, or "inf" / "nan" where the row held one. From each rank's trace-rank<R>.jsonl
// (TRAINSCOPE_TRACE_BATCHES): a series per (frame position in its batch, kind, row label), x the batch number, the
// numeric "stats" rows when the line has them, else its text rows; at most kMaxPlotSeries series (those with inf/nan
// first, then the largest). A rank without a trace gets its nonfinite-rank<R> report's frames instead: x is the
// frame's place in the detection window, a series per row label.
nlohmann::json tensor_plots_json(const RunSummary& summary);
inline constexpr size_t kMaxPlotSeries = 12;
inline constexpr size_t kMaxTraceBytesRead = size_t{64} << 20;  // per trace file; the rest is said, not plotted

// Text for HTML element content and attribute values: & < > " ' as entities, control characters made visible
// (reports::printable_text: '\n' and '\t' kept), bytes that are not UTF-8 escaped.
std::string html_escape(std::string_view text);

}  // namespace trainscope::reports
