// The run summary: report files written here by the real writers, summary lines checked to the character, broken
// files named and survived, the JSON's keys, and `trainscope report` on a run directory that holds only reports.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/run_summary.h"
#include "base/fingerprint.h"
#include "base/flight_record_format.h"
#include "reports/exchange_reports.h"
#include "reports/frame_report.h"
#include "support/text_files.h"
#include "tests/support/subprocess.h"
#include "tests/support/tensor_stats.h"

namespace trainscope::reports {
namespace {

using nlohmann::json;
using recorder::ProcessOverview;
using recorder::ProcessRef;

constexpr uint64_t kComm = 0x3f2a9c0011223344ull;
constexpr uint64_t kOtherComm = 0x239016aabbccddeeull;
constexpr double kInf = std::numeric_limits<double>::infinity();

// A run directory "run-42" inside a fresh temporary directory.
class RunDir {
 public:
  RunDir() : path_(tmp_.path() + "/run-42") { EXPECT_EQ(mkdir(path_.c_str(), 0700), 0); }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  testing::TempDir tmp_;
  std::string path_;
};

void write_pair(const RunDir& dir, const std::string& base, const std::string& text, const json& j) {
  const WrittenReport written = write_report(dir.path(), base, text, j);
  ASSERT_TRUE(written.error.empty()) << written.error;
  ASSERT_EQ(written.text_path, dir.file(base + ".txt"));
}

void write_manifest(const RunDir& dir, int world_size, const std::vector<std::string>& warnings = {}) {
  testing::write_text(
      dir.file("manifest.json"),
      json({{"world_size", world_size}, {"ranks", json::array()}, {"warnings", warnings}}).dump(2) + "\n");
}

stats::TensorStats tensor(double abs_max) { return testing::tensor_stats(abs_max); }

Frame allreduce_frame(uint64_t call, bool input_inf, bool output_inf) {
  const std::string name = "comm 3f2a9c ncclAllReduce #" + std::to_string(call);
  return Frame{name,
               "ncclAllReduce",
               {FrameRow::tensor("input[0]", tensor(input_inf ? kInf : 2.5)),
                FrameRow::tensor("output", tensor(output_inf ? kInf : 10.0))}};
}

// Rank 3 sends inf into all-reduce #812 of batch 12; ranks 0-2 and 4-7 first see it in that call's output.
void write_origin_and_detections(const RunDir& dir, const std::vector<int32_t>& ranks = {0, 1, 2, 3, 4, 5, 6, 7}) {
  std::vector<FirstNonfinite> firsts;
  for (int32_t rank : ranks) {
    const bool sender = rank == 3;
    firsts.push_back({rank, 12, kComm, 812, "ncclAllReduce", sender ? NonfiniteWhere::kInput : NonfiniteWhere::kOutput,
                      NonfiniteKind::kInf});
    DetectionReport detection;
    detection.rank = rank;
    detection.batch_number = 12;
    detection.frames = {allreduce_frame(811, false, false), allreduce_frame(812, sender, true)};
    if (sender) {  // the stacks the reports show after their text: no line of the summary
      firsts.back().stack.python = {{"train.py", 88, "backward"}};
      firsts.back().stack.native = {"main+0x12 (train+0x1012)"};
      detection.first_nonfinite_frame = detection.frames.back().name;
      detection.first_nonfinite_stack = firsts.back().stack;
    }
    write_pair(dir, "nonfinite-rank" + std::to_string(rank), format_detection_text(detection),
               detection_json(detection));
  }
  write_pair(dir, "origin", format_origin_text(firsts), origin_json(firsts));
  EXPECT_TRUE(format_origin_text(firsts).ends_with(
      "  File \"train.py\", line 88, in backward\n  #0 main+0x12 (train+0x1012)\n"));
}

MismatchReport count_mismatch() {
  MismatchReport m;
  m.comm_id = kOtherComm;
  m.seq = 24;
  m.op = static_cast<uint16_t>(recorder::Op::kAllReduce);
  m.differences = {"count"};
  m.detected_ns = 1700000000000000000ull;
  for (int32_t rank = 0; rank < 2; ++rank) {
    CallLine line;
    line.global_rank = rank;
    line.comm_rank = rank;
    line.present = true;
    line.call.comm_id = kOtherComm;
    line.call.seq = 24;
    line.call.count = rank == 0 ? 1048576 : 524288;
    line.call.op = m.op;
    line.call.dtype = 6;
    line.call.redop = 0;
    line.call.peer = -1;
    m.calls.push_back(line);
  }
  return m;
}

RunSummary read(const RunDir& dir) {
  RunSummary summary;
  std::string error;
  EXPECT_TRUE(read_run_summary(dir.path(), &summary, &error)) << error;
  return summary;
}

ProcessOverview exited(size_t n) {
  ProcessOverview p;
  p.recorded = n;
  p.exited = n;
  return p;
}

// The names `trainscope report --trace/--html` refuses to write in a run directory: those of the run's own files.
TEST(RunSummary, TheRunsOwnFileNamesAreKnown) {
  for (const char* name : {"rank-0.pid-12.tsrec",
                           "pid-7.tsrec",
                           "rank-0.pid-12.log",
                           "manifest.json",
                           "job-exit.json",
                           "rank-1.pid-3.no-nccl-calls.json",
                           "trace-rank2.txt",
                           "trace-rank2.jsonl",
                           "origin.txt",
                           "origin.json",
                           "origin-2.json",
                           "mismatch-3f2a9c-5.json",
                           "desync-3f2a9c-5.txt",
                           "vanished-rank3.json",
                           "nonfinite-rank1.txt",
                           "overflow-streak-rank2.json",
                           "near-overflow-rank1.json",
                           "stop-rank0.txt",
                           "cuda-error-rank3.json",
                           "manifest.json.tmp.812.0",
                           ".mismatch-3f2a9c-5.812.0.part-json"})
    EXPECT_TRUE(is_run_file_name(name)) << name;
  for (const char* name : {"page.html", "timeline.json", "trace.json", "notes.txt", "run.html", "mismatch.html",
                           "originals.json", "rank-0.pid-12.tsrec.html"})
    EXPECT_FALSE(is_run_file_name(name)) << name;
}

TEST(RunSummary, OriginAndFirstInfNan) {
  RunDir dir;
  write_origin_and_detections(dir);
  write_manifest(dir, 8);
  const RunSummary summary = read(dir);
  EXPECT_EQ(format_summary_text(summary),
            "Summary of run run-42\n"
            "  inf/nan origin: rank 3 sent inf in all-reduce call #812 in batch 12; ranks 0\u20132 and 4\u20137 first "
            "saw it in that call's output\n"
            "  first inf/nan: batch 12 on ranks 0\u20137\n"
            "  mismatches: none\n"
            "  desyncs: none\n"
            "  vanished ranks: none\n"
            "  overflow streaks: none\n"
            "  near overflow: none\n"
            "  stopped: none\n"
            "  processes: no flight recorder (*.tsrec) in the run directory\n"
            "  setup: world size 8, no warnings\n");
  EXPECT_TRUE(summary.unreadable.empty());

  const json j = summary_json(summary);
  EXPECT_FALSE(j["nothing_wrong"].get<bool>());
  EXPECT_EQ(j["origin"]["file"], "origin.json");
  EXPECT_EQ(j["origin"]["call_number"], 812);
  EXPECT_EQ(j["origin"]["senders"], json::array({3}));
  ASSERT_EQ(j["first_nonfinite"].size(), 8u);
  EXPECT_EQ(j["first_nonfinite"][3]["rank"], 3);
  EXPECT_EQ(j["first_nonfinite"][3]["batch_number"], 12);
  EXPECT_EQ(j["first_nonfinite"][3]["frame"], "comm 3f2a9c ncclAllReduce #812");
  EXPECT_EQ(j["first_nonfinite"][3]["label"], "input[0]");
  EXPECT_EQ(j["first_nonfinite"][0]["label"], "output");
}

TEST(RunSummary, WithoutAnOriginTheFirstFrameSaysWhere) {
  RunDir dir;
  DetectionReport detection;
  detection.rank = 0;
  detection.batch_number = 7;
  detection.frames = {allreduce_frame(40, false, false), allreduce_frame(41, false, true)};
  write_pair(dir, "nonfinite-rank0", format_detection_text(detection), detection_json(detection));
  const std::string text = format_summary_text(read(dir));
  EXPECT_TRUE(testing::contains(text, "  inf/nan origin: not reported (no origin.txt: it needs the coordinator)\n"))
      << text;
  EXPECT_TRUE(testing::contains(
      text, "  first inf/nan: batch 7 on rank 0; rank 0 saw it in comm 3f2a9c ncclAllReduce #41 output\n"))
      << text;
}

// A one-process job started without a launcher has no rank: its reports are named by its pid, and so is it.
TEST(RunSummary, AProcessWithoutARankIsNamedByItsPid) {
  RunDir dir;
  DetectionReport detection;
  detection.rank = -1;
  detection.batch_number = 2;
  detection.frames = {allreduce_frame(40, false, false), allreduce_frame(41, false, true)};
  write_pair(dir, "nonfinite-pid4242", format_detection_text(detection), detection_json(detection));
  const json near = {{"kind", "near_overflow"},
                     {"rank", -1},
                     {"warnings",
                      {{{"frame", "comm 3f2a9c ncclAllReduce #39"},
                        {"label", "output"},
                        {"batch_number", 2},
                        {"abs_max", 6.27e4},
                        {"limit", 65504.0},
                        {"fraction", 6.27e4 / 65504.0},
                        {"dtype", "float16"}}}}};
  write_pair(dir, "near-overflow-pid4242", "near overflow\n", near);
  write_pair(dir, "step-skipped-pid4242", "skipped\n",
             {{"kind", "step_skipped"}, {"rank", -1}, {"by", "GradScaler"}, {"batches", {2}}});
  const RunSummary summary = read(dir);
  ASSERT_EQ(summary.reports.size(), 3u);
  for (const ReportFiles& r : summary.reports) {
    EXPECT_EQ(r.rank, -1) << r.base_name;
    EXPECT_EQ(r.pid, 4242) << r.base_name;
  }
  const std::string text = format_summary_text(summary);
  EXPECT_TRUE(
      testing::contains(text,
                        "  first inf/nan: batch 2 on pid 4242; pid 4242 saw it in comm 3f2a9c ncclAllReduce #41 "
                        "output; the loss scaler skipped that batch's optimizer step (see skipped steps)\n"))
      << text;
  EXPECT_TRUE(testing::contains(
      text, "  near overflow: 1 warning on pid 4242 (batch 2, comm 3f2a9c ncclAllReduce #39 output 6.27e+04 = "))
      << text;
  EXPECT_TRUE(testing::contains(text, "  skipped steps: pid 4242, batch 2 (")) << text;
  EXPECT_FALSE(testing::contains(text, "rank ?")) << text;
  EXPECT_FALSE(testing::contains(text, "unknown rank")) << text;
  EXPECT_TRUE(testing::contains(text, "  inf/nan origin: not reported (no origin.txt: it needs the coordinator)\n"))
      << text;

  // With its recorder, the run is known to be that one process: no other rank can have come first.
  RunSummary one = summary;
  one.processes = recorder::ProcessOverview{};
  one.processes->recorded = 1;
  one.processes->exited = 1;
  EXPECT_TRUE(testing::contains(format_summary_text(one),
                                "  inf/nan origin: one process in this run: its first inf/nan is the origin\n"))
      << format_summary_text(one);
}

TEST(RunSummary, MismatchOnly) {
  RunDir dir;
  const MismatchReport m = count_mismatch();
  write_pair(dir, mismatch_base_name(m), format_mismatch_text(m), mismatch_json(m));
  RunSummary summary = read(dir);
  summary.processes = exited(2);
  EXPECT_EQ(format_summary_text(summary),
            "Summary of run run-42\n"
            "  inf/nan origin: none\n"
            "  first inf/nan: none\n"
            "  mismatches: 1 (communicator 239016 call #24 `ncclAllReduce`: count differs)\n"
            "  desyncs: none\n"
            "  vanished ranks: none\n"
            "  overflow streaks: none\n"
            "  near overflow: none\n"
            "  stopped: none\n"
            "  processes: 2 recorded: 2 exited; every call returned\n"
            "  setup: no manifest.json\n");
  const json j = summary_json(summary);
  ASSERT_EQ(j["mismatches"].size(), 1u);
  EXPECT_EQ(j["mismatches"][0]["file"], "mismatch-239016-24.json");
  EXPECT_EQ(j["mismatches"][0]["communicator"], "239016aabbccddee");
  EXPECT_EQ(j["mismatches"][0]["differences"], json::array({"count"}));
  EXPECT_EQ(j["processes"]["exited"], 2);
}

TEST(RunSummary, PointToPointDesyncIsASendAndNotTheCollectiveOfTheSameNumber) {
  RunDir dir;
  // Rank 1 waits in its 7th receive from rank 0, which destroyed the communicator; later, the collective call #7 of
  // the same communicator is stuck too: two desyncs.
  DesyncReport p2p;
  p2p.comm_id = kComm;
  p2p.seq = 7;
  p2p.op = static_cast<uint16_t>(recorder::Op::kRecv);
  p2p.point_to_point = true;
  p2p.sender = 0;
  p2p.receiver = 1;
  p2p.certain = true;
  p2p.detected_ns = 1700000001000000000ull;
  WaitingRank waiting;
  waiting.global_rank = 1;
  waiting.comm_rank = 1;
  waiting.seq = 7;
  waiting.op = p2p.op;
  p2p.waiting.push_back(waiting);
  MissingRank missing;
  missing.global_rank = 0;
  missing.comm_rank = 0;
  missing.state = LaggardState::kDestroyed;
  p2p.missing.push_back(missing);
  write_pair(dir, desync_base_name(p2p), format_desync_text(p2p), desync_json(p2p));
  DesyncReport collective = p2p;
  collective.point_to_point = false;
  collective.op = static_cast<uint16_t>(recorder::Op::kAllReduce);
  collective.detected_ns += 1000;
  write_pair(dir, desync_base_name(collective), format_desync_text(collective), desync_json(collective));
  const std::string line =
      "  desyncs: 2 (first: communicator 3f2a9c send #7 `ncclSend/ncclRecv`: rank 1 waits for rank 0 (destroyed the "
      "communicator))\n";
  RunSummary summary = read(dir);
  EXPECT_NE(format_summary_text(summary).find(line), std::string::npos) << format_summary_text(summary);
  const json j = summary_json(summary);
  ASSERT_EQ(j["desyncs"].size(), 2u);
  EXPECT_EQ(j["desyncs"][0]["file"], "desync-3f2a9c-send-0-1-7.json");
  EXPECT_EQ(j["desyncs"][0]["point_to_point"], true);
  EXPECT_EQ(j["desyncs"][0]["sender"], 0);
  EXPECT_EQ(j["desyncs"][0]["receiver"], 1);
  EXPECT_EQ(j["desyncs"][0]["seq"], 7);
  EXPECT_EQ(j["desyncs"][1]["point_to_point"], false);
  EXPECT_TRUE(j["desyncs"][1]["sender"].is_null());
  // Without its JSON, the file's name still says which pair and which send.
  ASSERT_EQ(::unlink(dir.file("desync-3f2a9c-send-0-1-7.json").c_str()), 0);
  summary = read(dir);
  const json without = summary_json(summary);
  bool found = false;
  for (const json& item : without["desyncs"]) {
    if (item["point_to_point"] != true) continue;
    found = true;
    EXPECT_EQ(item["sender"], 0);
    EXPECT_EQ(item["receiver"], 1);
    EXPECT_EQ(item["seq"], 7);
    EXPECT_EQ(item["communicator"], "3f2a9c");
  }
  EXPECT_TRUE(found) << without.dump(2);
  EXPECT_NE(format_summary_text(summary).find("  desyncs: 2 (first: "), std::string::npos)
      << format_summary_text(summary);
}

TEST(RunSummary, NothingWrongSaysSo) {
  RunDir dir;
  write_manifest(dir, 4);
  for (int rank = 0; rank < 4; ++rank) {
    const json stop = {{"kind", "stop"},
                       {"rank", rank},
                       {"reason", "abort_after_batch"},
                       {"batch_number", 5},
                       {"message", format_abort_after_batch(5)}};
    write_pair(dir, "stop-rank" + std::to_string(rank), format_abort_after_batch(5), stop);
  }
  RunSummary summary = read(dir);
  summary.processes = exited(4);
  EXPECT_EQ(format_summary_text(summary),
            "Summary of run run-42\n"
            "  nothing went wrong: no inf/nan, mismatch, desync, vanished rank or crash found\n"
            "  inf/nan origin: none\n"
            "  first inf/nan: none\n"
            "  mismatches: none\n"
            "  desyncs: none\n"
            "  vanished ranks: none\n"
            "  overflow streaks: none\n"
            "  near overflow: none\n"
            "  stopped: ranks 0\u20133 after batch 5 (TRAINSCOPE_ABORT_AFTER_BATCH)\n"
            "  processes: 4 recorded: 4 exited; every call returned\n"
            "  setup: world size 4, no warnings\n");
  EXPECT_TRUE(summary_json(summary)["nothing_wrong"].get<bool>());
}

// Detection is off in traced batches (as in the seed): an inf that only a trace shows is said in the traces line, and
// the run is not clean.
TEST(RunSummary, InfInATracedBatchIsSaidAndTheRunIsNotClean) {
  RunDir dir;
  write_manifest(dir, 4);
  for (int rank = 0; rank < 4; ++rank) {
    std::string trace;
    for (uint64_t batch : {1, 2, 3}) {
      trace += format_trace_batch_start(batch);
      trace += format_trace_frame(allreduce_frame(batch * 10, rank == 1 && batch == 2, rank < 2 && batch >= 2));
    }
    testing::write_text(dir.file("trace-rank" + std::to_string(rank) + ".txt"), trace);
  }
  RunSummary summary = read(dir);
  summary.processes = exited(4);
  const std::string text = format_summary_text(summary);
  EXPECT_FALSE(testing::contains(text, "nothing went wrong")) << text;
  EXPECT_TRUE(testing::contains(
      text,
      "  traces: batches 1\u20133 on ranks 0\u20133; inf/nan in traced batches 2 and 3 on ranks 0 and 1 "
      "(detection is off in traced batches)\n"))
      << text;
  const json traces = summary_json(summary)["traces"];
  ASSERT_EQ(traces.size(), 4u);
  EXPECT_EQ(traces[1]["nonfinite_batches"], json({2, 3}));
  EXPECT_EQ(traces[3]["nonfinite_batches"], json::array());
  EXPECT_FALSE(summary_json(summary)["nothing_wrong"].get<bool>());
}

TEST(RunSummary, EveryOtherKindInOneLine) {
  RunDir dir;
  write_manifest(dir, 8, {"GPUs of different models: A100 on ranks 0-3, H100 on ranks 4-7."});

  DesyncReport desync;
  desync.comm_id = kComm;
  desync.seq = 813;
  desync.op = static_cast<uint16_t>(recorder::Op::kAllReduce);
  desync.certain = true;
  desync.detected_ns = 1700000001000000000ull;
  for (int32_t rank = 0; rank < 3; ++rank) {
    WaitingRank waiting;
    waiting.global_rank = rank;
    waiting.comm_rank = rank;
    waiting.seq = 813;
    waiting.op = desync.op;
    desync.waiting.push_back(waiting);
  }
  MissingRank missing;
  missing.global_rank = 3;
  missing.comm_rank = 3;
  missing.state = LaggardState::kExited;
  missing.process_gone = true;
  desync.missing.push_back(missing);
  write_pair(dir, desync_base_name(desync), format_desync_text(desync), desync_json(desync));
  desync.repeat = 2;  // the same stuck call reported again: still one desync
  write_pair(dir, desync_base_name(desync), format_desync_text(desync), desync_json(desync));

  VanishedReport vanished;
  vanished.global_rank = 5;
  vanished.host = "node-b";
  vanished.pid = 4242;
  vanished.has_last_call = true;
  vanished.last_call.comm_id = kComm;
  vanished.last_call.seq = 24;
  vanished.last_call.op = static_cast<uint16_t>(recorder::Op::kAllReduce);
  write_pair(dir, vanished_base_name(vanished), format_vanished_text(vanished), vanished_json(vanished));

  OverflowStreakReport streak;
  streak.rank = 2;
  for (uint64_t b = 40; b <= 44; ++b) streak.batches.push_back({b, "comm 3f2a9c ncclAllReduce #9", "output"});
  write_pair(dir, "overflow-streak-rank2", format_overflow_streak_text(streak), overflow_streak_json(streak));

  json near = {{"kind", "near_overflow"}, {"rank", 1}, {"warnings", json::array()}};
  std::string near_text;
  for (uint64_t batch : {4, 3}) {
    const std::string frame = "comm 3f2a9c ncclAllReduce #" + std::to_string(70 + batch * 2 + 1);
    near["warnings"].push_back({{"frame", frame},
                                {"label", "output"},
                                {"batch_number", batch},
                                {"abs_max", 6.27e4},
                                {"limit", 65504.0},
                                {"fraction", 6.27e4 / 65504.0},
                                {"dtype", "float16"}});
    near_text += check_near_overflow(tensor(6.27e4), frame, "output").text;
  }
  write_pair(dir, "near-overflow-rank1", near_text, near);

  const json stop = {{"kind", "stop"},
                     {"rank", 1},
                     {"reason", "nonfinite"},
                     {"batch_number", 12},
                     {"message", format_nonfinite_abort(12, "comm 3f2a9c ncclAllReduce #812", "output")}};
  write_pair(dir, "stop-rank1", stop["message"].get<std::string>(), stop);

  for (int rank = 0; rank < 2; ++rank) {
    std::string trace;
    for (uint64_t batch : {1, 2}) {
      trace += format_trace_batch_start(batch);
      trace += format_trace_frame(allreduce_frame(batch * 10, false, false));
    }
    testing::write_text(dir.file("trace-rank" + std::to_string(rank) + ".txt"), trace);
    testing::write_text(dir.file("trace-rank" + std::to_string(rank) + ".jsonl"), "{}\n");
  }

  RunSummary summary = read(dir);
  ProcessOverview processes;
  processes.recorded = 3;
  processes.exited = 2;
  processes.crashed = {ProcessRef{5, 4242}};
  processes.did_not_return = {ProcessRef{5, 4242}};
  summary.processes = processes;
  EXPECT_EQ(format_summary_text(summary),
            "Summary of run run-42\n"
            "  inf/nan origin: none\n"
            "  first inf/nan: none\n"
            "  mismatches: none\n"
            "  desyncs: 1 (communicator 3f2a9c call #813 `ncclAllReduce`: ranks 0\u20132 wait for rank 3 (exited))\n"
            "  vanished ranks: rank 5 (host node-b, pid 4242; last call #24 `ncclAllReduce` on communicator 3f2a9c)\n"
            "  overflow streaks: rank 2, batches 40\u201344 (5 in a row)\n"
            "  near overflow: 2 warnings on rank 1 (first: batch 3, comm 3f2a9c ncclAllReduce #77 output 6.27e+04 = "
            "96% of float16's max)\n"
            "  stopped: rank 1 on inf/nan in batch 12 (" +
                std::string(kAbortOnNonfiniteVariable) +
                ")\n"
                "  processes: 3 recorded: 2 exited, 1 crashed or killed (rank 5); a call never returned on rank 5\n"
                "  setup: world size 8; 1 warning: GPUs of different models: A100 on ranks 0-3, H100 on ranks 4-7.\n"
                "  traces: batches 1 and 2 on ranks 0 and 1\n");

  // Full reports: desyncs (both), vanished, streak, near overflow, stop — each under its file's name.
  const std::string reports = format_report_texts(summary);
  std::vector<size_t> at;
  for (const char* header :
       {"=== desync-3f2a9c-813.txt ===", "=== desync-3f2a9c-813-2.txt ===", "=== vanished-rank5.txt ===",
        "=== overflow-streak-rank2.txt ===", "=== near-overflow-rank1.txt ===", "=== stop-rank1.txt ==="}) {
    at.push_back(reports.find(header));
    EXPECT_NE(at.back(), std::string::npos) << header << "\n" << reports;
  }
  EXPECT_TRUE(std::is_sorted(at.begin(), at.end())) << reports;
  EXPECT_TRUE(testing::contains(reports, format_vanished_text(vanished)));
  EXPECT_FALSE(testing::contains(reports, "Starting batch number")) << "traces are listed, not printed";
}

TEST(RunSummary, BrokenFilesAreNamedAndTheRestGoesOn) {
  RunDir dir;
  std::vector<FirstNonfinite> firsts = {
      {3, 12, kComm, 812, "ncclAllReduce", NonfiniteWhere::kInput, NonfiniteKind::kNan},
      {0, 12, kComm, 812, "ncclAllReduce", NonfiniteWhere::kOutput, NonfiniteKind::kNan}};
  testing::write_text(dir.file("origin.txt"), format_origin_text(firsts));
  testing::write_text(dir.file("origin.json"), origin_json(firsts).dump(2).substr(0, 40));  // crashed mid-write
  const MismatchReport m = count_mismatch();
  testing::write_text(dir.file("mismatch-239016-24.txt"), format_mismatch_text(m));
  testing::write_text(dir.file("mismatch-239016-24.json"), "not json at all");
  testing::write_text(dir.file("stop-rank1.json"), R"({"kind": "desync"})");
  testing::write_text(dir.file("nonfinite-rank2.txt"), "");
  testing::write_text(dir.file("nonfinite-rank4.json"), std::string(100000, '['));
  testing::write_text(dir.file("manifest.json"), "[1,2");
  ASSERT_EQ(mkdir(dir.file("vanished-rank9.json").c_str(), 0700), 0);  // a directory is skipped
  testing::write_text(dir.file("notes.txt"), "not a report\n");        // unknown names are ignored

  const RunSummary summary = read(dir);
  const std::string text = format_summary_text(summary);
  const std::vector<std::string> lines = testing::split_lines(text);
  ASSERT_EQ(lines.size(), 12u) << text;
  EXPECT_EQ(lines[1],
            "  inf/nan origin: rank 3 sent nan in all-reduce call #812 in batch 12; rank 0 first saw it in "
            "that call's output");
  EXPECT_EQ(lines[2], "  first inf/nan: batch ? on ranks 2 and 4");
  EXPECT_EQ(lines[3], "  mismatches: 1 (communicator 239016 call #24)");
  EXPECT_EQ(lines[5], "  vanished ranks: none");
  EXPECT_EQ(lines[8], "  stopped: rank 1 (reason unknown)");
  EXPECT_EQ(lines[10], "  setup: manifest.json could not be read");
  EXPECT_EQ(lines[11].rfind("  could not read: manifest.json (truncated JSON: ends after 4 bytes); "
                            "mismatch-239016-24.json (not valid JSON: error at byte ",
                            0),
            0u)
      << lines[11];
  EXPECT_TRUE(testing::contains(lines[11],
                                "; nonfinite-rank2.txt (empty file); nonfinite-rank4.json (not valid JSON: nested "
                                "deeper than 256 levels); nonfinite-rank4.txt (missing); origin.json (truncated "
                                "JSON: ends after 40 bytes); stop-rank1.json (not a stop report: \"kind\" is "
                                "\"desync\"); stop-rank1.txt (missing)"))
      << lines[11];

  const json j = summary_json(summary);
  EXPECT_FALSE(j["nothing_wrong"].get<bool>());
  EXPECT_EQ(j["unreadable"].size(), 8u);
  EXPECT_EQ(j["origin"]["file"], "origin.txt");
  EXPECT_TRUE(j["setup"].is_null());

  const json reports = reports_json(summary);
  ASSERT_EQ(reports.size(), 5u) << reports.dump(2);
  EXPECT_EQ(reports[0]["file"], "origin.json");
  EXPECT_TRUE(reports[0]["report"].is_null());
  EXPECT_EQ(reports[0]["error"], "truncated JSON: ends after 40 bytes");
  EXPECT_EQ(reports[0]["text"], format_origin_text(firsts));
  EXPECT_EQ(reports[1]["file"], "mismatch-239016-24.json");

  // The full text still shows what could be read.
  const std::string full = format_report_texts(summary);
  EXPECT_TRUE(testing::contains(full, "\n=== origin.txt ===\n" + format_origin_text(firsts))) << full;
  EXPECT_TRUE(testing::contains(full, "\n=== mismatch-239016-24.txt ===\n" + format_mismatch_text(m))) << full;
  EXPECT_TRUE(testing::contains(full, "\n=== nonfinite-rank2: no readable file")) << full;
}

TEST(RunSummary, ReportsComeInDisplayOrder) {
  RunDir dir;
  write_origin_and_detections(dir, {0, 3, 10, 2});
  const MismatchReport m = count_mismatch();
  write_pair(dir, mismatch_base_name(m), format_mismatch_text(m), mismatch_json(m));
  MismatchReport earlier = m;
  earlier.seq = 3;
  earlier.detected_ns -= 1000;
  write_pair(dir, mismatch_base_name(earlier), format_mismatch_text(earlier), mismatch_json(earlier));
  const RunSummary summary = read(dir);
  std::vector<std::string> names;
  for (const ReportFiles& r : summary.reports) names.push_back(r.base_name);
  EXPECT_EQ(names, (std::vector<std::string>{"origin", "mismatch-239016-3", "mismatch-239016-24", "nonfinite-rank0",
                                             "nonfinite-rank2", "nonfinite-rank3", "nonfinite-rank10"}));
  EXPECT_TRUE(testing::contains(format_summary_text(summary), "  mismatches: 2 (first: communicator 239016 call #3 "));
  const json reports = reports_json(summary);
  EXPECT_EQ(reports[0]["kind"], "origin");
  EXPECT_EQ(reports[0]["report"]["kind"], "nonfinite_origin");
  EXPECT_EQ(reports[0]["text_file"], "origin.txt");
  EXPECT_FALSE(reports[0].contains("error"));
  EXPECT_EQ(reports[3]["kind"], "nonfinite");
  EXPECT_EQ(reports[3]["report"]["rank"], 0);
}

TEST(RunSummary, JsonHasEveryKey) {
  RunDir dir;
  write_origin_and_detections(dir);
  const json j = summary_json(read(dir));
  std::set<std::string> keys;
  for (const auto& item : j.items()) keys.insert(item.key());
  EXPECT_EQ(keys, (std::set<std::string>{"run",
                                         "run_dir",
                                         "nothing_wrong",
                                         "lines",
                                         "origin",
                                         "first_nonfinite",
                                         "mismatches",
                                         "desyncs",
                                         "vanished",
                                         "overflow_streaks",
                                         "near_overflow",
                                         "stops",
                                         "skipped_steps",
                                         "cuda_errors",
                                         "launches",
                                         "job",
                                         "processes",
                                         "unwritten",
                                         "nccl_without_calls",
                                         "setup",
                                         "traces",
                                         "unreadable",
                                         "cross_rank_checks",
                                         "folders",
                                         "missing_recorders"}));
  EXPECT_EQ(j["run"], "run-42");
  EXPECT_EQ(j["lines"][0],
            "inf/nan origin: rank 3 sent inf in all-reduce call #812 in batch 12; ranks 0\u20132 and "
            "4\u20137 first saw it in that call's output");
  EXPECT_TRUE(j["processes"].is_null());
}

TEST(RunSummary, DirectoryThatCannotBeListedIsAnError) {
  RunSummary summary;
  std::string error;
  EXPECT_FALSE(read_run_summary("/nonexistent/trainscope/run", &summary, &error));
  EXPECT_EQ(error.rfind("cannot list '/nonexistent/trainscope/run': ", 0), 0u) << error;
}

// ---- The tool -----------------------------------------------------------------------------------------------------

testing::ProcessResult report_tool(std::vector<std::string> args) {
  args.insert(args.begin(), "report");
  args.insert(args.begin(), TRAINSCOPE_TOOL_PATH);
  testing::ProcessOptions options;
  options.timeout_seconds = 30;
  return testing::run_process(args, options);
}

TEST(RunSummaryTool, ReportsWithoutRecordersStillPrintTheSummary) {
  RunDir dir;
  write_origin_and_detections(dir, {0, 3});
  write_manifest(dir, 2);
  const RunSummary summary = read(dir);

  const testing::ProcessResult text = report_tool({dir.path()});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(text.err, "");
  EXPECT_EQ(text.out.rfind(format_summary_text(summary), 0), 0u) << text.out;
  EXPECT_EQ(text.out, format_summary_text(summary) + format_report_texts(summary));
  const size_t origin = text.out.find("\n=== origin.txt ===\n");
  const size_t rank0 = text.out.find("\n=== nonfinite-rank0.txt ===\n\nDetected inf/nan during batch_number=12\n");
  const size_t rank3 = text.out.find("\n=== nonfinite-rank3.txt ===\n");
  EXPECT_NE(origin, std::string::npos);
  EXPECT_LT(origin, rank0);
  EXPECT_LT(rank0, rank3);
  EXPECT_NE(rank3, std::string::npos);

  const testing::ProcessResult only = report_tool({"--summary", dir.path()});
  ASSERT_EQ(only.exit_code, 0) << only.err;
  EXPECT_EQ(only.out, format_summary_text(summary));

  const testing::ProcessResult j = report_tool({dir.path(), "--json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const json parsed = json::parse(j.out, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded()) << j.out;
  std::set<std::string> keys;
  for (const auto& item : parsed.items()) keys.insert(item.key());
  EXPECT_EQ(keys, (std::set<std::string>{"run_dir", "ranks", "errors", "summary", "reports", "manifest"}));
  EXPECT_EQ(parsed["ranks"], json::array());
  EXPECT_EQ(parsed["summary"]["lines"], summary_json(summary)["lines"]);
  EXPECT_EQ(parsed["manifest"]["world_size"], 2);
  ASSERT_EQ(parsed["reports"].size(), 3u);
  EXPECT_EQ(parsed["reports"][0]["file"], "origin.json");
  EXPECT_EQ(parsed["reports"][0]["report"]["origin"]["senders"], json::array({3}));

  const testing::ProcessResult js = report_tool({"--json", "--summary", dir.path()});
  ASSERT_EQ(js.exit_code, 0) << js.err;
  const json summary_only = json::parse(js.out, nullptr, false);
  ASSERT_TRUE(summary_only.is_object()) << js.out;
  EXPECT_EQ(summary_only.size(), 1u);
  EXPECT_EQ(summary_only["summary"]["run"], "run-42");
}

TEST(RunSummaryTool, UnreadableRecordersWithReportsAreNotAFailure) {
  RunDir dir;
  testing::write_text(dir.file("rank-0.pid-1.tsrec"), "");
  const MismatchReport m = count_mismatch();
  write_pair(dir, mismatch_base_name(m), format_mismatch_text(m), mismatch_json(m));
  const testing::ProcessResult run = report_tool({dir.path()});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(testing::contains(run.out, "  processes: 0 recorded, 1 recorder file unreadable\n")) << run.out;
  EXPECT_TRUE(testing::contains(run.out, "  ! unreadable " + dir.file("rank-0.pid-1.tsrec"))) << run.out;
  EXPECT_TRUE(testing::contains(run.err, "none of the 1 *.tsrec files in '" + dir.path() + "' could be read"))
      << run.err;
}

}  // namespace
}  // namespace trainscope::reports
