// Checks the run report (text and JSON) on a synthetic run directory, and `trainscope report`'s exit codes.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/run_summary.h"
#include "base/flight_recorder_reader.h"
#include "base/flight_recorder_writer.h"
#include "reports/cuda_error_report.h"
#include "reports/json_stream.h"
#include "reports/recorder_report.h"
#include "support/text_files.h"
#include "tests/support/launch_recorder.h"
#include "tests/support/subprocess.h"

extern char** environ;

namespace trainscope::recorder {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr uint64_t kBase = 1700000000123456789ull;  // 2023-11-14 22:13:20.123456789 UTC
constexpr uint64_t kMs = 1000000;
constexpr uint64_t kCommId = 0x3f2a9c0011223344ull;
constexpr int32_t kExitedPid = 1000001;
constexpr int32_t kKilledPid = 1000002;
constexpr int32_t kAlivePid = 1000003;

using testing::TempDir;

Record call(Op op, uint64_t start_ns, uint64_t seq, uint64_t count, int32_t dtype, int32_t redop, int32_t peer) {
  Record r{};
  r.start_ns = start_ns;
  r.comm_id = kCommId;
  r.seq = seq;
  r.count = count;
  r.rank = 0;
  r.nranks = 2;
  r.peer = peer;
  r.redop = redop;
  r.dtype = static_cast<int8_t>(dtype);
  r.op = static_cast<uint16_t>(op);
  return r;
}

struct RankSpec {
  int32_t rank;
  int32_t pid;
  const char* host;
  int32_t nccl_version;
};

void open_rank(const std::string& path, const RankSpec& spec, Writer& w) {
  WriterOptions o{};
  o.path = path.c_str();
  o.capacity = 64;
  o.max_comms = 4;
  o.pid = spec.pid;
  o.launcher_rank = spec.rank;
  o.launcher_world = 3;
  o.local_rank = spec.rank;
  o.host = spec.host;
  o.run_id = "run-42";
  o.exe = "/usr/bin/python3";
  o.start_ns = kBase;
  EXPECT_EQ(w.open(o), 0);
  w.set_nccl_version(spec.nccl_version);
  CommEntry c{};
  c.id = kCommId;
  c.created_ns = kBase;
  c.rank = spec.rank;
  c.nranks = 3;
  c.color = kUnknown;
  c.state = static_cast<uint16_t>(CommState::kLive);
  c.origin = static_cast<uint16_t>(Op::kCommInitRank);
  w.add_comm(c);
}

// As open_rank, with a table of 8 call sites.
void open_rank_with_sites(const std::string& path, const RankSpec& spec, Writer& w) {
  WriterOptions o{};
  o.path = path.c_str();
  o.capacity = 64;
  o.max_comms = 4;
  o.max_sites = 8;
  o.pid = spec.pid;
  o.launcher_rank = spec.rank;
  o.launcher_world = 2;
  o.local_rank = spec.rank;
  o.host = spec.host;
  o.run_id = "run-43";
  o.exe = "/usr/bin/python3";
  o.start_ns = kBase;
  EXPECT_EQ(w.open(o), 0);
  CommEntry c{};
  c.id = kCommId;
  c.created_ns = kBase;
  c.rank = spec.rank;
  c.nranks = 2;
  c.color = kUnknown;
  c.state = static_cast<uint16_t>(CommState::kLive);
  c.origin = static_cast<uint16_t>(Op::kCommInitRank);
  w.add_comm(c);
}

// Three ranks: 0 exited cleanly after five varied calls, 1 was killed inside an all-reduce, 2 is still in
// one; plus one file that is not a recorder at all.
void make_run(const std::string& dir) {
  const auto file = [&](const char* name) { return dir + "/" + name; };
  {
    Writer w;
    open_rank(file("rank0.tsrec"), {0, kExitedPid, "node-a", 22809}, w);
    Writer::complete(w.append(call(Op::kCommInitRank, kBase, 0, 0, kUnknown, kUnknown, kUnknown)), 0, kBase + 3 * kMs);
    Writer::complete(w.append(call(Op::kAllReduce, kBase + 10 * kMs, 1, 1048576, 6, 0, kUnknown)), 0,
                     kBase + 10 * kMs + 1500000);
    Writer::complete(w.append(call(Op::kBroadcast, kBase + 20 * kMs, 2, 4096, 9, kUnknown, 1)), 0,
                     kBase + 20 * kMs + 850);
    Record send = call(Op::kSend, kBase + 30 * kMs, 1, 128, 7, kUnknown, 1);
    send.group = 4;
    Writer::complete(w.append(send), 0, kBase + 30 * kMs + 12400);
    Writer::complete(w.append(call(Op::kAllReduce, kBase + 40 * kMs, 3, 256, 10, 5, kUnknown)), 6, kBase + 2040 * kMs);
    w.close(kBase + 4877 * kMs);
  }
  {
    Writer w;
    open_rank(file("rank1.tsrec"), {1, kKilledPid, "node-b", 2708}, w);
    Writer::complete(w.append(call(Op::kAllReduce, kBase + 10 * kMs, 1, 1048576, 6, 0, kUnknown)), 0, kBase + 11 * kMs);
    w.append(call(Op::kAllReduce, kBase + 50 * kMs, 812, 524288, 6, 0, kUnknown));
    w.abandon();  // as after SIGKILL: still marked running
  }
  {
    Writer w;
    open_rank(file("rank2.tsrec"), {2, kAlivePid, "node-c", 0}, w);
    w.append(call(Op::kAllReduce, kBase + 60 * kMs, 2, 1048576, 6, 0, kUnknown));
    w.abandon();
  }
  testing::write_text(file("broken.tsrec"), "not a recorder");
}

void make_run(const TempDir& dir) { make_run(dir.path()); }

ReportOptions test_options() {
  ReportOptions o;
  o.liveness = [](const FileHeader& h) {
    return h.pid == kKilledPid ? Liveness::kGone : h.pid == kAlivePid ? Liveness::kAlive : Liveness::kCannotTell;
  };
  return o;
}

RunDirectory read_run(const TempDir& dir) {
  RunDirectory run;
  std::string error;
  EXPECT_TRUE(read_run_directory(dir.path(), &run, &error)) << error;
  return run;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(RecorderReport, NamesFollowNccl) {
  EXPECT_EQ(nccl_version_string(22809), "2.28.9");
  EXPECT_EQ(nccl_version_string(2708), "2.7.8");
  EXPECT_EQ(nccl_version_string(21903), "2.19.3");
  EXPECT_EQ(nccl_version_string(0), "unknown");
  const char* dtypes[] = {"int8",    "uint8",   "int32",   "uint32",   "int64",      "uint64",
                          "float16", "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2"};
  for (int i = 0; i < 12; ++i) EXPECT_EQ(dtype_name(i), dtypes[i]);
  EXPECT_EQ(dtype_name(kUnknown), "-");
  EXPECT_EQ(dtype_name(12), "dtype#12");
  const char* redops[] = {"sum", "prod", "max", "min", "avg"};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(redop_name(i), redops[i]);
  EXPECT_EQ(redop_name(5), "premulsum#5");
  EXPECT_EQ(redop_name(kUnknown), "-");
  const char* results[] = {"ncclSuccess",         "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
                           "ncclInvalidArgument", "ncclInvalidUsage",       "ncclRemoteError", "ncclInProgress"};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(result_name(i), results[i]);
  EXPECT_EQ(result_name(kResultPending), "pending");
  EXPECT_EQ(result_name(99), "ncclResult#99");
  EXPECT_EQ(comm_state_name(static_cast<uint16_t>(CommState::kAborted)), "aborted");
  EXPECT_EQ(utc_time_of_day(kBase), "22:13:20.123456");
  EXPECT_EQ(utc_date_time(kBase), "2023-11-14 22:13:20.123456 UTC");
  EXPECT_EQ(duration_string(850), "850ns");
  EXPECT_EQ(duration_string(12400), "12.4us");
  EXPECT_EQ(duration_string(1500000), "1.50ms");
  EXPECT_EQ(duration_string(2000000000), "2.00s");
  EXPECT_EQ(hex_id(kCommId), "3f2a9c0011223344");
  EXPECT_EQ(short_hex_id(kCommId), "3f2a9c");
  EXPECT_EQ(short_hex_id(0), "-");
}

TEST(RecorderReport, LivenessProbeChecksPidHostAndPidReuse) {
  FileHeader h{};
  ASSERT_EQ(gethostname(h.host, sizeof(h.host) - 1), 0);
  h.pid = getpid();
  h.start_ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  EXPECT_EQ(probe_liveness(h), Liveness::kAlive);

  FileHeader reused = h;
  reused.start_ns = 1000000000000ull;  // 1970: this pid's process started long after, so the pid was reused
  EXPECT_EQ(probe_liveness(reused), Liveness::kGone);

  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  FileHeader gone = h;
  gone.pid = child;  // reaped: nothing runs under this pid unless it was reused within this test
  EXPECT_NE(probe_liveness(gone), Liveness::kCannotTell);

  FileHeader remote = h;
  std::strcpy(remote.host, "some-other-host.invalid");
  EXPECT_EQ(probe_liveness(remote), Liveness::kCannotTell);
}

TEST(RecorderReport, TextNamesEveryRankItsStateAndItsLastCalls) {
  TempDir dir;
  make_run(dir);
  const std::string text = format_text_report(read_run(dir), test_options());
  SCOPED_TRACE(text);

  EXPECT_TRUE(testing::contains(text, "trainscope report: " + dir.path() + "  (run run-42)\n"));
  EXPECT_TRUE(
      testing::contains(text, "3 recorder files read, 1 unreadable; first start 2023-11-14 22:13:20.123456 UTC"));
  EXPECT_TRUE(testing::contains(text, "\nATTENTION\n"));
  EXPECT_TRUE(testing::contains(text, "  ! rank 1 (pid 1000002, node-b): crashed or was killed\n"));
  EXPECT_TRUE(testing::contains(text,
                                "  ! rank 1 (pid 1000002, node-b): ncclAllReduce comm 3f2a9c seq 812 (#1, "
                                "22:13:20.173456) did not return\n"));
  EXPECT_TRUE(testing::contains(text,
                                "  ! rank 2 (pid 1000003, node-c): ncclAllReduce comm 3f2a9c seq 2 (#0, "
                                "22:13:20.183456) pending\n"));
  EXPECT_TRUE(testing::contains(text, "  ! unreadable " + dir.file("broken.tsrec") + ": truncated: 14 bytes"));

  EXPECT_TRUE(testing::contains(text,
                                "=== rank 0 | pid 1000001 | host node-a | NCCL 2.28.9 | exited 22:13:25.000456 | "
                                "records 5 total, 5 held (ring 64) | torn 0\n"));
  EXPECT_TRUE(testing::contains(text,
                                "=== rank 1 | pid 1000002 | host node-b | NCCL 2.7.8 | CRASHED OR KILLED (pid gone, "
                                "never exited cleanly) | records 2 total"));
  EXPECT_TRUE(
      testing::contains(text, "=== rank 2 | pid 1000003 | host node-c | NCCL unknown | running | records 1 total"));
  EXPECT_LT(text.find("=== rank 0"), text.find("=== rank 1"));
  EXPECT_LT(text.find("=== rank 1"), text.find("=== rank 2"));

  EXPECT_TRUE(
      testing::contains(text, "    id                parent  rank/n  created by        created          state\n"));
  EXPECT_TRUE(
      testing::contains(text, "    3f2a9c0011223344  -          0/3  ncclCommInitRank  22:13:20.123456  live\n"));

  // Rank 0's call table: every column starts where its header does.
  const std::vector<std::string> lines = lines_of(text);
  size_t header_line = 0;
  while (header_line < lines.size() && !testing::contains(lines[header_line], "index  time (UTC)")) ++header_line;
  ASSERT_LT(header_line + 5, lines.size());
  const std::string& header = lines[header_line];
  EXPECT_EQ(header,
            "    index  time (UTC)       op                comm    seq    count  dtype       redop        root/peer  "
            "group  result           duration");
  const std::vector<std::string> rows(lines.begin() + static_cast<long>(header_line) + 1,
                                      lines.begin() + static_cast<long>(header_line) + 6);
  EXPECT_EQ(rows[0],
            "        0  22:13:20.123456  ncclCommInitRank  3f2a9c    -        -  -           -                    "
            "-      -  ncclSuccess        3.00ms");
  EXPECT_EQ(rows[1],
            "        1  22:13:20.133456  ncclAllReduce     3f2a9c    1  1048576  float16     sum                  "
            "-      -  ncclSuccess        1.50ms");
  EXPECT_EQ(rows[2],
            "        2  22:13:20.143456  ncclBroadcast     3f2a9c    2     4096  bfloat16    -                    "
            "1      -  ncclSuccess         850ns");
  EXPECT_EQ(rows[3],
            "        3  22:13:20.153456  ncclSend          3f2a9c    1      128  float32     -                    "
            "1      4  ncclSuccess        12.4us");
  EXPECT_EQ(rows[4],
            "        4  22:13:20.163456  ncclAllReduce     3f2a9c    3      256  float8e4m3  premulsum#5          "
            "-      -  ncclRemoteError     2.00s");
}

TEST(RecorderReport, LastLimitsTheCallsShown) {
  TempDir dir;
  make_run(dir);
  ReportOptions options = test_options();
  options.last = 2;
  const std::string text = format_text_report(read_run(dir), options);
  EXPECT_TRUE(testing::contains(text, "  last 2 of 5 held calls\n")) << text;
  EXPECT_FALSE(testing::contains(text, "ncclBroadcast")) << text;
  options.last = 0;
  EXPECT_TRUE(testing::contains(format_text_report(read_run(dir), options), "  calls: none held\n"));
}

TEST(RecorderReport, JsonCarriesTheSameFacts) {
  TempDir dir;
  make_run(dir);
  const json j = make_json_report(read_run(dir), test_options());
  EXPECT_EQ(j["run_dir"], dir.path());
  ASSERT_EQ(j["ranks"].size(), 3u);
  const json& r0 = j["ranks"][0];
  EXPECT_EQ(r0["global_rank"], 0);
  EXPECT_EQ(r0["pid"], kExitedPid);
  EXPECT_EQ(r0["host"], "node-a");
  EXPECT_EQ(r0["run_id"], "run-42");
  EXPECT_EQ(r0["nccl_version"], "2.28.9");
  EXPECT_EQ(r0["nccl_version_code"], 22809);
  EXPECT_EQ(r0["state"], "exited");
  EXPECT_EQ(r0["records_total"], 5);
  EXPECT_EQ(r0["records_held"], 5);
  EXPECT_EQ(r0["capacity"], 64);
  EXPECT_EQ(r0["torn_records"], 0);
  ASSERT_EQ(r0["communicators"].size(), 1u);
  EXPECT_EQ(r0["communicators"][0]["id"], "3f2a9c0011223344");
  EXPECT_TRUE(r0["communicators"][0]["parent"].is_null());
  EXPECT_EQ(r0["communicators"][0]["created_by"], "ncclCommInitRank");
  EXPECT_EQ(r0["communicators"][0]["state"], "live");
  ASSERT_EQ(r0["records"].size(), 5u);
  const json& last = r0["records"][4];
  EXPECT_EQ(last["index"], 4);
  EXPECT_EQ(last["time"], "22:13:20.163456");
  EXPECT_EQ(last["op"], "ncclAllReduce");
  EXPECT_EQ(last["comm"], "3f2a9c0011223344");
  EXPECT_EQ(last["dtype"], "float8e4m3");
  EXPECT_EQ(last["redop"], "premulsum#5");
  EXPECT_EQ(last["result"], "ncclRemoteError");
  EXPECT_EQ(last["result_code"], 6);
  EXPECT_EQ(last["duration_ns"], 2000 * kMs);
  EXPECT_EQ(r0["records"][3]["group"], 4);
  EXPECT_EQ(r0["records"][3]["peer"], 1);

  const json& r1 = j["ranks"][1];
  EXPECT_EQ(r1["state"], "crashed_or_killed");
  EXPECT_EQ(r1["nccl_version"], "2.7.8");
  EXPECT_EQ(r1["records"][1]["result"], "did not return");
  EXPECT_EQ(r1["records"][1]["pending"], true);
  EXPECT_TRUE(r1["records"][1]["duration_ns"].is_null());
  EXPECT_EQ(j["ranks"][2]["state"], "running");
  EXPECT_EQ(j["ranks"][2]["records"][0]["result"], "pending");

  ASSERT_EQ(j["errors"].size(), 1u);
  EXPECT_EQ(j["errors"][0]["file"], dir.file("broken.tsrec"));
}

// The streamed report is the dump of the whole one, with the caller's members beside its own; the text report
// reaches its sink in whole lines.
TEST(RecorderReport, StreamedReportsPrintWhatTheWholeOnesPrint) {
  TempDir dir;
  make_run(dir);
  const RunDirectory run = read_run(dir);
  for (const size_t last : {size_t{0}, size_t{2}, size_t{1000}}) {
    ReportOptions options = test_options();
    options.last = last;
    const json more = {{"summary", {{"run", "x"}}}, {"reports", json::array()}, {"manifest", nullptr}};
    std::string text;
    reports::JsonStream out([&](std::string_view piece) { text += piece; });
    write_json_report(run, options, more, out);
    out.finish();
    json whole = make_json_report(run, options);
    whole.update(more);
    EXPECT_EQ(text, whole.dump(2, ' ', false, json::error_handler_t::replace)) << "last " << last;

    std::string lines;
    write_text_report(run, options, [&](std::string_view batch) {
      EXPECT_EQ(batch.back(), '\n');
      lines += batch;
    });
    EXPECT_EQ(lines, format_text_report(run, options));
  }
}

SiteEntry python_site(uint64_t caller, int32_t line, const char* function, const char* file) {
  SiteEntry entry{};
  entry.caller = caller;
  entry.python_depth = 12;
  entry.python_frames = 1;
  entry.frames[0].line = line;
  std::strncpy(entry.frames[0].function, function, sizeof(entry.frames[0].function) - 1);
  std::strncpy(entry.frames[0].file, file, sizeof(entry.frames[0].file) - 1);
  return entry;
}

// Rank 0 runs Python 3.12: two of its calls come from Python, one from native code. Rank 1 runs a Python trainscope
// cannot read: no column, a line saying why.
void make_python_run(const TempDir& dir) {
  {
    Writer w;
    open_rank_with_sites(dir.file("rank0.tsrec"), {0, kExitedPid, "node-a", 22809}, w);
    w.set_python(3, 12, "");
    const uint32_t backward = w.add_site(python_site(0x401000, 88, "backward", "train.py"));
    const uint32_t native = w.add_site(SiteEntry{0, 0x402000, 0, 0, {}});
    const uint32_t no_line = w.add_site(python_site(0x403000, 0, "step", "/opt/lib/loop.py"));
    Record r = call(Op::kAllReduce, kBase + 10 * kMs, 1, 1048576, 6, 0, kUnknown);
    r.site = static_cast<uint16_t>(backward);
    Writer::complete(w.append(r), 0, kBase + 11 * kMs);
    r = call(Op::kBroadcast, kBase + 20 * kMs, 2, 4096, 9, kUnknown, 1);
    r.site = static_cast<uint16_t>(native);
    Writer::complete(w.append(r), 0, kBase + 21 * kMs);
    r = call(Op::kAllReduce, kBase + 30 * kMs, 3, 1048576, 6, 0, kUnknown);
    r.site = static_cast<uint16_t>(no_line);
    Writer::complete(w.append(r), 0, kBase + 31 * kMs);
    r = call(Op::kAllReduce, kBase + 40 * kMs, 4, 1048576, 6, 0, kUnknown);
    r.site = 0;  // no site: the table was full
    Writer::complete(w.append(r), 0, kBase + 41 * kMs);
    w.close(kBase + 100 * kMs);
  }
  {
    Writer w;
    open_rank_with_sites(dir.file("rank1.tsrec"), {1, kExitedPid + 10, "node-b", 22809}, w);
    w.set_python(3, 14, "Python 3.14 is not supported by this trainscope (3.9 to 3.13)");
    Record r = call(Op::kAllReduce, kBase + 10 * kMs, 1, 1048576, 6, 0, kUnknown);
    r.site = static_cast<uint16_t>(w.add_site(SiteEntry{0, 0x401000, 0, 0, {}}));
    Writer::complete(w.append(r), 0, kBase + 11 * kMs);
    w.close(kBase + 100 * kMs);
  }
}

TEST(RecorderReport, LastCallsShowTheirInnermostPythonLocation) {
  TempDir dir;
  make_python_run(dir);
  const std::string text = format_text_report(read_run(dir), test_options());
  SCOPED_TRACE(text);
  EXPECT_TRUE(testing::contains(text, "    file " + dir.file("rank0.tsrec") +
                                          "  started 2023-11-14 22:13:20.123456 UTC\n"
                                          "    Python 3.12\n"
                                          "  communicators (1)\n"));
  EXPECT_TRUE(
      testing::contains(text,
                        "  last 4 of 4 held calls\n"
                        "    index  time (UTC)       op             comm    seq    count  dtype     redop  "
                        "root/peer  group  result       duration  python (the job's own line)\n"
                        "        0  22:13:20.133456  ncclAllReduce  3f2a9c    1  1048576  float16   sum            "
                        "-      -  ncclSuccess    1.00ms  train.py:88 in backward\n"
                        "        1  22:13:20.143456  ncclBroadcast  3f2a9c    2     4096  bfloat16  -              "
                        "1      -  ncclSuccess    1.00ms  -\n"
                        "        2  22:13:20.153456  ncclAllReduce  3f2a9c    3  1048576  float16   sum            "
                        "-      -  ncclSuccess    1.00ms  /opt/lib/loop.py in step\n"
                        "        3  22:13:20.163456  ncclAllReduce  3f2a9c    4  1048576  float16   sum            "
                        "-      -  ncclSuccess    1.00ms  -\n"));
  // Rank 1: Python, but not readable: said once, and no column of dashes.
  EXPECT_TRUE(
      testing::contains(text,
                        "    Python 3.14: stacks not available: Python 3.14 is not supported by this trainscope "
                        "(3.9 to 3.13)\n"));
  const size_t rank1 = text.find("=== rank 1");
  ASSERT_NE(rank1, std::string::npos);
  EXPECT_FALSE(testing::contains(text.substr(rank1), "python (the job's own line)"));

  const json j = make_json_report(read_run(dir), test_options());
  const json& r0 = j["ranks"][0];
  EXPECT_EQ(r0["python"], "3.12");
  EXPECT_EQ(r0["python_note"], "");
  EXPECT_EQ(r0["torn_sites"], 0);
  EXPECT_EQ(r0["records"][0]["python"], json::parse(R"({"file": "train.py", "line": 88, "function": "backward"})"));
  EXPECT_EQ(r0["records"][0]["site"], 1);
  EXPECT_TRUE(r0["records"][1]["python"].is_null());
  EXPECT_EQ(r0["records"][2]["python"]["line"], 0);
  EXPECT_TRUE(r0["records"][3]["python"].is_null());
  EXPECT_EQ(r0["records"][3]["site"], 0);
  EXPECT_EQ(j["ranks"][1]["python_note"], "Python 3.14 is not supported by this trainscope (3.9 to 3.13)");
  EXPECT_TRUE(j["ranks"][1]["records"][0]["python"].is_null());
  // A process without Python: no line, and null.
  TempDir plain;
  make_run(plain);
  const std::string plain_text = format_text_report(read_run(plain), test_options());
  EXPECT_FALSE(testing::contains(plain_text, "Python")) << plain_text;
  EXPECT_TRUE(make_json_report(read_run(plain), test_options())["ranks"][0]["python"].is_null());
}

TEST(RecorderReport, CallsThatDidNotReturnSayWhereInPythonTheyWereMade) {
  TempDir dir;
  {
    Writer w;
    open_rank_with_sites(dir.file("rank0.tsrec"), {0, kKilledPid, "node-a", 22809}, w);
    w.set_python(3, 11, "");
    Record r = call(Op::kAllReduce, kBase, 1, 8, 6, 0, kUnknown);
    r.site = static_cast<uint16_t>(w.add_site(python_site(0x401000, 131, "evaluate", "train.py")));
    w.append(r);
    r.seq = 2;
    r.site = 0;
    w.append(r);
    w.abandon();
  }
  const std::string text = format_text_report(read_run(dir), test_options());
  EXPECT_TRUE(
      testing::contains(text,
                        "  ! rank 0 (pid 1000002, node-a): ncclAllReduce comm 3f2a9c seq 1 (#0, 22:13:20.123456) did "
                        "not return, called from train.py:131 in evaluate\n"
                        "  ! rank 0 (pid 1000002, node-a): ncclAllReduce comm 3f2a9c seq 2 (#1, 22:13:20.123456) did "
                        "not return\n"))
      << text;
}

TEST(RecorderReport, PythonLocations) {
  EXPECT_EQ(python_location(nullptr), "");
  SiteEntry site = python_site(1, 88, "backward", "train.py");
  EXPECT_EQ(python_location(&site), "train.py:88 in backward");
  site.frames[0].function[0] = '\0';
  EXPECT_EQ(python_location(&site), "train.py:88");
  site.python_frames = 0;
  EXPECT_EQ(python_location(&site), "");
}

// dist.all_reduce's innermost frame is torch's: the job's own line comes first, where it called into torch after.
TEST(RecorderReport, ThePythonLocationIsTheJobsOwnLineWhenTheInnermostFrameIsALibrarys) {
  const char* torch = "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py";
  SiteEntry site = python_site(1, 2501, "all_reduce", torch);
  site.python_frames = 2;
  site.frames[1].line = 11;
  std::strncpy(site.frames[1].function, "reduce_gradients", sizeof(site.frames[1].function) - 1);
  std::strncpy(site.frames[1].file, "/home/me/torch_job.py", sizeof(site.frames[1].file) - 1);
  EXPECT_EQ(python_location(&site),
            "/home/me/torch_job.py:11 in reduce_gradients (innermost: " + std::string(torch) + ":2501 in all_reduce)");
  // The innermost frame is the job's own: it is the location, its caller is not shown.
  std::strncpy(site.frames[0].file, "/home/me/helpers.py", sizeof(site.frames[0].file) - 1);
  EXPECT_EQ(python_location(&site), "/home/me/helpers.py:2501 in all_reduce");
  // Every frame kept is a library's: the innermost one.
  std::strncpy(site.frames[0].file, torch, sizeof(site.frames[0].file) - 1);
  std::strncpy(site.frames[1].file, "/opt/py/lib/python3.12/threading.py", sizeof(site.frames[1].file) - 1);
  EXPECT_EQ(python_location(&site), std::string(torch) + ":2501 in all_reduce");
}

TEST(RecorderReport, LibraryPythonFilesAreTheInstallationsAndItsPackages) {
  EXPECT_TRUE(is_library_python_file("/usr/lib/python3/dist-packages/torch/nn/modules/module.py"));
  EXPECT_TRUE(is_library_python_file("/venv/lib/python3.11/site-packages/vllm/distributed/pynccl.py"));
  EXPECT_TRUE(is_library_python_file("/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py"));
  EXPECT_TRUE(is_library_python_file("<frozen importlib._bootstrap>"));
  EXPECT_FALSE(is_library_python_file("/home/me/train.py"));
  EXPECT_FALSE(is_library_python_file("<string>"));
  EXPECT_FALSE(is_library_python_file("/home/me/lib/python3.x/notes.py"));
  EXPECT_FALSE(is_library_python_file("/home/me/lib/python3.11"));
  EXPECT_FALSE(is_library_python_file(nullptr));
}

TEST(RecorderReport, TornCallSitesNeedAttention) {
  TempDir dir;
  {
    Writer w;
    open_rank_with_sites(dir.file("rank0.tsrec"), {0, kExitedPid, "node-a", 22809}, w);
    w.add_site(python_site(1, 88, "backward", "train.py"));
    SiteEntry* table = reinterpret_cast<SiteEntry*>(reinterpret_cast<char*>(w.header()) + site_table_offset(4));
    table[0].commit = 0;  // as if the process died writing it
    Record r = call(Op::kAllReduce, kBase, 1, 8, 6, 0, kUnknown);
    r.site = 1;
    Writer::complete(w.append(r), 0, kBase + kMs);
    w.close(kBase + 2 * kMs);
  }
  const std::string text = format_text_report(read_run(dir), test_options());
  EXPECT_TRUE(testing::contains(text, "  ! rank 0 (pid 1000001, node-a): 1 unfinished call site entry skipped\n"))
      << text;
  EXPECT_FALSE(testing::contains(text, "python (the job's own line)")) << text;
}

struct ToolRun {
  int status = -1;  // exit status, or -1 when it did not exit normally in time
  std::string out;
  std::string err;
};

// Runs the built `trainscope` with `args`, collecting stdout and stderr; gives up (SIGKILL) after 30 s.
ToolRun run_tool(const std::vector<std::string>& args) {
  ToolRun result;
  int out_pipe[2];
  int err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) return result;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  std::vector<std::string> storage = {TRAINSCOPE_TOOL_PATH};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, TRAINSCOPE_TOOL_PATH, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (spawned != 0) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    ADD_FAILURE() << "posix_spawn " << TRAINSCOPE_TOOL_PATH << ": " << std::strerror(spawned);
    return result;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_pipes = 2;
  while (open_pipes > 0 && std::chrono::steady_clock::now() < deadline) {
    if (poll(fds, 2, 1000) < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[4096];
      const ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        sinks[i]->append(buffer, static_cast<size_t>(n));
      } else {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_pipes;
      }
    }
  }
  for (const pollfd& p : fds) {
    if (p.fd >= 0) ::close(p.fd);
  }
  if (open_pipes > 0) kill(pid, SIGKILL);
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  if (open_pipes == 0 && WIFEXITED(wstatus)) result.status = WEXITSTATUS(wstatus);
  return result;
}

