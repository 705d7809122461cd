// The HTML page of a run: built from recorder files and reports written here by the real writers, with hand-made
// timeline events; checked as text (escaping, no URL, the summary's highlighted lines, where each rank was, the
// plotted series). The page's script is run in headless Chromium by tests/integration/html_integration_test.cc.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/html_report.h"
#include "analysis/run_summary.h"
#include "base/flight_record_format.h"
#include "base/flight_recorder_writer.h"
#include "reports/exchange_reports.h"
#include "reports/frame_report.h"
#include "support/text_files.h"
#include "tests/support/rank_recorder.h"
#include "tests/support/subprocess.h"
#include "tests/support/tensor_stats.h"

namespace trainscope::reports {
namespace {

using nlohmann::json;
using recorder::Op;

constexpr uint64_t kPageStart = 1700000000123456789ull;  // 2023-11-14 22:13:20.123456789 UTC
constexpr uint64_t kMillisecond = 1000000;
constexpr uint64_t kPageComm = 0x3f2a9c0011223344ull;
constexpr const char* kHostile = "</script><img src=x onerror=alert(1)><!--";

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t pos = text.find(part); pos != std::string::npos; pos = text.find(part, pos + 1)) ++n;
  return n;
}

recorder::Record call(Op op, uint64_t start_ns, uint64_t seq, int32_t rank) {
  recorder::Record r{};
  r.start_ns = start_ns;
  r.comm_id = kPageComm;
  r.seq = seq;
  r.count = 1024;
  r.rank = rank;
  r.nranks = 2;
  r.peer = recorder::kUnknown;
  r.redop = 0;
  r.dtype = 7;  // float32
  r.op = static_cast<uint16_t>(op);
  return r;
}

// Rank 0 made three all-reduces and exited; rank 1 is gone inside its third (host name hostile).
void write_recorder(const std::string& path, int32_t rank, bool hangs) {
  recorder::Writer w;
  ASSERT_EQ(testing::open_rank_recorder(w, path.c_str(),
                                        {.rank = rank,
                                         .world = 2,
                                         .pid = 1000001 + rank,
                                         .host = rank == 1 ? "node<b>1</b>" : "node0",
                                         .run_id = "run-42",
                                         .start_ns = kPageStart}),
            0);
  testing::add_live_comm(w, kPageComm, rank, 2, kPageStart);
  for (uint64_t seq = 1; seq <= 3; ++seq) {
    const auto pending = w.append(call(Op::kAllReduce, kPageStart + seq * 10 * kMillisecond, seq, rank));
    if (!(hangs && seq == 3))
      recorder::Writer::complete(pending, 0, kPageStart + seq * 10 * kMillisecond + 2 * kMillisecond);
  }
  if (hangs) {
    w.abandon();
  } else {
    w.close(kPageStart + 100 * kMillisecond);
  }
}

// A trace line as the engine writes it: text rows, and "stats" rows when `with_stats`.
std::string trace_line(uint64_t batch, const std::string& kind, const std::vector<FrameRow>& rows, bool with_stats) {
  Frame frame{"comm 3f2a9c all-reduce #" + std::to_string(batch), kind, rows, std::nullopt};
  json line = {{"batch_number", batch}, {"name", frame.name}, {"kind", kind}};
  json text = json::array();
  for (const FrameRow& row : rows) text.push_back(format_frame_row(row));
  line["rows"] = text;
  if (with_stats) line["stats"] = frame_json(frame)["rows"];
  return line.dump() + "\n";
}

// A float32 tensor's statistics; an infinite abs max is one +inf element.
stats::TensorStats page_tensor(double abs_max) { return testing::tensor_stats(abs_max, stats::DType::kFloat32, 1.0); }

