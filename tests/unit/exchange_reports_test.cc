// The exchange's report files: both forms written mode 0600, never overwriting an earlier report; the desync
// report of a send/recv to the character, and its file name apart from the collective's.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "reports/exchange_reports.h"
#include "reports/recorder_report.h"
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
  waiting.stack = {"recv_activations(Stage&) at pipeline.cc:88", "train_step() at pipeline.cc:120"};
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
            "Native stack at the waiting call:\n"
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
            "Native stack at the waiting call:\n"
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
    "sender": 0,
    "receiver": 1,
    "certain": true,
    "repeat": 1,
    "detected_ns": 1700000312400000000,
    "stuck_since_ns": 1700000001000000000,
    "waiting": [{
      "process": 1, "comm_rank": 1, "seq": 7, "op": "ncclRecv", "since_ns": 1700000000000000000, "peer": 0,
      "stack": ["recv_activations(Stage&) at pipeline.cc:88", "train_step() at pipeline.cc:120"],
      "caller": "0x401234"
    }],
    "missing": [{
      "process": 0, "comm_rank": 0, "host": "node0", "pid": 4242, "state": "destroyed the communicator",
      "process_gone": false,
      "last_call": {"seq": 6, "op": "ncclSend", "peer": 1, "start_ns": 1699999999000000000}
    }],
    "note": ""
  })"));
}

TEST(ExchangeReportsTest, CollectiveDesyncTextIsUnchangedAndHasNoPairFields) {
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
            "running\n");
  const nlohmann::json json = desync_json(report);
  EXPECT_EQ(json["point_to_point"], false);
  EXPECT_TRUE(json["sender"].is_null());
  EXPECT_TRUE(json["receiver"].is_null());
  EXPECT_FALSE(json["waiting"][0].contains("stack"));
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

}  // namespace
}  // namespace trainscope::reports
