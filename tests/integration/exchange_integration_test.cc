// End-to-end tests of the out-of-band exchange: 4-rank jobs on the CPU stand-in NCCL under the shim, where one
// rank goes wrong. Each asserts the report's content and that the job ended (or went on, for warn). Every wait
// is bounded: ts-launch kills a job that outlives its deadline, and polls below stop after a fixed count.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "base/flight_recorder_reader.h"
#include "integration_helpers.h"
#include "support/subprocess.h"

namespace trainscope {
namespace {

namespace fs = std::filesystem;
using testing::free_loopback_port;
using testing::ProcessOptions;
using testing::ProcessResult;
using testing::TempDir;

std::vector<std::string> scenario(const std::string& fault, int rank, int step, int steps = 10) {
  return {TS_LAUNCH,
          "-n",
          "4",
          "--timeout",
          "60",
          "--",
          program("scenario_program"),
          "--steps",
          std::to_string(steps),
          "--fault",
          fault,
          "--rank",
          std::to_string(rank),
          "--step",
          std::to_string(step)};
}

// ---- mismatches ----

struct MismatchCase {
  const char* fault;
  const char* differs;
  const char* shapes;  // a line of the report for the faulty rank
};

class Mismatch : public ::testing::TestWithParam<MismatchCase> {};

TEST_P(Mismatch, IsReportedAndStopsEveryRank) {
  const MismatchCase& c = GetParam();
  TempDir dir;
  const ProcessResult job = testing::run_process(scenario(c.fault, 2, 3), job_options(dir));
  EXPECT_FALSE(job.timed_out);
  EXPECT_EQ(job.exit_code, kVerdictExit) << job.err;
  int reports = 0;
  const std::string text = report(dir, "mismatch-", &reports);
  EXPECT_EQ(reports, 1);
  EXPECT_EQ(text.rfind("Cannot apply desired operation due to shape mismatches. All shapes across devices must be "
                       "valid.\n\nOperation: `",
                       0),
            0u)
      << text;
  EXPECT_NE(text.find(std::string("Differs in: ") + c.differs), std::string::npos) << text;
  EXPECT_NE(text.find(c.shapes), std::string::npos) << text;
  // Each rank's stack at the call, symbolised (a C program: native frames only).
  EXPECT_NE(text.find("Stacks at the call:\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("File \""), std::string::npos) << "no Python frame in a C program: " << text;
  EXPECT_NE(text.find("    #0 main+0x"), std::string::npos) << text;
  // The main rank printed it; every rank logged that it stopped.
  EXPECT_NE(job.err.find("Cannot apply desired operation due to shape mismatches"), std::string::npos) << job.err;
  for (const auto& entry : fs::directory_iterator(run_dir(dir))) {
    if (entry.path().extension() == ".log") {
      EXPECT_NE(testing::read_file(entry.path()).find("stopping this rank (exit status 86)"), std::string::npos)
          << entry.path();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, Mismatch,
    ::testing::Values(MismatchCase{"half-count", "count", "  - Process 2: [32768] float32 sum\n"},
                      MismatchCase{"dtype", "data type", "  - Process 2: [65536] float64 sum\n"},
                      MismatchCase{"redop", "reduction op", "  - Process 2: [65536] float32 max\n"},
                      MismatchCase{"root", "root", "  - Process 2: [16] float32 root 1\n"},
                      MismatchCase{"op", "operation", "  - Process 2: [65536] float32 root 0 `ncclBroadcast`\n"},
                      MismatchCase{"p2p-count", "count", "  - Process 2: [64] float32 send to rank 3 `ncclSend`\n"}),
    [](const ::testing::TestParamInfo<MismatchCase>& param_info) {
      std::string name = param_info.param.fault;
      for (char& ch : name)
        if (ch == '-') ch = '_';
      return name;
    });

TEST(Exchange, MismatchInWarnModeIsReportedAndTheJobIsNotStopped) {
  TempDir dir;
  ProcessOptions options = job_options(dir);
  options.env["TRAINSCOPE_ON_MISMATCH"] = "warn";
  const pid_t launcher = testing::start_process(scenario("half-count", 1, 2), options);
  ASSERT_GT(launcher, 0);
  ASSERT_TRUE(eventually([&] { return !report(dir, "mismatch-").empty(); })) << "no mismatch report";
  // Give the verdict time to reach every rank (the log line is the sign), then check nobody was stopped.
  ASSERT_TRUE(eventually([&] {
    int logged = 0;
    for (const auto& entry : fs::directory_iterator(run_dir(dir))) {
      if (entry.path().extension() == ".log" &&
          testing::read_file(entry.path()).find("warning: mismatch") != std::string::npos)
        ++logged;
    }
    return logged == 4;
  }));
  EXPECT_EQ(kill(launcher, 0), 0) << "the job must go on (here it waits in the mismatched call, as NCCL would)";
  for (const auto& entry : fs::directory_iterator(run_dir(dir))) {
    if (entry.path().extension() == ".log") {
      EXPECT_EQ(testing::read_file(entry.path()).find("stopping this rank"), std::string::npos) << entry.path();
    }
  }
  kill(-launcher, SIGKILL);
  testing::wait_process(launcher, 30);
}

// ---- desyncs and vanished ranks ----

TEST(Exchange, RankThatDestroysItsCommunicatorEarlyIsACertainDesync) {
  TempDir dir;
  const ProcessResult job = testing::run_process(scenario("early-destroy", 2, 3), job_options(dir));
  EXPECT_FALSE(job.timed_out);
  EXPECT_EQ(job.exit_code, kVerdictExit) << job.err;
  const std::string text = report(dir, "desync-");
  EXPECT_NE(text.find("Desync on communicator "), std::string::npos) << text;
  EXPECT_NE(text.find("some members can never reach this call"), std::string::npos) << text;
  EXPECT_NE(text.find("Process 2 (communicator rank 2"), std::string::npos) << text;
  EXPECT_NE(text.find("destroyed the communicator"), std::string::npos) << text;
  EXPECT_NE(text.find("Waiting in the communicator:"), std::string::npos) << text;
}

TEST(Exchange, RankThatJustExitsIsACertainDesync) {
  TempDir dir;
  const ProcessResult job = testing::run_process(scenario("early-exit", 1, 4), job_options(dir));
  EXPECT_FALSE(job.timed_out);
  EXPECT_EQ(job.exit_code, kVerdictExit) << job.err;
  const std::string text = report(dir, "desync-");
  EXPECT_NE(text.find("Process 1 (communicator rank 1"), std::string::npos) << text;
  EXPECT_NE(text.find("exited"), std::string::npos) << text;
}

TEST(Exchange, RankThatSkipsASendAndEndsLeavesItsPeerInACertainPointToPointDesync) {
  TempDir dir;
  // Rank 0 skips its send to rank 1 in the last step (it would have been send #10) and ends normally: rank 1 waits
  // in recv #10 from rank 0 forever, which the verdict stops.
  const ProcessResult job = testing::run_process(scenario("skip-send", 0, 9), job_options(dir));
  EXPECT_FALSE(job.timed_out);
  EXPECT_EQ(job.exit_code, kVerdictExit) << job.err;
  int count = 0;
  const std::string text = report(dir, "desync-", &count);
  EXPECT_EQ(count, 1) << text;
  EXPECT_NE(text.find(" at send #10 from rank 0 to rank 1 (`ncclSend`/`ncclRecv`): rank 1 waits in recv #10 from "
                      "rank 0; rank 0 can never make that send.\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  - Process 1 (communicator rank 1): recv #10 from rank 0 `ncclRecv` since "), std::string::npos)
      << text;
  EXPECT_NE(text.find("  - Process 0 (communicator rank 0"), std::string::npos) << text;
  EXPECT_NE(text.find("destroyed the communicator"), std::string::npos) << text;
  EXPECT_NE(text.find("Stacks at the waiting calls:\n  Process 1:\n"), std::string::npos) << text;
  std::string json;
  for (const auto& entry : fs::directory_iterator(run_dir(dir))) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("desync-") && name.ends_with("-send-0-1-10.json")) json = testing::read_file(entry.path());
  }
  ASSERT_FALSE(json.empty()) << "no desync-<communicator>-send-0-1-10.json";
  for (const char* field : {"\"point_to_point\": true", "\"sender\": 0", "\"receiver\": 1", "\"seq\": 10"})
    EXPECT_NE(json.find(field), std::string::npos) << field << " in " << json;
}

TEST(Exchange, RankAliveButSilentIsAWarningAfterTheTimeoutAndTheJobIsNotStopped) {
  TempDir dir;
  ProcessOptions options = job_options(dir);
  options.env["TRAINSCOPE_DESYNC_TIMEOUT"] = "1";
  const pid_t launcher = testing::start_process(scenario("hang", 3, 2), options);
  ASSERT_GT(launcher, 0);
  std::string text;
  ASSERT_TRUE(eventually([&] { return !(text = report(dir, "desync-")).empty(); })) << "no desync warning";
  EXPECT_NE(text.find("Process 3 (communicator rank 3"), std::string::npos) << text;
  EXPECT_NE(text.find("process still running"), std::string::npos) << text;
  EXPECT_EQ(text.find("can never reach"), std::string::npos) << "alive but silent is not certain: " << text;
  EXPECT_EQ(kill(launcher, 0), 0) << "a warning does not stop the job";
  for (const auto& entry : fs::directory_iterator(run_dir(dir))) {
    if (entry.path().extension() == ".log") {
      EXPECT_EQ(testing::read_file(entry.path()).find("stopping this rank"), std::string::npos) << entry.path();
    }
  }
  kill(-launcher, SIGKILL);
  testing::wait_process(launcher, 30);
}

TEST(Exchange, SigkilledRankIsReportedAsVanished) {
  TempDir dir;
  const pid_t launcher = testing::start_process(
      {TS_LAUNCH, "-n", "4", "--timeout", "60", "--", program("loop_program"), "--iterations", "0"}, job_options(dir));
  ASSERT_GT(launcher, 0);
  // Wait until every rank has said hello to the coordinator (the manifest lists them) and rank 3 is well into
  // its loop, then kill it.
  ASSERT_TRUE(eventually([&] {
    const std::string manifest = testing::read_file(run_dir(dir) + "/manifest.json");
    size_t ranks = 0;
    for (size_t at = manifest.find("\"pid\""); at != std::string::npos; at = manifest.find("\"pid\"", at + 1)) ++ranks;
    return ranks >= 4;
  }));
  int victim = -1;
  ASSERT_TRUE(eventually([&] {
    recorder::RunDirectory run;
    std::string error;
    if (!recorder::read_run_directory(run_dir(dir), &run, &error)) return false;
    for (const auto& file : run.files) {
      if (file.header.launcher_rank == 3 && file.records_total() > 100) victim = file.pid();
    }
    return victim > 0;
  }));
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const ProcessResult job = testing::wait_process(launcher, 60);
  EXPECT_FALSE(job.timed_out);
  const std::string text = report(dir, "vanished-");
  EXPECT_NE(text.find("3"), std::string::npos) << text;
  EXPECT_NE(text.find(std::to_string(victim)), std::string::npos) << "the report names the pid: " << text;
  EXPECT_NE(text.find(".tsrec"), std::string::npos) << "the report points at its flight recorder: " << text;
  int stopped = 0;
  for (const auto& entry : fs::directory_iterator(run_dir(dir))) {
    if (entry.path().extension() == ".log" &&
        testing::read_file(entry.path()).find("stopping this rank") != std::string::npos)
      ++stopped;
  }
  EXPECT_EQ(stopped, 3) << "the three survivors were stopped";
}

// ---- a clean job, the coordinator elsewhere, no coordinator, a wrong token ----

TEST(Exchange, CleanJobOfTenThousandCollectivesPerRankProducesNoReport) {
  TempDir dir;
  const ProcessResult job = testing::run_process(
      {TS_LAUNCH, "-n", "4", "--timeout", "120", "--", program("loop_program"), "--iterations", "10000"},
      job_options(dir));
  ASSERT_EQ(job.exit_code, 0) << job.err;
  // Watching is on by default: ten thousand watched collectives per rank, and no frame report either.
  for (const char* kind : {"mismatch-", "desync-", "vanished-", "nonfinite-", "overflow-streak-", "near-overflow-",
                           "stop-", "origin", "trace-"})
    EXPECT_EQ(report(dir, kind), "") << kind;
  EXPECT_EQ(job.err.find("warn"), std::string::npos) << job.err;
}

class ExternalCoordinator : public ::testing::Test {
 protected:
  void start(const std::string& token) {
    port_ = free_loopback_port();
    ASSERT_GT(port_, 0);
    ProcessOptions options;
    options.env["LD_PRELOAD"] = std::nullopt;
    coordinator_ = testing::start_process({TS_TOOL, "coordinator", "--bind", "tcp://127.0.0.1:" + std::to_string(port_),
                                           "--token", token, "--dir", coordinator_dir_.path()},
                                          options);
    ASSERT_GT(coordinator_, 0);
  }
  void TearDown() override {
    if (coordinator_ > 0) {
      kill(coordinator_, SIGTERM);
      testing::wait_process(coordinator_, 30);
    }
  }
  ProcessOptions job_for(const TempDir& dir, const std::string& token) {
    ProcessOptions options = job_options(dir);
    options.env["TRAINSCOPE_COORDINATOR"] = "127.0.0.1:" + std::to_string(port_);
    options.env["TRAINSCOPE_TOKEN"] = token;
    return options;
  }
  TempDir coordinator_dir_;
  int port_ = -1;
  pid_t coordinator_ = -1;
};

TEST_F(ExternalCoordinator, JudgesAJobAndWritesTheManifest) {
  start("token-0123456789");
  TempDir dir;
  const ProcessResult job = testing::run_process(scenario("half-count", 3, 1), job_for(dir, "token-0123456789"));
  EXPECT_EQ(job.exit_code, kVerdictExit) << job.err;
  std::string text;
  for (const auto& entry : fs::directory_iterator(coordinator_dir_.path())) {
    if (entry.path().filename().string().rfind("mismatch-", 0) == 0 && entry.path().extension() == ".txt")
      text = testing::read_file(entry.path());
  }
  EXPECT_NE(text.find("  - Process 3: [32768] float32 sum"), std::string::npos) << text;
  ASSERT_TRUE(fs::exists(coordinator_dir_.path() + "/manifest.json"));
  EXPECT_NE(testing::read_file(coordinator_dir_.path() + "/manifest.json").find("\"host\""), std::string::npos);
}

TEST_F(ExternalCoordinator, AJobWithAnotherTokenNeitherTalksToItNorStops) {
  start("the-right-token");
  TempDir dir;
  const ProcessResult job = testing::run_process(scenario("none", -1, -1, 20), job_for(dir, "a-wrong-token"));
  EXPECT_EQ(job.exit_code, 0) << job.err;
  // The key check fails both ways: the main rank says the listener is not its coordinator.
  EXPECT_NE(job.err.find("is not this job's coordinator"), std::string::npos) << job.err;
  EXPECT_FALSE(fs::exists(coordinator_dir_.path() + "/manifest.json"));
}

TEST_F(ExternalCoordinator, CoordinatorKilledMidRunLeavesTheJobRunning) {
  start("token-0123456789");
  TempDir dir;
  const pid_t launcher = testing::start_process(
      {TS_LAUNCH, "-n", "2", "--timeout", "60", "--", program("loop_program"), "--iterations", "0"},
      job_for(dir, "token-0123456789"));
  ASSERT_GT(launcher, 0);
  ASSERT_TRUE(eventually([&] { return fs::exists(coordinator_dir_.path() + "/manifest.json"); }));
  kill(coordinator_, SIGKILL);
  testing::wait_process(coordinator_, 30);
  coordinator_ = -1;
  // The job keeps recording calls: read the recorder twice, the second time it has grown.
  auto calls = [&] {
    recorder::RunDirectory run;
    std::string error;
    uint64_t total = 0;
    if (recorder::read_run_directory(run_dir(dir), &run, &error)) {
      for (const auto& file : run.files) total += file.records_total();
    }
    return total;
  };
  const uint64_t before = calls();
  EXPECT_TRUE(eventually([&] { return calls() > before + 10000; }));
  EXPECT_EQ(kill(launcher, 0), 0) << "the job is still running";
  kill(-launcher, SIGKILL);
  testing::wait_process(launcher, 30);
}

TEST(Exchange, NoCoordinatorReachableTheJobRunsOnAndWarnsOnce) {
  TempDir dir;
  ProcessOptions options = job_options(dir);
  options.env["TRAINSCOPE_COORDINATOR"] = "127.0.0.1:" + std::to_string(free_loopback_port());
  const ProcessResult job = testing::run_process(scenario("none", -1, -1, 20), options);
  EXPECT_EQ(job.exit_code, 0) << job.err;
  std::string all;
  for (const auto& line : testing::split_lines(job.out)) all += line + "\n";
  EXPECT_NE(all.find("rank 3 finished 20 steps"), std::string::npos) << all;
}

// ---- trust ----

// The text of rank 0's log in `run_dir` ("" until it exists).
std::string rank0_log(const std::string& run_dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("rank-0.pid-", 0) == 0 && entry.path().extension() == ".log")
      return testing::read_file(entry.path());
  }
  return "";
}