class HtmlReport : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path() + "/run-42";
    ASSERT_EQ(mkdir(dir_.c_str(), 0700), 0);
  }
  std::string file(const std::string& name) const { return dir_ + "/" + name; }

  // Reads the run as `trainscope report` does (rank 1's process is gone).
  void read(recorder::RunDirectory* run, RunSummary* summary) {
    std::string error;
    ASSERT_TRUE(read_run_summary(dir_, summary, &error)) << error;
    if (recorder::read_run_directory(dir_, run, &error)) {
      recorder::ReportOptions options;
      options.liveness = [](const recorder::FileHeader&) { return recorder::Liveness::kGone; };
      note_recorders(summary, *run, options);
    }
  }

  // Rank 0 traced batches 1..3 (old files: text rows only), its all-reduce's output inf in batch 3.
  void write_old_trace() {
    std::string lines;
    for (uint64_t batch = 1; batch <= 3; ++batch) {
      lines += trace_line(batch, "ncclAllReduce",
                          {FrameRow::tensor("input[0]", page_tensor(0.1 * static_cast<double>(batch))),
                           FrameRow::tensor("output", page_tensor(batch == 3 ? std::numeric_limits<double>::infinity()
                                                                             : 0.4 * static_cast<double>(batch)))},
                          false);
      lines += trace_line(batch, "ncclBroadcast",
                          {FrameRow::none("input[0]"), FrameRow::tensor("output", page_tensor(0.5))}, false);
    }
    testing::write_text(file("trace-rank0.jsonl"), lines);
    testing::write_text(file("trace-rank0.txt"), "\n                  *** Starting batch number=1 ***\n");
  }

  testing::TempDir tmp_;
  std::string dir_;
};

TimelineWriter writer_of(const json& list) {
  return [list](const std::function<void(std::string_view)>& sink) {
    sink(json({{"traceEvents", list}, {"displayTimeUnit", "ms"}}).dump());
  };
}

TEST_F(HtmlReport, EveryTextFromTheFilesIsEscapedAndThePageNamesNoUrl) {
  write_recorder(file("rank0.tsrec"), 0, false);
  write_recorder(file("rank1.tsrec"), 1, true);
  const WrittenReport stop = write_report(dir_, "stop-rank1", std::string("stopping ") + kHostile + "\n",
                                          {{"kind", "stop"}, {"rank", 1}, {"text", kHostile}});
  ASSERT_TRUE(stop.error.empty()) << stop.error;
  recorder::RunDirectory run;
  RunSummary summary;
  read(&run, &summary);
  const json list = json::array({{{"ph", "X"},
                                  {"name", kHostile},
                                  {"ts", 0},
                                  {"dur", 5},
                                  {"pid", 0},
                                  {"tid", 1},
                                  {"args", {{"python", kHostile}}}}});
  const std::string page = make_html_page(run, summary, writer_of(list));
  // Only the page's own blocks open and close scripts; a file's text never does.
  EXPECT_EQ(count(page, "<script"), 3u);
  EXPECT_EQ(count(page, "</script>"), 3u);
  EXPECT_EQ(count(page, "<img"), 0u);
  EXPECT_EQ(count(page, "<!--"), 0u);
  EXPECT_NE(page.find("stopping &lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;&lt;!--"), std::string::npos);
  EXPECT_NE(page.find("node&lt;b&gt;1&lt;/b&gt;"), std::string::npos) << "the host name from the recorder";
  // The events are embedded as JSON, '<' escaped.
  EXPECT_NE(page.find(R"("name":"\u003c/script>\u003cimg src=x onerror=alert(1)>\u003c!--")"), std::string::npos);
  // Self-contained: nothing is fetched, no link leaves the page.
  for (const char* url : {"http:", "https:", "src=\"", "href=\"/", "href=\"h", "@import", "url("})
    EXPECT_EQ(page.find(url), std::string::npos) << url;
}

