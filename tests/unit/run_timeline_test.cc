// Checks the run's timeline (Chrome trace-event JSON) on synthetic run directories written with the recorder writer:
// parsed back with nlohmann, its tracks, slices and instants; and `trainscope report --trace`'s exit codes.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/run_summary.h"
#include "analysis/run_timeline.h"
#include "base/flight_recorder_reader.h"
#include "support/text_files.h"
#include "tests/support/launch_recorder.h"
#include "tests/support/subprocess.h"

namespace trainscope::reports {
namespace {

using nlohmann::json;
using recorder::Op;
using testing::LaunchRecorder;
using testing::TempDir;

constexpr uint64_t kTimelineComm = 0x3f2a9c0011223344ull;
constexpr uint64_t kTimelineStream = 0x7f3a5c001200ull;

void add_comm(LaunchRecorder& r, int32_t rank) {
  recorder::CommEntry c{};
  c.id = kTimelineComm;
  c.created_ns = LaunchRecorder::at(0);
  c.rank = rank;
  c.nranks = 2;
  c.color = recorder::kUnknown;
  c.state = static_cast<uint16_t>(recorder::CommState::kLive);
  c.origin = static_cast<uint16_t>(Op::kCommInitRank);
  r.writer().add_comm(c);
}

// A broadcast from root 1 made at train.py:88 (record of `rank`), returning after 250 µs.
void python_broadcast(LaunchRecorder& r, int32_t rank, uint64_t seq, uint64_t ms) {
  recorder::SiteEntry site{};
  site.caller = 0x401000;
  site.python_depth = 3;
  site.python_frames = 1;
  site.frames[0].line = 88;
  std::strncpy(site.frames[0].function, "backward", sizeof(site.frames[0].function) - 1);
  std::strncpy(site.frames[0].file, "/home/me/train.py", sizeof(site.frames[0].file) - 1);
  recorder::Record c{};
  c.op = static_cast<uint16_t>(Op::kBroadcast);
  c.start_ns = LaunchRecorder::at(ms);
  c.comm_id = kTimelineComm;
  c.seq = seq;
  c.count = 4096;
  c.rank = rank;
  c.nranks = 2;
  c.dtype = 6;
  c.redop = recorder::kUnknown;
  c.peer = 1;
  c.site = static_cast<uint16_t>(r.writer().add_site(site));
  recorder::Writer::complete(r.writer().append(c), 0, c.start_ns + 250000);
}

// Two ranks on one communicator: all-reduce #1 at 10 ms, broadcast #2 at 20 ms; rank 1 never returns from
// all-reduce #3 (40 ms); rank 0 launches a kernel on a stream at 30 ms, synchronises it, and meets a CUDA error.
void write_run(const TempDir& dir) {
  for (int32_t rank = 0; rank < 2; ++rank) {
    LaunchRecorder r(dir.file("rank" + std::to_string(rank) + ".tsrec"), rank);
    ASSERT_TRUE(r.opened());
    r.writer().set_global_rank(rank);
    add_comm(r, rank);
    r.collective(kTimelineComm, 1, 10);
    python_broadcast(r, rank, 2, 20);
    if (rank == 0) {
      r.launch("void at::native::gemm_kernel<float, 4>(float*, float const*, int)", kTimelineStream, 30);
      r.sync("cudaStreamSynchronize", kTimelineStream, 31);
      r.error("cudaMemcpyAsync", kTimelineStream, 32, 700);
    }
    r.collective(kTimelineComm, 3, 40, /*returned=*/rank == 0);
  }
}

json timeline(const TempDir& dir, size_t* pieces = nullptr) {
  recorder::RunDirectory run;
  std::string error;
  EXPECT_TRUE(recorder::read_run_directory(dir.path(), &run, &error)) << error;
  RunSummary summary;
  EXPECT_TRUE(read_run_summary(dir.path(), &summary, &error)) << error;
  note_recorders(&summary, run);
  std::string text;
  size_t count = 0;
  write_run_timeline(run, summary, [&](std::string_view piece) {
    text += piece;
    ++count;
  });
  if (pieces != nullptr) *pieces = count;
  return json::parse(text);  // throws (failing the test) on anything but one JSON document
}

std::vector<json> events(const json& trace, const std::string& ph, const std::string& name = "", int64_t pid = -1) {
  std::vector<json> out;
  for (const json& e : trace.at("traceEvents")) {
    if (e.at("ph") != ph || (!name.empty() && e.at("name") != name) || (pid >= 0 && e.at("pid") != pid)) continue;
    out.push_back(e);
  }
  return out;
}

// The tid of the track named `name` in process `pid`, -1 when there is none.
int64_t track(const json& trace, int64_t pid, const std::string& name) {
  for (const json& e : events(trace, "M", "thread_name", pid))
    if (e.at("args").at("name") == name) return e.at("tid").get<int64_t>();
  return -1;
}

double us(uint64_t ms) { return static_cast<double>(ms) * 1000.0; }

TEST(RunTimeline, OneProcessPerRankWithATrackPerCommunicatorAndStream) {
  TempDir dir;
  write_run(dir);
  const json trace = timeline(dir);
  EXPECT_EQ(trace.at("displayTimeUnit"), "ms");
  for (int64_t rank = 0; rank < 2; ++rank) {
    const std::vector<json> names = events(trace, "M", "process_name", rank);
    ASSERT_EQ(names.size(), 1u) << rank;
    EXPECT_EQ(names[0].at("args").at("name"),
              "rank " + std::to_string(rank) + " (pid " + std::to_string(4000 + rank) + ", host node-1)");
    EXPECT_EQ(track(trace, rank, "process"), 0);
    EXPECT_GT(track(trace, rank, "comm 3f2a9c (rank " + std::to_string(rank) + " of 2)"), 0);
  }
  EXPECT_GT(track(trace, 0, "stream 0x7f3a5c001200"), 0);
  EXPECT_EQ(track(trace, 1, "stream 0x7f3a5c001200"), -1);
  // The run's first record is the trace's zero.
  EXPECT_EQ(trace.at("otherData").at("start_time_ns"), LaunchRecorder::at(10));
}

TEST(RunTimeline, EveryNcclCallIsASliceWithItsArguments) {
  TempDir dir;
  write_run(dir);
  const json trace = timeline(dir);
  for (int64_t rank = 0; rank < 2; ++rank) {
    const int64_t comm = track(trace, rank, "comm 3f2a9c (rank " + std::to_string(rank) + " of 2)");
    const std::vector<json> all_reduces = events(trace, "X", "ncclAllReduce", rank);
    ASSERT_EQ(all_reduces.size(), 2u);
    const json& first = all_reduces[0];
    EXPECT_EQ(first.at("cat"), "nccl");
    EXPECT_EQ(first.at("tid"), comm);
    EXPECT_DOUBLE_EQ(first.at("ts").get<double>(), 0.0);
    EXPECT_DOUBLE_EQ(first.at("dur").get<double>(), 3.0);  // returned 3000 ns later
    const json& args = first.at("args");
    EXPECT_EQ(args.at("op"), "ncclAllReduce");
    EXPECT_EQ(args.at("comm"), "3f2a9c0011223344");
    EXPECT_EQ(args.at("seq"), 1);
    EXPECT_EQ(args.at("count"), 1024);
    EXPECT_EQ(args.at("type"), "float32");
    EXPECT_EQ(args.at("redop"), "sum");
    EXPECT_EQ(args.at("result"), "ncclSuccess");
    EXPECT_TRUE(args.contains("record"));
    EXPECT_FALSE(args.contains("python"));

    const std::vector<json> broadcasts = events(trace, "X", "ncclBroadcast", rank);
    ASSERT_EQ(broadcasts.size(), 1u);
    EXPECT_DOUBLE_EQ(broadcasts[0].at("ts").get<double>(), us(10));
    EXPECT_DOUBLE_EQ(broadcasts[0].at("dur").get<double>(), 250.0);
    EXPECT_EQ(broadcasts[0].at("args").at("root"), 1);
    EXPECT_EQ(broadcasts[0].at("args").at("type"), "float16");
    EXPECT_FALSE(broadcasts[0].at("args").contains("redop"));  // no reduction
    EXPECT_EQ(broadcasts[0].at("args").at("python"), "/home/me/train.py:88 in backward");
  }
}

TEST(RunTimeline, ACallThatNeverReturnedIsOpenToTheEndOfTheTrace) {
  TempDir dir;
  write_run(dir);
  const json trace = timeline(dir);
  double end = 0;
  for (const json& e : trace.at("traceEvents")) {
    if (e.at("ph") == "M") continue;
    end = std::max(end, e.at("ts").get<double>() + e.value("dur", 0.0));
  }
  const std::vector<json> calls = events(trace, "X", "ncclAllReduce", 1);
  ASSERT_EQ(calls.size(), 2u);
  const json& pending = calls[1];
  EXPECT_EQ(pending.at("args").at("result"), "pending (never returned)");
  EXPECT_DOUBLE_EQ(pending.at("ts").get<double>(), us(30));
  EXPECT_DOUBLE_EQ(pending.at("ts").get<double>() + pending.at("dur").get<double>(), end);
  // The end is the last thing known of the run: here the recorders' exit at 1 s.
  EXPECT_DOUBLE_EQ(end, us(1000 - 10));
  EXPECT_EQ(events(trace, "X", "ncclAllReduce", 0)[1].at("args").at("result"), "ncclSuccess");
}

TEST(RunTimeline, CallsEveryRankHungInAreDrawnThoughNothingCameAfterThem) {
  TempDir dir;
  std::vector<std::unique_ptr<LaunchRecorder>> ranks;  // never closed: the processes hang
  for (int32_t rank = 0; rank < 2; ++rank) {
    ranks.push_back(std::make_unique<LaunchRecorder>(dir.file("rank" + std::to_string(rank) + ".tsrec"), rank));
    ASSERT_TRUE(ranks.back()->opened());
    ranks.back()->writer().set_global_rank(rank);
    ranks.back()->collective(kTimelineComm, 1, 0);
    ranks.back()->collective(kTimelineComm, 2, 100 + static_cast<uint64_t>(rank), /*returned=*/false);
  }
  const json trace = timeline(dir);
  EXPECT_EQ(trace.at("otherData").at("end_after_last_record"), true);
  for (int64_t rank = 0; rank < 2; ++rank) {
    const std::vector<json> calls = events(trace, "X", "ncclAllReduce", rank);
    ASSERT_EQ(calls.size(), 2u);
    EXPECT_EQ(calls[1].at("args").at("result"), "pending (never returned)");
    // Both reach the same end, 2 ms (2% of the 101 ms before, at least 1 ms) after the last one started.
    EXPECT_NEAR(calls[1].at("ts").get<double>() + calls[1].at("dur").get<double>(), us(101) + 2020.0, 1e-6);
  }
  ranks.clear();
  EXPECT_EQ(timeline(dir).at("otherData").at("end_after_last_record"), false);  // closed at 1 s: that is the end
}

TEST(RunTimeline, LaunchesAndSynchronisationsAreOnTheirStreamsTrack) {
  TempDir dir;
  write_run(dir);
  const json trace = timeline(dir);
  const int64_t stream = track(trace, 0, "stream 0x7f3a5c001200");
  const std::vector<json> launches = events(trace, "X", "gemm_kernel", 0);
  ASSERT_EQ(launches.size(), 1u);
  const json& launch = launches[0];
  EXPECT_EQ(launch.at("cat"), "launch");
  EXPECT_EQ(launch.at("tid"), stream);
  EXPECT_DOUBLE_EQ(launch.at("ts").get<double>(), us(20));
  EXPECT_DOUBLE_EQ(launch.at("dur").get<double>(), 5.0);
  EXPECT_EQ(launch.at("args").at("kernel"), "void at::native::gemm_kernel<float, 4>(float*, float const*, int)");
  EXPECT_EQ(launch.at("args").at("grid"), "1024");
  EXPECT_EQ(launch.at("args").at("block"), "256");
  EXPECT_EQ(launch.at("args").at("result"), "cudaSuccess");
  EXPECT_TRUE(launch.at("args").contains("finished"));

  const std::vector<json> syncs = events(trace, "X", "cudaStreamSynchronize", 0);
  ASSERT_EQ(syncs.size(), 1u);
  EXPECT_EQ(syncs[0].at("cat"), "sync");
  EXPECT_EQ(syncs[0].at("tid"), stream);

  const std::vector<json> errors =
      events(trace, "i", "CUDA error: cudaMemcpyAsync returned cudaErrorIllegalAddress", 0);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].at("cat"), "cuda_error");
  EXPECT_EQ(errors[0].at("tid"), stream);
  EXPECT_DOUBLE_EQ(errors[0].at("ts").get<double>(), us(22));
}

