// The run summary's word on NCCL calls it never saw: the notes a process that loaded NCCL without making a
// communicator leaves (shim/nccl_presence.h), read back and judged, and a `trainscope run` job that recorded nothing.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/run_summary.h"
#include "tests/support/subprocess.h"

namespace trainscope::reports {
namespace {

using nlohmann::json;

class NcclRunDir {
 public:
  NcclRunDir() : path_(tmp_.path() + "/run-7") { EXPECT_EQ(mkdir(path_.c_str(), 0700), 0); }
  const std::string& path() const { return path_; }
  void write(const std::string& name, const std::string& content) const {
    const std::string file = path_ + "/" + name;
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0) << file;
    ASSERT_EQ(::write(fd, content.data(), content.size()), static_cast<ssize_t>(content.size()));
    ::close(fd);
  }
  // A note as the shim writes it.
  // `cuda_driver`: null leaves the field out, as the notes of trainscope before it did.
  void note(int rank, int pid, const std::string& exe = "/usr/bin/python3.11", json cuda_driver = true) const {
    json j = {{"kind", "nccl_without_calls"},
              {"pid", pid},
              {"rank", rank >= 0 ? json(rank) : json(nullptr)},
              {"host", "node7"},
              {"exe", exe},
              {"nccl", "/opt/nccl/lib/libnccl.so.2"},
              {"calls", 0},
              {"communicators", 0}};
    if (!cuda_driver.is_null()) j["cuda_driver"] = cuda_driver;
    const std::string stem =
        rank >= 0 ? "rank-" + std::to_string(rank) + ".pid-" + std::to_string(pid) : "pid-" + std::to_string(pid);
    write(stem + ".no-nccl-calls.json", j.dump() + "\n");
  }