TEST(RecorderReport, ToolPrintsTextAndJson) {
  TempDir dir;
  make_run(dir);
  const ToolRun text = run_tool({"report", dir.path()});
  EXPECT_EQ(text.status, 0) << text.err;
  // The summary first, then the recorders' table.
  EXPECT_EQ(text.out.rfind("Summary of run " + fs::path(dir.path()).filename().string() + "\n", 0), 0u) << text.out;
  EXPECT_LT(text.out.find("  processes: 3 recorded, 1 recorder file unreadable: "),
            text.out.find("trainscope report: " + dir.path()))
      << text.out;
  EXPECT_TRUE(testing::contains(text.out, "=== rank 0 | pid 1000001 | host node-a | NCCL 2.28.9 | exited")) << text.out;
  EXPECT_TRUE(testing::contains(text.out, "  ! unreadable " + dir.file("broken.tsrec"))) << text.out;

  const ToolRun j = run_tool({"report", dir.path(), "--json", "--last", "1"});
  EXPECT_EQ(j.status, 0) << j.err;
  const json parsed = json::parse(j.out, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded()) << j.out;
  ASSERT_EQ(parsed["ranks"].size(), 3u);
  ASSERT_EQ(parsed["ranks"][0]["records"].size(), 1u);
  EXPECT_EQ(parsed["ranks"][0]["records"][0]["index"], 4);
  EXPECT_EQ(parsed["errors"].size(), 1u);
  EXPECT_EQ(parsed["summary"]["processes"]["recorded"], 3);
  EXPECT_EQ(parsed["reports"], json::array());
  EXPECT_TRUE(parsed["manifest"].is_null());

  const ToolRun all = run_tool({"report", "--last=all", dir.path()});
  EXPECT_EQ(all.status, 0) << all.err;
  EXPECT_TRUE(testing::contains(all.out, "  last 5 of 5 held calls\n"));
}