TEST(RunTimeline, AMismatchAndTheFirstInfNanAreInstantsOnTheirRanks) {
  TempDir dir;
  write_run(dir);
  const json mismatch = {
      {"kind", "mismatch"},
      {"operation", "ncclBroadcast"},
      {"communicator", "3f2a9c0011223344"},
      {"seq", 2},
      {"differences", {"count"}},
      {"detected_ns", LaunchRecorder::at(25)},
      {"calls", {{{"process", 0}, {"comm_rank", 0}, {"present", true}}, {{"process", 1}, {"comm_rank", 1}}}}};
  testing::write_text(dir.file("mismatch-3f2a9c-2.json"), mismatch.dump());
  // Rank 1's first inf/nan: in the output of broadcast #2 (a JSON without a time: the call's record gives it).
  const json nonfinite = {{"kind", "inf_nan_detected"},
                          {"rank", 1},
                          {"batch_number", 4},
                          {"frames",
                           {{{"name", "comm 3f2a9c all-reduce #1"}, {"has_nonfinite", false}},
                            {{"name", "comm 3f2a9c broadcast #2"}, {"has_nonfinite", true}}}}};
  testing::write_text(dir.file("nonfinite-rank1.json"), nonfinite.dump());
  const json trace = timeline(dir);

  for (int64_t rank = 0; rank < 2; ++rank) {
    const std::vector<json> verdicts = events(trace, "i", "mismatch: ncclBroadcast call #2 on comm 3f2a9c", rank);
    ASSERT_EQ(verdicts.size(), 1u) << rank;
    EXPECT_EQ(verdicts[0].at("cat"), "verdict");
    EXPECT_EQ(verdicts[0].at("s"), "p");
    EXPECT_DOUBLE_EQ(verdicts[0].at("ts").get<double>(), us(15));
    EXPECT_EQ(verdicts[0].at("tid"), track(trace, rank, "comm 3f2a9c (rank " + std::to_string(rank) + " of 2)"));
    EXPECT_EQ(verdicts[0].at("args").at("report"), "mismatch-3f2a9c-2.json");
    EXPECT_EQ(verdicts[0].at("args").at("differences"), json({"count"}));
  }
  const std::vector<json> firsts = events(trace, "i", "first inf/nan (batch 4)");
  ASSERT_EQ(firsts.size(), 1u);
  EXPECT_EQ(firsts[0].at("pid"), 1);
  EXPECT_EQ(firsts[0].at("cat"), "nonfinite");
  EXPECT_DOUBLE_EQ(firsts[0].at("ts").get<double>(), us(10));  // broadcast #2's start
  EXPECT_EQ(firsts[0].at("args").at("frame"), "comm 3f2a9c broadcast #2");
  EXPECT_EQ(firsts[0].at("args").at("time_of"), "the call's record");
}