 private:
  testing::TempDir tmp_;
  std::string path_;
};

RunSummary read(const NcclRunDir& dir) {
  RunSummary summary;
  std::string error;
  EXPECT_TRUE(read_run_summary(dir.path(), &summary, &error)) << error;
  return summary;
}

std::string nccl_line(const RunSummary& summary) {
  const std::string text = format_summary_text(summary);
  const size_t at = text.find("  NCCL calls: ");
  if (at == std::string::npos) return "";
  return text.substr(at + 2, text.find('\n', at) - at - 2);
}

TEST(NcclWithoutCalls, RanksThatLoadedNcclAndCalledNothingMakeTheRunNotClean) {
  NcclRunDir dir;
  dir.note(1, 812);
  dir.note(0, 811);
  RunSummary summary = read(dir);
  ASSERT_EQ(summary.nccl_without_calls.size(), 2u);
  EXPECT_EQ(summary.nccl_without_calls[0].rank, 0);  // by rank
  EXPECT_EQ(summary.nccl_without_calls[1].pid, 812);
  EXPECT_FALSE(summary.empty());
  EXPECT_EQ(nccl_line(summary),
            "NCCL calls: 2 processes loaded libnccl but no NCCL call was seen: NCCL may be linked statically into the "
            "job (rank 0 pid 811 (python3.11 on node7), rank 1 pid 812 (python3.11 on node7); "
            "/opt/nccl/lib/libnccl.so.2)");
  const json j = summary_json(summary);
  EXPECT_FALSE(j["nothing_wrong"]);
  EXPECT_EQ(j["nccl_without_calls"]["unexplained"], 2);
  EXPECT_TRUE(j["nccl_without_calls"]["no_nccl_call_in_job"]);
  EXPECT_EQ(format_summary_text(summary).find("nothing went wrong"), std::string::npos);
}

TEST(NcclWithoutCalls, LaunchersAndHelpersOfRanksThatUsedNcclAreOnlyListed) {
  NcclRunDir dir;
  dir.note(-1, 100, "/usr/bin/python3.11");  // torchrun's agent
  dir.note(0, 250);                          // rank 0's data-loader worker
  RunSummary summary = read(dir);
  summary.processes = recorder::ProcessOverview{};
  summary.processes->recorded = 2;
  summary.processes->exited = 2;
  summary.recorders_with_communicators = 2;
  summary.ranks_with_communicators = {0, 1};
  EXPECT_EQ(nccl_line(summary),
            "NCCL calls: 2 other processes loaded libnccl without calling it, as launchers and data-loader workers do "
            "(rank 0 pid 250 (python3.11 on node7), pid 100 (python3.11 on node7))");
  const json j = summary_json(summary);
  EXPECT_TRUE(j["nothing_wrong"]);
  EXPECT_EQ(j["nccl_without_calls"]["unexplained"], 0);
  EXPECT_TRUE(j["nccl_without_calls"]["processes"][0]["helper"]);
}

// torch with gloo on the CPU loads libnccl and never the driver: NCCL cannot have run, linked statically or not.
TEST(NcclWithoutCalls, ProcessesThatNeverLoadedTheCudaDriverRanOnTheCpuAndAreNotSuspected) {
  NcclRunDir dir;
  dir.note(0, 811, "/usr/bin/python3.11", false);
  dir.note(1, 812, "/usr/bin/python3.11", false);
  dir.note(-1, 800, "/usr/bin/python3.11", false);  // torchrun's agent
  RunSummary summary = read(dir);
  ASSERT_EQ(summary.nccl_without_calls.size(), 3u);
  EXPECT_EQ(summary.nccl_without_calls[0].cuda_driver, false);
  EXPECT_EQ(nccl_line(summary),
            "NCCL calls: 3 processes loaded libnccl but never the CUDA driver, so ran no NCCL: a job on the CPU, whose "
            "collectives (gloo, MPI) trainscope does not watch (rank 0 pid 811 (python3.11 on node7), rank 1 pid 812 "
            "(python3.11 on node7), pid 800 (python3.11 on node7))");
  const json j = summary_json(summary);
  EXPECT_TRUE(j["nothing_wrong"]);
  EXPECT_EQ(j["nccl_without_calls"]["unexplained"], 0);
  EXPECT_EQ(j["nccl_without_calls"]["on_the_cpu"], 3);
  EXPECT_FALSE(j["nccl_without_calls"]["no_nccl_call_in_job"]);
  EXPECT_EQ(j["nccl_without_calls"]["processes"][0]["cuda_driver"], false);

  // One that did load the driver is still suspected; a note without the field (an older trainscope's) too.
  dir.note(2, 813, "/usr/bin/python3.11", true);
  dir.note(3, 814, "/usr/bin/python3.11", nullptr);
  summary = read(dir);
  for (const NcclWithoutCalls& n : summary.nccl_without_calls) {
    if (n.pid == 814) {
      EXPECT_EQ(n.cuda_driver, std::nullopt);
    }
  }
  EXPECT_NE(nccl_line(summary).find("NCCL calls: 2 processes loaded libnccl but no NCCL call was seen: NCCL may be "
                                    "linked statically into the job (rank 2 pid 813"),
            std::string::npos)
      << nccl_line(summary);
  EXPECT_NE(nccl_line(summary).find("; 3 processes loaded libnccl but never the CUDA driver"), std::string::npos);
  EXPECT_FALSE(summary_json(summary)["nothing_wrong"]);
}

TEST(NcclWithoutCalls, ARankWithoutARecorderAmongRanksWithOnesIsStillUnexplained) {
  NcclRunDir dir;
  dir.note(3, 903);
  RunSummary summary = read(dir);
  summary.recorders_with_communicators = 3;
  summary.ranks_with_communicators = {0, 1, 2};
  EXPECT_EQ(nccl_line(summary).rfind("NCCL calls: 1 process loaded libnccl but no NCCL call was seen", 0), 0u)
      << nccl_line(summary);
  EXPECT_FALSE(summary_json(summary)["nothing_wrong"]);
  EXPECT_FALSE(summary_json(summary)["nccl_without_calls"]["no_nccl_call_in_job"]);
}

TEST(NcclWithoutCalls, AJobThatRecordedNothingIsNotSaidToBeClean) {
  NcclRunDir dir;
  RunSummary summary = read(dir);
  EXPECT_EQ(nccl_line(summary), "");  // `trainscope report` of a folder: nothing to say
  summary.job_started = true;         // `trainscope run` started a job, and nothing reached NCCL
  EXPECT_EQ(nccl_line(summary),
            "NCCL calls: no process of this job recorded an NCCL call: NCCL may be linked statically into the job "
            "(trainscope sees calls into a shared libnccl only), or the job never reached NCCL");
  EXPECT_FALSE(summary_json(summary)["nothing_wrong"]);
}

TEST(NcclWithoutCalls, ABrokenNoteIsNamedNotTrusted) {
  NcclRunDir dir;
  dir.write("rank-0.pid-5.no-nccl-calls.json", "{\"kind\": \"nccl_without");
  dir.write("rank-1.pid-6.no-nccl-calls.json", "{\"kind\": \"mismatch\"}");
  const RunSummary summary = read(dir);
  EXPECT_TRUE(summary.nccl_without_calls.empty());
  ASSERT_EQ(summary.unreadable.size(), 2u);
  EXPECT_EQ(summary.unreadable[0].file, "rank-0.pid-5.no-nccl-calls.json");
  EXPECT_EQ(summary.unreadable[1].error, "not a note of a process that loaded NCCL without calling it");
}

TEST(NcclWithoutCalls, TheReportToolReadsAFolderThatHoldsOnlyNotes) {
  NcclRunDir dir;
  dir.note(0, 42);
  testing::ProcessOptions options;
  options.timeout_seconds = 30;
  const testing::ProcessResult run = testing::run_process({TRAINSCOPE_TOOL_PATH, "report", dir.path()}, options);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("  NCCL calls: 1 process loaded libnccl but no NCCL call was seen"), std::string::npos)
      << run.out;
}

}  // namespace
}  // namespace trainscope::reports