// "HOST:PORT" of the coordinator rank 0 of the job in `dir` hosts, once its log says it listens and its manifest is
// written (polled, bounded by eventually()); "" when it never does.
std::string hosted_coordinator(const TempDir& dir) {
  std::string coordinator;
  eventually([&] {
    const std::string log = rank0_log(run_dir(dir));
    const size_t at = log.find("coordinator listening at tcp://");
    if (at == std::string::npos || !fs::exists(run_dir(dir) + "/manifest.json")) return false;
    const size_t start = at + std::strlen("coordinator listening at tcp://");
    coordinator = log.substr(start, log.find('\n', start) - start);
    return true;
  });
  return coordinator;
}

// The attack of issue 11: an outside process, preloaded, with everything an outsider can know of the job (its run id,
// its master address and port, hence the coordinator's address, and the token the run id used to give), sends one inf
// under TRAINSCOPE_ON_NONFINITE=abort. The job's coordinator must not let it in: no verdict, no origin, no stop.
TEST(Trust, AnOutsiderCannotForgeAVerdictThatStopsTheJob) {
  TempDir dir;
  ProcessOptions options = job_options(dir);
  options.env["TRAINSCOPE_LOG_LEVEL"] = "info";
  const pid_t launcher = testing::start_process(
      {TS_LAUNCH, "-n", "4", "--timeout", "120", "--", program("loop_program"), "--iterations", "0"}, options);
  ASSERT_GT(launcher, 0);
  const std::string coordinator = hosted_coordinator(dir);
  ASSERT_FALSE(coordinator.empty()) << "the job's coordinator never started";
  const std::string port = coordinator.substr(coordinator.rfind(':') + 1);

  TempDir outside;
  ProcessOptions attacker = job_options(outside);
  attacker.env["TRAINSCOPE_COORDINATOR"] = coordinator;
  attacker.env["TRAINSCOPE_TOKEN"] = "run-job-";  // what the run id "job" gave before
  attacker.env["TRAINSCOPE_ON_NONFINITE"] = "abort";
  attacker.env["RANK"] = "0";
  attacker.env["WORLD_SIZE"] = "1";
  attacker.env["MASTER_ADDR"] = "127.0.0.1";
  attacker.env["MASTER_PORT"] = std::to_string(std::stoi(port) - 3);
  attacker.timeout_seconds = 60;
  const ProcessResult forged = testing::run_process(
      {program("train_program"), "--steps", "3", "--inject", "inf", "--rank", "0", "--step", "1"}, attacker);
  // (It stops itself with 87: TRAINSCOPE_ON_NONFINITE=abort applies to its own inf whatever the coordinator says.)
  EXPECT_NE(forged.err.find("Detected inf/nan"), std::string::npos) << "the outsider sent no inf: " << forged.err;

  // The coordinator turned it away...
  EXPECT_TRUE(eventually([&] {
    return rank0_log(run_dir(dir)).find("does not hold this job's key") != std::string::npos;
  })) << rank0_log(run_dir(dir));
  // ... and the job runs on, untouched.
  EXPECT_EQ(kill(launcher, 0), 0) << "the job stopped";
  EXPECT_FALSE(fs::exists(run_dir(dir) + "/origin.txt"));
  kill(-launcher, SIGKILL);
  const ProcessResult job = testing::wait_process(launcher, 30);
  EXPECT_NE(job.exit_code, 87);
}

