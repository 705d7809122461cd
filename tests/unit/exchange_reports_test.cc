// The exchange's report files: both forms written mode 0600, never overwriting an earlier report; the desync
// report of a send/recv to the character, and its file name apart from the collective's.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/private_files.h"
#include "collectors/exchange/recorder_tail.h"
#include "reports/exchange_reports.h"
#include "reports/recorder_report.h"
#include "tests/support/launch_recorder.h"
#include "tests/support/subprocess.h"

namespace trainscope::reports {
namespace {

using recorder::Op;

constexpr uint64_t kT0 = 1700000000000000000ull;
constexpr uint64_t kSecond = 1000000000ull;

// Process 1 waits in its 7th receive from process 0, which made 6 sends and destroyed the communicator.
DesyncReport point_to_point_desync() {
  DesyncReport report;
  report.comm_id = 0x3f2a9c0011223344ull;
  report.seq = 7;
  report.op = static_cast<uint16_t>(Op::kRecv);
  report.point_to_point = true;
  report.sender = 0;
  report.receiver = 1;
  report.certain = true;
  report.stuck_since_ns = kT0 + kSecond;
  report.detected_ns = kT0 + 312 * kSecond + 400000000ull;
  WaitingRank waiting;
  waiting.global_rank = 1;
  waiting.comm_rank = 1;
  waiting.seq = 7;
  waiting.op = static_cast<uint16_t>(Op::kRecv);
  waiting.since_ns = kT0;
  waiting.stack.native = {"recv_activations(Stage&) at pipeline.cc:88", "train_step() at pipeline.cc:120"};
  waiting.caller = 0x401234;
  report.waiting.push_back(waiting);
  MissingRank missing;
  missing.global_rank = 0;
  missing.comm_rank = 0;
  missing.host = "node0";
  missing.pid = 4242;
  missing.has_last_call = true;
  missing.last_seq = 6;
  missing.last_op = static_cast<uint16_t>(Op::kSend);
  missing.last_peer = 1;
  missing.last_call_ns = kT0 - kSecond;
  missing.state = LaggardState::kDestroyed;
  report.missing.push_back(missing);
  return report;
}

TEST(ExchangeReportsTest, PointToPointDesyncNamesGlobalRanksInASubCommunicator) {
  // A pipeline's communicator whose ranks 0 and 1 are the job's ranks 4 and 6; one the coordinator never placed is
  // named by its communicator rank.
  DesyncReport report = point_to_point_desync();
  report.waiting[0].global_rank = 6;
  report.missing[0].global_rank = 4;
  const std::string text = format_desync_text(report);
  EXPECT_EQ(text.substr(0, text.find('\n') + 1),
            "Desync on communicator 3f2a9c at send #7 from rank 4 to rank 6 (`ncclSend`/`ncclRecv`): rank 6 waits in "
            "recv #7 from rank 4; rank 4 can never make that send.\n");
  EXPECT_NE(text.find("  - Process 6 (communicator rank 1): recv #7 from rank 4 `ncclRecv`"), std::string::npos)
      << text;
  EXPECT_NE(text.find("last call send #6 to rank 6 `ncclSend`"), std::string::npos) << text;
  report.missing[0].global_rank = -1;
  EXPECT_NE(format_desync_text(report).find("at send #7 from communicator rank 0 to rank 6"), std::string::npos)
      << format_desync_text(report);
  EXPECT_EQ(desync_base_name(report), "desync-3f2a9c-send-0-1-7") << "file names keep communicator ranks";
}

TEST(ExchangeReportsTest, PointToPointDesyncText) {
  DesyncReport report = point_to_point_desync();
  EXPECT_EQ(format_desync_text(report),
            "Desync on communicator 3f2a9c at send #7 from rank 0 to rank 1 (`ncclSend`/`ncclRecv`): rank 1 waits in "
            "recv #7 from rank 0; rank 0 can never make that send.\n"
            "Waiting in the communicator:\n"
            "  - Process 1 (communicator rank 1): recv #7 from rank 0 `ncclRecv` since 2023-11-14 22:13:20.000000 UTC "
            "(312.40s)\n"
            "Not arrived:\n"
            "  - Process 0 (communicator rank 0, host node0, pid 4242): last call send #6 to rank 1 `ncclSend` at "
            "2023-11-14 22:13:19.000000 UTC; destroyed the communicator; process still running\n"
            "\n"
            "Stacks at the waiting calls:\n"
            "  Process 1:\n"
            "    #0 recv_activations(Stage&) at pipeline.cc:88\n"
            "    #1 train_step() at pipeline.cc:120\n");
  // The timed warning, from the sender's side: the receiver is alive and may still come.
  report.op = static_cast<uint16_t>(Op::kSend);
  report.certain = false;
  report.repeat = 2;
  report.waiting[0] = WaitingRank{};
  report.waiting[0].global_rank = 0;
  report.waiting[0].comm_rank = 0;
  report.waiting[0].seq = 7;
  report.waiting[0].op = static_cast<uint16_t>(Op::kSend);
  report.waiting[0].caller = 0x401234;
  report.missing[0] = MissingRank{};
  report.missing[0].global_rank = 1;
  report.missing[0].comm_rank = 1;
  report.missing[0].state = LaggardState::kAlive;
  EXPECT_EQ(format_desync_text(report),
            "Desync on communicator 3f2a9c at send #7 from rank 0 to rank 1 (`ncclSend`/`ncclRecv`): rank 0 waits in "
            "send #7 to rank 1; rank 1 has not made that receive after 311.40s (reported again: still stuck). It is "
            "alive; a long checkpoint save or evaluation on some ranks looks like this too.\n"
            "Waiting in the communicator:\n"
            "  - Process 0 (communicator rank 0): send #7 to rank 1 `ncclSend` since an unknown time\n"
            "Not arrived:\n"
            "  - Process 1 (communicator rank 1): no call on this communicator seen; alive, not arrived; process still "
            "running\n"
            "\n"
            "Stacks at the waiting calls:\n"
            "  Process 0:\n"
            "    (no stack captured; call site 0x401234)\n");
}

TEST(ExchangeReportsTest, PointToPointDesyncJson) {
  EXPECT_EQ(desync_json(point_to_point_desync()), nlohmann::json::parse(R"({
    "kind": "desync",
    "communicator": "3f2a9c0011223344",
    "seq": 7,
    "operation": "ncclSend/ncclRecv",
    "point_to_point": true,
    "creation": false,
    "sender": 0,
    "receiver": 1,
    "certain": true,
    "repeat": 1,
    "detected_ns": 1700000312400000000,
    "stuck_since_ns": 1700000001000000000,
    "waiting": [{
      "process": 1, "comm_rank": 1, "seq": 7, "op": "ncclRecv", "since_ns": 1700000000000000000, "peer": 0,
      "stack": ["recv_activations(Stage&) at pipeline.cc:88", "train_step() at pipeline.cc:120"],
      "python_stack": [], "python_stack_note": "",
      "caller": "0x401234"
    }],
    "missing": [{
      "process": 0, "comm_rank": 0, "host": "node0", "pid": 4242, "state": "destroyed the communicator",
      "process_gone": false,
      "last_call": {"seq": 6, "op": "ncclSend", "peer": 1, "start_ns": 1699999999000000000,
                    "stack": [], "python_stack": [], "python_stack_note": ""}
    }],
    "note": ""
  })"));
}

TEST(ExchangeReportsTest, CollectiveDesyncShowsTheWaitingCallsStacksAndHasNoPairFields) {
  DesyncReport report;
  report.comm_id = 0x3f2a9c0011223344ull;
  report.seq = 813;
  report.op = static_cast<uint16_t>(Op::kAllReduce);
  report.certain = true;
  report.detected_ns = kT0 + 2 * kSecond;
  WaitingRank waiting;
  waiting.global_rank = 0;
  waiting.comm_rank = 0;
  waiting.seq = 813;
  waiting.op = report.op;
  waiting.since_ns = kT0;
  report.waiting.push_back(waiting);
  MissingRank missing;
  missing.comm_rank = 1;  // never heard from
  report.missing.push_back(missing);
  EXPECT_EQ(format_desync_text(report),
            "Desync on communicator 3f2a9c at call #813 (`ncclAllReduce`): some members can never reach this call.\n"
            "Waiting in the communicator:\n"
            "  - Process 0 (communicator rank 0): call #813 `ncclAllReduce` since 2023-11-14 22:13:20.000000 UTC "
            "(2.00s)\n"
            "Not arrived:\n"
            "  - Process ? (communicator rank 1): no call on this communicator seen; never heard from; process still "
            "running\n"
            "\n"
            "Stacks at the waiting calls:\n"
            "  Process 0:\n"
            "    (no stack captured)\n");
  const nlohmann::json json = desync_json(report);
  EXPECT_EQ(json["point_to_point"], false);
  EXPECT_TRUE(json["sender"].is_null());
  EXPECT_TRUE(json["receiver"].is_null());
  EXPECT_FALSE(json["waiting"][0].contains("peer"));
  EXPECT_EQ(json["waiting"][0]["stack"], nlohmann::json::array());
  EXPECT_EQ(json["waiting"][0]["python_stack"], nlohmann::json::array());
  EXPECT_EQ(json["waiting"][0]["python_stack_note"], "");
  EXPECT_TRUE(json["missing"][0]["last_call"].is_null());
}

exchange::CallStack python_stack() {
  exchange::CallStack stack;
  stack.python = {{"train.py", 88, "backward"}, {"train.py", 120, "main"}};
  stack.native = {"ncclAllReduce at nccl.cc:1", "_PyEval_EvalFrameDefault at ceval.c:4200"};
  return stack;
}

TEST(ExchangeReportsTest, CollectiveDesyncWithPythonStacksOfTheWaitingAndTheMissing) {
  DesyncReport report;
  report.comm_id = 0x3f2a9c0011223344ull;
  report.seq = 813;
  report.op = static_cast<uint16_t>(Op::kAllReduce);
  report.certain = true;
  report.detected_ns = kT0 + 2 * kSecond;
  for (int32_t rank : {0, 1}) {
    WaitingRank waiting;
    waiting.global_rank = rank;
    waiting.comm_rank = rank;
    waiting.seq = 813;
    waiting.op = report.op;
    waiting.since_ns = kT0;
    waiting.caller = 0x401234;
    if (rank == 0) waiting.stack = python_stack();
    if (rank == 1) waiting.stack.python_note = "Python 3.14 is not supported by this trainscope (3.9 to 3.13)";
    report.waiting.push_back(waiting);
  }
  for (int32_t rank : {2, 3}) {
    MissingRank missing;
    missing.global_rank = rank;
    missing.comm_rank = rank;
    missing.host = "node1";
    missing.pid = 90 + rank;
    missing.has_last_call = true;
    missing.last_seq = 812;
    missing.last_op = report.op;
    missing.last_call_ns = kT0 - kSecond;
    missing.state = LaggardState::kExited;
    missing.process_gone = true;
    if (rank == 2) missing.last_stack.python = {{"train.py", 131, "evaluate"}};  // rank 3's is not known
    report.missing.push_back(missing);
  }
  EXPECT_EQ(format_desync_text(report),
            "Desync on communicator 3f2a9c at call #813 (`ncclAllReduce`): some members can never reach this call.\n"
            "Waiting in the communicator:\n"
            "  - Process 0 (communicator rank 0): call #813 `ncclAllReduce` since 2023-11-14 22:13:20.000000 UTC "
            "(2.00s)\n"
            "  - Process 1 (communicator rank 1): call #813 `ncclAllReduce` since 2023-11-14 22:13:20.000000 UTC "
            "(2.00s)\n"
            "Not arrived:\n"
            "  - Process 2 (communicator rank 2, host node1, pid 92): last call #812 `ncclAllReduce` at 2023-11-14 "
            "22:13:19.000000 UTC; exited; process gone\n"
            "  - Process 3 (communicator rank 3, host node1, pid 93): last call #812 `ncclAllReduce` at 2023-11-14 "
            "22:13:19.000000 UTC; exited; process gone\n"
            "\n"
            "Stacks at the waiting calls:\n"
            "  Process 0:\n"
            "    File \"train.py\", line 88, in backward\n"
            "    File \"train.py\", line 120, in main\n"
            "    #0 ncclAllReduce at nccl.cc:1\n"
            "    #1 _PyEval_EvalFrameDefault at ceval.c:4200\n"
            "  Process 1:\n"
            "    (Python stack not captured: Python 3.14 is not supported by this trainscope (3.9 to 3.13))\n"
            "\n"
            "Stacks at the last calls of the ranks that did not arrive:\n"
            "  Process 2:\n"
            "    File \"train.py\", line 131, in evaluate\n");
  const nlohmann::json json = desync_json(report);
  EXPECT_EQ(json["waiting"][0]["python_stack"], nlohmann::json::parse(R"([
    {"file": "train.py", "line": 88, "function": "backward"}, {"file": "train.py", "line": 120, "function": "main"}
  ])"));
  EXPECT_EQ(json["waiting"][0]["stack"][1], "_PyEval_EvalFrameDefault at ceval.c:4200");
  EXPECT_EQ(json["waiting"][1]["python_stack_note"], "Python 3.14 is not supported by this trainscope (3.9 to 3.13)");
  EXPECT_EQ(json["missing"][0]["last_call"]["python_stack"][0]["function"], "evaluate");
  EXPECT_EQ(json["missing"][1]["last_call"]["python_stack"], nlohmann::json::array());
}

TEST(ExchangeReportsTest, MismatchWithPythonStacks) {
  MismatchReport report;
  report.comm_id = 0x3f2a9c0011223344ull;
  report.seq = 812;
  report.op = static_cast<uint16_t>(Op::kAllReduce);
  report.differences = {"count"};
  report.detected_ns = kT0;
  for (int32_t rank : {0, 1, 2}) {
    CallLine line;
    line.global_rank = rank;
    line.comm_rank = rank;
    line.present = true;
    line.call.op = report.op;
    line.call.count = rank == 1 ? 524288 : 1048576;
    line.call.dtype = 6;
    line.call.redop = 0;
    line.call.peer = -1;
    line.call.caller = 0x401234;
    if (rank == 0) line.stack = python_stack();
    if (rank == 1) line.stack.python = {{"train.py", 88, "backward"}};
    report.calls.push_back(line);
  }
  EXPECT_EQ(format_mismatch_text(report),
            "Cannot apply desired operation due to shape mismatches. All shapes across devices must be valid.\n"
            "\n"
            "Operation: `ncclAllReduce` (communicator 3f2a9c, call #812)\n"
            "Input shapes:\n"
            "  - Process 0: [1048576] float16 sum\n"
            "  - Process 1: [524288] float16 sum\n"
            "  - Process 2: [1048576] float16 sum\n"
            "\n"
            "Differs in: count\n"
            "\n"
            "Stacks at the call:\n"
            "  Process 0:\n"
            "    File \"train.py\", line 88, in backward\n"
            "    File \"train.py\", line 120, in main\n"
            "    #0 ncclAllReduce at nccl.cc:1\n"
            "    #1 _PyEval_EvalFrameDefault at ceval.c:4200\n"
            "  Process 1:\n"
            "    File \"train.py\", line 88, in backward\n"
            "  Process 2:\n"
            "    (no stack captured; call site 0x401234)\n");
  const nlohmann::json json = mismatch_json(report);
  EXPECT_EQ(json["calls"][0]["stack"],
            (std::vector<std::string>{"ncclAllReduce at nccl.cc:1", "_PyEval_EvalFrameDefault at ceval.c:4200"}));
  EXPECT_EQ(json["calls"][0]["python_stack"][1], nlohmann::json::parse(R"({"file": "train.py", "line": 120,
                                                                           "function": "main"})"));
  EXPECT_EQ(json["calls"][1]["stack"], nlohmann::json::array());
  EXPECT_EQ(json["calls"][2]["python_stack"], nlohmann::json::array());
  EXPECT_EQ(json["calls"][2]["python_stack_note"], "");
}

TEST(ExchangeReportsTest, VanishedRankWithTheStackOfItsLastCall) {
  VanishedReport report;
  report.global_rank = 3;
  report.host = "node3";
  report.pid = 77;
  report.time_ns = kT0 + 5 * kSecond;
  report.has_last_call = true;
  report.last_call.comm_id = 0x3f2a9c0011223344ull;
  report.last_call.seq = 812;
  report.last_call.op = static_cast<uint16_t>(Op::kAllReduce);
  report.last_call.count = 1048576;
  report.last_call.dtype = 6;
  report.last_call.redop = 0;
  report.last_call.peer = -1;
  report.last_call.start_ns = kT0;
  report.flight_recorder_path = "/runs/job1/rank-3.pid-77.tsrec";
  const std::string without = format_vanished_text(report);
  EXPECT_EQ(without.find("Stack at the last call:"), std::string::npos) << without;
  report.last_stack = python_stack();
  EXPECT_EQ(format_vanished_text(report),
            "Rank 3 vanished: its connection to the coordinator dropped without a goodbye.\n"
            "Host: node3, pid 77\n"
            "Time: 2023-11-14 22:13:25.000000 UTC\n"
            "Last call: `ncclAllReduce` (communicator 3f2a9c, call #812) [1048576] float16 sum at 2023-11-14 "
            "22:13:20.000000 UTC\n"
            "Stack at the last call:\n"
            "  File \"train.py\", line 88, in backward\n"
            "  File \"train.py\", line 120, in main\n"
            "  #0 ncclAllReduce at nccl.cc:1\n"
            "  #1 _PyEval_EvalFrameDefault at ceval.c:4200\n"
            "Flight recorder: /runs/job1/rank-3.pid-77.tsrec (its last calls survive the process: trainscope report "
            "<run directory>)\n");
  const nlohmann::json json = vanished_json(report);
  EXPECT_EQ(json["last_call"]["python_stack"][0]["line"], 88);
  EXPECT_EQ(json["last_call"]["stack"][0], "ncclAllReduce at nccl.cc:1");
  EXPECT_EQ(json["last_call"]["python_stack_note"], "");
  report.has_last_call = false;
  EXPECT_TRUE(vanished_json(report)["last_call"].is_null());
}

TEST(ExchangeReportsTest, PointToPointDesyncNamesNeverMeetACollectivesName) {
  DesyncReport report = point_to_point_desync();
  EXPECT_EQ(desync_base_name(report), "desync-3f2a9c-send-0-1-7");
  report.repeat = 3;
  EXPECT_EQ(desync_base_name(report), "desync-3f2a9c-send-0-1-7-3");
  report.point_to_point = false;
  report.repeat = 1;
  EXPECT_EQ(desync_base_name(report), "desync-3f2a9c-7");
}

TEST(ExchangeReportsTest, WritesTextAndJsonPrivatelyWithoutOverwriting) {
  testing::TempDir dir;
  const std::string run = dir.path() + "/runs/job1";
  VanishedReport report;
  report.global_rank = 3;
  report.host = "node3";
  report.pid = 77;
  report.time_ns = 1700000000000000000ull;
  const WrittenReport first =
      write_report(run, vanished_base_name(report), format_vanished_text(report), vanished_json(report));
  ASSERT_TRUE(first.error.empty()) << first.error;
  EXPECT_EQ(first.text_path, run + "/vanished-rank3.txt");
  EXPECT_EQ(first.json_path, run + "/vanished-rank3.json");
  struct stat info {};
  ASSERT_EQ(stat(first.text_path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(run.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0700u);
  EXPECT_EQ(testing::read_file(first.text_path), format_vanished_text(report));
  EXPECT_NE(testing::read_file(first.json_path).find("\"kind\": \"vanished\""), std::string::npos);
  const WrittenReport second = write_report(run, vanished_base_name(report), "again\n", vanished_json(report));
  ASSERT_TRUE(second.error.empty()) << second.error;
  EXPECT_EQ(second.text_path, run + "/vanished-rank3-2.txt");
  EXPECT_EQ(testing::read_file(first.text_path), format_vanished_text(report));
  // A name taken by either file moves the pair on; nothing else is left in the folder (no temporaries).
  std::ofstream(run + "/vanished-rank3-3.json") << "someone else's\n";
  std::ofstream(run + "/vanished-rank3-4.txt") << "someone else's\n";
  const WrittenReport fifth = write_report(run, vanished_base_name(report), "fifth\n", vanished_json(report));
  ASSERT_TRUE(fifth.error.empty()) << fifth.error;
  EXPECT_EQ(fifth.text_path, run + "/vanished-rank3-5.txt");
  EXPECT_EQ(fifth.json_path, run + "/vanished-rank3-5.json");
  EXPECT_EQ(testing::read_file(run + "/vanished-rank3-3.json"), "someone else's\n");
  EXPECT_EQ(testing::read_file(run + "/vanished-rank3-4.txt"), "someone else's\n");
  EXPECT_FALSE(std::filesystem::exists(run + "/vanished-rank3-4.json")) << "the half pair at -4 was taken back";
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(run)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"vanished-rank3-2.json", "vanished-rank3-2.txt", "vanished-rank3-3.json",
                                             "vanished-rank3-4.txt", "vanished-rank3-5.json", "vanished-rank3-5.txt",
                                             "vanished-rank3.json", "vanished-rank3.txt"}));
}

TEST(ExchangeReportsTest, ALinkPlantedAtAReportsNameIsNeverWrittenThrough) {
  testing::TempDir dir;
  testing::TempDir elsewhere;
  const std::string outside = elsewhere.path() + "/precious";
  std::ofstream(outside) << "precious\n";
  const std::string run = dir.path() + "/run";
  ASSERT_TRUE(make_report_directory(run, nullptr));
  ASSERT_EQ(symlink(outside.c_str(), (run + "/vanished-rank3.txt").c_str()), 0);
  ASSERT_EQ(symlink(outside.c_str(), (run + "/vanished-rank3-2.json").c_str()), 0);
  VanishedReport report;
  report.global_rank = 3;
  const WrittenReport written =
      write_report(run, vanished_base_name(report), format_vanished_text(report), vanished_json(report));
  ASSERT_TRUE(written.error.empty()) << written.error;
  EXPECT_EQ(written.text_path, run + "/vanished-rank3-3.txt") << "both names with a link are passed over";
  EXPECT_EQ(testing::read_file(outside), "precious\n");
  EXPECT_TRUE(std::filesystem::is_symlink(run + "/vanished-rank3.txt"));

  // A file replaced in place (the origin, the manifest) is refused at a link, saying why.
  ASSERT_EQ(symlink(outside.c_str(), (run + "/manifest.json").c_str()), 0);
  EXPECT_EQ(replace_file(run + "/manifest.json", "{}\n"), files::kIsSymlink);
  ASSERT_EQ(symlink(outside.c_str(), (run + "/trace-rank0.txt").c_str()), 0);
  EXPECT_EQ(append_file(run + "/trace-rank0.txt", "frame\n"), files::kIsSymlink);
  EXPECT_STREQ(files::error_text(files::kIsSymlink), "it is a symbolic link, and trainscope never writes through one");
  EXPECT_EQ(testing::read_file(outside), "precious\n");
}

TEST(ExchangeReportsTest, TheRunDirectoryMustBePrivate) {
  testing::TempDir dir;
  const std::string run = dir.path() + "/run";
  ASSERT_EQ(mkdir(run.c_str(), 0777), 0);
  ASSERT_EQ(chmod(run.c_str(), 0777), 0);
  std::string notice;
  std::string error;
  EXPECT_TRUE(make_report_directory(run, &error, &notice)) << error;
  EXPECT_EQ(notice, "made the run directory " + run + " private: it was mode 0777, open to other users");
  struct stat info {};
  ASSERT_EQ(stat(run.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0700u);
  const std::string link = dir.path() + "/link";
  ASSERT_EQ(symlink(run.c_str(), link.c_str()), 0);
  EXPECT_FALSE(make_report_directory(link, &error));
  EXPECT_EQ(error, "cannot use the run directory " + link +
                       ": it is a symbolic link, and trainscope never writes through one");
  if (geteuid() == 0) {
    ASSERT_EQ(chown(run.c_str(), 65534, 65534), 0);
    ASSERT_EQ(chmod(run.c_str(), 0777), 0);
    EXPECT_FALSE(make_report_directory(run, &error));
    EXPECT_EQ(error, "cannot use the run directory " + run +
                         ": it belongs to another user (uid 65534) and others can write to it");
    const WrittenReport refused = write_report(run, "vanished-rank1", "x\n", nlohmann::json::object());
    EXPECT_EQ(refused.error.rfind("cannot use the run directory " + run, 0), 0u) << refused.error;
    EXPECT_EQ(refused.unwritten.report, "vanished-rank1.json");
    EXPECT_TRUE(std::filesystem::is_empty(run)) << "nothing written into it";
  }
}

// A report that cannot be written says which file and why as values (WrittenReport::unwritten), for the coordinator to
// hand on (the engine's recorder note, trainscope run's summary) without parsing its log line back.
TEST(ExchangeReportsTest, AReportThatCannotBeWrittenNamesItsFileAndWhyAsValues) {
  testing::TempDir dir;
  const std::string file = dir.path() + "/a-file";
  std::ofstream(file) << "not a folder\n";
  ASSERT_TRUE(std::filesystem::is_regular_file(file));
  const WrittenReport written = write_report(file + "/run", "mismatch-3f2a9c-5", "x\n", nlohmann::json::object());
  EXPECT_FALSE(written.error.empty());
  EXPECT_EQ(written.unwritten.report, "mismatch-3f2a9c-5.json");
  EXPECT_NE(written.unwritten.cause.find("Not a directory"), std::string::npos) << written.unwritten.cause;
  EXPECT_TRUE(written.text_path.empty());
}

// A desync's waiting and missing ranks with what their GPU streams were doing, read from their flight recorders.
TEST(ExchangeReportsTest, DesyncShowsTheLastLaunchOnEachStreamAndWhetherItFinished) {
  const std::string dir = ::testing::TempDir() + "/desync-launches-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  constexpr uint64_t kCompute = 0x7f3a5c001200;
  constexpr uint64_t kCopy = 0x7f3a5c009900;
  {
    testing::LaunchRecorder rec(dir + "/rank1.tsrec", 1);
    rec.writer().set_launch_mode(recorder::LaunchMode::kCompletions, "");
    const uint64_t gemm = rec.launch("gemm", kCompute, 10);
    rec.launch("copy_in", kCopy, 15);
    rec.completed(kCopy, 0, 0, 50);  // checked, nothing finished on the copy stream yet
    rec.completed(kCompute, gemm, 20, 50);
    rec.launch("void spin_forever<int>(int*)", kCompute, 40);
    rec.launch("copy_out", kCopy, 60);  // after the check: unknown
  }
  {
    testing::LaunchRecorder rec(dir + "/rank0.tsrec", 0);
    rec.collective(0xabc, 1, 1);  // no launch at all
  }
  std::vector<recorder::StreamLastLaunch> missing_launches;
  ASSERT_TRUE(exchange::recorded_last_launches(dir + "/rank1.tsrec", &missing_launches));
  ASSERT_EQ(missing_launches.size(), 2u);
  std::vector<recorder::StreamLastLaunch> waiting_launches;
  ASSERT_TRUE(exchange::recorded_last_launches(dir + "/rank0.tsrec", &waiting_launches));
  EXPECT_TRUE(waiting_launches.empty());
  std::vector<recorder::StreamLastLaunch> none;
  EXPECT_FALSE(exchange::recorded_last_launches(dir + "/missing.tsrec", &none));
  std::filesystem::create_symlink(dir + "/rank1.tsrec", dir + "/link.tsrec");
  EXPECT_FALSE(exchange::recorded_last_launches(dir + "/link.tsrec", &none)) << "never through a link";
  // Only the newest records are read: the newest one alone holds no compute-stream launch.
  ASSERT_TRUE(exchange::recorded_last_launches(dir + "/rank1.tsrec", &none, 1));
  ASSERT_EQ(none.size(), 1u);
  EXPECT_EQ(none[0].kernel, "copy_out");

  DesyncReport report;
  report.comm_id = 0x3f2a9c0011223344ull;
  report.seq = 9;
  report.op = static_cast<uint16_t>(Op::kAllReduce);
  report.detected_ns = testing::LaunchRecorder::at(2000);
  report.stuck_since_ns = testing::LaunchRecorder::at(1000);
  WaitingRank waiting;
  waiting.global_rank = 0;
  waiting.comm_rank = 0;
  waiting.seq = 9;
  waiting.op = report.op;
  waiting.since_ns = testing::LaunchRecorder::at(1000);
  waiting.launches_read = true;
  waiting.launches = waiting_launches;
  report.waiting.push_back(waiting);
  MissingRank missing;
  missing.global_rank = 1;
  missing.comm_rank = 1;
  missing.host = "node-1";
  missing.pid = 4001;
  missing.state = LaggardState::kAlive;
  missing.launches_read = true;
  missing.launches = missing_launches;
  report.missing.push_back(missing);
  const std::string text = format_desync_text(report);
  EXPECT_NE(text.find("Not arrived:\n"
                      "  - Process 1 (communicator rank 1, host node-1, pid 4001): no call on this communicator seen; "
                      "alive, not arrived; process still running\n"
                      "      last launch on stream 0x7f3a5c001200: void spin_forever<int>(int*) launched "
                      "12:00:00.040000, not finished as of 12:00:00.050000\n"
                      "      last launch on stream 0x7f3a5c009900: copy_out launched 12:00:00.060000, unknown\n"),
            std::string::npos)
      << text;
  const nlohmann::json json = desync_json(report);
  EXPECT_EQ(json["waiting"][0]["last_launches"], nlohmann::json::array());
  ASSERT_EQ(json["missing"][0]["last_launches"].size(), 2u);
  EXPECT_EQ(json["missing"][0]["last_launches"][0]["kernel"], "void spin_forever<int>(int*)");
  EXPECT_EQ(json["missing"][0]["last_launches"][0]["finished"], "not_finished");
  EXPECT_EQ(json["missing"][0]["last_launches"][0]["finished_at_ns"], testing::LaunchRecorder::at(50));
  EXPECT_EQ(json["missing"][0]["last_launches"][1]["finished"], "unknown");
  // Not read (another host): no key, no line, as before launches were collected.
  report.missing[0].launches_read = false;
  report.missing[0].launches.clear();
  EXPECT_FALSE(desync_json(report)["missing"][0].contains("last_launches"));
  EXPECT_EQ(format_desync_text(report).find("last launch"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace trainscope::reports