TEST(RunTimeline, DesyncVanishedStopAndCudaErrorReportsAreInstantsOnTheRanksTheyName) {
  TempDir dir;
  write_run(dir);
  const json desync = {{"kind", "desync"},
                       {"communicator", "3f2a9c0011223344"},
                       {"seq", 3},
                       {"operation", "ncclAllReduce"},
                       {"detected_ns", LaunchRecorder::at(70)},
                       {"waiting", {{{"process", 1}, {"comm_rank", 1}, {"seq", 3}}}},
                       {"missing", {{{"process", 0}, {"comm_rank", 0}, {"state", "alive, not arrived"}}}}};
  testing::write_text(dir.file("desync-3f2a9c-3.json"), desync.dump());
  // A vanished rank 5 has no recorder here: its mark still names it.
  const json vanished = {{"kind", "vanished"},
                         {"process", 5},
                         {"host", "node-9"},
                         {"pid", 77},
                         {"time_ns", LaunchRecorder::at(80)},
                         {"last_call", nullptr},
                         {"last_call_communicator", ""}};
  testing::write_text(dir.file("vanished-rank5.json"), vanished.dump());
  const json stop = {{"kind", "stop"}, {"rank", 1}, {"reason", "nonfinite"}, {"batch_number", 4}, {"message", "m"}};
  testing::write_text(dir.file("stop-rank1.json"), stop.dump());
  // Rank 1 has no CUDA error record: its report's time places the mark (rank 0's record already has one).
  const json cuda_error = {{"kind", "cuda_error"},
                           {"process", 1},
                           {"time_ns", LaunchRecorder::at(50)},
                           {"summary", "cudaMalloc returned 2 cudaErrorMemoryAllocation"}};
  testing::write_text(dir.file("cuda-error-rank1.json"), cuda_error.dump());
  testing::write_text(dir.file("cuda-error-rank0.json"),
                      json({{"kind", "cuda_error"}, {"process", 0}, {"time_ns", 1}}).dump());
  const json trace = timeline(dir);

  for (int64_t rank = 0; rank < 2; ++rank) {
    const std::vector<json> marks = events(trace, "i", "desync: ncclAllReduce call #3 on comm 3f2a9c", rank);
    ASSERT_EQ(marks.size(), 1u) << rank;
    EXPECT_DOUBLE_EQ(marks[0].at("ts").get<double>(), us(60));
    EXPECT_EQ(marks[0].at("tid"), track(trace, rank, "comm 3f2a9c (rank " + std::to_string(rank) + " of 2)"));
  }
  const std::vector<json> gone = events(trace, "i", "vanished: rank 5", 5);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_DOUBLE_EQ(gone[0].at("ts").get<double>(), us(70));
  EXPECT_EQ(gone[0].at("args").at("note"), "no flight recorder of this rank in the run directory");

  const std::vector<json> stops = events(trace, "i", "stopped (nonfinite)", 1);
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].at("cat"), "stop");
  EXPECT_DOUBLE_EQ(stops[0].at("ts").get<double>(), us(990));  // its process's exit
  EXPECT_EQ(stops[0].at("args").at("batch_number"), 4);

  const std::vector<json> errors = events(trace, "i", "first CUDA error");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].at("pid"), 1);
  EXPECT_DOUBLE_EQ(errors[0].at("ts").get<double>(), us(40));
  EXPECT_EQ(errors[0].at("args").at("summary"), "cudaMalloc returned 2 cudaErrorMemoryAllocation");
}