// A crafted recorder (and a crafted report and note beside it) cannot drive the reader's terminal: every string from
// them is printed with its control characters escaped, in the text and in the JSON.
TEST(RecorderReport, CraftedStringsArePrintedEscaped) {
  TempDir dir;
  {
    Writer w;
    WriterOptions o{};
    const std::string path = dir.file("rank0.tsrec");
    o.path = path.c_str();
    o.capacity = 16;
    o.max_comms = 4;
    o.pid = kExitedPid;
    o.launcher_rank = 0;
    o.launcher_world = 1;
    o.host = "evil\x1b]0;pwned\x07";
    o.run_id = "run\x1b[2J";
    o.exe = "/bin/\x1b[31mpython";
    o.start_ns = kBase;
    ASSERT_EQ(w.open(o), 0);
    Writer::complete(w.append(call(Op::kAllReduce, kBase, 1, 16, 7, 0, kUnknown)), 0, kBase + kMs);
    w.close(kBase + 2 * kMs);
  }
  testing::write_text(dir.file("mismatch-abcdef-1.txt"), "Cannot apply\x1b[8m hidden\n");
  testing::write_text(
      dir.file("pid-7.no-nccl-calls.json"),
      "{\"kind\": \"nccl_without_calls\", \"pid\": 7, \"rank\": null, \"host\": \"h\\u001b[5m\", \"exe\": "
      "\"/x\\u009by\", \"nccl\": \"libnccl.so.2\", \"calls\": 0, \"communicators\": 0}\n");

  const std::string text = format_text_report(read_run(dir), test_options());
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_TRUE(testing::contains(text, "| host evil\\x1b]0;pwned\\x07 |")) << text;
  EXPECT_TRUE(testing::contains(text, "(run run\\x1b[2J)")) << text;

  const ToolRun tool = run_tool({"report", dir.path()});
  EXPECT_EQ(tool.status, 0) << tool.err;
  for (const std::string* out : {&tool.out, &tool.err}) {
    EXPECT_EQ(out->find('\x1b'), std::string::npos) << *out;
    EXPECT_EQ(out->find('\x07'), std::string::npos) << *out;
  }
  EXPECT_TRUE(testing::contains(tool.out, "host evil\\x1b]0;pwned\\x07")) << tool.out;
  EXPECT_TRUE(testing::contains(tool.out, "Cannot apply\\x1b[8m hidden\n"))
      << "the report's own text, escaped: " << tool.out;

  const ToolRun j = run_tool({"report", "--json", dir.path()});
  EXPECT_EQ(j.status, 0) << j.err;
  EXPECT_EQ(j.out.find('\x1b'), std::string::npos) << j.out;
  EXPECT_EQ(j.out.find("\xc2\x9b"), std::string::npos) << j.out;
  const json parsed = json::parse(j.out, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded()) << j.out;
  EXPECT_EQ(parsed["ranks"][0]["host"], "evil\x1b]0;pwned\x07") << "the JSON keeps the value, JSON-escaped";
}

