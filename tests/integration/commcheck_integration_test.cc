// `trainscope commcheck` as real processes on the CPU stand-in NCCL: every rank OK under a launcher, a rank that
// never joins named by the others within the timeout, a rank that cannot load NCCL named to all, bad arguments.
#include <unistd.h>

#include <future>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/subprocess.h"

namespace {

using trainscope::testing::ProcessOptions;
using trainscope::testing::ProcessResult;
using trainscope::testing::run_process;

std::string host_name() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

// A port below Linux's ephemeral range, different per test process (as ts-launch picks MASTER_PORT).
int test_port(int salt) { return 20000 + static_cast<int>((getpid() * 7 + salt * 131) % 12000); }

ProcessOptions rank_options() {
  ProcessOptions options;
  options.env["LD_LIBRARY_PATH"] = std::string(TS_FAKE_NCCL_DIR);
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "OMPI_COMM_WORLD_RANK",
                           "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "PMIX_RANK", "SLURM_PROCID", "SLURM_NTASKS",
                           "SLURM_LOCALID", "LD_PRELOAD"})
    options.env[name] = std::nullopt;
  options.timeout_seconds = 60;
  return options;
}

TEST(Commcheck, EveryRankIsOkUnderALauncher) {
  const ProcessResult r = run_process({TS_LAUNCH, "-n", "3", "--timeout", "60", "--", TS_TOOL, "commcheck", "--buffers",
                                       "host", "--count", "100000", "--timeout", "30"},
                                      rank_options());
  ASSERT_EQ(0, r.exit_code) << r.out << r.err;
  for (int rank = 0; rank < 3; ++rank) {
    const std::string line =
        "[" + host_name() + "-" + std::to_string(rank) + "] is OK (global rank: " + std::to_string(rank) + "/3)";
    EXPECT_NE(std::string::npos, r.out.find(line + "\n")) << r.out << r.err;
  }
}

TEST(Commcheck, OpenMpiVariablesAndASingleProcessWork) {
  ProcessOptions options = rank_options();
  options.env["OMPI_COMM_WORLD_RANK"] = "0";
  options.env["OMPI_COMM_WORLD_SIZE"] = "1";
  options.env["OMPI_COMM_WORLD_LOCAL_RANK"] = "0";
  ProcessResult r = run_process({TS_TOOL, "commcheck", "--buffers", "host", "--timeout", "20"}, options);
  EXPECT_EQ(0, r.exit_code) << r.out << r.err;
  EXPECT_EQ("[" + host_name() + "-0] is OK (global rank: 0/1)\n", r.out);
  r = run_process({TS_TOOL, "commcheck", "--buffers", "host", "--timeout", "20"}, rank_options());  // no launcher
  EXPECT_EQ(0, r.exit_code) << r.out << r.err;
  EXPECT_EQ("[" + host_name() + "-0] is OK (global rank: 0/1)\n", r.out);
}

// Ranks 0 and 1 of a world of 3 start; rank 2 never does.
TEST(Commcheck, ARankThatNeverJoinsIsNamedByTheOthersWithinTheTimeout) {
  const int port = test_port(1);
  std::vector<std::future<ProcessResult>> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ProcessOptions options = rank_options();
    options.env["RANK"] = std::to_string(rank);
    options.env["LOCAL_RANK"] = std::to_string(rank);
    options.env["WORLD_SIZE"] = "3";
    options.env["MASTER_ADDR"] = "127.0.0.1";
    options.env["MASTER_PORT"] = std::to_string(port);
    ranks.push_back(std::async(std::launch::async, [options] {
      return run_process({TS_TOOL, "commcheck", "--buffers", "host", "--timeout", "3"}, options);
    }));
  }
  for (int rank = 0; rank < 2; ++rank) {
    const ProcessResult r = ranks[static_cast<size_t>(rank)].get();
    EXPECT_EQ(1, r.exit_code) << r.out << r.err;
    EXPECT_EQ("", r.out);
    const std::string label =
        "[" + host_name() + "-" + std::to_string(rank) + "] FAILED (global rank: " + std::to_string(rank) + "/3): ";
    EXPECT_NE(std::string::npos, r.err.find(label + "rank 2 never joined the rendezvous at 127.0.0.1:" +
                                            std::to_string(port + 4) + " in time (2 of 3 ranks came)"))
        << r.err;
    EXPECT_NE(std::string::npos, r.err.find("rerun with NCCL_DEBUG=INFO")) << r.err;
  }
}

