// Jobs that reach NCCL through a look-up on a library handle (ctypes as vLLM and SGLang do it, a JAX-like dlopen
// stub, a renamed copy) or through the process-wide look-up from Python, UNDER trainscope: they must get the verdicts
// and reports of the linked C job, and the reports must name the user's own line of Python. Real processes on the
// CPU stand-in NCCL, every wait bounded (ts-launch's deadline, run_process's timeout); every Python 3.9-3.13 found is
// tested where the version matters, the others are skipped with a message.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "integration_helpers.h"
#include "python_helpers.h"
#include "support/python_interpreters.h"
#include "support/subprocess.h"

namespace trainscope {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::FoundPython;
using testing::ProcessOptions;
using testing::ProcessResult;
using testing::TempDir;

// The 1-based line of `file` that holds `text` (the first one); 0 when none does.
int line_of(const std::string& file, const std::string& text) {
  std::ifstream in(file);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number)
    if (line.find(text) != std::string::npos) return number;
  return 0;
}

// What a report says about the calls, without what differs between two runs of the same job by nature: the stacks
// (after the first "Stack(s) ..." heading), communicator ids, times and durations.
std::string verdict_text(std::string text) {
  for (const char* heading : {"\nStacks at the", "\nStack at the", "\nStack of the"}) {
    const size_t at = text.find(heading);
    if (at != std::string::npos) text.resize(at);
  }
  text = std::regex_replace(text, std::regex("(communicator|comm) [0-9a-f]{6}"), "$1 <comm>");
  text = std::regex_replace(text, std::regex("[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:.]+ UTC"), "<time>");
  text = std::regex_replace(text, std::regex("[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]+"), "<time>");
  text = std::regex_replace(text, std::regex("[0-9.]+(ns|us|ms|s)\\b"), "<duration>");
  text = std::regex_replace(text, std::regex("pid [0-9]+"), "pid <pid>");
  return text;
}

// The run's report files (.txt), communicator ids normalised, and their verdict texts, by name.
std::map<std::string, std::string> verdicts(const TempDir& dir) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir(dir), ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() != ".txt" || name.rfind("trace-", 0) == 0) continue;
    out[std::regex_replace(name, std::regex("-[0-9a-f]{6}-"), "-<comm>-")] =
        verdict_text(testing::read_file(entry.path()));
  }
  return out;
}

// The path of the one report file whose name starts with `prefix` and ends with `extension`; "" when none.
std::string report_file(const TempDir& dir, const std::string& prefix, const std::string& extension) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir(dir), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && entry.path().extension() == extension) return entry.path().string();
  }
  return "";
}

// The Python lines of one stack block of a report: `File "...", line N, in f`, in order.
std::vector<std::string> python_lines(const std::string& text) {
  std::vector<std::string> lines;
  for (const std::string& line : testing::split_lines(text)) {
    const size_t at = line.find("File \"");
    if (at != std::string::npos) lines.push_back(line.substr(at));
  }
  return lines;
}

std::string frame_line(const std::string& file, int line, const std::string& function) {
  return "File \"" + file + "\", line " + std::to_string(line) + ", in " + function;
}

// ---- the verdicts of the C job, for a ctypes job that looks NCCL up on its handle ----

struct Scenario {
  const char* name;
  std::vector<std::string> args;
  int exit_code;
};

class HandleLookedUpJob : public ::testing::TestWithParam<std::tuple<Scenario, int>> {};