// Rank 0's process id, from its log's name in `run_dir` (-1 until it exists).
pid_t rank0_pid(const std::string& run_dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("rank-0.pid-", 0) == 0 && entry.path().extension() == ".log")
      return static_cast<pid_t>(std::atol(name.c_str() + std::strlen("rank-0.pid-")));
  }
  return -1;
}

size_t open_descriptors(pid_t pid) {
  std::error_code ec;
  size_t count = 0;
  for (auto it = fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec); !ec && it != fs::end(it);
       it.increment(ec))
    ++count;
  return count;
}

// `count` plain TCP connections to 127.0.0.1:`port` that never say anything, as an outsider holds them: each made
// (the kernel's TCP handshake, the listener's queue permitting) within 20 s, or left out.
std::vector<int> hold_idle_connections(uint16_t port, int count) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::vector<pollfd> pending;
  for (int i = 0; i < count; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    if (connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0 || errno == EINPROGRESS) {
      pending.push_back({fd, POLLOUT, 0});
    } else {
      close(fd);
    }
  }
  std::vector<int> made;
  for (int round = 0; round < 200 && made.size() < pending.size(); ++round) {
    if (poll(pending.data(), pending.size(), 100) < 0) break;
    for (pollfd& p : pending) {
      if (p.fd < 0 || p.revents == 0) continue;
      int failure = 0;
      socklen_t length = sizeof(failure);
      if (getsockopt(p.fd, SOL_SOCKET, SO_ERROR, &failure, &length) == 0 && failure == 0) made.push_back(p.fd);
      p.fd = -1 - p.fd;  // done: poll() skips it
    }
  }
  for (pollfd& p : pending) {
    if (p.fd >= 0) close(p.fd);  // never made
  }
  return made;
}

