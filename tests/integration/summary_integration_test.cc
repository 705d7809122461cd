// The run summary of real jobs on the CPU stand-in NCCL, under `trainscope run` and under LD_PRELOAD: ranks that
// trainscope stopped, a job killed by SIGTERM or SIGKILL, ranks still waiting in a call, a rank's exit status, a
// recorder whose records are all torn, and a full disk (libts_full_disk.so) on which no report can be written.
// Every wait is bounded: ts-launch kills a job past its deadline, polls stop after a fixed count.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/flight_record_format.h"
#include "base/flight_recorder_reader.h"
#include "integration_helpers.h"
#include "python_helpers.h"
#include "support/subprocess.h"
#include "support/text_files.h"

namespace trainscope {
namespace {

namespace fs = std::filesystem;
using testing::ProcessOptions;
using testing::ProcessResult;
using testing::TempDir;

// `trainscope run` around `job`, its run directory dir/runs/job.
std::vector<std::string> trainscope_run(const TempDir& dir, const std::vector<std::string>& job) {
  std::vector<std::string> argv = {TS_TOOL,     "run",   "--dir", dir.path() + "/runs", "--run-id", "job",
                                   "--library", TS_SHIM, "--"};
  argv.insert(argv.end(), job.begin(), job.end());
  return argv;
}

// The environment of `trainscope run` itself: it preloads the library into the job; `preload` goes first (the
// sanitizer's runtime first of all) and is passed on to the job too.
ProcessOptions run_options(const TempDir& dir, const std::string& preload = "") {
  ProcessOptions options = job_options(dir);
  std::string libraries = sanitized() ? std::string(TS_SANITIZER_RUNTIME) : std::string();
  if (!preload.empty()) libraries += (libraries.empty() ? "" : ":") + preload;
  options.env["LD_PRELOAD"] = libraries.empty() ? std::nullopt : std::optional<std::string>(libraries);
  options.env["TRAINSCOPE_RUN_ID"] = std::nullopt;
  return options;
}

std::vector<std::string> scenario(int ranks, const std::string& fault, int rank, int step, int steps = 10) {
  return {TS_LAUNCH,
          "-n",
          std::to_string(ranks),
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

ProcessResult report_summary(const TempDir& dir) {
  ProcessOptions options;
  options.timeout_seconds = 60;
  return testing::run_process({TS_TOOL, "report", "--summary", run_dir(dir)}, options);
}

// Whether rank `rank`'s recorder holds all-reduce #`seq` and it has not returned (the rank waits in it).
bool waits_in_all_reduce(const TempDir& dir, int32_t rank, uint64_t seq) {
  recorder::RunDirectory run;
  std::string error;
  if (!recorder::read_run_directory(run_dir(dir), &run, &error)) return false;
  for (const recorder::RecorderFile& file : run.files) {
    if (file.global_rank() != rank) continue;
    for (const recorder::RecordedCall& call : file.records)
      if (call.pending() && call.record.op == static_cast<uint16_t>(recorder::Op::kAllReduce) && call.record.seq == seq)
        return true;
  }
  return false;
}

// The children of `parent`, from /proc.
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const size_t close = line.rfind(')');
    int ppid = 0;
    char state = 0;
    if (close != std::string::npos && std::sscanf(line.c_str() + close + 1, " %c %d", &state, &ppid) == 2 &&
        ppid == parent)
      out.push_back(static_cast<pid_t>(std::stoi(name)));
  }
  return out;
}

// `trainscope run` started in the background with its stderr in dir/run.err: a two-rank job in which rank 1 stops
// calling NCCL at step 2 and rank 0 waits in that step's all-reduce (call #5) for ever. Returns once rank 0 waits.
pid_t start_hanging_job(const TempDir& dir) {
  // The shell only redirects and execs (the same pid): whatever trainscope run needs preloaded is not the shell's.
  ProcessOptions options = run_options(dir);
  std::string command = "exec";
  if (const std::optional<std::string> preload = options.env["LD_PRELOAD"])
    command = "LD_PRELOAD=" + *preload + " exec";
  options.env["LD_PRELOAD"] = std::nullopt;
  for (const std::string& arg : trainscope_run(dir, scenario(2, "hang", 1, 2))) command += " " + arg;
  command += " 2>" + dir.path() + "/run.err";
  const pid_t pid = testing::start_process({"/bin/sh", "-c", command}, options);
  EXPECT_GT(pid, 0);
  // Step 2's all-reduce is call #5 (each step is an all-reduce and a broadcast): rank 1 never comes to it.
  EXPECT_TRUE(eventually([&] { return waits_in_all_reduce(dir, 0, 5); })) << "rank 0 never waited in call #5";
  return pid;
}

// ---- stopped by trainscope ----------------------------------------------------------------------------------------

TEST(Summary, RanksStoppedByAMismatchVerdictAreStoppedByTrainscopeNotCrashed) {
  TempDir dir;
  const ProcessResult run =
      testing::run_process(trainscope_run(dir, scenario(4, "half-count", 2, 3)), run_options(dir));
  ASSERT_EQ(run.exit_code, kVerdictExit) << run.err;
  for (const std::string& text : {run.err, report_summary(dir).out}) {
    EXPECT_TRUE(testing::contains(text, "\n  stopped: ranks 0\u20133 by trainscope (mismatch, status 86)\n")) << text;
    EXPECT_TRUE(testing::contains(text,
                                  "\n    ranks 0\u20133: stopped by trainscope (mismatch, status 86); was waiting in "
                                  "ncclAllReduce (communicator "))
        << text;
    EXPECT_TRUE(testing::contains(text,
                                  "\n  job: exited with status 86 (trainscope stopped it: a mismatch, desync or "
                                  "vanished rank)\n"))
        << text;
    EXPECT_TRUE(testing::contains(text, "\n  mismatches: 1 (communicator ")) << text;
    EXPECT_FALSE(testing::contains(text, "crashed or killed")) << text;
    EXPECT_FALSE(testing::contains(text, "stopped: none")) << text;
    EXPECT_FALSE(testing::contains(text, "nothing went wrong")) << text;
  }
}

// ---- exit statuses and signals ------------------------------------------------------------------------------------

TEST(Summary, ARanksExitStatusIsSaid) {
  TempDir dir;
  const ProcessResult run = testing::run_process(trainscope_run(dir, scenario(2, "exit-3", 1, 0, 3)), run_options(dir));
  ASSERT_EQ(run.exit_code, 3) << run.err;
  EXPECT_TRUE(testing::contains(run.err, "\n  job: exited with status 3\n")) << run.err;
  EXPECT_TRUE(
      testing::contains(run.err,
                        "\n  processes: 2 recorded: 1 exited, 1 exited with status 3 (rank 1); every call returned\n"
                        "    rank 1: exited with status 3\n"))
      << run.err;
  EXPECT_FALSE(testing::contains(run.err, "nothing went wrong")) << run.err;
}

TEST(Summary, AJobKilledBySigtermIsSaidSoWithTheCallItsRankWasIn) {
  TempDir dir;
  const pid_t run = start_hanging_job(dir);
  ASSERT_GT(run, 0);
  // trainscope run passes SIGTERM to ts-launch, which passes it to the ranks and exits 128 + 15 as they did.
  kill(run, SIGTERM);
  const ProcessResult ended = testing::wait_process(run, 60);
  EXPECT_FALSE(ended.timed_out);
  EXPECT_EQ(ended.exit_code, 128 + SIGTERM);
  const std::string err = testing::read_file(dir.path() + "/run.err");
  for (const std::string& text : {err, report_summary(dir).out}) {
    EXPECT_TRUE(testing::contains(
        text,
        "\n  job: exited with status 143 (128 + 15: a process was killed by SIGTERM, as launchers and "
        "shells report it)\n"))
        << text;
    EXPECT_TRUE(
        testing::contains(text,
                          "\n    rank 0: crashed or killed (no clean exit; its process is gone); was waiting in "
                          "ncclAllReduce (communicator "))
        << text;
    EXPECT_TRUE(testing::contains(text, ", call #5) since ")) << text;
    EXPECT_FALSE(testing::contains(text, "nothing went wrong")) << text;
  }
}

TEST(Summary, AJobKilledBySigkillIsSaidSoAndItsRanksStillWaitingAreNamedWithTheirCall) {
  TempDir dir;
  const pid_t run = start_hanging_job(dir);
  ASSERT_GT(run, 0);
  // SIGKILL cannot be passed on: ts-launch dies alone, its ranks live on (rank 0 still waits in its all-reduce).
  const std::vector<pid_t> launcher = children_of(run);
  ASSERT_EQ(launcher.size(), 1u);
  kill(launcher[0], SIGKILL);
  const ProcessResult ended = testing::wait_process(run, 60);
  EXPECT_FALSE(ended.timed_out);
  EXPECT_EQ(ended.exit_code, 128 + SIGKILL);
  const std::string err = testing::read_file(dir.path() + "/run.err");
  const ProcessResult report = report_summary(dir);  // the ranks still wait
  for (const std::string& text : {err, report.out}) {
    EXPECT_TRUE(testing::contains(text, "\n  job: killed by SIGKILL\n")) << text;
    EXPECT_TRUE(testing::contains(text, "\n    rank 0: running; waiting in ncclAllReduce (communicator ")) << text;
    EXPECT_TRUE(testing::contains(text, ", call #5) since ")) << text;
    EXPECT_TRUE(testing::contains(text, "; calls still pending on rank")) << text;
    EXPECT_FALSE(testing::contains(text, "nothing went wrong")) << text;
  }
  kill(-run, SIGKILL);  // the ranks are in trainscope run's process group
}

// ---- records unreadable -------------------------------------------------------------------------------------------

TEST(Summary, ARecorderWhoseRecordsAreAllTornIsUnreadableNeverNothingWentWrong) {
  TempDir dir;
  const ProcessResult job = testing::run_process(scenario(2, "none", -1, -1, 3), job_options(dir));
  ASSERT_EQ(job.exit_code, 0) << job.err;
  const ProcessResult clean = report_summary(dir);
  EXPECT_TRUE(testing::contains(clean.out, "\n  nothing went wrong: ")) << clean.out;
  EXPECT_TRUE(testing::contains(clean.out, "\n  processes: 2 recorded: 2 exited; every call returned\n")) << clean.out;

  // Rank 1's ring, every record of it, overwritten with what no writer writes.
  recorder::RunDirectory run;
  std::string error;
  ASSERT_TRUE(recorder::read_run_directory(run_dir(dir), &run, &error)) << error;
  ASSERT_EQ(run.files.size(), 2u);
  const recorder::RecorderFile& rank1 = run.files[1];
  ASSERT_EQ(rank1.global_rank(), 1);
  const uint64_t records = rank1.records_total();
  ASSERT_GT(records, 0u);
  ASSERT_LE(records, rank1.header.capacity);
  {
    std::fstream file(rank1.path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(recorder::ring_offset(rank1.header)));
    const std::string junk(records * sizeof(recorder::Record), '\xab');
    file.write(junk.data(), static_cast<std::streamsize>(junk.size()));
    ASSERT_TRUE(file.good());
  }
  const ProcessResult torn = report_summary(dir);
  EXPECT_TRUE(testing::contains(
      torn.out, "\n    rank 1: exited; records unreadable (all " + std::to_string(records) + " torn)\n"))
      << torn.out;
  EXPECT_FALSE(testing::contains(torn.out, "nothing went wrong")) << torn.out;
}

// A folder named like a recorder is named in the summary and its JSON, as a FIFO is: what is in a run directory but
// cannot be read is never passed over in silence.
TEST(Summary, AFolderNamedLikeARecorderIsUnreadableAsAFifoIs) {
  TempDir dir;
  const ProcessResult job = testing::run_process(scenario(2, "none", -1, -1, 3), job_options(dir));
  ASSERT_EQ(job.exit_code, 0) << job.err;
  ASSERT_EQ(mkdir((run_dir(dir) + "/rank-5.pid-1.tsrec").c_str(), 0700), 0);
  ASSERT_EQ(mkfifo((run_dir(dir) + "/rank-6.pid-1.tsrec").c_str(), 0600), 0);

  const ProcessResult text = report_summary(dir);
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(testing::contains(text.out, ", 2 recorder files unreadable")) << text.out;
  EXPECT_TRUE(testing::contains(text.out, "\n    rank-5.pid-1.tsrec: unreadable (not a regular file (a folder))\n"))
      << text.out;
  EXPECT_TRUE(testing::contains(text.out, "\n    rank-6.pid-1.tsrec: unreadable (not a regular file (a FIFO))\n"))
      << text.out;
  EXPECT_FALSE(testing::contains(text.out, "nothing went wrong")) << text.out;

  ProcessOptions options;
  options.timeout_seconds = 60;
  const ProcessResult json_run =
      testing::run_process({TS_TOOL, "report", "--json", "--summary", run_dir(dir)}, options);
  ASSERT_EQ(json_run.exit_code, 0) << json_run.err;
  const nlohmann::json files = nlohmann::json::parse(json_run.out).at("summary").at("processes").at("unreadable_files");
  const nlohmann::json expected = {
      {{"file", "rank-5.pid-1.tsrec"}, {"error", "not a regular file (a folder)"}},
      {{"file", "rank-6.pid-1.tsrec"}, {"error", "not a regular file (a FIFO)"}},
  };
  EXPECT_EQ(files, expected) << files.dump();
}

// ---- reports that could not be written ----------------------------------------------------------------------------

TEST(Summary, OnAFullDiskTheReportThatCouldNotBeWrittenIsNamedWithItsCause) {
  TempDir dir;
  ProcessOptions options = run_options(dir, TS_FULL_DISK);
  options.env["TS_FULL_DISK_DIR"] = run_dir(dir);
  const ProcessResult run = testing::run_process(trainscope_run(dir, scenario(4, "half-count", 2, 3)), options);
  ASSERT_EQ(run.exit_code, kVerdictExit) << run.err;
  int written = 0;
  report(dir, "mismatch-", &written);
  EXPECT_EQ(written, 0) << "the disk was full";
  // What trainscope run heard its coordinator say, and what it could not write itself.
  EXPECT_TRUE(testing::contains(run.err, ".json: No space left on device (the coordinator)")) << run.err;
  EXPECT_TRUE(testing::contains(run.err, "could not write ")) << run.err;
  EXPECT_TRUE(testing::contains(run.err, "mismatch-")) << run.err;
  EXPECT_TRUE(testing::contains(run.err, "job-exit.json: No space left on device (trainscope run)")) << run.err;
  for (const std::string& text : {run.err, report_summary(dir).out}) {
    EXPECT_TRUE(testing::contains(text, "\n  mismatches: 1 (communicator ")) << text;
    EXPECT_TRUE(testing::contains(text, "; its report could not be written; it stopped ranks 0\u20133)\n")) << text;
    EXPECT_FALSE(testing::contains(text, "mismatches: none")) << text;
    EXPECT_TRUE(testing::contains(text, "\n  stopped: ranks 0\u20133 by trainscope (mismatch, status 86)\n")) << text;
    EXPECT_FALSE(testing::contains(text, "nothing went wrong")) << text;
  }
  // Later, from the run directory alone: the ranks' recorders say the verdict came without its report.
  const ProcessResult later = report_summary(dir);
  EXPECT_TRUE(
      testing::contains(later.out,
                        "\n  could not write the report of the verdict that stopped ranks 0\u20133: cause not known "
                        "(the coordinator; its log says why)\n"))
      << later.out;
}

std::vector<std::string> training_job(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {TS_LAUNCH, "-n", "2", "--timeout", "60", "--", program("train_program")};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

TEST(Summary, AStopTheUserAskedForIsNothingWrongUnlessItsReportCouldNotBeWritten) {
  const auto stop_after_batch_2 = [](const TempDir& dir, bool full_disk) {
    ProcessOptions options = job_options(dir);
    options.env["TRAINSCOPE_ABORT_AFTER_BATCH"] = "2";
    options.env["TRAINSCOPE_STEP_MARKER"] = "every:3";
    if (full_disk) {
      options.env["LD_PRELOAD"] = *options.env["LD_PRELOAD"] + ":" + TS_FULL_DISK;
      options.env["TS_FULL_DISK_DIR"] = run_dir(dir);
    }
    return testing::run_process(training_job({"--steps", "1000"}), options);
  };
  {
    TempDir dir;
    const ProcessResult job = stop_after_batch_2(dir, false);
    ASSERT_EQ(job.exit_code, 87) << job.err;
    const std::string text = report_summary(dir).out;
    EXPECT_TRUE(testing::contains(text, "\n  nothing went wrong: ")) << text;
    EXPECT_TRUE(testing::contains(text, "\n  stopped: ranks 0 and 1 after batch 2 (TRAINSCOPE_ABORT_AFTER_BATCH)\n"))
        << text;
    // Each rank on a line of its own when the stop met one inside a call, or half-way through its record.
    EXPECT_TRUE(testing::contains(text, "\n  processes: 2 recorded: 2 stopped by trainscope (ranks 0 and 1)")) << text;
    EXPECT_TRUE(testing::contains(text, ": stopped by trainscope (abort after batch 2, status 87)")) << text;
  }
  {
    TempDir dir;
    const ProcessResult job = stop_after_batch_2(dir, true);
    ASSERT_EQ(job.exit_code, 87) << job.err;
    const std::string text = report_summary(dir).out;
    EXPECT_TRUE(testing::contains(text, "\n  stopped: ranks 0 and 1 by trainscope (abort after batch 2, status 87)\n"))
        << text;
    EXPECT_TRUE(testing::contains(text, "could not write stop-rank0.json: No space left on device (rank 0")) << text;
    EXPECT_TRUE(testing::contains(text, "stop-rank1.json: No space left on device (rank 1)")) << text;
    EXPECT_FALSE(testing::contains(text, "nothing went wrong")) << text;
  }
}

TEST(Summary, OnAFullDiskRankZerosCoordinatorSaysWhatItCouldNotWriteInItsRecorder) {
  // Under LD_PRELOAD alone rank 0 hosts the coordinator: what it could not write, and why, is in rank 0's recorder.
  TempDir dir;
  ProcessOptions options = job_options(dir);
  options.env["LD_PRELOAD"] = *options.env["LD_PRELOAD"] + ":" + TS_FULL_DISK;
  options.env["TS_FULL_DISK_DIR"] = run_dir(dir);
  const ProcessResult job = testing::run_process(scenario(4, "half-count", 2, 3), options);
  ASSERT_EQ(job.exit_code, kVerdictExit) << job.err;
  const ProcessResult summary = report_summary(dir);
  EXPECT_TRUE(testing::contains(summary.out, "\n  could not write mismatch-")) << summary.out;
  EXPECT_TRUE(testing::contains(summary.out, ".json: No space left on device (rank 0")) << summary.out;
  EXPECT_TRUE(testing::contains(summary.out, "; its report could not be written; it stopped ranks 0\u20133)\n"))
      << summary.out;
  EXPECT_FALSE(testing::contains(summary.out, "mismatches: none")) << summary.out;
}

// Another program holds the coordinator's port (MASTER_PORT + 3): rank 0 cannot host it, no rank's calls are
// compared, and a mismatch would hang unreported. The summary must say so, and why, and not call the run clean.
// The C program and its Python (ctypes) twin.
TEST(SummaryOfRealJobs, ChecksThatNeverRanBecauseThePortWasTakenAreSaidAndTheRunIsNotClean) {
  const testing::FoundPython python = newest_python();
  std::vector<std::vector<std::string>> jobs = {{program("loop_program"), "--iterations", "5"}};
  if (python.found) jobs.push_back({python.path, python_job("scenario_job.py"), "--steps", "3", "--count", "1024"});
  for (const std::vector<std::string>& job : jobs) {
    SCOPED_TRACE(job[0]);
    TempDir dir;
    const int master_port = 20000 + getpid() % 12000;
    const int listener = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(listener, 0);
    const int yes = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(master_port + 3));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0) << std::strerror(errno);
    ASSERT_EQ(listen(listener, 16), 0);
    ProcessOptions options = python_shim_options(dir);
    options.env["MASTER_PORT"] = std::to_string(master_port);
    const ProcessResult run = testing::run_process(launch(2, 60, job), options);
    close(listener);
    ASSERT_EQ(run.exit_code, 0) << run.err;
    const ProcessResult summary = report_summary(dir);
    EXPECT_FALSE(testing::contains(summary.out, "nothing went wrong")) << summary.out;
    EXPECT_TRUE(testing::contains(summary.out, "cross-rank checks: did not run on ")) << summary.out;
    EXPECT_TRUE(testing::contains(summary.out,
                                  "cannot host the coordinator at tcp://127.0.0.1:" + std::to_string(master_port + 3)))
        << summary.out;
    EXPECT_TRUE(testing::contains(summary.out, "mismatches: not looked for (the cross-rank checks did not run)"))
        << summary.out;
    EXPECT_FALSE(testing::contains(summary.out, "mismatches: none\n")) << summary.out;
    const ProcessResult as_json = testing::run_process({TS_TOOL, "report", "--summary", "--json", run_dir(dir)});
    const nlohmann::json all = nlohmann::json::parse(as_json.out, nullptr, false);
    ASSERT_FALSE(all.is_discarded()) << as_json.out;
    const nlohmann::json& j = all["summary"];
    EXPECT_EQ(j["nothing_wrong"], false);
    EXPECT_EQ(j["cross_rank_checks"]["ran"], 0);
    ASSERT_EQ(j["cross_rank_checks"]["did_not_run"].size(), 2u) << j.dump(2);
    for (const nlohmann::json& rank : j["cross_rank_checks"]["did_not_run"]) EXPECT_TRUE(rank["why"].is_string());
  }
}

// The same job with the port free: its checks ran on every rank, and nothing about them is said.
TEST(SummaryOfRealJobs, ChecksThatRanAreCountedAndSayNothing) {
  TempDir dir;
  const ProcessResult run = testing::run_process(
      {TS_LAUNCH, "-n", "2", "--timeout", "60", "--", program("loop_program"), "--iterations", "5"}, job_options(dir));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const ProcessResult summary = report_summary(dir);
  EXPECT_FALSE(testing::contains(summary.out, "cross-rank checks")) << summary.out;
  EXPECT_TRUE(testing::contains(summary.out, "mismatches: none\n")) << summary.out;
  const ProcessResult as_json = testing::run_process({TS_TOOL, "report", "--summary", "--json", run_dir(dir)});
  const nlohmann::json all = nlohmann::json::parse(as_json.out, nullptr, false);
  ASSERT_FALSE(all.is_discarded()) << as_json.out;
  const nlohmann::json& j = all["summary"];
  EXPECT_EQ(j["cross_rank_checks"]["ran"], 2);
  EXPECT_TRUE(j["cross_rank_checks"]["did_not_run"].empty());
}

}  // namespace
}  // namespace trainscope