TEST(RecorderReport, ProcessOverviewSaysWhoCrashedAndWhichCallsNeverReturned) {
  TempDir dir;
  make_run(dir);
  const ProcessOverview overview = process_overview(read_run(dir), test_options());
  EXPECT_EQ(overview.recorded, 3u);
  EXPECT_EQ(overview.unreadable, 1u);
  EXPECT_EQ(overview.exited, 1u);
  EXPECT_EQ(overview.running, 1u);
  EXPECT_EQ(overview.running_unverified, 0u);
  ASSERT_EQ(overview.crashed.size(), 1u);
  EXPECT_EQ(overview.crashed[0].rank, 1);
  EXPECT_EQ(overview.crashed[0].pid, kKilledPid);
  ASSERT_EQ(overview.did_not_return.size(), 1u);
  EXPECT_EQ(overview.did_not_return[0].rank, 1);
  ASSERT_EQ(overview.pending.size(), 1u);
  EXPECT_EQ(overview.pending[0].rank, 2);

  reports::RunSummary summary;
  std::string error;
  ASSERT_TRUE(reports::read_run_summary(dir.path(), &summary, &error)) << error;
  summary.processes = overview;
  EXPECT_TRUE(
      testing::contains(reports::format_summary_text(summary),
                        "  processes: 3 recorded, 1 recorder file unreadable: 1 exited, 1 crashed or killed (rank 1), "
                        "1 running; a call never returned on rank 1; calls still pending on rank 2\n"))
      << reports::format_summary_text(summary);
}