// How many of `held` the far end has closed (end of file or reset), waiting up to 20 s for `at_least` of them. What
// the coordinator sends first (ZeroMQ's greeting) is read and dropped.
size_t wait_closed_by_peer(const std::vector<int>& held, size_t at_least) {
  std::vector<pollfd> open;
  for (const int fd : held) open.push_back({fd, POLLIN | POLLRDHUP, 0});
  size_t closed = 0;
  for (int round = 0; round < 200 && closed < at_least; ++round) {
    if (poll(open.data(), open.size(), 100) < 0) break;
    for (pollfd& p : open) {
      if (p.fd < 0 || p.revents == 0) continue;
      char bytes[256];
      ssize_t got = 0;
      while ((got = recv(p.fd, bytes, sizeof(bytes), MSG_DONTWAIT)) > 0) {
      }
      if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
        ++closed;
        p.fd = -1 - p.fd;  // done: poll() skips it
      }
    }
  }
  return closed;
}

// Issue 19: an outsider held idle connections to the coordinator's port (328 under `ulimit -n 256`), and the job's
// own open() failed with EMFILE. Now the coordinator keeps a few and closes the rest: rank 0 opens its files, the
// job ends with its normal status, and the log says so in a line or two.
TEST(Trust, IdleConnectionsOfAnOutsiderLeaveRankZeroItsDescriptors) {
  constexpr size_t kLimit = 256;
  constexpr int kOutsiderConnections = 320;
  constexpr int kWave = 40;
  constexpr size_t kJobFiles = 128;
  TempDir dir;
  ProcessOptions options = job_options(dir);
  options.env["TRAINSCOPE_LOG_LEVEL"] = "info";
  const std::string go = dir.path() + "/go";
  const pid_t launcher = testing::start_process(
      {TS_LAUNCH, "-n", "2", "--timeout", "120", "--", program("loop_program"), "--iterations", "20", "--nofile",
       std::to_string(kLimit), "--open-files", std::to_string(kJobFiles), "--after", go},
      options);
  ASSERT_GT(launcher, 0);
  const std::string coordinator = hosted_coordinator(dir);
  ASSERT_FALSE(coordinator.empty()) << "the job's coordinator never started";
  const pid_t rank0 = rank0_pid(run_dir(dir));
  ASSERT_GT(rank0, 0);

  // The outsider connects in waves smaller than the listener's queue (ZeroMQ's backlog, 100): a connection the
  // client sees made while the queue is full waits in the kernel for a SYN-ACK retransmission (1, 3, 7, 15 ... s)
  // before the coordinator can even see it, and the job's files would race those late accepts instead of testing
  // what the gate keeps. After each wave the coordinator keeps a few and closes the rest (ZeroMQ alone would hold
  // them for its default handshake limit, 30 s): the outsider sees all but the gate's cap closed.
  const uint16_t port = static_cast<uint16_t>(std::stoi(coordinator.substr(coordinator.rfind(':') + 1)));
  const size_t most_kept = 32;  // the cap for a 256-descriptor limit (an eighth), above the 2 ranks' bound of 18
  std::vector<int> held;
  for (int wave = 0; wave < kOutsiderConnections / kWave; ++wave) {
    const std::vector<int> made = hold_idle_connections(port, kWave);
    held.insert(held.end(), made.begin(), made.end());
    const size_t closed = wait_closed_by_peer(held, held.size() - std::min(held.size(), most_kept));
    if (closed + most_kept < held.size()) {
      ADD_FAILURE() << "the coordinator closed " << closed << " of the outsider's " << held.size() << " connections";
      break;  // the job still ends below, bounded
    }
  }
  EXPECT_GT(held.size(), kLimit);
  EXPECT_TRUE(eventually([&] { return open_descriptors(rank0) + kJobFiles + 16 <= kLimit; }, 1500))
      << open_descriptors(rank0) << " descriptors open in rank 0";
  std::ofstream(go).put('\n');
  const ProcessResult job = testing::wait_process(launcher, 90);
  for (const int fd : held) close(fd);
  EXPECT_FALSE(job.timed_out);
  EXPECT_EQ(job.exit_code, 0) << "rank 0 could not open its files (exit 3), or the job failed";
  const std::string log = rank0_log(run_dir(dir));
  EXPECT_NE(log.find("closed a connection that had not said a valid hello"), std::string::npos) << log;
  size_t lines = 0;
  for (const std::string& line : testing::split_lines(log))
    lines += line.find("had not said a valid hello") != std::string::npos;
  EXPECT_LE(lines, 2u) << log;
}