// Two processes both given RANK=0 (local ranks 0 and 1) in a world of 2: each says that two processes call themselves
// rank 0, naming both, not that the port is in use or that rank 1 never joined; neither waits for the timeout.
TEST(Commcheck, TwoProcessesThatBothSayRankZeroAreNamedByBoth) {
  const int port = test_port(2);
  std::vector<std::future<ProcessResult>> ranks;
  for (int local_rank = 0; local_rank < 2; ++local_rank) {
    ProcessOptions options = rank_options();
    options.env["RANK"] = "0";
    options.env["LOCAL_RANK"] = std::to_string(local_rank);
    options.env["WORLD_SIZE"] = "2";
    options.env["MASTER_ADDR"] = "127.0.0.1";
    options.env["MASTER_PORT"] = std::to_string(port);
    ranks.push_back(std::async(std::launch::async, [options] {
      return run_process({TS_TOOL, "commcheck", "--buffers", "host", "--timeout", "30"}, options);
    }));
  }
  std::vector<std::string> whys;
  for (int local_rank = 0; local_rank < 2; ++local_rank) {
    const ProcessResult r = ranks[static_cast<size_t>(local_rank)].get();
    EXPECT_EQ(1, r.exit_code) << r.out << r.err;
    EXPECT_EQ("", r.out);
    const std::string label = "[" + host_name() + "-" + std::to_string(local_rank) + "] FAILED (global rank: 0/2): ";
    const size_t at = r.err.find(label + "two processes call themselves rank 0: ");
    ASSERT_NE(std::string::npos, at) << r.err;
    const std::string why = r.err.substr(at + label.size(), r.err.find('\n', at) - at - label.size());
    EXPECT_NE(std::string::npos, why.find(", which holds the rendezvous at 127.0.0.1:" + std::to_string(port + 4)))
        << why;
    for (const std::string& rank_zero : {host_name() + "-0 (pid ", host_name() + "-1 (pid "})
      EXPECT_NE(std::string::npos, why.find(rank_zero)) << why;
    EXPECT_NE(std::string::npos, why.find("check the launcher's RANK for every process")) << why;
    for (const char* wrong : {"never joined", "another program holds the port", "when --timeout"})
      EXPECT_EQ(std::string::npos, r.err.find(wrong)) << r.err;
    whys.push_back(why);
  }
  EXPECT_EQ(whys[0], whys[1]) << "both say the same";
}

TEST(Commcheck, ARankThatCannotLoadNcclIsNamedToAll) {
  ProcessOptions options = rank_options();
  const ProcessResult r = run_process({TS_LAUNCH, "-n", "2", "--timeout", "60", "--", "/bin/sh", "-c",
                                       std::string("if [ \"$RANK\" = 1 ]; then n=/nonexistent/libnccl.so.2; else "
                                                   "n=libnccl.so.2; fi; exec ") +
                                           TS_TOOL + " commcheck --buffers host --timeout 20 --nccl $n"},
                                      options);
  EXPECT_EQ(1, r.exit_code) << r.out << r.err;
  // Both ranks say it: rank 1 of itself, rank 0 as told by the rendezvous.
  const std::string why = "rank 1 (" + host_name() + "-1) cannot take part: cannot load /nonexistent/libnccl.so.2";
  size_t count = 0;
  for (size_t at = r.err.find(why); at != std::string::npos; at = r.err.find(why, at + 1)) ++count;
  EXPECT_EQ(2u, count) << r.err;
}