TEST(RecorderReport, ToolRejectsBadArgumentsWithOneClearLine) {
  TempDir dir;
  make_run(dir);
  const auto expect_usage_error = [](const ToolRun& run, const std::string& message) {
    EXPECT_EQ(run.status, 2);
    EXPECT_TRUE(testing::contains(run.err, "trainscope report: " + message + "\n")) << run.err;
    EXPECT_EQ(run.out, "");
  };
  expect_usage_error(run_tool({"report"}),
                     "missing RUN_DIR: the run directory (a sub-folder of TRAINSCOPE_DIR) holding *.tsrec files");
  expect_usage_error(run_tool({"report", dir.file("nope")}), "'" + dir.file("nope") + "' does not exist");
  expect_usage_error(run_tool({"report", dir.file("rank0.tsrec")}),
                     "'" + dir.file("rank0.tsrec") + "' is not a directory");
  const std::string empty = dir.file("empty");
  ASSERT_EQ(mkdir(empty.c_str(), 0700), 0);
  expect_usage_error(run_tool({"report", empty}),
                     "'" + empty + "' is not a run directory: it holds no *.tsrec flight recorder files");
  expect_usage_error(run_tool({"report", dir.path(), "--last", "ten"}),
                     "--last 'ten' is not valid; accepted: a whole number 0..1000000000 or 'all'");
  expect_usage_error(run_tool({"report", dir.path(), "--last", "-1"}),
                     "--last '-1' is not valid; accepted: a whole number 0..1000000000 or 'all'");
  expect_usage_error(run_tool({"report", dir.path(), "--last"}),
                     "--last needs a value; accepted: a whole number 0..1000000000 or 'all'");
  expect_usage_error(
      run_tool({"report", dir.path(), "--jsn"}),
      "unknown option '--jsn'; accepted: --json, --summary, --last N, --trace FILE, --html FILE, --help");
  expect_usage_error(run_tool({"report", dir.path(), "--json", "--trace", dir.file("t.json")}),
                     "--json cannot be combined with --trace or --html: they write files of their own");
  expect_usage_error(run_tool({"report", dir.path(), "--html"}),
                     "--html needs a file name: where to write the page (HTML)");
  expect_usage_error(run_tool({"report", dir.path(), dir.file("nope")}), "'" + dir.file("nope") + "' does not exist");
}