// A thread of a process: its id, its name and its scheduling policy (SCHED_OTHER 0, SCHED_BATCH 3, SCHED_IDLE 5;
// field 41 of /proc/PID/task/TID/stat). ZeroMQ's threads are named "ZMQbg/IO/0", "ZMQbg/Reaper"; the job's own
// threads carry the program's name.
struct Task {
  pid_t tid = -1;
  std::string name;
  int policy = -1;
};

std::vector<Task> tasks_of(pid_t pid) {
  std::vector<Task> tasks;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    Task task;
    task.tid = static_cast<pid_t>(std::atol(entry.path().filename().c_str()));
    task.name = testing::read_file(entry.path() / "comm");
    while (!task.name.empty() && task.name.back() == '\n') task.name.pop_back();
    const std::string stat = testing::read_file(entry.path() / "stat");
    const size_t end_of_name = stat.rfind(')');
    if (task.name.empty() || end_of_name == std::string::npos) continue;  // the thread ended meanwhile
    std::istringstream fields(stat.substr(end_of_name + 2));
    std::string field;
    for (int number = 3; fields >> field; ++number) {
      if (number == 41) {
        task.policy = std::stoi(field);
        break;
      }
    }
    tasks.push_back(std::move(task));
  }
  return tasks;
}

// Each thread's policy by name.
std::multimap<std::string, int> thread_policies(pid_t pid) {
  std::multimap<std::string, int> policies;
  for (const Task& task : tasks_of(pid)) policies.emplace(task.name, task.policy);
  return policies;
}

// The thread of `pid` named `name` (-1 when there is none).
pid_t thread_named(pid_t pid, const std::string& name) {
  for (const Task& task : tasks_of(pid))
    if (task.name == name) return task.tid;
  return -1;
}

// trainscope's threads in rank 0 are named ts-* while the job runs (top -H and py-spy tell them from the job's), and
// at its end the rank says what they cost it: their CPU per recorded call, counted over every call (issue 20).
TEST(EngineThreads, AreNamedAndTheirCpuPerCallIsSaidAtTheEnd) {
  TempDir dir;
  ProcessOptions options = job_options(dir);
  options.env["TRAINSCOPE_LOG_LEVEL"] = "info";
  const std::string go = dir.path() + "/go";
  const pid_t launcher =
      testing::start_process({TS_LAUNCH, "-n", "2", "--timeout", "120", "--", program("loop_program"), "--iterations",
                              "50", "--open-files", "1", "--after", go},
                             options);
  ASSERT_GT(launcher, 0);
  ASSERT_FALSE(hosted_coordinator(dir).empty()) << "the job's coordinator never started";
  const pid_t rank0 = rank0_pid(run_dir(dir));
  ASSERT_GT(rank0, 0);
  // Rank 0 waits for `go` after its first all-reduce: every thread of the engine has started by then.
  std::set<std::string> names;
  EXPECT_TRUE(eventually(
      [&] {
        names.clear();
        for (const Task& task : tasks_of(rank0)) names.insert(task.name);
        return names.count("ts-frames") && names.count("ts-client") && names.count("ts-coordinator");
      },
      1500))
      << [&] {
           std::string all;
           for (const std::string& name : names) all += name + " ";
           return all;
         }();
  std::ofstream(go).put('\n');
  const ProcessResult job = testing::wait_process(launcher, 90);
  EXPECT_FALSE(job.timed_out);
  EXPECT_EQ(job.exit_code, 0);
  const std::string log = rank0_log(run_dir(dir));
  const size_t line = log.find("trainscope's threads used ");
  ASSERT_NE(line, std::string::npos) << log;
  double ms = -1;
  int threads = 0;
  double per_call = -1;
  unsigned long long calls = 0;
  ASSERT_EQ(std::sscanf(log.c_str() + line,
                        "trainscope's threads used %lf ms of CPU (%d threads), %lf us per recorded "
                        "call (%llu calls)",
                        &ms, &threads, &per_call, &calls),
            4)
      << log.substr(line, 200);
  // The client's thread reads the recorder for the exchange: no thread of its own wakes for it.
  EXPECT_EQ(names.count("ts-exchange"), 0u);
  EXPECT_GE(threads, 4) << "ts-frames, ts-client, ts-coordinator and ZeroMQ's";
  EXPECT_GE(calls, 50u) << "50 all-reduces";
  EXPECT_GT(ms, 0);
  // The line rounds the milliseconds to a tenth and the figure per call to a hundredth of a microsecond.
  EXPECT_NEAR(per_call, ms * 1000 / static_cast<double>(calls), 0.05 * 1000 / static_cast<double>(calls) + 0.01);
  // Then how often they slept and woke, in all and by thread (the kernel's count, which every thread has above 0).
  unsigned long long wakeups = 0;
  const size_t count = log.find(" wakeups: ", line);
  ASSERT_NE(count, std::string::npos) << log.substr(line, 400);
  const size_t start = log.rfind("; ", count);
  ASSERT_EQ(std::sscanf(log.c_str() + start, "; %llu wakeups: ", &wakeups), 1) << log.substr(line, 400);
  EXPECT_GT(wakeups, 0u);
  const std::string tail = log.substr(count, log.find('\n', count) - count);
  EXPECT_NE(tail.find("ts-frames "), std::string::npos) << tail;
  EXPECT_NE(tail.find("ts-coordinator "), std::string::npos) << tail;
}

