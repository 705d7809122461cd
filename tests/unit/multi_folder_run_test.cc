// A run of several hosts read as one: each host's copy of the run folder, written here by the real recorder and report
// writers, merged by analysis/multi_folder_run.h and by `trainscope report DIR1 DIR2`; the ranks whose recorders are in
// none of the folders are named, with their hosts where the manifest knows them.
#include "analysis/multi_folder_run.h"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/run_summary.h"
#include "base/flight_record_format.h"
#include "base/flight_recorder_writer.h"
#include "reports/exchange_reports.h"
#include "tests/support/rank_recorder.h"
#include "tests/support/subprocess.h"

namespace trainscope::reports {
namespace {

using nlohmann::json;

constexpr uint64_t kFolderComm = 0x239016aabbccddeeull;
constexpr uint64_t kStart = 1700000000000000000ull;

// A job of `world` ranks, two per host; host h's copy of the run folder is <root>/<host>/run-7.
class Hosts {
 public:
  std::string folder(const std::string& host) const { return tmp_.path() + "/" + host + "/run-7"; }
  std::string root() const { return tmp_.path(); }

  // Rank `rank`'s recorder in `host`'s folder: it made a communicator, completed an all-reduce and exited.
  void write_rank(const std::string& host, int32_t rank, int32_t world, const char* run_id = "run-7") const {
    make_folder(host);
    const std::string path = folder(host) + "/rank" + std::to_string(rank) + ".tsrec";
    recorder::Writer w;
    testing::RankProcess process;
    process.rank = rank;
    process.world = world;
    process.pid = 4000 + rank;
    process.host = host.c_str();
    process.run_id = run_id;
    process.start_ns = kStart;
    ASSERT_EQ(testing::open_rank_recorder(w, path.c_str(), process), 0);
    testing::add_live_comm(w, kFolderComm, rank, world, kStart);
    recorder::Record r{};
    r.op = static_cast<uint16_t>(recorder::Op::kAllReduce);
    r.comm_id = kFolderComm;
    r.seq = 1;
    r.count = 1024;
    r.dtype = 7;
    r.redop = 0;
    r.rank = rank;
    r.nranks = world;
    r.peer = recorder::kUnknown;
    r.start_ns = kStart + 1000;
    recorder::Writer::complete(w.append(r), 0, kStart + 2000);
    w.close(kStart + 3000);
  }

  // A job of 4 ranks on node0 and node1 with a mismatch, node0 the coordinator's host: each host's copy.
  void write_two_hosts_job() const {
    for (int32_t rank = 0; rank < 4; ++rank) write_rank(rank < 2 ? "node0" : "node1", rank, 4);
    write_mismatch("node0", 4);
  }

  // The coordinator's mismatch report and manifest, in `host`'s folder (where the coordinator ran).
  void write_mismatch(const std::string& host, int32_t world) const {
    make_folder(host);
    MismatchReport m;
    m.comm_id = kFolderComm;
    m.seq = 24;
    m.op = static_cast<uint16_t>(recorder::Op::kAllReduce);
    m.differences = {"count"};
    m.detected_ns = kStart;
    for (int32_t rank = 0; rank < 2; ++rank) {
      CallLine line;
      line.global_rank = rank;
      line.comm_rank = rank;
      line.present = true;
      line.call.comm_id = kFolderComm;
      line.call.seq = 24;
      line.call.count = rank == 0 ? 1048576 : 524288;
      line.call.op = m.op;
      line.call.dtype = 6;
      line.call.peer = -1;
      m.calls.push_back(line);
    }
    const WrittenReport written =
        write_report(folder(host), mismatch_base_name(m), format_mismatch_text(m), mismatch_json(m));
    ASSERT_TRUE(written.error.empty()) << written.error;
    json ranks = json::array();
    for (int32_t rank = 0; rank < world; ++rank)
      ranks.push_back({{"rank", rank}, {"launcher_rank", rank}, {"host", "node" + std::to_string(rank / 2)}});
    const std::string manifest = json({{"world_size", world}, {"ranks", ranks}, {"warnings", json::array()}}).dump();
    ASSERT_EQ(replace_file(folder(host) + "/manifest.json", manifest), 0);
  }