TEST_P(HandleLookedUpJob, GetsTheVerdictsAndReportsOfTheLinkedJob) {
  const auto& [scenario, ranks] = GetParam();
  const FoundPython python = newest_python();
  if (!python.found) GTEST_SKIP() << "no Python 3.9 to 3.13 on this machine";
  TempDir c_dir;
  TempDir py_dir;
  const ProcessResult c = testing::run_process(
      launch(ranks, 60, with_args({program("scenario_program")}, scenario.args)), python_shim_options(c_dir));
  const ProcessResult py =
      testing::run_process(launch(ranks, 60, with_args({python.path, python_job("scenario_job.py")}, scenario.args)),
                           python_shim_options(py_dir));
  EXPECT_FALSE(c.timed_out || py.timed_out);
  EXPECT_EQ(c.exit_code, scenario.exit_code) << c.err;
  EXPECT_EQ(py.exit_code, scenario.exit_code) << py.err;
  const auto c_reports = verdicts(c_dir);
  const auto py_reports = verdicts(py_dir);
  EXPECT_EQ(c_reports.empty(), scenario.exit_code == 0);
  EXPECT_EQ(py_reports, c_reports);
  // Where the C job's stacks name main, the Python job's name its own lines of scenario_job.py.
  for (const auto& entry : fs::directory_iterator(run_dir(py_dir))) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() != ".txt" || (name.rfind("mismatch-", 0) != 0 && name.rfind("desync-", 0) != 0))
      continue;
    const std::vector<std::string> lines = python_lines(testing::read_file(entry.path()));
    ASSERT_FALSE(lines.empty()) << name << "\n" << testing::read_file(entry.path());
    for (const std::string& line : lines)
      EXPECT_EQ(line.rfind("File \"" + python_job("scenario_job.py") + "\", line ", 0), 0u) << line;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Scenarios, HandleLookedUpJob,
    ::testing::Combine(
        ::testing::Values(Scenario{"count", {"--fault", "half-count", "--rank", "1", "--step", "3"}, kVerdictExit},
                          Scenario{"dtype", {"--fault", "dtype", "--rank", "1", "--step", "2"}, kVerdictExit},
                          Scenario{"root", {"--fault", "root", "--rank", "0", "--step", "2"}, kVerdictExit},
                          Scenario{"send_recv", {"--fault", "p2p-count", "--rank", "1", "--step", "1"}, kVerdictExit},
                          Scenario{"early_exit", {"--fault", "early-exit", "--rank", "1", "--step", "2"}, kVerdictExit},
                          Scenario{"healthy", {"--steps", "4"}, 0}),
        ::testing::Values(2, 4)),
    [](const ::testing::TestParamInfo<std::tuple<Scenario, int>>& param_info) {
      return std::string(std::get<0>(param_info.param).name) + "_" + std::to_string(std::get<1>(param_info.param)) +
             "_ranks";
    });

// inf and nan: the same detection reports (the seed's block, to the character) and the same origin.
TEST(HandleLookedUpJobFrames, InfAndNanGiveTheLinkedJobsReportsWithThePythonLineOfTheCall) {
  const FoundPython python = newest_python();
  if (!python.found) GTEST_SKIP() << "no Python 3.9 to 3.13 on this machine";
  for (const int ranks : {2, 4}) {
    for (const char* value : {"inf", "nan"}) {
      SCOPED_TRACE(std::string(value) + " on " + std::to_string(ranks) + " ranks");
      const std::vector<std::string> args = {"--steps", "5", "--inject", value, "--rank", "1", "--step", "3"};
      TempDir c_dir;
      TempDir py_dir;
      const ProcessResult c = testing::run_process(launch(ranks, 60, with_args({program("train_program")}, args)),
                                                   python_shim_options(c_dir));
      const ProcessResult py = testing::run_process(
          launch(ranks, 60, with_args({python.path, python_job("train_job.py")}, args)), python_shim_options(py_dir));
      ASSERT_EQ(c.exit_code, 0) << c.err;
      ASSERT_EQ(py.exit_code, 0) << py.err;
      const auto c_reports = verdicts(c_dir);
      EXPECT_EQ(c_reports.count("nonfinite-rank1.txt"), 1u);
      EXPECT_EQ(c_reports.count("origin.txt"), 1u);
      EXPECT_EQ(verdicts(py_dir), c_reports);
      // The rank that made the value names the line of train_job.py that all-reduced it, and so does the origin.
      const std::string detection = testing::read_file(run_dir(py_dir) + "/nonfinite-rank1.txt");
      const std::vector<std::string> lines = python_lines(detection);
      ASSERT_FALSE(lines.empty()) << detection;
      EXPECT_EQ(lines[0].rfind("File \"" + python_job("train_job.py") + "\", line ", 0), 0u) << detection;
      const std::string origin = testing::read_file(run_dir(py_dir) + "/origin.txt");
      EXPECT_FALSE(python_lines(origin).empty()) << origin;
    }
  }
}