// Rank 0 of a 2-rank job, stopped after its first all-reduce (every engine thread has started then): its threads'
// policies under `thread_class` (unset: the default).
std::multimap<std::string, int> rank0_thread_policies(const std::optional<std::string>& thread_class) {
  TempDir dir;
  ProcessOptions options = job_options(dir);
  options.env["TRAINSCOPE_THREAD_CLASS"] = thread_class;
  const std::string go = dir.path() + "/go";
  const pid_t launcher =
      testing::start_process({TS_LAUNCH, "-n", "2", "--timeout", "120", "--", program("loop_program"), "--iterations",
                              "50", "--open-files", "1", "--after", go},
                             options);
  EXPECT_GT(launcher, 0);
  if (launcher <= 0) return {};
  std::multimap<std::string, int> policies;
  if (!hosted_coordinator(dir).empty()) {
    const pid_t rank0 = rank0_pid(run_dir(dir));
    eventually(
        [&] {
          policies = thread_policies(rank0);
          return policies.count("ts-frames") && policies.count("ts-client") && policies.count("ts-coordinator") &&
                 policies.count("ZMQbg/IO/0");
        },
        1500);
  }
  std::ofstream(go).put('\n');
  const ProcessResult job = testing::wait_process(launcher, 90);
  EXPECT_FALSE(job.timed_out);
  EXPECT_EQ(job.exit_code, 0) << job.err;
  return policies;
}

std::string describe(const std::multimap<std::string, int>& policies) {
  std::string text;
  for (const auto& [name, policy] : policies) text += name + "=" + std::to_string(policy) + " ";
  return text;
}

constexpr int kSchedOther = 0;
constexpr int kSchedIdle = 5;

// TRAINSCOPE_THREAD_CLASS=idle (the default): the frame thread runs in SCHED_IDLE, on the cores the job leaves idle,
// with its guard beside it in the normal class; the coordinator, the exchange client and every ZeroMQ thread (pings,
// reconnections, goodbyes) stay in the normal class, and so does every thread of the job (issue 20).
TEST(EngineThreads, TheFrameThreadRunsInTheIdleClassAndTheJobAndConnectionsInTheNormalOne) {
  const std::multimap<std::string, int> policies = rank0_thread_policies(std::nullopt);
  ASSERT_TRUE(policies.count("ts-frames") && policies.count("ts-frames-late") && policies.count("ts-client") &&
              policies.count("ts-coordinator"))
      << describe(policies);
  size_t zeromq = 0;
  size_t job = 0;
  for (const auto& [name, policy] : policies) {
    if (name == "ts-frames") {
      EXPECT_EQ(policy, kSchedIdle) << name << ": " << describe(policies);
    } else {
      EXPECT_EQ(policy, kSchedOther) << name << ": " << describe(policies);
      zeromq += name.rfind("ZMQbg/", 0) == 0;
      job += name.rfind("ts-", 0) != 0 && name.rfind("ZMQbg/", 0) != 0;
    }
  }
  EXPECT_GE(zeromq, 2u) << "the client's I/O thread and the coordinator's: " << describe(policies);
  EXPECT_GE(job, 1u) << "the job's main thread: " << describe(policies);
}

// TRAINSCOPE_THREAD_CLASS=normal: every thread in the job's own class, as before the idle class, and no guard.
TEST(EngineThreads, NormalClassKeepsEveryThreadInTheJobsClass) {
  const std::multimap<std::string, int> policies = rank0_thread_policies("normal");
  ASSERT_TRUE(policies.count("ts-frames") && policies.count("ts-client")) << describe(policies);
  EXPECT_EQ(policies.count("ts-frames-late"), 0u) << describe(policies);
  for (const auto& [name, policy] : policies) EXPECT_EQ(policy, kSchedOther) << name << ": " << describe(policies);
}

// The number of the system call a stopped thread is in ("running" when it is in none), from /proc.
std::string syscall_of(pid_t pid, pid_t tid) {
  const std::string text =
      testing::read_file("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/syscall");
  return text.substr(0, text.find_first_of(" \n"));
}

