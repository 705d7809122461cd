// End-to-end tests of the files a job under the shim leaves in its run directory: links planted where reports, the
// manifest, the origin, traces and logs go are never written through (and each refusal is said, naming the path and
// why); a run directory open to others is made private, or refused when it is another user's. Every wait is bounded
// (ts-launch's deadline).
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "integration_helpers.h"
#include "support/subprocess.h"

namespace trainscope {
namespace {

namespace fs = std::filesystem;
using testing::ProcessOptions;
using testing::ProcessResult;
using testing::TempDir;

constexpr const char* kSymlinkWhy = "it is a symbolic link, and trainscope never writes through one";

// The lines trainscope wrote to stderr.
std::vector<std::string> trainscope_lines(const std::string& err) {
  std::vector<std::string> lines;
  for (const std::string& line : testing::split_lines(err))
    if (line.rfind("[trainscope]", 0) == 0) lines.push_back(line);
  return lines;
}

// The text of the log file of `rank` in the run directory ("" when there is none).
std::string log_of_rank(const TempDir& dir, int rank) {
  const std::string prefix = "rank-" + std::to_string(rank) + ".pid-";
  for (const auto& entry : fs::directory_iterator(run_dir(dir))) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && entry.path().extension() == ".log" && !entry.is_symlink())
      return testing::read_file(entry.path());
  }
  return "";
}

mode_t mode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

TEST(Files, LinksPlantedInTheRunDirectoryAreNeverFollowed) {
  TempDir dir;
  TempDir elsewhere;
  const std::string outside = elsewhere.path() + "/precious";
  std::ofstream(outside) << "precious\n";
  const std::string run = run_dir(dir);
  fs::create_directories(run);
  fs::permissions(run, fs::perms::owner_all);
  const std::vector<std::string> planted = {"manifest.json",    "manifest.json.tmp",   "origin.txt",
                                            "origin.json.tmp",  "nonfinite-rank1.txt", "trace-rank0.txt",
                                            "trace-rank2.jsonl"};
  for (const std::string& name : planted) ASSERT_EQ(symlink(outside.c_str(), (run + "/" + name).c_str()), 0) << name;

  // inf from rank 0 in batch 1 (every rank reports it, the coordinator writes the origin), batch 2 traced.
  ProcessOptions options = job_options(dir);
  options.env["TRAINSCOPE_STEP_MARKER"] = "every:3";
  options.env["TRAINSCOPE_TRACE_BATCHES"] = "2";
  options.env["TS_OUTSIDE"] = outside;
  options.env["TS_RUN"] = run;
  // Rank 0 first plants a link where its log file will be: its pid is the shell's, which exec keeps.
  const std::vector<std::string> argv = {
      TS_LAUNCH,
      "-n",
      "4",
      "--timeout",
      "60",
      "--",
      "/bin/sh",
      "-c",
      "if [ \"$RANK\" = 0 ]; then ln -s \"$TS_OUTSIDE\" \"$TS_RUN/rank-0.pid-$$.log\" || "
      "exit 99; fi; exec \"$0\" \"$@\"",
      program("train_program"),
      "--steps",
      "4",
      "--inject",
      "inf",
      "--rank",
      "0",
      "--step",
      "1"};
  const ProcessResult job = testing::run_process(argv, options);
  ASSERT_EQ(job.exit_code, 0) << job.err;

  EXPECT_EQ(testing::read_file(outside), "precious\n");
  for (const std::string& name : planted) EXPECT_TRUE(fs::is_symlink(run + "/" + name)) << name;
  // Each refusal is said once, naming the path and why: on the main rank's stderr (the coordinator runs there, and
  // its log file was refused) ...
  EXPECT_EQ(count(job.err, "cannot use the log file '" + run + "/rank-0.pid-"), 1u) << job.err;
  EXPECT_EQ(count(job.err, "coordinator: cannot write " + run + "/manifest.json: " + kSymlinkWhy), 1u) << job.err;
  EXPECT_EQ(count(job.err, "coordinator: cannot write " + run + "/origin.txt: " + kSymlinkWhy), 1u) << job.err;
  EXPECT_EQ(count(job.err, "frames: cannot write " + run + "/trace-rank0.txt: " + kSymlinkWhy), 1u) << job.err;
  EXPECT_EQ(count(job.err, kSymlinkWhy), 4u) << job.err;
  // ... and in the other ranks' own logs.
  EXPECT_EQ(count(log_of_rank(dir, 1), "frames: cannot write " + run + "/nonfinite-rank1.txt: " + kSymlinkWhy), 1u);
  EXPECT_EQ(count(log_of_rank(dir, 2), "frames: cannot write " + run + "/trace-rank2.jsonl: " + kSymlinkWhy), 1u);

  // Everything else was written as usual, and no temporary stayed behind.
  EXPECT_NE(testing::read_file(run + "/nonfinite-rank0.txt").find("Detected inf/nan during batch_number=1"),
            std::string::npos);
  EXPECT_TRUE(fs::is_regular_file(run + "/nonfinite-rank1.json"));
  EXPECT_TRUE(fs::is_regular_file(run + "/origin.json"));
  EXPECT_NE(testing::read_file(run + "/trace-rank1.txt").find("*** Starting batch number=2 ***"), std::string::npos);
  for (const auto& entry : fs::directory_iterator(run)) {
    const std::string name = entry.path().filename().string();
    EXPECT_EQ(name.find(".tmp."), std::string::npos) << name;
    EXPECT_EQ(name.find(".part"), std::string::npos) << name;
    if (!entry.is_symlink()) {
      EXPECT_EQ(mode_of(entry.path()), 0600u) << name;
    }
  }
}