// ---- the user's own line, for every Python found ----

class PythonStacks : public EveryPython {};

// forward() and backward() share the helper that calls NCCL, so they share its native call site: only the Python
// stack tells them apart. A count mismatch in backward() must be reported in backward(), on each rank, whether the
// job finds NCCL on a handle (ctypes) or through the process-wide look-up (a linked libnccl, as PyTorch's).
TEST_P(PythonStacks, AMismatchInBackwardIsReportedInBackwardThroughAHelperForwardAlsoUses) {
  const std::string job = python_job("forward_backward_job.py");
  const int helper_line = line_of(job, "nc.check(nccl.ncclAllReduce(buf, buf, count");
  const int backward_line = line_of(job, "all_reduce(grads, count // 2 if faulty else count)");
  const int forward_line = line_of(job, "all_reduce(activations, count)");
  ASSERT_GT(helper_line, 0);
  ASSERT_GT(backward_line, 0);
  for (const char* load : {"handle", "global"}) {
    TempDir dir;
    ProcessOptions options = python_shim_options(dir);
    options.env["TS_NCCL_LOAD"] = load;
    const ProcessResult run = testing::run_process(
        launch(2, 60, {python_.path, job, "--steps", "4", "--fault", "backward-count", "--rank", "1", "--step", "2"}),
        options);
    EXPECT_EQ(run.exit_code, kVerdictExit) << load << "\n" << run.err;
    int reports = 0;
    const std::string text = report(dir, "mismatch-", &reports);
    ASSERT_EQ(reports, 1) << load << "\n" << run.err;
    // "Stacks at the call:" then one block per process, each starting with its Python frames.
    const size_t stacks = text.find("\nStacks at the call:\n");
    ASSERT_NE(stacks, std::string::npos) << text;
    for (int rank : {0, 1}) {
      const size_t block = text.find("  Process " + std::to_string(rank) + ":\n", stacks);
      ASSERT_NE(block, std::string::npos) << text;
      const std::vector<std::string> lines = python_lines(text.substr(block, text.find("    #0 ", block) - block));
      ASSERT_GE(lines.size(), 2u) << load << " rank " << rank << "\n" << text;
      EXPECT_EQ(lines[0], frame_line(job, helper_line, "all_reduce")) << load;
      EXPECT_EQ(lines[1], frame_line(job, backward_line, "backward")) << load;
      EXPECT_EQ(text.find(frame_line(job, forward_line, "forward")), std::string::npos) << text;
    }
    // The JSON twin carries the same frames as {file, line, function}.
    const json twin = json::parse(testing::read_file(report_file(dir, "mismatch-", ".json")));
    const json& first = twin["calls"][0]["python_stack"];
    ASSERT_TRUE(first.is_array() && first.size() >= 2) << twin.dump(2);
    EXPECT_EQ(first[1], json({{"file", job}, {"line", backward_line}, {"function", "backward"}}));
  }
}

