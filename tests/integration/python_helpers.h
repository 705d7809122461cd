// Shared by the tests that run the Python jobs of tests/programs/python: where they are, a launch command, a clean
// Python environment, a renamed copy of the stand-in NCCL, the calls a run recorded, its mismatch report.
#pragma once

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "integration_helpers.h"
#include "support/python_interpreters.h"
#include "support/subprocess.h"

namespace trainscope {

// The newest Python 3.9-3.13 found: the one the tests that do not depend on the version use.
inline testing::FoundPython newest_python() {
  testing::FoundPython newest;
  for (const testing::FoundPython& p : testing::found_pythons())
    if (p.found) newest = p;
  return newest;
}

// Why a test of every Python version skips `python` in this build, "" when it runs. A sanitizer build instruments
// our libraries, not the interpreter: one version is enough there, and each costs minutes under TSan.
inline std::string reason_to_skip(const testing::FoundPython& python) {
  if (!python.found) return "Python " + python.version + " not found on this machine";
  if (sanitized() && python.version != newest_python().version)
    return "sanitizer build: Python " + newest_python().version + " only";
  return "";
}

inline std::string python_job(const std::string& name) { return std::string(TS_PYTHON_JOB_DIR) + "/" + name; }

// No launcher, loader or interpreter settings of the machine's own leak into a Python job; the helpers library
// of gil_job.py is found.
inline void clean_python_environment(testing::ProcessOptions* options) {
  for (const char* name : {"RANK",           "WORLD_SIZE",     "LOCAL_RANK",          "LOCAL_WORLD_SIZE",
                           "MASTER_ADDR",    "MASTER_PORT",    "TS_UID_WRITE_FD",     "TS_UID_READ_FD",
                           "TS_NCCL_PATH",   "TS_NCCL_LOAD",   "TS_OPEN_COUNTER_OUT", "PYTHONPATH",
                           "PYTHONHOME",     "PYTHONSAFEPATH", "PYTHONUNBUFFERED",    "PYTHONSTARTUP",
                           "PYTHONWARNINGS", "PYTHONDEVMODE",  "PYTHONINSPECT",       "PYTHONOPTIMIZE"})
    options->env[name] = std::nullopt;
  options->env["PYTHONDONTWRITEBYTECODE"] = "1";  // no __pycache__ in the source tree
  options->env["TS_GIL_HELPERS"] = std::string(TS_GIL_HELPERS);
}

// The environment of a Python job without trainscope: the stand-in NCCL, nothing preloaded (but a sanitizer's
// runtime, which an instrumented libnccl.so.2 needs in front of an uninstrumented Python), no launcher or loader
// settings.
inline testing::ProcessOptions plain_python_options() {
  testing::ProcessOptions options;
  options.env["LD_LIBRARY_PATH"] = std::string(TS_FAKE_NCCL_DIR);
  options.env["LD_PRELOAD"] = sanitized() ? std::optional<std::string>(TS_SANITIZER_RUNTIME) : std::nullopt;
  if (sanitized()) options.env["ASAN_OPTIONS"] = "detect_leaks=0:verify_asan_link_order=0";
  clean_python_environment(&options);
  options.timeout_seconds = 120;
  return options;
}

// The environment of a Python job under the shim (job_options), clean of the machine's own Python settings.
inline testing::ProcessOptions python_shim_options(const testing::TempDir& dir) {
  testing::ProcessOptions options = job_options(dir);
  clean_python_environment(&options);
  return options;
}

// A test run once for every CPython 3.9-3.13 (the parameter is the minor version), skipped with its reason where
// that Python is not found (reason_to_skip).
class EveryPython : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    python_ = testing::find_python(GetParam());
    if (const std::string why = reason_to_skip(python_); !why.empty()) GTEST_SKIP() << why;
  }
  testing::FoundPython python_;
};

// The parameters and test names of an EveryPython suite: INSTANTIATE_TEST_SUITE_P(Versions, Suite, kEveryPython...).
#define TS_EVERY_PYTHON                                                        \
  ::testing::Range(testing::kFirstPythonMinor, testing::kLastPythonMinor + 1), \
      [](const ::testing::TestParamInfo<int>& param_info) { return "Python3_" + std::to_string(param_info.param); }

inline std::vector<std::string> launch(int ranks, int deadline_s, const std::vector<std::string>& command) {
  std::vector<std::string> argv = {TS_LAUNCH, "-n", std::to_string(ranks), "--timeout", std::to_string(deadline_s),
                                   "--"};
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

inline std::vector<std::string> with_args(std::vector<std::string> command, const std::vector<std::string>& args) {
  command.insert(command.end(), args.begin(), args.end());
  return command;
}

// The stand-in libnccl.so.2 copied into `dir` under another name.
inline std::string renamed_copy(const testing::TempDir& dir) {
  const std::string copy = dir.path() + "/libmy_collectives.so";
  std::filesystem::copy_file(std::string(TS_FAKE_NCCL_DIR) + "/libnccl.so.2", copy,
                             std::filesystem::copy_options::overwrite_existing);
  return copy;
}

// Each rank's recorded calls, op by op, and the Python frame (innermost) of every one of `op`.
struct RecordedRank {
  std::map<std::string, int> calls;
  std::vector<nlohmann::json> frames_of_op;
};

inline std::vector<RecordedRank> recorded(const testing::TempDir& dir, const std::string& op) {
  const testing::ProcessResult listed =
      testing::run_process({TS_TOOL, "report", run_dir(dir), "--json", "--last", "200"});
  EXPECT_EQ(listed.exit_code, 0) << listed.err;
  std::vector<RecordedRank> ranks;
  if (listed.exit_code != 0) return ranks;
  const nlohmann::json report_json = nlohmann::json::parse(listed.out);
  for (const nlohmann::json& rank : report_json["ranks"]) {
    RecordedRank out;
    for (const nlohmann::json& call : rank["records"]) {
      ++out.calls[call["op"].get<std::string>()];
      if (call["op"] == op) out.frames_of_op.push_back(call["python"]);
    }
    ranks.push_back(out);
  }
  return ranks;
}

// The run in `dir` holds one mismatch report: process 0 all-reduced `count` float32 elements, process 1 half of them,
// and the stacks name `file` (the Python file whose line made the call). `job_err`: the job's stderr, said if not.
inline void expect_half_count_mismatch_report(const testing::TempDir& dir, int count, const std::string& file,
                                              const std::string& job_err) {
  int reports = 0;
  const std::string text = report(dir, "mismatch-", &reports);
  ASSERT_EQ(reports, 1) << job_err;
  EXPECT_NE(text.find("  - Process 0: [" + std::to_string(count) + "] float32 sum\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  - Process 1: [" + std::to_string(count / 2) + "] float32 sum\n"), std::string::npos) << text;
  EXPECT_NE(text.find("File \"" + file + "\", line "), std::string::npos) << text;
}

}  // namespace trainscope