// Holds one thread of another process still, as a starved idle-class thread is on a node whose cores are all busy:
// PTRACE_SEIZE then PTRACE_INTERRUPT stop that thread alone. Lets it go when destroyed, or reaps it if its process
// ended meanwhile (a traced thread that dies waits for its tracer).
class HeldThread {
 public:
  explicit HeldThread(pid_t tid) : tid_(tid) {
    if (ptrace(PTRACE_SEIZE, tid_, nullptr, nullptr) != 0) {
      error_ = std::strerror(errno);
      return;
    }
    int status = 0;
    if (ptrace(PTRACE_INTERRUPT, tid_, nullptr, nullptr) != 0 || waitpid(tid_, &status, __WALL) != tid_) {
      error_ = std::strerror(errno);
      ptrace(PTRACE_DETACH, tid_, nullptr, nullptr);
      return;
    }
    held_ = true;
  }
  ~HeldThread() {
    if (held_) ptrace(PTRACE_DETACH, tid_, nullptr, nullptr);
    reap();
  }
  bool held() const { return held_; }
  const std::string& error() const { return error_; }
  // Whether the thread has died (its process exited), reaping it then; never blocks.
  bool reap() {
    if (!held_) return true;
    int status = 0;
    const pid_t got = waitpid(tid_, &status, __WALL | WNOHANG);
    if (got == tid_ && (WIFEXITED(status) || WIFSIGNALED(status))) held_ = false;
    if (got < 0 && errno == ECHILD) held_ = false;
    return !held_;
  }

 private:
  pid_t tid_;
  bool held_ = false;
  std::string error_;
};

// TRAINSCOPE_THREAD_CLASS=idle on a node whose cores are all busy: the idle-class frame thread gets no core. Here it
// is held still from before the first inf to the job's end. The guard in the job's class makes its passes (the inf of
// step 2 is reported while the frame thread has not run), and the job's exit does not wait for the frame thread: the
// rank makes the last pass itself and exits 0, saying that the guard stood in (issue 20).
TEST(EngineThreads, AnIdleFrameThreadThatGetsNoCoreNeitherLosesFramesNorHoldsTheExitUp) {
  TempDir dir;
  ProcessOptions options = job_options(dir);
  options.env["TRAINSCOPE_LOG_LEVEL"] = "info";
  options.env["TRAINSCOPE_STEP_MARKER"] = "every:3";  // a step is a batch
  const std::string go = dir.path() + "/go";
  const std::string end = dir.path() + "/end";
  const pid_t launcher = testing::start_process(
      {TS_LAUNCH,       "-n",  "2",      "--timeout", "120",    "--", program("train_program"), "--steps", "4",
       "--inject",      "inf", "--rank", "0",         "--step", "2",  "--wait-before",          "1",       go,
       "--wait-before", "4",   end},
      options);
  ASSERT_GT(launcher, 0);
  pid_t rank0 = -1;
  pid_t frames = -1;
  eventually([&] {
    rank0 = rank0_pid(run_dir(dir));
    frames = rank0 > 0 ? thread_named(rank0, "ts-frames") : -1;
    return frames > 0 && thread_named(rank0, "ts-frames-late") > 0;
  });
  // Held asleep between two passes (in its futex wait), never inside one: a pass may hold an allocator's or a
  // sanitizer's lock that the job's threads need.
  std::optional<HeldThread> held;
  for (int attempt = 0; frames > 0 && attempt < 200; ++attempt) {
    held.emplace(frames);
    if (!held->held() || syscall_of(rank0, frames) == std::to_string(SYS_futex)) break;
    held.reset();
    usleep(1000);
  }
  if (!held || !held->held()) {
    std::ofstream(go).put('\n');
    std::ofstream(end).put('\n');
    testing::wait_process(launcher, 90);
    if (frames <= 0) FAIL() << "rank 0 has no ts-frames and ts-frames-late threads";
    if (!held) FAIL() << "the frame thread was never found asleep between two passes";
    GTEST_SKIP() << "ptrace cannot hold a thread on this machine (" << held->error() << ")";
  }
  // Steps 1-3 run, rank 0 sends an inf at step 2, then the ranks wait before their end: only the guard can pass.
  std::ofstream(go).put('\n');
  const bool reported = eventually([&] { return fs::exists(run_dir(dir) + "/nonfinite-rank0.txt"); });
  // The job ends with the frame thread still held (a traced thread that dies waits to be reaped by its tracer).
  std::ofstream(end).put('\n');
  EXPECT_TRUE(eventually([&] { return held->reap(); })) << "rank 0 never ended";
  const ProcessResult job = testing::wait_process(launcher, 90);
  EXPECT_TRUE(reported) << "no inf/nan report while the frame thread was held";
  EXPECT_FALSE(job.timed_out);
  EXPECT_EQ(job.exit_code, 0) << job.err;
  const std::string text = testing::read_file(run_dir(dir) + "/nonfinite-rank0.txt");
  EXPECT_NE(text.find("Detected inf/nan during batch_number=2"), std::string::npos) << text;
  const std::string log = rank0_log(run_dir(dir));
  EXPECT_NE(log.find("passes were made in the job's class instead"), std::string::npos) << log;
}

// Two runs of one command with torchrun's defaults (the same MASTER_ADDR/MASTER_PORT, no run id of their own) each
// get their own folder: the second, clean run is not blamed for the first one's mismatch.
TEST(Trust, RerunsOfTheSameCommandEachGetTheirOwnDirectory) {
  TempDir dir;
  ProcessOptions options = job_options(dir);
  options.env["TRAINSCOPE_RUN_ID"] = std::nullopt;
  options.env["TORCHELASTIC_RUN_ID"] = "none";
  options.env["MASTER_ADDR"] = "127.0.0.1";
  options.env["MASTER_PORT"] = std::to_string(20000 + getpid() % 12000);
  const ProcessResult first = testing::run_process(scenario("half-count", 1, 2), options);
  EXPECT_EQ(first.exit_code, kVerdictExit) << first.err;
  const ProcessResult second = testing::run_process(scenario("none", -1, -1, 5), options);
  EXPECT_EQ(second.exit_code, 0) << second.err;

  const std::string base = dir.path() + "/runs/master-127.0.0.1-" + options.env["MASTER_PORT"].value();
  std::vector<std::string> runs;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(base, ec))
    if (entry.is_directory() && entry.path().filename().string().rfind("run-", 0) == 0)
      runs.push_back(entry.path().string());
  ASSERT_EQ(runs.size(), 2u) << "one folder per run below " << base;
  int with_mismatch = 0;
  for (const std::string& run : runs) {
    int recorders = 0;
    bool mismatch = false;
    for (const auto& entry : fs::directory_iterator(run, ec)) {
      const std::string name = entry.path().filename().string();
      if (entry.path().extension() == ".tsrec") ++recorders;
      if (name.rfind("mismatch-", 0) == 0) mismatch = true;
    }
    EXPECT_EQ(recorders, 4) << run;
    with_mismatch += mismatch ? 1 : 0;
    const ProcessResult summary = testing::run_process({TS_TOOL, "report", run}, options);
    EXPECT_NE(summary.out.find("processes: 4 recorded"), std::string::npos) << summary.out << summary.err;
  }
  EXPECT_EQ(with_mismatch, 1);
  // Nothing was left behind in the shared parent.
  for (const auto& entry : fs::directory_iterator(base, ec))
    EXPECT_TRUE(entry.is_directory()) << "left in the shared folder: " << entry.path();
}