TEST(RunTimeline, AProcessOfUnknownRankAndARestartedRankAreProcessesOfTheirOwn) {
  TempDir dir;
  {
    LaunchRecorder unknown(dir.file("a.tsrec"), -1);  // pid 3999, no rank
    ASSERT_TRUE(unknown.opened());
    unknown.collective(kTimelineComm, 1, 1);
    LaunchRecorder first(dir.file("b.tsrec"), 0);  // pid 4000
    ASSERT_TRUE(first.opened());
    first.collective(kTimelineComm, 1, 2);
  }
  {
    // Rank 0 again, in a process of its own (a restart on another node).
    LaunchRecorder again(dir.file("c.tsrec"), 0);
    ASSERT_TRUE(again.opened());
    again.writer().header()->pid = 4100;
    std::strcpy(again.writer().header()->host, "node-2");
  }
  const json trace = timeline(dir);
  const auto name_of = [&](int64_t pid) {
    const std::vector<json> names = events(trace, "M", "process_name", pid);
    return names.size() == 1 ? names[0].at("args").at("name").get<std::string>() : std::string("none");
  };
  EXPECT_EQ(name_of(0), "rank 0 (pid 4000, host node-1)");
  EXPECT_EQ(name_of(1000000 + 3999), "rank ? (pid 3999, host node-1)");
  EXPECT_EQ(name_of(1000000 + 4100), "rank 0 (pid 4100, host node-2)");
  EXPECT_EQ(events(trace, "M", "process_name").size(), 3u);
}