 private:
  void make_folder(const std::string& host) const {
    mkdir((tmp_.path() + "/" + host).c_str(), 0700);
    mkdir(folder(host).c_str(), 0700);
  }
  testing::TempDir tmp_;
};

RunRead read_run(const std::vector<std::string>& args) {
  std::vector<std::string> folders;
  std::string error;
  EXPECT_TRUE(find_run_folders(args, &folders, &error)) << error;
  RunRead out;
  EXPECT_TRUE(read_run(folders, {}, &out, &error)) << error;
  return out;
}

std::vector<std::string> summary_lines(const RunRead& run) {
  std::vector<std::string> lines;
  const std::string text = format_summary_text(run.summary);
  size_t start = 0;
  for (size_t end = text.find('\n'); end != std::string::npos; start = end + 1, end = text.find('\n', start))
    lines.push_back(text.substr(start, end - start));
  return lines;
}

bool has_line(const std::vector<std::string>& lines, const std::string& line) {
  for (const std::string& l : lines)
    if (l == line) return true;
  return false;
}

TEST(MultiFolderRun, TwoHostsCopiesAreOneRun) {
  Hosts hosts;
  hosts.write_two_hosts_job();
  const RunRead run = read_run({hosts.folder("node0"), hosts.folder("node1")});
  ASSERT_EQ(run.run.files.size(), 4u);
  for (int32_t rank = 0; rank < 4; ++rank) EXPECT_EQ(run.run.files[rank].header.launcher_rank, rank);
  EXPECT_TRUE(run.summary.missing_ranks.empty());
  EXPECT_EQ(run.summary.launcher_world, 4);
  ASSERT_EQ(run.summary.folders.size(), 2u);
  EXPECT_EQ(run.summary.folders[1].ranks, (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(run.summary.name, "run-7");
  const std::vector<std::string> lines = summary_lines(run);
  EXPECT_TRUE(has_line(lines, "  mismatches: 1 (communicator 239016 call #24 `ncclAllReduce`: count differs)"))
      << format_summary_text(run.summary);
  EXPECT_TRUE(has_line(lines, "  processes: 4 recorded: 4 exited; every call returned"))
      << format_summary_text(run.summary);
  EXPECT_TRUE(has_line(lines, "  run folders: 2 read as one run: " + hosts.folder("node0") +
                                  " (ranks 0 and 1, 1 report); " + hosts.folder("node1") + " (ranks 2 and 3)"))
      << format_summary_text(run.summary);
  // Each report says the folder it came from.
  const std::string texts = format_report_texts(run.summary);
  EXPECT_NE(texts.find("=== " + hosts.folder("node0") + "/mismatch-239016-24.txt ==="), std::string::npos) << texts;
}

TEST(MultiFolderRun, AParentOfTheHostsCopiesIsSearchedTwoLevelsDown) {
  Hosts hosts;
  hosts.write_rank("node0", 0, 4);
  hosts.write_rank("node0", 1, 4);
  hosts.write_rank("node1", 2, 4);
  hosts.write_rank("node1", 3, 4);
  std::vector<std::string> folders;
  std::string error;
  ASSERT_TRUE(find_run_folders({hosts.root()}, &folders, &error)) << error;
  EXPECT_EQ(folders, (std::vector<std::string>{hosts.folder("node0"), hosts.folder("node1")}));
  // The same folder given twice, or given and found, is read once.
  ASSERT_TRUE(find_run_folders({hosts.folder("node0"), hosts.root(), hosts.folder("node0") + "/"}, &folders, &error))
      << error;
  EXPECT_EQ(folders.size(), 2u);
  const RunRead run = read_run({hosts.root()});
  EXPECT_EQ(run.run.files.size(), 4u);
}

TEST(MultiFolderRun, AParentHoldingSeveralRunsIsRefusedNamingThem) {
  testing::TempDir tmp;
  for (const char* run : {"run-a", "run-b"}) {
    const std::string dir = tmp.path() + "/" + run;
    ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
    recorder::Writer w;
    testing::RankProcess process;
    const std::string path = dir + "/rank0.tsrec";
    ASSERT_EQ(testing::open_rank_recorder(w, path.c_str(), process), 0);
    w.close(1);
  }
  std::vector<std::string> folders;
  std::string error;
  EXPECT_FALSE(find_run_folders({tmp.path()}, &folders, &error));
  EXPECT_EQ(error, "'" + tmp.path() +
                       "' holds 2 different runs (run-a, run-b): pass the folder of one run, or the hosts' copies of "
                       "one run");
}

TEST(MultiFolderRun, ARankWhoseHostsFolderIsMissingIsNamedWithItsHost) {
  Hosts hosts;
  hosts.write_rank("node0", 0, 4);
  hosts.write_rank("node0", 1, 4);
  hosts.write_mismatch("node0", 4);
  const RunRead run = read_run({hosts.folder("node0")});
  EXPECT_TRUE(run.summary.folders.empty());  // one folder: read as always
  EXPECT_EQ(run.summary.missing_ranks, (std::vector<int32_t>{2, 3}));
  EXPECT_TRUE(
      has_line(summary_lines(run),
               "  missing recorders: ranks 2 and 3 of a world of 4 left no flight recorder in this folder (ranks "
               "2 and 3 on node1, by the manifest): on a job of several hosts, copy each host's run folder back "
               "and read them together: trainscope report DIR1 DIR2 ..."))
      << format_summary_text(run.summary);
  const json j = summary_json(run.summary);
  EXPECT_EQ(j["missing_recorders"]["ranks"], json({2, 3}));
  EXPECT_EQ(j["missing_recorders"]["hosts"]["node1"], json({2, 3}));
  EXPECT_TRUE(j["folders"].is_null());
}

TEST(MultiFolderRun, TheSameProcessCopiedTwiceIsOneProcessAndTheSameReportOneReport) {
  Hosts hosts;
  hosts.write_rank("node0", 0, 2);
  hosts.write_rank("node0", 1, 2);
  hosts.write_mismatch("node0", 2);
  hosts.write_rank("copy", 1, 2);  // makes the folder; replaced below
  // Byte copies of rank 0's recorder and of the mismatch report, as a second collection of the host would hold.
  std::filesystem::remove(hosts.folder("copy") + "/rank1.tsrec");
  for (const char* name : {"rank0.tsrec", "mismatch-239016-24.txt", "mismatch-239016-24.json"})
    std::filesystem::copy_file(hosts.folder("node0") + "/" + name, hosts.folder("copy") + "/" + name);
  const RunRead run = read_run({hosts.folder("node0"), hosts.folder("copy")});
  EXPECT_EQ(run.run.files.size(), 2u);
  EXPECT_TRUE(run.summary.missing_ranks.empty());
  EXPECT_EQ(run.summary.reports.size(), 1u);
}

TEST(MultiFolderRun, FoldersOfDifferentRunsAreSaidToBeSo) {
  Hosts hosts;
  hosts.write_rank("node0", 0, 2, "run-7");
  hosts.write_rank("node1", 1, 2, "run-8");
  const RunRead run = read_run({hosts.folder("node0"), hosts.folder("node1")});
  const std::string text = format_summary_text(run.summary);
  EXPECT_NE(text.find("their recorders name different runs (run-7, run-8): are these copies of one run?"),
            std::string::npos)
      << text;
}

TEST(MultiFolderRun, TheToolReadsSeveralFoldersAsOneRun) {
  Hosts hosts;
  hosts.write_two_hosts_job();
  testing::ProcessOptions options;
  options.timeout_seconds = 30;
  const testing::ProcessResult both = testing::run_process(
      {TRAINSCOPE_TOOL_PATH, "report", hosts.folder("node0"), hosts.folder("node1"), "--summary"}, options);
  EXPECT_EQ(both.exit_code, 0) << both.err;
  EXPECT_NE(both.out.find("processes: 4 recorded: 4 exited"), std::string::npos) << both.out;
  EXPECT_EQ(both.out.find("missing recorders"), std::string::npos) << both.out;
  const testing::ProcessResult one =
      testing::run_process({TRAINSCOPE_TOOL_PATH, "report", hosts.folder("node0"), "--summary"}, options);
  EXPECT_EQ(one.exit_code, 0) << one.err;
  EXPECT_NE(one.out.find("missing recorders: ranks 2 and 3 of a world of 4"), std::string::npos) << one.out;
  // The page of the merged run holds every rank.
  const std::string page = hosts.root() + "/run.html";
  const testing::ProcessResult html =
      testing::run_process({TRAINSCOPE_TOOL_PATH, "report", hosts.root(), "--html", page}, options);
  EXPECT_EQ(html.exit_code, 0) << html.err;
  EXPECT_NE(html.out.find("run folders: 2 read as one run"), std::string::npos) << html.out;
  // A file it writes is never one of the folders' files.
  const testing::ProcessResult clobber =
      testing::run_process({TRAINSCOPE_TOOL_PATH, "report", hosts.folder("node0"), hosts.folder("node1"), "--html",
                            hosts.folder("node1") + "/rank2.tsrec"},
                           options);
  EXPECT_EQ(clobber.exit_code, 2) << clobber.out;
}

}  // namespace
}  // namespace trainscope::reports