// ---- trainscope run ----

TEST(Exchange, TrainscopeRunAroundAFourRankJob) {
  TempDir dir;
  ProcessOptions options = job_options(dir);
  options.env["LD_PRELOAD"] = sanitized() ? std::optional<std::string>(TS_SANITIZER_RUNTIME) : std::nullopt;
  options.env["TRAINSCOPE_RUN_ID"] = std::nullopt;
  std::vector<std::string> argv = {TS_TOOL, "run", "--dir", dir.path() + "/runs", "--library", TS_SHIM, "--"};
  for (const auto& arg : scenario("half-count", 0, 2)) argv.push_back(arg);
  const ProcessResult run = testing::run_process(argv, options);
  EXPECT_EQ(run.exit_code, kVerdictExit) << run.err;
  EXPECT_NE(run.err.find("trainscope: the job exited with status 86"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("\n  processes: 4 recorded"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("\n  mismatches: 1 (communicator "), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("\n  vanished ranks: none\n"), std::string::npos)
      << "stopped ranks are not vanished ones: " << run.err;

  const ProcessResult clean =
      testing::run_process({TS_TOOL, "run", "--dir", dir.path() + "/runs", "--library", TS_SHIM, "--", TS_LAUNCH, "-n",
                            "4", "--", program("scenario_program"), "--steps", "5"},
                           options);
  EXPECT_EQ(clean.exit_code, 0) << clean.err;
  EXPECT_NE(clean.err.find("  nothing went wrong: no inf/nan, mismatch, desync, vanished rank or crash found"),
            std::string::npos)
      << clean.err;

  const ProcessResult bad = testing::run_process({TS_TOOL, "run", "--on-mismatch", "explode", "--", "true"}, options);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("accepted abort|warn"), std::string::npos) << bad.err;
}

// One host of a job of several: `trainscope run --join` starts no coordinator, points its ranks at the other host's
// (here one `trainscope coordinator`), and names its run folder as every host will (Slurm's job and step).
TEST_F(ExternalCoordinator, TrainscopeRunJoinsAnotherHostsCoordinator) {
  const std::string token = "token-0123456789";
  start(token);
  TempDir dir;
  ProcessOptions options = job_for(dir, token);
  options.env["LD_PRELOAD"] = sanitized() ? std::optional<std::string>(TS_SANITIZER_RUNTIME) : std::nullopt;
  options.env["TRAINSCOPE_COORDINATOR"] = std::nullopt;
  options.env["TRAINSCOPE_RUN_ID"] = std::nullopt;
  options.env["SLURM_JOB_ID"] = "4242";
  options.env["SLURM_STEP_ID"] = "0";
  std::vector<std::string> argv = {TS_TOOL,     "run",   "--dir",  dir.path() + "/runs",
                                   "--library", TS_SHIM, "--join", "127.0.0.1:" + std::to_string(port_),
                                   "--"};
  for (const auto& arg : scenario("half-count", 0, 2)) argv.push_back(arg);
  const ProcessResult run = testing::run_process(argv, options);
  EXPECT_EQ(run.exit_code, kVerdictExit) << run.err;
  EXPECT_NE(run.err.find("joining the coordinator at 127.0.0.1:" + std::to_string(port_)), std::string::npos)
      << run.err;
  const fs::path run_dir = fs::path(dir.path()) / "runs" / "slurm-4242.0";
  EXPECT_TRUE(fs::is_directory(run_dir)) << run.err;
  EXPECT_NE(run.err.find("trainscope: run directory " + run_dir.string()), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("\n  processes: 4 recorded"), std::string::npos) << run.err;
  // The verdict came from the other host's coordinator: its report is in its folder.
  bool coordinator_report = false;
  std::error_code ec;
  for (const auto& entry : fs::recursive_directory_iterator(coordinator_dir_.path(), ec))
    if (entry.path().filename().string().rfind("mismatch-", 0) == 0) coordinator_report = true;
  EXPECT_TRUE(coordinator_report);

  // The hosts of one job share the secret and the run id the user or the scheduler gave: without them, no run.
  ProcessOptions no_token = options;
  no_token.env["TRAINSCOPE_TOKEN"] = std::nullopt;
  const ProcessResult refused = testing::run_process(
      {TS_TOOL, "run", "--library", TS_SHIM, "--join", "127.0.0.1:" + std::to_string(port_), "--", "true"}, no_token);
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("set TRAINSCOPE_TOKEN"), std::string::npos) << refused.err;
  ProcessOptions no_id = options;
  no_id.env["SLURM_JOB_ID"] = std::nullopt;
  const ProcessResult unnamed = testing::run_process(
      {TS_TOOL, "run", "--library", TS_SHIM, "--join", "127.0.0.1:" + std::to_string(port_), "--", "true"}, no_id);
  EXPECT_EQ(unnamed.exit_code, 2);
  EXPECT_NE(unnamed.err.find("the same run id: pass --run-id ID"), std::string::npos) << unnamed.err;
  const ProcessResult bad_address =
      testing::run_process({TS_TOOL, "run", "--library", TS_SHIM, "--coordinator", "nohost", "--", "true"}, options);
  EXPECT_EQ(bad_address.exit_code, 2);
  EXPECT_NE(bad_address.err.find("accepted HOST:PORT or [IPv6]:PORT"), std::string::npos) << bad_address.err;
}

}  // namespace
}  // namespace trainscope