// Every event has the shape run_timeline.h promises, whatever made it.
TEST(RunTimeline, EveryEventHasTheHeadersShape) {
  TempDir dir;
  write_run(dir);
  testing::write_text(dir.file("stop-rank1.json"),
                      json({{"kind", "stop"}, {"rank", 1}, {"reason", "nonfinite"}}).dump());
  testing::write_text(dir.file("nonfinite-rank1.json"), json({{"kind", "inf_nan_detected"}, {"rank", 1}}).dump());
  const json trace = timeline(dir);
  const std::set<std::string> instant_categories = {"verdict", "nonfinite", "cuda_error", "stop", "step"};
  const std::set<std::string> slice_categories = {"nccl", "launch", "sync"};
  std::set<std::string> phases;
  for (const json& e : trace.at("traceEvents")) {
    const std::string ph = e.at("ph");
    phases.insert(ph);
    EXPECT_TRUE(e.at("pid").is_number_integer() && e.at("tid").is_number_integer()) << e;
    EXPECT_TRUE(e.at("name").is_string() && e.at("args").is_object()) << e;
    if (ph == "M") continue;
    EXPECT_GE(e.at("ts").get<double>(), 0.0) << e;
    if (ph == "X") {
      EXPECT_EQ(slice_categories.count(e.at("cat")), 1u) << e;
      EXPECT_GE(e.at("dur").get<double>(), 0.0) << e;
      EXPECT_TRUE(e.at("args").contains("record")) << e;
    } else {
      EXPECT_EQ(ph, "i") << e;
      EXPECT_TRUE(e.at("s") == "g" || e.at("s") == "p") << e;
      EXPECT_EQ(instant_categories.count(e.at("cat")), 1u) << e;
    }
  }
  EXPECT_EQ(phases, (std::set<std::string>{"M", "X", "i"}));
}