TEST(RecorderReport, ToolFailsWhenNoFileCouldBeRead) {
  TempDir dir;
  testing::write_text(dir.file("a.tsrec"), "");
  testing::write_text(dir.file("b.tsrec"), std::string(5000, 'x'));
  const ToolRun run = run_tool({"report", dir.path()});
  EXPECT_EQ(run.status, 1);
  EXPECT_TRUE(testing::contains(run.out, "  ! unreadable " + dir.file("a.tsrec") + ": empty file (0 bytes)"))
      << run.out;
  EXPECT_TRUE(
      testing::contains(run.out, "  ! unreadable " + dir.file("b.tsrec") + ": not a trainscope flight recorder"))
      << run.out;
  EXPECT_TRUE(testing::contains(run.err, "none of the 2 *.tsrec files in '" + dir.path() + "' could be read"))
      << run.err;
}

// The golden run: make_run's ranks and unreadable file; rank 3, stopped by trainscope, whose strings were crafted
// (control characters, a C1 control, DEL, bytes that are not UTF-8), with twelve calls from Python sites (one whose
// innermost frame is a library's) and a second communicator split off the first; a process of unknown global rank
// whose Python cannot be read; a report, a no-NCCL-calls note and a manifest.
void make_golden_run(const std::string& dir) {
  make_run(dir);
  {
    Writer w;
    WriterOptions o{};
    const std::string path = dir + "/rank3.tsrec";
    o.path = path.c_str();
    o.capacity = 16;
    o.max_comms = 4;
    o.max_sites = 8;
    o.pid = kExitedPid + 3;
    o.launcher_rank = 3;
    o.launcher_world = 5;
    o.local_rank = 1;
    o.host = "evil\x1b]0;pwned\x07";
    o.run_id =
        "run\xc2\x9b"
        "2J\x7f";
    o.exe = "/bin/py\xff\xfethon";
    o.start_ns = kBase;
    ASSERT_EQ(w.open(o), 0);
    w.set_global_rank(3);
    w.set_nccl_version(22809);
    w.set_python(3, 12, "");
    CommEntry c{};
    c.id = kCommId;
    c.created_ns = kBase;
    c.rank = 3;
    c.nranks = 4;
    c.color = kUnknown;
    c.state = static_cast<uint16_t>(CommState::kLive);
    c.origin = static_cast<uint16_t>(Op::kCommInitRank);
    w.add_comm(c);
    c.id = 0x77aa;
    c.parent_id = kCommId;
    c.rank = 1;
    c.nranks = 2;
    c.color = 1;
    c.origin = static_cast<uint16_t>(Op::kCommSplit);
    Writer::set_comm_state(w.add_comm(c), CommState::kDestroyed, kBase + 90 * kMs);
    const uint32_t own = w.add_site(python_site(0x401000, 7, "f\x1b[31mn", "/home/me/tr\xe9in.py"));
    SiteEntry library = python_site(0x402000, 2501, "all_reduce",
                                    "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py");
    library.python_frames = 2;
    library.frames[1].line = 11;
    std::strncpy(library.frames[1].function, "reduce\x7f\xc2\x85", sizeof(library.frames[1].function) - 1);
    std::strncpy(library.frames[1].file, "/home/me/job.py", sizeof(library.frames[1].file) - 1);
    const uint32_t from_torch = w.add_site(library);
    for (uint64_t i = 0; i < 12; ++i) {
      Record r = call(i % 3 == 0   ? Op::kAllReduce
                      : i % 3 == 1 ? Op::kRecv
                                   : Op::kReduce,
                      kBase + (10 + i) * kMs, i + 1, 1000 + i, static_cast<int32_t>(i % 12),
                      i % 3 == 0 ? static_cast<int32_t>(i % 6) : kUnknown, i % 3 == 0 ? kUnknown : 2);
      r.site = static_cast<uint16_t>(i % 4 == 3 ? 0 : i % 2 == 0 ? own : from_torch);
      r.flags = static_cast<uint8_t>(i % 16);
      r.group = i % 5 == 4 ? i : 0;
      r.tid = 4242;
      const Pending pending = w.append(r);
      if (i != 11) Writer::complete(pending, static_cast<int32_t>(i % 9), kBase + (10 + i) * kMs + i * 977);
    }
    record_unwritten_report(w.header(), "stop-rank3.json", "No space left on device\x1b[0m");
    record_stop(w.header(), StopReason::kMismatch, 86, kCommId, 5, false, 0, true, kBase + 95 * kMs);
    w.abandon();  // record_stop marked it exited, as trainscope's stop does before _exit()
  }
  {
    Writer w;
    WriterOptions o{};
    const std::string path = dir + "/rank-unknown.tsrec";
    o.path = path.c_str();
    o.capacity = 4;
    o.max_comms = 2;
    o.max_sites = 2;
    o.pid = kExitedPid + 4;
    o.launcher_rank = kUnknown;
    o.launcher_world = kUnknown;
    o.local_rank = kUnknown;
    o.host = "node-e";
    o.run_id = "run-42";
    o.exe = "/usr/bin/python3";
    o.start_ns = kBase + kMs;
    ASSERT_EQ(w.open(o), 0);
    w.set_python(3, 14, "Python 3.14\x01 is not \xc2\x85supported \xff");
    for (uint64_t i = 0; i < 6; ++i) {  // a ring of 4: the first two are gone
      Record r = call(Op::kBroadcast, kBase + (20 + i) * kMs, i + 1, 64, 7, kUnknown, 0);
      Writer::complete(w.append(r), 0, kBase + (20 + i) * kMs + 100);
    }
    record_exit_status(w.header(), 3);
    w.close(kBase + 99 * kMs);
  }
  testing::write_text(dir + "/mismatch-abcdef-1.txt", "Cannot apply\x1b[8m hidden\n");
  testing::write_text(
      dir + "/pid-7.no-nccl-calls.json",
      "{\"kind\": \"nccl_without_calls\", \"pid\": 7, \"rank\": null, \"host\": \"h\\u001b[5m\", \"exe\": "
      "\"/x\\u009by\", \"nccl\": \"libnccl.so.2\", \"calls\": 0, \"communicators\": 0}\n");
  testing::write_text(dir + "/manifest.json",
                      "{\"world_size\": 5, \"warnings\": [], \"note\": \"a\\u007fb\\u0085c\\u001b\"}\n");
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

// `trainscope report` prints, byte for byte, what it printed before it streamed its output: the files in
// tests/unit/golden were written by the version that built the whole JSON document (and the whole text) first
// (commit ce65791), the scratch folder's path replaced by @TMP@. TRAINSCOPE_UPDATE_GOLDEN=1 rewrites them from the
// tool under test instead of comparing.
TEST(RecorderReport, ToolOutputMatchesTheGoldenFiles) {
  TempDir dir;
  const std::string run = dir.file("run-golden");
  ASSERT_EQ(mkdir(run.c_str(), 0700), 0);
  make_golden_run(run);
  const char* update = std::getenv("TRAINSCOPE_UPDATE_GOLDEN");
  struct Case {
    std::vector<std::string> args;
    const char* golden;
    bool json;
  };
  const Case cases[] = {{{"--json", "--last", "all"}, "report-json-last-all.golden", true},
                        {{"--json", "--last", "2"}, "report-json-last-2.golden", true},
                        {{"--json", "--summary"}, "report-json-summary.golden", true},
                        {{"--last", "all"}, "report-text-last-all.golden", false},
                        {{}, "report-text.golden", false}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.golden);
    std::vector<std::string> args = {"report", run};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const ToolRun tool = run_tool(args);
    ASSERT_EQ(tool.status, 0) << tool.err;
    const std::string shown = replace_all(tool.out, dir.path(), "@TMP@");
    const std::string golden_path = std::string(TRAINSCOPE_GOLDEN_DIR) + "/" + c.golden;
    if (update != nullptr && std::strcmp(update, "1") == 0) {
      testing::write_text(golden_path, shown);
      continue;
    }
    const std::string golden = read_text(golden_path);
    ASSERT_FALSE(golden.empty()) << golden_path;
    EXPECT_EQ(shown, golden);
    if (c.json) {
      const json parsed = json::parse(shown, nullptr, false);
      ASSERT_FALSE(parsed.is_discarded()) << shown;
      EXPECT_EQ(parsed, json::parse(golden));
    }
  }
}