// Rank 1 runs a no-op NCCL: its all-reduce "succeeds" without reducing, so its sum is wrong; it says so, and rank 0,
// waiting for it in the stand-in NCCL, is told through the rendezvous's connection at once, not at the timeout.
TEST(Commcheck, ARankThatBreaksAfterTheRendezvousIsNamedByTheOthersAtOnce) {
  const ProcessResult r = run_process({TS_LAUNCH, "-n", "2", "--timeout", "60", "--", "/bin/sh", "-c",
                                       std::string("if [ \"$RANK\" = 1 ]; then n=") + TS_NOOP_NCCL_DIR +
                                           "/libnccl.so.2; else n=libnccl.so.2; fi; exec " + TS_TOOL +
                                           " commcheck --buffers host --timeout 30 --count 1000 --nccl $n"},
                                      rank_options());
  EXPECT_EQ(1, r.exit_code) << r.out << r.err;
  // Told, not timed out: no rank's watchdog (30 s) had anything to say.
  EXPECT_EQ(std::string::npos, r.err.find("when --timeout")) << r.err;
  const std::string why = "rank 1 (" + host_name() + "-1): ncclAllReduce returned a wrong sum: element 0 is";
  EXPECT_NE(std::string::npos, r.err.find("[" + host_name() + "-0] FAILED (global rank: 0/2): " + why)) << r.err;
  EXPECT_NE(std::string::npos, r.err.find("[" + host_name() +
                                          "-1] FAILED (global rank: 1/2): ncclAllReduce returned "
                                          "a wrong sum: element 0 is"))
      << r.err;
}

// Rank 1 all-reduces more elements than rank 0: like real NCCL, the stand-in waits forever; the watchdog ends both.
TEST(Commcheck, CallsThatDoNotMatchEndWithWhereEachRankWasWithinTheTimeout) {
  const ProcessResult r = run_process(
      {TS_LAUNCH, "-n", "2", "--timeout", "60", "--", "/bin/sh", "-c",
       std::string("exec ") + TS_TOOL + " commcheck --buffers host --timeout 2 --count $((1000 + RANK * 5000))"},
      rank_options());
  EXPECT_EQ(1, r.exit_code) << r.out << r.err;  // not ts-launch's 124: the ranks' own watchdogs ended them
  // Each rank says it, of itself or as told by the other, whose watchdog fired first.
  for (int rank = 0; rank < 2; ++rank) {
    const std::string label =
        "[" + host_name() + "-" + std::to_string(rank) + "] FAILED (global rank: " + std::to_string(rank) + "/2): ";
    EXPECT_NE(std::string::npos, r.err.find(label)) << r.err;
  }
  const std::string why =
      "still in ncclAllReduce when --timeout 2 s (and 3 s of grace) ran out: the ranks did not all "
      "make this call alike";
  size_t count = 0;
  for (size_t at = r.err.find(why); at != std::string::npos; at = r.err.find(why, at + 1)) ++count;
  EXPECT_EQ(2u, count) << r.err;
  EXPECT_EQ(std::string::npos, r.err.find("crashed")) << r.err;
}

TEST(Commcheck, BadArgumentsAndEnvironmentAreClearErrors) {
  ProcessResult r = run_process({TS_TOOL, "commcheck", "--timeout", "0"}, rank_options());
  EXPECT_EQ(2, r.exit_code);
  EXPECT_NE(std::string::npos,
            r.err.find("--timeout '0': expected a number of seconds from 1 to 3600, optionally suffixed s or m"))
      << r.err;
  r = run_process({TS_TOOL, "commcheck", "--timeout", "ten"}, rank_options());
  EXPECT_EQ(2, r.exit_code);
  EXPECT_NE(std::string::npos, r.err.find("--timeout 'ten'")) << r.err;
  r = run_process({TS_TOOL, "commcheck", "--buffers", "gpu"}, rank_options());
  EXPECT_EQ(2, r.exit_code);
  EXPECT_NE(std::string::npos, r.err.find("--buffers 'gpu': expected auto, device or host")) << r.err;
  ProcessOptions options = rank_options();
  options.env["RANK"] = "1";
  options.env["WORLD_SIZE"] = "2";
  r = run_process({TS_TOOL, "commcheck"}, options);
  EXPECT_EQ(2, r.exit_code);
  EXPECT_NE(std::string::npos, r.err.find("a job of 2 ranks needs MASTER_ADDR and MASTER_PORT")) << r.err;
}

}  // namespace