TEST_F(HtmlReport, TheSummaryIsShownWithTheWorstLinesHighlightedAndWhereEachRankWasAtTheEnd) {
  write_recorder(file("rank0.tsrec"), 0, false);
  write_recorder(file("rank1.tsrec"), 1, true);
  recorder::RunDirectory run;
  RunSummary summary;
  read(&run, &summary);
  const std::string page = make_html_page(run, summary, writer_of(json::array()));
  EXPECT_NE(page.find("<span class=\"title\">Summary of run run-42</span>"), std::string::npos) << page;
  // Every summary line is on the page; the one saying rank 1 never returned is highlighted.
  for (const std::string& line : testing::split_lines(format_summary_text(summary)))
    EXPECT_NE(page.find(html_escape(line) + "</span>"), std::string::npos) << line;
  EXPECT_NE(page.find("<span class=\"line bad\">  processes: 2 recorded"), std::string::npos) << page;
  // The table: rank 0's last call returned, rank 1 waits in all-reduce #3.
  EXPECT_NE(page.find("<td>0</td><td>pid 1000001 on node0</td><td>exited</td><td>ncclAllReduce comm 3f2a9c #3 "
                      "(1024 float32), 22:13:20.153456 UTC, ncclSuccess after 2.00ms</td><td></td></tr>"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("<tr class=\"bad\"><td>1</td><td>pid 1000002 on node&lt;b&gt;1&lt;/b&gt;</td><td>crashed or "
                      "killed</td><td>the call it waits in</td><td>"
                      "ncclAllReduce comm 3f2a9c #3 (1024 float32) since 22:13:20.153456 UTC</td></tr>"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("flight recorders (the last 10 calls of every process)"), std::string::npos);
}

TEST_F(HtmlReport, TracesArePlottedPerRankFromTextRowsOrStatsWithTheirInfBatches) {
  write_old_trace();
  // Rank 2: new lines with stats (and a line that is not JSON, skipped).
  std::string lines = trace_line(4, "ncclAllReduce", {FrameRow::tensor("output", page_tensor(2.0))}, true);
  lines += "{not json\n";
  lines += trace_line(5, "ncclAllReduce",
                      {FrameRow::tensor("output", page_tensor(std::numeric_limits<double>::infinity()))}, true);
  testing::write_text(file("trace-rank2.jsonl"), lines);
  recorder::RunDirectory run;
  RunSummary summary;
  read(&run, &summary);
  const json plots = tensor_plots_json(summary);
  ASSERT_EQ(plots.size(), 2u) << plots.dump(2);
  const json& rank0 = plots[0];
  EXPECT_EQ(rank0["rank"], 0);
  EXPECT_EQ(rank0["source"], "trace-rank0.jsonl");
  EXPECT_EQ(rank0["x_label"], "batch");
  EXPECT_EQ(rank0["series_total"], 3) << "the None row is no series";
  ASSERT_EQ(rank0["series"].size(), 3u);
  EXPECT_EQ(rank0["series"][0]["label"], "#1 ncclAllReduce input[0]");
  EXPECT_EQ(rank0["series"][1]["label"], "#1 ncclAllReduce output");
  EXPECT_EQ(rank0["series"][2]["label"], "#2 ncclBroadcast output");
  EXPECT_EQ(rank0["series"][0]["points"], json::parse("[[1, 0.1], [2, 0.2], [3, 0.3]]"));
  EXPECT_EQ(rank0["series"][1]["points"], json::parse(R"([[1, 0.4], [2, 0.8], [3, "inf"]])"));
  EXPECT_EQ(rank0["series"][1]["nonfinite"], true);
  EXPECT_EQ(rank0["nonfinite_x"], json::parse("[3]"));
  const json& rank2 = plots[1];
  EXPECT_EQ(rank2["rank"], 2);
  EXPECT_EQ(rank2["series"][0]["points"], json::parse(R"([[4, 2.0], [5, "inf"]])"));
  EXPECT_EQ(rank2["nonfinite_x"], json::parse("[5]"));
  EXPECT_EQ(rank2["note"], "1 unreadable line(s) skipped");
  // And they are on the page.
  const std::string page = make_html_page(run, summary, writer_of(json::array()));
  EXPECT_NE(page.find(R"("label":"#1 ncclAllReduce output","nonfinite":true,"points":[[1,0.4],[2,0.8],[3,"inf"]])"),
            std::string::npos);
}

TEST_F(HtmlReport, ManySeriesAreCappedKeepingThoseWithInfAndTheLargest) {
  std::string lines;
  std::vector<FrameRow> rows;
  for (int i = 0; i < 20; ++i) {
    const double value = i == 3 ? std::numeric_limits<double>::infinity() : static_cast<double>(i + 1);
    rows.push_back(FrameRow::tensor("t" + std::to_string(i), page_tensor(value)));
  }
  testing::write_text(file("trace-rank0.jsonl"), trace_line(1, "k", rows, true));
  recorder::RunDirectory run;
  RunSummary summary;
  read(&run, &summary);
  const json plots = tensor_plots_json(summary);
  ASSERT_EQ(plots.size(), 1u);
  EXPECT_EQ(plots[0]["series_total"], 20);
  std::vector<std::string> labels;
  for (const json& s : plots[0]["series"]) labels.push_back(s["label"]);
  std::vector<std::string> expected = {"#1 k t3"};
  for (int i = 9; i < 20; ++i) expected.push_back("#1 k t" + std::to_string(i));
  EXPECT_EQ(labels, expected);
  EXPECT_EQ(plots[0]["note"], "8 more series not shown (those with inf/nan first, then the largest are)");
}

TEST_F(HtmlReport, WithoutATraceTheNonfiniteReportsFramesArePlotted) {
  write_old_trace();  // rank 0 has a trace: its report is not plotted again
  for (int rank : {0, 1}) {
    DetectionReport report;
    report.rank = rank;
    report.batch_number = 7;
    report.frames = {
        Frame{"comm 3f2a9c all-reduce #20", "ncclAllReduce", {FrameRow::tensor("output", page_tensor(0.5))}},
        Frame{"comm 3f2a9c all-reduce #21",
              "ncclAllReduce",
              {FrameRow::tensor("output", page_tensor(std::numeric_limits<double>::infinity()))}}};
    const WrittenReport written = write_report(dir_, "nonfinite-rank" + std::to_string(rank),
                                               format_detection_text(report), detection_json(report));
    ASSERT_TRUE(written.error.empty()) << written.error;
  }
  recorder::RunDirectory run;
  RunSummary summary;
  read(&run, &summary);
  const json plots = tensor_plots_json(summary);
  ASSERT_EQ(plots.size(), 2u) << plots.dump(2);
  EXPECT_EQ(plots[0]["source"], "trace-rank0.jsonl");
  const json& rank1 = plots[1];
  EXPECT_EQ(rank1["rank"], 1);
  EXPECT_EQ(rank1["source"], "nonfinite-rank1.json");
  EXPECT_EQ(rank1["x_label"], "frame");
  EXPECT_EQ(rank1["x_names"], json::parse(R"(["comm 3f2a9c all-reduce #20", "comm 3f2a9c all-reduce #21"])"));
  EXPECT_EQ(rank1["series"][0]["label"], "output");
  EXPECT_EQ(rank1["series"][0]["points"], json::parse(R"([[1, 0.5], [2, "inf"]])"));
  EXPECT_EQ(rank1["nonfinite_x"], json::parse("[2]"));
  EXPECT_EQ(rank1["note"],
            "no trace of this rank: the frames of nonfinite-rank1.json (the last ones before the inf/nan, batch 7)");
}

// A timeline past the cap is not embedded: the page says where to look instead, and stays small.
TEST_F(HtmlReport, ATimelineOverTheCapIsLeftToTheTraceFile) {
  recorder::RunDirectory run;
  RunSummary summary;
  read(&run, &summary);
  const std::string event = R"({"ph":"X","name":"ncclAllReduce","ts":1,"dur":1,"pid":0,"tid":1},)";
  std::string piece;
  while (piece.size() < (size_t{1} << 20)) piece += event;
  size_t written = 0;
  const std::string page = make_html_page(run, summary, [&](const std::function<void(std::string_view)>& sink) {
    sink(R"({"traceEvents":[)");
    while (written <= kMaxEmbeddedTimelineBytes) {
      sink(piece);
      written += piece.size();
    }
    sink(R"({}]})");
  });
  EXPECT_LT(page.size(), size_t{1} << 20);
  EXPECT_NE(page.find(R"({"otherData":{"note":"the timeline is larger than 64 MiB: open the file of `trainscope )"
                      R"(report RUN_DIR --trace FILE` in ui.perfetto.dev instead"},"traceEvents":[]})"),
            std::string::npos);
}

TEST_F(HtmlReport, ThePageIsWrittenPrivateAndAnUnwritablePathIsAnError) {
  write_recorder(file("rank0.tsrec"), 0, false);
  recorder::RunDirectory run;
  RunSummary summary;
  read(&run, &summary);
  const std::string out = tmp_.path() + "/page.html";
  std::string error;
  ASSERT_TRUE(write_html_report(run, summary, out, &error)) << error;
  struct stat st;
  ASSERT_EQ(stat(out.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_NE(testing::read_file(out).find("</html>"), std::string::npos);
  ASSERT_TRUE(write_html_report(run, summary, out, &error)) << "replaced: " << error;

  const std::string missing = tmp_.path() + "/no/such/dir/page.html";
  EXPECT_FALSE(write_html_report(run, summary, missing, &error));
  EXPECT_EQ(error, missing + ": No such file or directory");
  const std::string link = tmp_.path() + "/link.html";
  ASSERT_EQ(symlink(out.c_str(), link.c_str()), 0);
  EXPECT_FALSE(write_html_report(run, summary, link, &error));
  EXPECT_EQ(error, link + ": it is a symbolic link, and trainscope never writes through one");
}

}  // namespace
}  // namespace trainscope::reports