TEST(RunTimeline, StringsFromTheFilesStayValidJson) {
  TempDir dir;
  {
    LaunchRecorder r(dir.file("rank0.tsrec"), 0);
    ASSERT_TRUE(r.opened());
    std::strcpy(r.writer().header()->host, "bad\xff\xfehost\"\n");
    r.launch("kernel\xc3(\"x\")", kTimelineStream, 1);
  }
  const json trace = timeline(dir);
  const std::vector<json> names = events(trace, "M", "process_name", 0);
  ASSERT_EQ(names.size(), 1u);
  EXPECT_NE(names[0].at("args").at("name").get<std::string>().find("host\"\n"), std::string::npos);
}

TEST(RunTimeline, ReportsOfTheWrongShapeAreLeftOutNeverThrown) {
  TempDir dir;
  write_run(dir);
  testing::write_text(dir.file("nonfinite-rank0.json"),
                      R"({"kind": "inf_nan_detected", "rank": 0, "batch_number": "four", "frames": [1, "x", {"name": 7,
                 "has_nonfinite": "yes"}, {"has_nonfinite": true, "launch": {"record_index": -3}}]})");
  testing::write_text(
      dir.file("mismatch-3f2a9c-9.json"),
      R"({"kind": "mismatch", "communicator": 12, "seq": -1, "calls": [{"process": "one"}, {"process": -4}, 5]})");
  testing::write_text(dir.file("origin.json"),
                      R"({"kind": "nonfinite_origin", "origin": {"senders": [1, "x", -2, 1e300]}})");
  const json trace = timeline(dir);
  const std::vector<json> firsts = events(trace, "i", "first inf/nan", 0);
  ASSERT_EQ(firsts.size(), 1u);  // no batch, no call: placed at its process's exit, and said so
  EXPECT_EQ(firsts[0].at("args").at("time_of"), "not known: placed at the process's exit");
  for (const json& e : events(trace, "i"))  // the mismatch names no rank it could be put on
    EXPECT_EQ(std::string(e.at("name")).rfind("mismatch", 0), std::string::npos) << e;
}

