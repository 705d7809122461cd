// The HTML page in a browser: `trainscope report RUN_DIR --html FILE` on a real 4-rank job of the CPU stand-in NCCL
// (per-batch traces, an inf), and pages of hand-made timeline events (ordinary, hostile, huge), each loaded in
// headless Chromium (--dump-dom, bounded by a timeout). The page's script sets <body data-rendered="ok"> when it drew
// everything and records its errors in data-errors; the tests read both from the DOM, with what was drawn. Skipped,
// saying so, where chromium is not installed (scripts/setup.sh installs it).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/html_report.h"
#include "integration_helpers.h"
#include "support/subprocess.h"

namespace trainscope {
namespace {

using nlohmann::json;
using testing::ProcessOptions;
using testing::ProcessResult;
using testing::TempDir;

// chromium in PATH, or "".
std::string find_chromium() {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin";
  size_t pos = 0;
  while (pos <= dirs.size()) {
    size_t end = dirs.find(':', pos);
    if (end == std::string::npos) end = dirs.size();
    const std::string candidate = dirs.substr(pos, end - pos) + "/chromium";
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    pos = end + 1;
  }
  return "";
}

#define REQUIRE_CHROMIUM()                                                                                        \
  const std::string chromium = find_chromium();                                                                   \
  if (chromium.empty())                                                                                           \
  GTEST_SKIP() << "chromium is not installed (scripts/setup.sh installs it): the page's script was not run in a " \
                  "browser"

// The DOM after the page loaded and its script ran, as headless Chromium prints it (its own profile folder, 60 s).
std::string dom_of(const std::string& chromium, const TempDir& dir, const std::string& page) {
  ProcessOptions options;
  options.timeout_seconds = 60;
  const ProcessResult result = testing::run_process(
      {chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
       "--user-data-dir=" + dir.path() + "/chromium-profile", "--dump-dom", "file://" + page},
      options);
  EXPECT_FALSE(result.timed_out) << "chromium did not finish within 60 s";
  EXPECT_EQ(result.exit_code, 0) << result.err;
  return result.out;
}

// `trainscope report RUN_DIR --html FILE` on the job's run directory: FILE (dir/run.html), written.
std::string page_of_run(const TempDir& dir) {
  const std::string page = dir.path() + "/run.html";
  ProcessOptions options;
  options.timeout_seconds = 60;
  const ProcessResult report = testing::run_process({TS_TOOL, "report", run_dir(dir), "--html", page}, options);
  EXPECT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.err.find("page written to " + page), std::string::npos) << report.err;
  EXPECT_NE(report.out.find("Summary of run job"), std::string::npos) << "the summary is printed too: " << report.out;
  return page;
}

// The <body ...> tag of the DOM: the page's script writes its verdict there.
std::string body_tag(const std::string& dom) {
  const size_t start = dom.find("<body");
  return start == std::string::npos ? std::string() : dom.substr(start, dom.find('>', start) - start + 1);
}

// The value of `attribute` on the first element with id `id`, "" when absent.
std::string attribute_of(const std::string& dom, const std::string& id, const std::string& attribute) {
  const size_t at = dom.find("id=\"" + id + "\"");
  if (at == std::string::npos) return "";
  const size_t open = dom.rfind('<', at);
  const std::string tag = dom.substr(open, dom.find('>', at) - open);
  const size_t value = tag.find(" " + attribute + "=\"");
  if (value == std::string::npos) return "";
  const size_t begin = value + attribute.size() + 3;
  return tag.substr(begin, tag.find('"', begin) - begin);
}

void expect_rendered(const std::string& dom) {
  const std::string body = body_tag(dom);
  EXPECT_NE(body.find("data-rendered=\"ok\""), std::string::npos) << body;
  EXPECT_EQ(body.find("data-errors"), std::string::npos) << body;
}

// A page of hand-made events (the trace file's text), written into dir.
std::string synthetic_page(const TempDir& dir, const std::string& trace) {
  reports::RunSummary summary;
  summary.path = dir.path() + "/synthetic";
  summary.name = "synthetic";
  const std::string page = reports::make_html_page(
      recorder::RunDirectory{}, summary, [&](const std::function<void(std::string_view)>& sink) { sink(trace); });
  const std::string path = dir.path() + "/page.html";
  FILE* file = std::fopen(path.c_str(), "we");
  EXPECT_NE(file, nullptr);
  if (file != nullptr) {
    std::fwrite(page.data(), 1, page.size(), file);
    std::fclose(file);
  }
  return path;
}

std::string synthetic_page(const TempDir& dir, const json& events) {
  return synthetic_page(dir, json({{"traceEvents", events}}).dump());
}

json meta(const char* name, int pid, int tid, const json& args) {
  return {{"ph", "M"}, {"name", name}, {"pid", pid}, {"tid", tid}, {"args", args}};
}

json slice(const std::string& name, double ts, double dur, int pid, int tid, const std::string& result, int seq) {
  return {{"ph", "X"},    {"cat", "nccl"},
          {"name", name}, {"ts", ts},
          {"dur", dur},   {"pid", pid},
          {"tid", tid},   {"args", {{"op", name}, {"seq", seq}, {"result", result}, {"comm", "3f2a9c"}}}};
}

// Two ranks, two tracks each; rank 1 never returned from its last all-reduce; a mismatch verdict (global) and the
// first inf/nan of rank 0 (its process), and events the page cannot use, which it skips.
json hand_made_events() {
  json events = json::array();
  for (int rank = 0; rank < 2; ++rank) {
    events.push_back(meta("process_name", rank, 0, {{"name", "rank " + std::to_string(rank) + " (pid 7, host h)"}}));
    events.push_back(meta("thread_name", rank, 1, {{"name", "comm 3f2a9c (rank " + std::to_string(rank) + " of 2)"}}));
    events.push_back(meta("thread_name", rank, 2, {{"name", "stream 0x7f3a5c001200"}}));
    for (int i = 0; i < 10; ++i) {
      const bool hang = rank == 1 && i == 9;
      events.push_back(slice(i % 2 == 0 ? "ncclAllReduce" : "ncclBroadcast", 1000.0 * i, hang ? 9000 : 400, rank, 1,
                             hang ? "pending (never returned)" : "ncclSuccess", i + 1));
      events.push_back({{"ph", "X"},
                        {"cat", "launch"},
                        {"name", "gemm_kernel"},
                        {"ts", 1000.0 * i + 100},
                        {"dur", 20},
                        {"pid", rank},
                        {"tid", 2},
                        {"args", {{"kernel", "gemm_kernel<float>"}}}});
    }
  }
  events.push_back({{"ph", "i"},
                    {"s", "g"},
                    {"cat", "verdict"},
                    {"name", "mismatch"},
                    {"ts", 9500},
                    {"pid", 0},
                    {"tid", 0},
                    {"args", {{"text", "count differs"}}}});
  events.push_back(
      {{"ph", "i"}, {"s", "p"}, {"cat", "nonfinite"}, {"name", "first inf/nan"}, {"ts", 4200}, {"pid", 0}, {"tid", 0}});
  for (const json& junk :
       {json(nullptr), json("text"), json(42), json::object(), json({{"ph", "X"}, {"ts", "soon"}, {"pid", 0}}),
        json({{"ph", "X"}, {"ts", 10}, {"dur", -5}, {"pid", {{"odd", 1}}}, {"tid", 1}}),
        json({{"ph", "Q"}, {"ts", 1}, {"pid", 0}})})
    events.push_back(junk);
  return events;
}

TEST(HtmlPage, HandMadeEventsAreDrawnAsTheTimelineOfEveryRank) {
  REQUIRE_CHROMIUM();
  TempDir dir;
  const std::string dom = dom_of(chromium, dir, synthetic_page(dir, hand_made_events()));
  expect_rendered(dom);
  EXPECT_NE(dom.find(">rank 0 (pid 7, host h)</text>"), std::string::npos);
  EXPECT_NE(dom.find(">rank 1 (pid 7, host h)</text>"), std::string::npos);
  EXPECT_NE(dom.find(">comm 3f2a9c (rank 1 of 2)<title>"), std::string::npos);
  EXPECT_EQ(attribute_of(dom, "timeline", "data-pending"), "1");
  EXPECT_EQ(attribute_of(dom, "timeline", "data-instants"), "2");
  // 40 calls and launches, and the one with a negative duration (drawn as an instant-long slice).
  EXPECT_EQ(attribute_of(dom, "timeline", "data-slices"), "41");
  EXPECT_NE(dom.find("never returned: ncclBroadcast #10"), std::string::npos)
      << "the call rank 1 never returned from is named";
  EXPECT_NE(dom.find("6 events not understood, skipped"), std::string::npos);
}

// The timeline's zoom, driven by a script added to the page after its own: "the end" (the last 5 % of the run) shows
// only rank 1's call that never returned; "whole run" all again; dragging across the first half of the bars shows the
// calls there. The script leaves what was drawn each time in <body data-zoomed>.
TEST(HtmlPage, TheTimelineZoomsToTheEndAndToADraggedRange) {
  REQUIRE_CHROMIUM();
  TempDir dir;
  const std::string page = synthetic_page(dir, hand_made_events());
  std::string html = testing::read_file(page);
  html.insert(html.rfind("</body>"), R"(<script>
    var host = document.getElementById("timeline"), seen = [];
    function note() {
      seen.push(host.getAttribute("data-slices") + "/" + host.getAttribute("data-pending") + " " +
                host.querySelector(".zoom .note").textContent);
    }
    host.querySelector("[data-zoom=end]").click();
    note();
    host.querySelector("[data-zoom=all]").click();
    note();
    var svg = document.getElementById("timeline-svg"), box = svg.getBoundingClientRect();
    var width = svg.viewBox.baseVal.width, middle = 260 + (width - 300) * 0.4;
    function mouse(type, x) {
      svg.dispatchEvent(new MouseEvent(type, {clientX: box.left + x * box.width / width, clientY: box.top + 40,
                                              bubbles: true}));
    }
    mouse("mousedown", 260);
    mouse("mousemove", middle);
    mouse("mouseup", middle);
    note();
    document.body.setAttribute("data-zoomed", seen.join(" | "));
  </script>)");
  FILE* file = std::fopen(page.c_str(), "we");
  ASSERT_NE(file, nullptr);
  std::fwrite(html.data(), 1, html.size(), file);
  std::fclose(file);
  const std::string dom = dom_of(chromium, dir, page);
  expect_rendered(dom);
  const std::string body = body_tag(dom);
  // 40% of the 18 ms: calls 1-8 of each rank (those starting at 0..7 ms), their launches, and the junk one at 10 us.
  EXPECT_NE(body.find("data-zoomed=\"1/1 17.1 ms to 18.0 ms; drag across the bars to zoom in | 41/1 the whole run; "
                      "drag across the bars to zoom in | 33/0 0 µs to 7."),  // 7.19 or 7.20 ms: a pixel's rounding
            std::string::npos)
      << body;
}

// A timeline of 200,000 calls on 4 ranks: what is drawn is bounded by the page's width, not the number of calls.
TEST(HtmlPage, AHugeTimelineIsDrawnMergedWithinBounds) {
  REQUIRE_CHROMIUM();
  TempDir dir;
  // Written as text: 200,000 json objects take longer to make than the page takes to draw (the tests' own code is
  // built at -O0 in CI).
  std::string trace = R"({"traceEvents":[)";
  char event[320];
  for (int i = 0; i < 200000; ++i) {  // ops alternating: marks are merged whatever their op
    const char* op = i % 8 < 4 ? "ncclAllReduce" : "ncclBroadcast";
    std::snprintf(event, sizeof event,
                  R"(%s{"ph":"X","cat":"nccl","name":"%s","ts":%d,"dur":5,"pid":%d,"tid":1,)"
                  R"("args":{"op":"%s","seq":%d,"result":"ncclSuccess","comm":"3f2a9c"}})",
                  i == 0 ? "" : ",", op, i * 10, i % 4, op, i);
    trace += event;
  }
  trace += "]}";
  const std::string dom = dom_of(chromium, dir, synthetic_page(dir, trace));
  expect_rendered(dom);
  const int drawn = std::atoi(attribute_of(dom, "timeline", "data-slices").c_str());
  EXPECT_GT(drawn, 0);
  EXPECT_LE(drawn, 4 * 1400);
}

// No event at all (the timeline writer found no call): the page says so and draws the rest.
TEST(HtmlPage, NoEventsIsSaidAndTheRestIsDrawn) {
  REQUIRE_CHROMIUM();
  TempDir dir;
  const std::string dom = dom_of(chromium, dir, synthetic_page(dir, json::array()));
  expect_rendered(dom);
  EXPECT_NE(dom.find("No timeline events"), std::string::npos);
  EXPECT_NE(dom.find("No watched tensors"), std::string::npos);
}

// A real job: 4 ranks of train_program on the stand-in NCCL under the shim, batches 1-3 traced (TRAINSCOPE_TRACE_
// BATCHES), rank 0 putting an inf into batch 3, then `trainscope report RUN_DIR --html FILE`.
TEST(HtmlPage, ARealRunsPageLoadsWithItsSummaryAndPlotsOfTheTracedTensors) {
  REQUIRE_CHROMIUM();
  TempDir dir;
  ProcessOptions options = job_options(dir);
  options.env["TRAINSCOPE_TRACE_BATCHES"] = "1,2,3";
  options.env["TRAINSCOPE_STEP_MARKER"] = "every:3";
  const ProcessResult job =
      testing::run_process({TS_LAUNCH, "-n", "4", "--timeout", "60", "--", program("train_program"), "--steps", "5",
                            "--inject", "inf", "--rank", "0", "--step", "3"},
                           options);
  ASSERT_EQ(job.exit_code, 0) << job.err;
  const std::string dom = dom_of(chromium, dir, page_of_run(dir));
  expect_rendered(dom);
  EXPECT_NE(dom.find("<span class=\"title\">Summary of run job</span>"), std::string::npos);
  EXPECT_NE(dom.find("traces: batches 1"), std::string::npos) << "the summary's traces line";
  // A plot per rank, with points; rank 0's all-reduce output is inf in batch 3.
  EXPECT_EQ(count(dom, "class=\"plot-svg\""), 4u);
  EXPECT_GE(count(dom, "class=\"point\""), 4u * 3u);
  EXPECT_NE(dom.find("class=\"nonfinite-mark point\""), std::string::npos) << "the inf is marked";
  EXPECT_NE(dom.find("#1 ncclAllReduce output"), std::string::npos);
  // The timeline holds the job's calls (5 steps of 3 collectives, the communicator's set-up, on 4 ranks): its summary
  // line counts them. (What is drawn, data-slices, merges calls thinner than a pixel: fewer the faster the job ran.)
  const size_t said = dom.find(" slices on ");
  ASSERT_NE(said, std::string::npos) << "the timeline's summary line";
  size_t digits = said;
  while (digits > 0 && std::isdigit(static_cast<unsigned char>(dom[digits - 1])) != 0) --digits;
  EXPECT_GE(std::atoi(dom.substr(digits, said - digits).c_str()), 4 * 15);
  EXPECT_GT(std::atoi(attribute_of(dom, "timeline", "data-slices").c_str()), 0);
  EXPECT_EQ(attribute_of(dom, "timeline", "data-pending"), "0") << "every call returned";
  // Every rank is in the table of where it was at the end.
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_NE(dom.find("<tr><td>" + std::to_string(rank) + "</td><td>pid "), std::string::npos) << rank;
}

// A job `trainscope run` stopped at a mismatch (rank 2 all-reduces half the count in step 4): the page's summary
// shows the mismatch and the stops in red, every rank's row says how trainscope stopped it and the call it waits in,
// and the mismatch report is on the page, escaped.
TEST(HtmlPage, AStoppedRunsPageShowsWhatWentWrongInRed) {
  REQUIRE_CHROMIUM();
  TempDir dir;
  ProcessOptions options = job_options(dir);
  options.env["LD_PRELOAD"] = sanitized() ? std::optional<std::string>(TS_SANITIZER_RUNTIME) : std::nullopt;
  options.env["TRAINSCOPE_RUN_ID"] = std::nullopt;
  const ProcessResult job = testing::run_process({TS_TOOL,     "run",     "--dir",     dir.path() + "/runs",
                                                  "--run-id",  "job",     "--library", TS_SHIM,
                                                  "--",        TS_LAUNCH, "-n",        "4",
                                                  "--timeout", "60",      "--",        program("scenario_program"),
                                                  "--steps",   "10",      "--fault",   "half-count",
                                                  "--rank",    "2",       "--step",    "4"},
                                                 options);
  ASSERT_EQ(job.exit_code, 86) << job.err;
  const std::string dom = dom_of(chromium, dir, page_of_run(dir));
  expect_rendered(dom);
  EXPECT_NE(dom.find("<span class=\"line bad\">  mismatches: 1 (communicator "), std::string::npos);
  EXPECT_NE(dom.find("<span class=\"line bad\">  stopped: ranks 0–3 by trainscope (mismatch, status 86)"),
            std::string::npos);
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_NE(dom.find("<tr class=\"bad\"><td>" + std::to_string(rank) + "</td>"), std::string::npos) << rank;
  EXPECT_EQ(count(dom, "<td>stopped by trainscope (mismatch, status 86)</td><td>the call it waits in</td>"), 4u);
  EXPECT_NE(dom.find("<summary>mismatch-"), std::string::npos) << "the report is on the page";
  EXPECT_NE(dom.find("Operation: `ncclAllReduce`"), std::string::npos);
  // On the timeline, the call each rank never returned from is open to the end, and the verdict is marked.
  EXPECT_EQ(attribute_of(dom, "timeline", "data-pending"), "4");
  EXPECT_GE(std::atoi(attribute_of(dom, "timeline", "data-instants").c_str()), 4);
}

}  // namespace
}  // namespace trainscope