// ---- Launches (the launch collector's records) --------------------------------------------------------------------

constexpr uint64_t kComputeStream = 0x7f3a5c001200;
constexpr uint64_t kCopyStream = 0x7f3a5c009900;

// Rank 0: NCCL calls and launches on two streams, completion checked at 12:00:00.060, a first CUDA error. Rank 1: an
// older-format-like process whose launch collector never ran (no launch section).
void make_launch_run(const std::string& dir) {
  {
    testing::LaunchRecorder rec(dir + "/rank0.tsrec", 0);
    rec.writer().set_launch_mode(LaunchMode::kCompletions, "");
    rec.collective(0xabc, 1, 1);
    rec.launch("gemm_a", kComputeStream, 10);
    const uint64_t b = rec.launch("gemm_b", kComputeStream, 20);
    rec.launch("copy_kernel", kCopyStream, 21);
    rec.collective(0xabc, 2, 30);
    rec.launch("softmax", kComputeStream, 40);
    rec.launch("late", kComputeStream, 70);  // after the last completion check: unknown
    rec.completed(kComputeStream, b, 35, 60);
    rec.error("cudaStreamSynchronize", kComputeStream, 80, 700);
  }
  {
    testing::LaunchRecorder rec(dir + "/rank1.tsrec", 1);
    rec.collective(0xabc, 1, 1);
  }
}

