// nccl4py's and CuPy's own compiled NCCL bindings (nccl.bindings.nccl, cupy.cuda.nccl: the real packages, installed
// by scripts/client_packages.sh) in a two-rank job on the CPU stand-in NCCL: without trainscope and under it the job
// prints the same and ends the same, under it every rank's recorder holds the calls the package made, each with the
// job's own Python line (the bindings are compiled: the innermost Python frame is the user's), and a count mismatch
// made through either package gets the mismatch verdict. Every CPython 3.10-3.13 found (their releases need 3.10);
// every wait bounded (ts-launch's deadline, run_process's timeout).
//
// They run in the plain build only: the packages are not ours, and the shim's way of meeting them (a library linked
// by a Python extension, CuPy's; a library opened RTLD_LOCAL and looked up in the global scope first, nccl4py's) is
// what python_startup_test.cc runs under the sanitizers.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "integration_helpers.h"
#include "python_helpers.h"
#include "support/python_interpreters.h"
#include "support/subprocess.h"

namespace trainscope {
namespace {

namespace fs = std::filesystem;
using testing::ProcessOptions;
using testing::ProcessResult;
using testing::TempDir;

constexpr int kPackageSteps = 3;
constexpr int kPackageCount = 4096;
constexpr int kFirstPackagesMinor = 10;  // nccl4py 0.6.0 and CuPy 14 need CPython 3.10 or newer

struct Package {
  const char* name;     // --client of package_client_job.py
  const char* version;  // what the job prints: the release scripts/client_packages.sh pins
  const char* init;     // how the package makes a communicator
};

void PrintTo(const Package& package, std::ostream* out) { *out << package.name; }

const Package kNccl4py{"nccl4py", "0.6.0", "ncclCommInitRank"};
const Package kCupy{"cupy", "14.2.0", "ncclCommInitRankConfig"};  // CuPy 14 passes an ncclConfig_t

std::string venv_python(int minor) {
  return std::string(TS_CLIENT_WRAPPERS_DIR) + "/packages-3." + std::to_string(minor) + "/bin/python";
}

// Why the packages cannot run under CPython 3.<minor> here, "" when they can.
std::string why_packages_cannot_run(int minor) {
  if (sanitized()) return "sanitizer build: the client packages run in the plain build";
  const testing::FoundPython python = testing::find_python(minor);
  if (!python.found) return "Python " + python.version + " not found on this machine";
  if (minor < kFirstPackagesMinor)
    return "nccl4py 0.6.0 and CuPy 14.2.0 need Python 3." + std::to_string(kFirstPackagesMinor) + " or newer";
  if (!fs::exists(venv_python(minor)))
    return "no venv with nccl4py and CuPy for Python " + python.version + " at " +
           fs::path(venv_python(minor)).parent_path().parent_path().string() + ": run scripts/client_packages.sh " +
           TS_CLIENT_WRAPPERS_DIR + " (it needs the package index)";
  return "";
}

std::vector<std::string> package_job(int minor, const Package& package, const std::vector<std::string>& args = {}) {
  return with_args({venv_python(minor), python_job("package_client_job.py"), "--client", package.name, "--steps",
                    std::to_string(kPackageSteps), "--count", std::to_string(kPackageCount)},
                   args);
}

class ClientPackages : public ::testing::TestWithParam<std::tuple<Package, int>> {
 protected:
  void SetUp() override {
    package_ = std::get<0>(GetParam());
    minor_ = std::get<1>(GetParam());
    if (const std::string why = why_packages_cannot_run(minor_); !why.empty()) GTEST_SKIP() << why;
  }
  Package package_;
  int minor_ = 0;
};

TEST_P(ClientPackages, RunTheSameUnderTrainscopeAndEveryCallIsRecordedWithTheJobsLine) {
  const ProcessResult plain =
      testing::run_process(launch(2, 60, package_job(minor_, package_)), plain_python_options());
  ASSERT_FALSE(plain.timed_out);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const std::vector<std::string> lines = sorted_lines(plain.out);
  ASSERT_EQ(lines.size(), 2u) << plain.out;
  for (int rank : {0, 1}) {
    // The stand-in's version (2.28.9), as the package read it from the library it loaded.
    const std::string start = "rank " + std::to_string(rank) + ": " + package_.name + " " + package_.version +
                              ", NCCL 22809, " + std::to_string(kPackageSteps) + " steps of " +
                              std::to_string(kPackageCount) + ", digest ";
    EXPECT_EQ(lines[static_cast<size_t>(rank)].rfind(start, 0), 0u) << lines[static_cast<size_t>(rank)];
  }

  TempDir dir;
  const ProcessResult traced =
      testing::run_process(launch(2, 60, package_job(minor_, package_)), python_shim_options(dir));
  EXPECT_FALSE(traced.timed_out);
  EXPECT_EQ(traced.exit_code, plain.exit_code) << traced.err;
  EXPECT_EQ(sorted_lines(traced.out), lines);

  const std::vector<RecordedRank> ranks = recorded(dir, "ncclAllReduce");
  ASSERT_EQ(ranks.size(), 2u);
  for (size_t rank = 0; rank < ranks.size(); ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    std::map<std::string, int> calls = ranks[rank].calls;
    EXPECT_EQ(calls[package_.init], 1);
    EXPECT_EQ(calls["ncclCommDestroy"], 1);
    for (const char* op : {"ncclAllReduce", "ncclBroadcast", "ncclAllGather", "ncclReduceScatter", "ncclReduce",
                           "ncclSend", "ncclRecv", "ncclGroupStart", "ncclGroupEnd"})
      EXPECT_EQ(calls[op], kPackageSteps) << op;
    // The bindings are compiled: the innermost Python frame of each all-reduce is the job's own line that called
    // the package.
    ASSERT_EQ(ranks[rank].frames_of_op.size(), static_cast<size_t>(kPackageSteps));
    for (const nlohmann::json& frame : ranks[rank].frames_of_op) {
      ASSERT_TRUE(frame.is_object()) << frame.dump();
      EXPECT_EQ(frame["file"], python_job("package_client_job.py"));
      EXPECT_EQ(frame["function"], "all_reduce");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Versions, ClientPackages,
                         ::testing::Combine(::testing::Values(kNccl4py, kCupy),
                                            ::testing::Range(testing::kFirstPythonMinor,
                                                             testing::kLastPythonMinor + 1)),
                         [](const ::testing::TestParamInfo<std::tuple<Package, int>>& param_info) {
                           return std::string(std::get<0>(param_info.param).name) + "_Python3_" +
                                  std::to_string(std::get<1>(param_info.param));
                         });

// Rank 1 all-reduces half the elements at step 1 through the package: without trainscope both ranks would wait
// forever (as on real NCCL); under it the job stops with the mismatch verdict, the report naming both shapes and the
// job's line.
TEST(ClientPackageFaults, ACountMismatchThroughEachPackageGetsTheMismatchVerdict) {
  const int minor = newest_python().minor;
  if (const std::string why = why_packages_cannot_run(minor); !why.empty()) GTEST_SKIP() << why;
  for (const Package& package : {kNccl4py, kCupy}) {
    SCOPED_TRACE(package.name);
    TempDir dir;
    const ProcessResult run = testing::run_process(
        launch(2, 60, package_job(minor, package, {"--fault", "half-count", "--rank", "1", "--step", "1"})),
        python_shim_options(dir));
    EXPECT_FALSE(run.timed_out);
    EXPECT_EQ(run.exit_code, kVerdictExit) << run.err;
    expect_half_count_mismatch_report(dir, kPackageCount, python_job("package_client_job.py"), run.err);
  }
}

}  // namespace
}  // namespace trainscope