TEST(RunTimeline, ABigRunIsHandedOverInPieces) {
  TempDir dir;
  {
    LaunchRecorder r(dir.file("rank0.tsrec"), 0, 4096);
    ASSERT_TRUE(r.opened());
    for (uint64_t i = 1; i <= 4000; ++i) r.collective(kTimelineComm, i, i);
  }
  size_t pieces = 0;
  const json trace = timeline(dir, &pieces);
  EXPECT_EQ(events(trace, "X", "ncclAllReduce", 0).size(), 4000u);
  EXPECT_GT(pieces, 4u);
}

// ---- the command ------------------------------------------------------------------------------------------------

// `trainscope report DIR --trace OUT` on the run `write_run` leaves in `dir`.
testing::ProcessResult report_trace(const TempDir& dir, const std::string& out) {
  write_run(dir);
  return testing::run_process({TRAINSCOPE_TOOL_PATH, "report", dir.path(), "--trace", out});
}

TEST(RunTimelineCommand, WritesTheFileAndPrintsTheSummary) {
  TempDir dir;
  const std::string out = dir.file("trace.json");
  const testing::ProcessResult r = report_trace(dir, out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("timeline written to " + out), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("Summary of run"), std::string::npos) << r.out;
  const json trace = json::parse(testing::read_file(out));
  EXPECT_EQ(events(trace, "X", "ncclAllReduce").size(), 4u);
  struct stat st {};
  ASSERT_EQ(stat(out.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // Written again over the first one.
  EXPECT_EQ(testing::run_process({TRAINSCOPE_TOOL_PATH, "report", dir.path(), "--trace", out}).exit_code, 0);
}

TEST(RunTimelineCommand, AnUnwritableFileIsAClearErrorAndExitOne) {
  TempDir dir;
  const std::string out = dir.file("no-such-folder/trace.json");
  const testing::ProcessResult r = report_trace(dir, out);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("cannot write the timeline to " + out + ": No such file or directory"), std::string::npos)
      << r.err;
  // A symbolic link is never written through.
  const std::string link = dir.file("link.json");
  ASSERT_EQ(symlink(dir.file("target.json").c_str(), link.c_str()), 0);
  const testing::ProcessResult linked =
      testing::run_process({TRAINSCOPE_TOOL_PATH, "report", dir.path(), "--trace", link});
  EXPECT_EQ(linked.exit_code, 1) << linked.err;
  EXPECT_NE(linked.err.find("symbolic link"), std::string::npos) << linked.err;
  EXPECT_NE(access(dir.file("target.json").c_str(), F_OK), 0);
}

TEST(RunTimelineCommand, TraceWithoutAFileNameIsAUsageError) {
  TempDir dir;
  write_run(dir);
  const testing::ProcessResult r = testing::run_process({TRAINSCOPE_TOOL_PATH, "report", dir.path(), "--trace"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--trace needs a file name"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace trainscope::reports