TEST(Files, ARunDirectoryOpenToOthersIsMadePrivateAndSaidOnce) {
  TempDir dir;
  const std::string run = run_dir(dir);
  fs::create_directories(run);
  fs::permissions(run, fs::perms::all);
  ProcessOptions options = job_options(dir);
  options.env["TRAINSCOPE_LOG_RANKS"] = "all";  // whichever rank finds it open says so where this test sees it
  const ProcessResult job = testing::run_process({TS_LAUNCH, "-n", "4", "--", program("collectives_program")}, options);
  ASSERT_EQ(job.exit_code, 0) << job.err;
  EXPECT_EQ(mode_of(run), 0700u);
  EXPECT_EQ(count(job.err, "warning: made the run directory '" + run +
                               "' private: it was mode 0777, open to other "
                               "users\n"),
            1u)
      << job.err;
  EXPECT_EQ(count(job.err, "made the run directory"), 1u) << job.err;
  EXPECT_FALSE(log_of_rank(dir, 3).empty()) << "recorded as usual";
}

// TRAINSCOPE_DIR holding a newline and an escape sequence: every line trainscope logs, to stderr and to each rank's
// log file, shows them escaped as the reports do (\x0a, \x1b), never raw — the engine's "recording to ..." and the
// shim's own warning about the run directory alike. No forged line, nothing that drives the terminal.
TEST(Files, ControlCharactersInTheRunDirectoryAreEscapedInEveryLogLine) {
  TempDir dir;
  const std::string runs = dir.path() + "/runs\n\x1b[31mred";
  const std::string run = runs + "/job";
  fs::create_directories(run);
  fs::permissions(run, fs::perms::all);  // so that the shim warns, naming it, before the engine is there to
  ProcessOptions options = job_options(dir);
  options.env["TRAINSCOPE_DIR"] = runs;
  options.env["TRAINSCOPE_LOG_RANKS"] = "all";
  const ProcessResult job = testing::run_process({TS_LAUNCH, "-n", "2", "--", program("collectives_program")}, options);
  ASSERT_EQ(job.exit_code, 0) << job.err;
  const std::string shown = dir.path() + "/runs\\x0a\\x1b[31mred/job";
  EXPECT_EQ(count(job.err, "recording to " + shown + " (pid "), 2u) << job.err;
  EXPECT_EQ(count(job.err, "warning: made the run directory '" + shown + "' private"), 1u) << job.err;
  EXPECT_EQ(job.err.find('\x1b'), std::string::npos) << job.err;
  EXPECT_EQ(count(job.err, "[31mred"), count(job.err, "\\x1b[31mred")) << "no line starts inside a path: " << job.err;
  size_t logs = 0;
  for (const auto& entry : fs::directory_iterator(run)) {
    if (entry.path().extension() != ".log") continue;
    ++logs;
    const std::string log = testing::read_file(entry.path());
    EXPECT_EQ(count(log, "recording to " + shown + " (pid "), 1u) << log;
    EXPECT_EQ(log.find('\x1b'), std::string::npos) << log;
    EXPECT_EQ(count(log, "[31mred"), count(log, "\\x1b[31mred")) << log;
  }
  EXPECT_EQ(logs, 2u);
}

TEST(Files, AnotherUsersRunDirectoryThatOthersCanWriteIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give the run directory to another user";
  TempDir dir;
  const std::string run = run_dir(dir);
  fs::create_directories(run);
  ASSERT_EQ(chown(run.c_str(), 65534, 65534), 0);
  fs::permissions(run, fs::perms::all);
  TempDir plain_dir;
  ProcessOptions plain = job_options(plain_dir);
  plain.env["LD_PRELOAD"] = std::nullopt;
  const ProcessResult without =
      testing::run_process({TS_LAUNCH, "-n", "2", "--", program("collectives_program")}, plain);
  const ProcessResult job =
      testing::run_process({TS_LAUNCH, "-n", "2", "--", program("collectives_program")}, job_options(dir));
  ASSERT_EQ(job.exit_code, 0) << job.err;
  std::vector<std::string> out = testing::split_lines(job.out);
  std::vector<std::string> expected = testing::split_lines(without.out);
  std::sort(out.begin(), out.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(out, expected) << "the job runs on unchanged";
  const std::vector<std::string> lines = trainscope_lines(job.err);
  ASSERT_EQ(lines.size(), 1u) << job.err;
  EXPECT_EQ(lines[0], "[trainscope][rank 0] warning: nothing is recorded: the run directory '" + run +
                          "' belongs to another user (uid 65534) and others can write to it; the job runs on without "
                          "trainscope's checks and reports; set TRAINSCOPE_DIR to a writable folder of yours");
  EXPECT_TRUE(fs::is_empty(run)) << "nothing written into it";
  EXPECT_EQ(mode_of(run), 0777u) << "another user's folder is left as it is";
}

}  // namespace
}  // namespace trainscope