// Another thread holds the GIL for the whole of every all-reduce: trainscope must not wait for it, and the call's
// Python line must still be known.
TEST_P(PythonStacks, AThreadHoldingTheGilDoesNotHangTheJobAndTheLineIsStillKnown) {
  const std::string job = python_job("gil_job.py");
  const int call_line = line_of(job, "result = wait_then_call(");
  ASSERT_GT(call_line, 0);
  TempDir dir;
  const ProcessResult run = testing::run_process(launch(2, 60, {python_.path, job, "--steps", "3", "--count", "512"}),
                                                 python_shim_options(dir));
  EXPECT_FALSE(run.timed_out);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const ProcessResult listed = testing::run_process({TS_TOOL, "report", run_dir(dir), "--json", "--last", "50"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  const json j = json::parse(listed.out);
  int all_reduces = 0;
  for (const json& rank : j["ranks"]) {
    for (const json& call : rank["records"]) {
      if (call["op"] != "ncclAllReduce") continue;
      ++all_reduces;
      ASSERT_TRUE(call["python"].is_object()) << call.dump();
      EXPECT_EQ(call["python"]["file"], job);
      EXPECT_EQ(call["python"]["line"], call_line);
    }
  }
  EXPECT_EQ(all_reduces, 2 * 3);
}

INSTANTIATE_TEST_SUITE_P(Versions, PythonStacks, TS_EVERY_PYTHON);

// A Python the stack reader does not support (3.6 to 3.8, each found): the job runs under the shim and gets its
// verdict, the report says why it has no Python stack, and the native one is still there.
class PythonStacksUnsupported : public ::testing::TestWithParam<int> {};

TEST_P(PythonStacksUnsupported, TheReportSaysWhyThereIsNoPythonStack) {
  const FoundPython python = testing::find_python(GetParam());
  if (!python.found) GTEST_SKIP() << "Python " << python.version << " not found on this machine";
  TempDir dir;
  const ProcessResult run = testing::run_process(launch(2, 60,
                                                        {python.path, python_job("forward_backward_job.py"), "--fault",
                                                         "backward-count", "--rank", "1", "--step", "1"}),
                                                 python_shim_options(dir));
  EXPECT_EQ(run.exit_code, kVerdictExit) << run.err;
  const std::string text = report(dir, "mismatch-");
  EXPECT_NE(text.find("    (Python stack not captured: Python " + python.version +
                      " is not supported by this trainscope (3.9 to 3.13))\n"
                      "    #0 "),
            std::string::npos)
      << text;
}

// The test jobs are Python 3 programs: 2.7 runs none of them (the stack reader's own tests refuse it).
INSTANTIATE_TEST_SUITE_P(Versions, PythonStacksUnsupported, ::testing::Range(6, 9),
                         [](const ::testing::TestParamInfo<int>& param_info) {
                           return "Python3_" + std::to_string(param_info.param);
                         });

// ---- every way of reaching NCCL ----

// vLLM's VLLM_NCCL_SO_PATH may name any file: a renamed copy, found by nothing but its path.
TEST(HandleLookups, ARenamedCopyOfNcclIsInterceptedLikeTheLibraryItself) {
  const FoundPython python = newest_python();
  if (!python.found) GTEST_SKIP() << "no Python 3.9 to 3.13 on this machine";
  TempDir dir;
  ProcessOptions options = python_shim_options(dir);
  options.env["TS_NCCL_PATH"] = renamed_copy(dir);
  options.env["LD_LIBRARY_PATH"] = std::nullopt;
  const ProcessResult run = testing::run_process(
      launch(2, 60,
             {python.path, python_job("scenario_job.py"), "--fault", "half-count", "--rank", "0", "--step", "1"}),
      options);
  EXPECT_EQ(run.exit_code, kVerdictExit) << run.err;
  const std::string text = report(dir, "mismatch-");
  EXPECT_NE(text.find("  - Process 0: [32768] float32 sum\n"), std::string::npos) << text;
}

// JAX's NCCL stub: dlopen by path, every function looked up with dlsym (or dlvsym) on the handle, from C.
TEST(HandleLookups, AJaxLikeStubGetsTheVerdictThroughDlsymAndDlvsym) {
  for (const bool versioned : {false, true}) {
    TempDir dir;
    ProcessOptions options = python_shim_options(dir);
    std::vector<std::string> command = {
        program("dlopen_program"), "--fault", "half-count", "--rank", "1", "--step", "2"};
    if (versioned) {
      command.insert(command.begin() + 1,
                     {"--nccl", std::string(TS_VERSIONED_NCCL_DIR) + "/libnccl.so.2", "--dlvsym", "NCCL_2.28"});
    }
    const ProcessResult run = testing::run_process(launch(2, 60, command), options);
    EXPECT_EQ(run.exit_code, kVerdictExit) << (versioned ? "dlvsym" : "dlsym") << "\n" << run.err;
    const std::string text = report(dir, "mismatch-");
    EXPECT_NE(text.find("  - Process 1: [32768] float32 sum\n"), std::string::npos) << text;
  }
}

// Two NCCLs in one process (PyTorch's linked one and a ctypes copy of another): each hook calls its own library.
TEST(HandleLookups, TwoNcclLibrariesInOneProcessEachGetTheirOwnCalls) {
  const FoundPython python = newest_python();
  if (!python.found) GTEST_SKIP() << "no Python 3.9 to 3.13 on this machine";
  TempDir dir;
  const std::string copy = renamed_copy(dir);
  const std::string script = R"(
import ctypes, sys
class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]
linked = ctypes.CDLL("libnccl.so.2", mode=ctypes.RTLD_GLOBAL)
process_wide = ctypes.CDLL(None)
other = ctypes.CDLL(sys.argv[1])
for lib in (process_wide, other, process_wide, other):
    uid = UniqueId()
    comm = ctypes.c_void_p()
    assert lib.ncclGetUniqueId(ctypes.byref(uid)) == 0
    assert lib.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0) == 0
    buf = (ctypes.c_float * 8)(*range(8))
    assert lib.ncclAllReduce(buf, buf, ctypes.c_size_t(8), 7, 0, comm, None) == 0
    assert list(buf) == [float(i) for i in range(8)]
    assert lib.ncclCommDestroy(comm) == 0
print("ok")
)";
  const ProcessResult run = testing::run_process({python.path, "-c", script, copy}, python_shim_options(dir));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "ok\n");
  EXPECT_NE(run.err.find("NCCL looked up on a library handle: " + copy), std::string::npos) << run.err;
  const ProcessResult listed = testing::run_process({TS_TOOL, "report", run_dir(dir), "--json", "--last", "50"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  const json j = json::parse(listed.out);
  ASSERT_EQ(j["ranks"].size(), 1u);
  EXPECT_EQ(j["ranks"][0]["communicators"].size(), 4u);
  int all_reduces = 0;
  for (const json& call : j["ranks"][0]["records"]) all_reduces += call["op"] == "ncclAllReduce" ? 1 : 0;
  EXPECT_EQ(all_reduces, 4);
}

// A second preloaded library that wraps open() with dlsym(RTLD_NEXT, "open") must still find libc's open, in either
// order: our dlsym keeps RTLD_NEXT relative to its caller.
TEST(HandleLookups, ASecondPreloadedLibraryWrappingOpenWithRtldNextStillWorks) {
  const std::vector<std::string> args = {"--steps", "3", "--count", "2048", "--digest"};
  TempDir plain_dir;
  ProcessOptions plain = python_shim_options(plain_dir);
  plain.env["LD_PRELOAD"] = sanitized() ? std::optional<std::string>(TS_SANITIZER_RUNTIME) : std::nullopt;
  const ProcessResult expected =
      testing::run_process(launch(2, 60, with_args({program("scenario_program")}, args)), plain);
  ASSERT_EQ(expected.exit_code, 0) << expected.err;
  const std::string shim = shim_preload();
  for (const bool shim_first : {true, false}) {
    TempDir dir;
    ProcessOptions options = python_shim_options(dir);
    options.env["LD_PRELOAD"] = shim_first ? shim + ":" + TS_OPEN_COUNTER
                                           : (sanitized() ? std::string(TS_SANITIZER_RUNTIME) + ":" : std::string()) +
                                                 TS_OPEN_COUNTER + ":" + TS_SHIM;
    options.env["TS_OPEN_COUNTER_OUT"] = dir.path() + "/opens.txt";
    const ProcessResult run =
        testing::run_process(launch(2, 60, with_args({program("scenario_program")}, args)), options);
    ASSERT_EQ(run.exit_code, 0) << (shim_first ? "shim first" : "counter first") << "\n" << run.err;
    EXPECT_EQ(sorted_lines(run.out), sorted_lines(expected.out));
    const std::vector<std::string> counts = testing::split_lines(testing::read_file(dir.path() + "/opens.txt"));
    EXPECT_EQ(counts.size(), 3u);  // ts-launch and both ranks
    for (const std::string& line : counts) EXPECT_EQ(line.rfind("open_counter: ", 0), 0u) << line;
    // And the job was recorded: both ranks' recorders hold their calls.
    EXPECT_TRUE(fs::exists(run_dir(dir))) << run.err;
  }
}

// ---- a process that loaded NCCL and made no call ----

// `driver`: whether the process loads the (stand-in) CUDA driver first, as a GPU job does before any NCCL.
ProcessResult run_nccl_without_calls(const FoundPython& python, const TempDir& dir, bool driver) {
  ProcessOptions options = python_shim_options(dir);
  options.env["LD_PRELOAD"] = std::nullopt;  // trainscope run sets it
  options.env["RANK"] = "0";
  options.env["WORLD_SIZE"] = "1";
  const std::string script =
      std::string("import ctypes\n") + (driver ? "ctypes.CDLL('" TS_FAKE_CUDA_DIR "/libcuda.so.1')\n" : "") +
      "v = ctypes.c_int(); ctypes.CDLL('libnccl.so.2').ncclGetVersion(ctypes.byref(v)); print(v.value)";
  std::vector<std::string> command = {TS_TOOL, "run", "--dir", dir.path() + "/runs", "--run-id", "static"};
  if (sanitized()) command.insert(command.end(), {"--library", TS_SHIM});
  command.insert(command.end(), {"--", python.path, "-c", script});
  if (sanitized()) options.env["LD_PRELOAD"] = std::string(TS_SANITIZER_RUNTIME);
  return testing::run_process(command, options);
}

TEST(NcclWithoutCalls, TheRunSummarySaysSoInsteadOfNothingWentWrong) {
  const FoundPython python = newest_python();
  if (!python.found) GTEST_SKIP() << "no Python 3.9 to 3.13 on this machine";
  TempDir dir;
  const ProcessResult run = run_nccl_without_calls(python, dir, true);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("  NCCL calls: 1 process loaded libnccl but no NCCL call was seen: NCCL may be linked "
                         "statically into the job (rank 0 pid "),
            std::string::npos)
      << run.err;
  EXPECT_EQ(run.err.find("nothing went wrong"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("no NCCL communicator was seen"), std::string::npos) << run.err;  // its log, warning level
}

// A CPU job (torch with gloo loads libnccl too) is not told its NCCL may be linked statically: it never loaded the
// driver, without which no NCCL runs.
TEST(NcclWithoutCalls, AProcessThatNeverLoadedTheCudaDriverIsSaidToHaveRunOnTheCpu) {
  const FoundPython python = newest_python();
  if (!python.found) GTEST_SKIP() << "no Python 3.9 to 3.13 on this machine";
  TempDir dir;
  const ProcessResult run = run_nccl_without_calls(python, dir, false);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("  NCCL calls: 1 process loaded libnccl but never the CUDA driver, so ran no NCCL: a job on "
                         "the CPU, whose collectives (gloo, MPI) trainscope does not watch (rank 0 pid "),
            std::string::npos)
      << run.err;
  EXPECT_EQ(run.err.find("linked statically"), std::string::npos) << run.err;
  EXPECT_EQ(run.err.find("] warn:"), std::string::npos) << run.err;  // said at info, not warned
}

}  // namespace
}  // namespace trainscope