TEST(RecorderReport, LaunchesPerStreamBesideTheCallsWithWhetherTheyFinished) {
  TempDir dir;
  make_launch_run(dir.path());
  ReportOptions options = test_options();
  options.last = 3;
  const std::string text = format_text_report(read_run(dir), options);
  // The calls table holds the NCCL calls only, counted among themselves.
  EXPECT_TRUE(testing::contains(text, "  last 2 of 2 held calls\n")) << text;
  EXPECT_FALSE(testing::contains(text, "kernel launch")) << text;
  EXPECT_TRUE(
      testing::contains(text, "  launches: callbacks and kernel completion; completion known as of 12:00:00.060000\n"))
      << text;
  EXPECT_TRUE(
      testing::contains(text, "    stream 0x7f3a5c001200 (context 0000000000c0ffee): last 3 of 4 held launches\n"))
      << text;
  EXPECT_TRUE(
      testing::contains(text, "    stream 0x7f3a5c009900 (context 0000000000c0ffee): last 1 of 1 held launches\n"))
      << text;
  EXPECT_FALSE(testing::contains(text, "gemm_a")) << "beyond --last 3 on its stream";
  const std::vector<std::string> lines = lines_of(text);
  const auto line_with = [&](const std::string& part) {
    for (const std::string& line : lines)
      if (testing::contains(line, part)) return line;
    return std::string();
  };
  EXPECT_TRUE(testing::contains(
      line_with("gemm_b"), "gemm_b   1024  256    0       runtime kernel  cudaSuccess  finished by 12:00:00.035000"))
      << line_with("gemm_b");
  EXPECT_TRUE(testing::contains(line_with("softmax"), "not finished as of 12:00:00.060000")) << line_with("softmax");
  EXPECT_TRUE(testing::contains(line_with("  late  "), "cudaSuccess  unknown")) << text;
  EXPECT_TRUE(testing::contains(line_with("copy_kernel"), "not finished as of"))
      << "checked at 60, started at 21, never done";
  EXPECT_TRUE(
      testing::contains(text,
                        "  first CUDA error: cudaStreamSynchronize returned 700 cudaErrorIllegalAddress (an "
                        "illegal memory access was encountered) at 2025-12-01 12:00:00.080000 UTC, after kernel "
                        "late on stream 0x7f3a5c001200 (cuda-error-rank0)\n"))
      << text;
  EXPECT_TRUE(
      testing::contains(text, "  ! rank 0 (pid 4000, node-1): first CUDA error: cudaStreamSynchronize returned 700"))
      << text;
  // Rank 1's collector never ran and it launched nothing: its section is as it always was.
  const size_t rank1 = text.find("=== rank 1");
  ASSERT_NE(rank1, std::string::npos);
  EXPECT_FALSE(testing::contains(text.substr(rank1), "launches:")) << text.substr(rank1);

  const json j = make_json_report(read_run(dir), options);
  const json& rank0 = j["ranks"][0];
  ASSERT_EQ(rank0["records"].size(), 2u) << "NCCL calls only";
  EXPECT_EQ(rank0["launches"]["mode"], "completions");
  EXPECT_EQ(rank0["launches"]["cuda_errors"], 1);
  ASSERT_EQ(rank0["launches"]["streams"].size(), 2u);
  const json& compute = rank0["launches"]["streams"][1];  // the one launched on most recently is last
  EXPECT_EQ(compute["stream"], kComputeStream);
  EXPECT_EQ(compute["held"], 4);
  ASSERT_EQ(compute["launches"].size(), 3u);
  EXPECT_EQ(compute["launches"][0]["kernel"], "gemm_b");
  EXPECT_EQ(compute["launches"][0]["finished"], "finished");
  EXPECT_EQ(compute["launches"][1]["finished"], "not_finished");
  EXPECT_EQ(compute["launches"][2]["finished"], "unknown");
  EXPECT_EQ(rank0["launches"]["first_cuda_error"]["result_name"], "cudaErrorIllegalAddress");
  EXPECT_TRUE(j["ranks"][1]["launches"]["first_cuda_error"].is_null());
  EXPECT_EQ(j["ranks"][1]["launches"]["mode"], "none");
}

TEST(RecorderReport, ALaunchRecordWithoutAResultIsNoWait) {
  TempDir dir;
  {
    testing::LaunchRecorder rec(dir.file("rank0.tsrec"), 0);
    Record r{};
    r.op = static_cast<uint16_t>(Op::kKernelLaunch);
    r.start_ns = testing::LaunchRecorder::at(5);
    rec.writer().append(r);  // the process died between the append and its result
  }
  const RunDirectory run = read_run(dir);
  const ProcessOverview overview = process_overview(run, test_options());
  ASSERT_EQ(overview.details.size(), 1u);
  EXPECT_EQ(overview.details[0].pending_calls, 0u);
  EXPECT_TRUE(overview.pending.empty());
  const std::string text = format_text_report(run, test_options());
  EXPECT_FALSE(testing::contains(text, "pending")) << text;
  EXPECT_TRUE(testing::contains(text, "no result")) << text;
}

TEST(RecorderReport, ToolShowsTheFirstCudaErrorRebuiltWhenTheProcessDidNotWriteIt) {
  TempDir dir;
  make_launch_run(dir.path());
  ToolRun text = run_tool({"report", dir.path()});
  EXPECT_EQ(text.status, 0) << text.err;
  EXPECT_TRUE(testing::contains(text.out,
                                "  first CUDA errors: 1\n    rank 0: first CUDA error: cudaStreamSynchronize returned "
                                "700 cudaErrorIllegalAddress"))
      << text.out;
  EXPECT_TRUE(
      testing::contains(text.out, "\n=== cuda-error-rank0 (rebuilt from " + dir.file("rank0.tsrec") +
                                      ": not written by the process) ===\nFirst CUDA error on rank 0 (pid 4000, host "
                                      "node-1): cudaStreamSynchronize returned 700 cudaErrorIllegalAddress"))
      << text.out;
  // Once the process wrote it, the report on disk is shown, once.
  RecorderFile file;
  std::string error;
  ASSERT_TRUE(read_recorder_file(dir.file("rank0.tsrec"), &file, &error)) << error;
  ASSERT_EQ(reports::write_cuda_error_report(dir.path(), file).error, "");
  text = run_tool({"report", dir.path()});
  EXPECT_EQ(text.status, 0) << text.err;
  EXPECT_TRUE(testing::contains(text.out, "\n=== cuda-error-rank0.txt ===\nFirst CUDA error on rank 0")) << text.out;
  EXPECT_FALSE(testing::contains(text.out, "rebuilt from")) << text.out;
  EXPECT_TRUE(testing::contains(text.out, "  first CUDA errors: 1\n")) << "one line per process, not per source";
  const ToolRun j = run_tool({"report", dir.path(), "--json"});
  const json parsed = json::parse(j.out, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded()) << j.out;
  EXPECT_EQ(parsed["ranks"][0]["launches"]["first_cuda_error"]["api"], "cudaStreamSynchronize");
  ASSERT_EQ(parsed["reports"].size(), 1u);
  EXPECT_EQ(parsed["reports"][0]["kind"], "cuda_error");
}

}  // namespace
}  // namespace trainscope::recorder
