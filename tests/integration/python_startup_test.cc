// Jobs that go wrong, or end unusually, at start-up, UNDER trainscope, from Python (ctypes) on every CPython 3.9-3.13
// found: a process that made a unique id and no communicator must end with its own status (never a crash at exit);
// NCCL loaded RTLD_LOCAL and looked up in the global scope first (nccl4py's way) must work as without trainscope.
// Real processes on the CPU stand-in NCCL, every wait bounded (ts-launch's deadline, run_process's timeout).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "integration_helpers.h"
#include "python_helpers.h"
#include "support/python_interpreters.h"
#include "support/subprocess.h"

namespace trainscope {
namespace {

using nlohmann::json;
using testing::FoundPython;
using testing::ProcessOptions;
using testing::ProcessResult;
using testing::TempDir;

// The NCCL calls of every rank of a run, by op name, from `trainscope report --json`.
std::map<std::string, int> calls_by_op(const std::string& dir) {
  const ProcessResult listed = testing::run_process({TS_TOOL, "report", dir, "--json", "--last", "1000"});
  EXPECT_EQ(listed.exit_code, 0) << listed.err;
  std::map<std::string, int> ops;
  const json j = json::parse(listed.out, nullptr, false);
  if (j.is_discarded()) return ops;
  for (const json& rank : j["ranks"])
    for (const json& call : rank["records"]) ++ops[call["op"].get<std::string>()];
  return ops;
}

class PythonStartup : public EveryPython {};

// vLLM's rank 0 when its start-up fails after it made the unique id: WORLD_SIZE 2 and MASTER_* set, no
// TRAINSCOPE_TOKEN, so the exchange waits for a world communicator that never comes. Its status is its own, however
// it ends (before issue 19 it died at exit: "double free detected", or SIGSEGV).
TEST_P(PythonStartup, AProcessThatMadeOnlyAUniqueIdEndsWithItsOwnStatus) {
  for (const char* how : {"exit", "_exit", "exec"}) {
    SCOPED_TRACE(how);
    TempDir dir;
    ProcessOptions options = python_shim_options(dir);
    options.env["RANK"] = "0";
    options.env["WORLD_SIZE"] = "2";
    options.env["MASTER_ADDR"] = "127.0.0.1";
    options.env["MASTER_PORT"] = std::to_string(20000 + getpid() % 12000);
    options.timeout_seconds = 60;
    const ProcessResult run =
        testing::run_process({python_.path, python_job("startup_job.py"), "--end", how, "--status", "5"}, options);
    EXPECT_FALSE(run.timed_out);
    EXPECT_EQ(run.exit_code, 5) << run.err;
    EXPECT_EQ(run.err.find("double free"), std::string::npos) << run.err;
    EXPECT_EQ(calls_by_op(run_dir(dir))["ncclGetUniqueId"], 1);
  }
}

// nccl4py loads NCCL RTLD_LOCAL and looks each function up in the global scope first, then on the handle: the global
// scope holds our exported hooks, whose real functions are in that local library (here a renamed copy, found by
// nothing but its path). The job must run as without trainscope, be recorded, and get the verdict of a mismatch.
TEST_P(PythonStartup, NcclLoadedLocallyAndLookedUpInTheGlobalScopeFirstWorksAndIsRecorded) {
  TempDir plain_dir;
  TempDir dir;
  const std::vector<std::string> args = {"--steps", "3", "--count", "2048", "--digest"};
  ProcessOptions plain = plain_python_options();
  ProcessOptions shim = python_shim_options(dir);
  for (ProcessOptions* options : {&plain, &shim}) {
    options->env["TS_NCCL_LOAD"] = "scope-first";
    options->env["TS_NCCL_PATH"] = renamed_copy(plain_dir);
    options->env["LD_LIBRARY_PATH"] = std::nullopt;  // no libnccl.so.2 to be found by its name
  }
  const std::vector<std::string> command = with_args({python_.path, python_job("scenario_job.py")}, args);
  const ProcessResult without = testing::run_process(launch(2, 60, command), plain);
  const ProcessResult with = testing::run_process(launch(2, 60, command), shim);
  ASSERT_EQ(without.exit_code, 0) << without.err;
  EXPECT_EQ(with.exit_code, 0) << with.err;
  EXPECT_EQ(sorted_lines(with.out), sorted_lines(without.out));
  EXPECT_EQ(with.err.find("is not in the loaded NCCL"), std::string::npos) << with.err;
  EXPECT_EQ(with.err.find("no NCCL is loaded"), std::string::npos) << with.err;
  const std::map<std::string, int> ops = calls_by_op(run_dir(dir));
  EXPECT_EQ(ops.count("ncclCommInitRank") ? ops.at("ncclCommInitRank") : 0, 2);
  EXPECT_GE(ops.count("ncclAllReduce") ? ops.at("ncclAllReduce") : 0, 2 * 3);

  TempDir fault_dir;
  ProcessOptions faulty = python_shim_options(fault_dir);
  faulty.env["TS_NCCL_LOAD"] = "scope-first";
  faulty.env["TS_NCCL_PATH"] = renamed_copy(fault_dir);
  faulty.env["LD_LIBRARY_PATH"] = std::nullopt;
  const ProcessResult mismatch = testing::run_process(
      launch(2, 60,
             {python_.path, python_job("scenario_job.py"), "--fault", "half-count", "--rank", "1", "--step", "1"}),
      faulty);
  EXPECT_EQ(mismatch.exit_code, kVerdictExit) << mismatch.err;
  EXPECT_NE(report(fault_dir, "mismatch-").find("  - Process 1: [32768] float32 sum\n"), std::string::npos);
}

// `trainscope run` around ts-launch: a token for every rank, the coordinator a process of its own.
std::vector<std::string> under_trainscope_run(const TempDir& dir, const std::vector<std::string>& job) {
  std::vector<std::string> argv = {TS_TOOL,     "run",   "--dir", dir.path() + "/runs", "--run-id", "job",
                                   "--library", TS_SHIM, "--"};
  argv.insert(argv.end(), job.begin(), job.end());
  return argv;
}

// The text of every file of `dir` (not below it) whose name ends with `suffix` and starts with `prefix`.
std::string files_text(const std::string& dir, const std::string& prefix, const std::string& suffix) {
  std::string text;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && name.size() >= suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      text += testing::read_file(entry.path());
  }
  return text;
}

// Rank 0 makes the unique id, hands it to the launcher and exits with status 5 before ncclCommInitRank; rank 1 waits
// in ncclCommInitRank for it (on real NCCL, forever). Under `trainscope run` the coordinator knows rank 0 is gone: the
// desync report of the creation names it within the desync timeout, and rank 1 is stopped instead of hanging.
TEST_P(PythonStartup, ARankThatNeverJoinsTheCommunicatorIsNamedAndTheWaitingRankStops) {
  TempDir dir;
  ProcessOptions options = python_shim_options(dir);
  options.env["LD_PRELOAD"] = sanitized() ? std::optional<std::string>(TS_SANITIZER_RUNTIME) : std::nullopt;
  options.env["TRAINSCOPE_RUN_ID"] = std::nullopt;
  options.env["TRAINSCOPE_DESYNC_TIMEOUT"] = "3";
  const ProcessResult run = testing::run_process(
      under_trainscope_run(dir, launch(2, 60, {python_.path, python_job("startup_job.py"), "--status", "5"})), options);
  EXPECT_FALSE(run.timed_out);
  EXPECT_EQ(run.exit_code, 5) << run.err;  // rank 0's own status (ts-launch's first failing rank), not the deadline's
  int reports = 0;
  const std::string text = report(dir, "desync-", &reports);
  ASSERT_EQ(reports, 1) << run.err;
  EXPECT_NE(text.find("at its creation (`ncclCommInitRank`, 1 of its 2 ranks missing)"), std::string::npos) << text;
  EXPECT_NE(text.find("  - Process 1 (communicator rank 1): creating it in `ncclCommInitRank` since "),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  - Process 0 (communicator rank 0, host "), std::string::npos) << text;
  EXPECT_NE(text.find("never joined it; exited; process gone"), std::string::npos) << text;
  // Its line of Python, in the stack of the waiting call.
  EXPECT_NE(text.find("File \"" + python_job("startup_job.py") + "\", line "), std::string::npos) << text;
  const std::string summary = testing::run_process({TS_TOOL, "report", "--summary", run_dir(dir)}).out;
  EXPECT_NE(summary.find("desyncs: 1 (communicator "), std::string::npos) << summary;
  EXPECT_NE(summary.find(" at its creation `ncclCommInitRank`: rank 1 waits for rank 0 (exited)"), std::string::npos)
      << summary;
}

// The same job under plain LD_PRELOAD, without TRAINSCOPE_TOKEN: no coordinator ever exists (rank 0 would host it
// once the world communicator is made). Rank 1 still hangs, as it does without trainscope, but says in its log whom
// it waits for; and both processes' files are in the run's one folder.
TEST_P(PythonStartup, WithoutACoordinatorTheWaitingRankSaysWhomItWaitsForAndTheRunHasOneFolder) {
  TempDir dir;
  ProcessOptions options = python_shim_options(dir);
  options.env["TRAINSCOPE_RUN_ID"] = std::nullopt;  // the run id of torchrun's defaults: reruns share it
  options.env["TRAINSCOPE_DESYNC_TIMEOUT"] = "2";
  const int deadline = sanitized() ? 20 : 8;
  const ProcessResult run =
      testing::run_process(launch(2, deadline, {python_.path, python_job("startup_job.py"), "--status", "5"}), options);
  EXPECT_FALSE(run.timed_out);
  EXPECT_EQ(run.exit_code, 124) << run.err;  // ts-launch's deadline: rank 1 waits as it would without trainscope
  std::vector<std::string> folders;
  std::error_code ec;
  for (const auto& base : std::filesystem::directory_iterator(dir.path() + "/runs", ec))
    for (const auto& folder : std::filesystem::directory_iterator(base.path(), ec))
      if (folder.is_directory()) folders.push_back(folder.path().string());
  ASSERT_EQ(folders.size(), 1u) << "every process of the run in one folder";
  EXPECT_FALSE(files_text(folders[0], "rank-0.pid-", ".tsrec").empty());
  EXPECT_FALSE(files_text(folders[0], "rank-1.pid-", ".tsrec").empty());
  const std::string log = files_text(folders[0], "rank-1.pid-", ".log");
  EXPECT_NE(log.find(" s in ncclCommInitRank for communicator "), std::string::npos) << log;
  EXPECT_NE(log.find("(rank 1 of 2): some of its other ranks have not joined, and no coordinator answers at tcp://"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find(": rank 0 (pid "), std::string::npos) << log;
  EXPECT_NE(log.find(") exited with status 5"), std::string::npos) << log;
}

// _exit() and exec() are clean ends: a 2-rank job whose rank 0 ends by each, after its communicator was destroyed,
// reads as exited (never "crashed or killed"), and no rank is taken for vanished.
TEST_P(PythonStartup, ProcessesThatEndByUnderscoreExitOrExecEndCleanly) {
  for (const char* how : {"_exit", "exec"}) {
    SCOPED_TRACE(how);
    TempDir dir;
    const ProcessResult run = testing::run_process(
        launch(2, 60, {python_.path, python_job("startup_job.py"), "--init-first", "--end", how, "--status", "0"}),
        python_shim_options(dir));
    EXPECT_FALSE(run.timed_out);
    EXPECT_EQ(run.exit_code, 0) << run.err;
    EXPECT_EQ(sorted_lines(run.out), (std::vector<std::string>{"rank 0 all-reduced", "rank 1 all-reduced"}));
    const std::string summary = testing::run_process({TS_TOOL, "report", "--summary", run_dir(dir)}).out;
    EXPECT_EQ(summary.find("crashed or killed"), std::string::npos) << summary;
    EXPECT_EQ(summary.find("vanished: 1"), std::string::npos) << summary;
    EXPECT_NE(summary.find("nothing went wrong"), std::string::npos) << summary;
  }
}

// Each child of a fork that uses NCCL starts trainscope anew from its parent's environment: the warnings that
// environment earns (a misspelt variable, cross-rank checks that cannot run) are said once, by the parent.
TEST_P(PythonStartup, ForkedChildrenDoNotRepeatTheStartUpWarnings) {
  TempDir dir;
  ProcessOptions options = python_shim_options(dir);
  options.env["RANK"] = "0";
  options.env["WORLD_SIZE"] = "2";  // and no MASTER_ADDR: the checks cannot run, which is worth a warning
  options.env["TRAINSCOPE_WATCHH"] = "off";
  const std::string script = R"(
import ctypes, os, sys
class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]
nccl = ctypes.CDLL("libnccl.so.2")
def make_id():
    uid = UniqueId()
    if nccl.ncclGetUniqueId(ctypes.byref(uid)) != 0:
        sys.exit(3)
make_id()
children = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        make_id()
        os._exit(0)
    children.append(pid)
for pid in children:
    _, status = os.waitpid(pid, 0)
    if status != 0:
        sys.exit(4)
)";
  const ProcessResult run = testing::run_process({python_.path, "-c", script}, options);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto count = [&](const std::string& text) {
    size_t n = 0;
    for (size_t at = run.err.find(text); at != std::string::npos; at = run.err.find(text, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("unknown variable TRAINSCOPE_WATCHH"), 1u) << run.err;
  EXPECT_EQ(count("cross-rank checks are off for this 2-rank job"), 1u) << run.err;
}

INSTANTIATE_TEST_SUITE_P(Versions, PythonStartup, TS_EVERY_PYTHON);

}  // namespace
}  // namespace trainscope
