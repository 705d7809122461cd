// vLLM's and SGLang's own pynccl_wrapper.py (ctypes, run unchanged; tests/clients/README.md) in a two-rank job on the
// CPU stand-in NCCL: without trainscope and under it the job prints the same and ends the same, under it every
// rank's recorder holds the calls the wrapper made with the wrapper's own Python line, and a count mismatch made
// through the wrapper gets the mismatch verdict. Every CPython 3.9-3.13 found (vLLM 0.33 needs 3.10 or newer); every
// wait bounded (ts-launch's deadline, run_process's timeout).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <optional>
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
using nlohmann::json;
using testing::FoundPython;
using testing::ProcessOptions;
using testing::ProcessResult;
using testing::TempDir;

constexpr int kWrapperSteps = 3;
constexpr int kWrapperCount = 4096;

struct Client {
  const char* name;
  int first_python_minor;  // the oldest CPython the client's release supports
};

// gtest names a parameter by this rather than by its bytes.
void PrintTo(const Client& client, std::ostream* out) { *out << client.name; }

const Client kVllm{"vllm", 10};
const Client kSglang{"sglang", 9};

std::string wrapper_of(const Client& client) {
  return fs::absolute(std::string(TS_CLIENT_WRAPPERS_DIR) + "/" + client.name + "/pynccl_wrapper.py").string();
}

// Why `client` cannot run under `python` here, "" when it can.
std::string why_client_cannot_run(const Client& client, const FoundPython& python) {
  if (!fs::exists(wrapper_of(client)))
    return std::string(client.name) + "'s pynccl_wrapper.py is not in " + TS_CLIENT_WRAPPERS_DIR +
           ": run scripts/client_wrappers.sh " + TS_CLIENT_WRAPPERS_DIR + " (it needs the package index)";
  if (python.found && python.minor < client.first_python_minor)
    return std::string(client.name) + "'s release needs Python 3." + std::to_string(client.first_python_minor) +
           " or newer";
  return reason_to_skip(python);
}

// The NCCL the wrapper is given as so_file: vLLM the stand-in by its path (VLLM_NCCL_SO_PATH's way), SGLang a renamed
// copy (SGLANG_NCCL_SO_PATH may name any file).
std::string nccl_for(const Client& client, const TempDir& dir) {
  return std::string(client.name) == "vllm" ? std::string(TS_FAKE_NCCL_DIR) + "/libnccl.so.2" : renamed_copy(dir);
}

std::vector<std::string> client_job(const FoundPython& python, const Client& client, const std::string& nccl,
                                    const std::vector<std::string>& args = {}) {
  return with_args(
      {python.path, python_job("client_wrapper_job.py"), "--client", client.name, "--wrapper", wrapper_of(client),
       "--nccl", nccl, "--steps", std::to_string(kWrapperSteps), "--count", std::to_string(kWrapperCount)},
      args);
}

class ClientWrappers : public ::testing::TestWithParam<std::tuple<Client, int>> {
 protected:
  void SetUp() override {
    client_ = std::get<0>(GetParam());
    python_ = testing::find_python(std::get<1>(GetParam()));
    if (const std::string why = why_client_cannot_run(client_, python_); !why.empty()) GTEST_SKIP() << why;
  }
  Client client_;
  FoundPython python_;
};

TEST_P(ClientWrappers, RunTheSameUnderTrainscopeAndEveryCallIsRecordedWithTheWrappersLine) {
  TempDir plain_dir;
  const ProcessResult plain = testing::run_process(
      launch(2, 60, client_job(python_, client_, nccl_for(client_, plain_dir))), plain_python_options());
  ASSERT_FALSE(plain.timed_out);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const std::vector<std::string> lines = sorted_lines(plain.out);
  ASSERT_EQ(lines.size(), 2u) << plain.out;
  for (int rank : {0, 1}) {
    const std::string start = "rank " + std::to_string(rank) + ": " + client_.name +
                              "'s pynccl_wrapper, NCCL 2.28.9, " + std::to_string(kWrapperSteps) + " steps of " +
                              std::to_string(kWrapperCount) + ", digest ";
    EXPECT_EQ(lines[static_cast<size_t>(rank)].rfind(start, 0), 0u) << lines[static_cast<size_t>(rank)];
  }

  TempDir dir;
  const ProcessResult traced = testing::run_process(launch(2, 60, client_job(python_, client_, nccl_for(client_, dir))),
                                                    python_shim_options(dir));
  EXPECT_FALSE(traced.timed_out);
  EXPECT_EQ(traced.exit_code, plain.exit_code) << traced.err;
  EXPECT_EQ(sorted_lines(traced.out), lines);

  const std::vector<RecordedRank> ranks = recorded(dir, "ncclAllReduce");
  ASSERT_EQ(ranks.size(), 2u);
  const std::string init = std::string(client_.name) == "vllm" ? "ncclCommInitRank" : "ncclCommInitRankConfig";
  for (size_t rank = 0; rank < ranks.size(); ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    std::map<std::string, int> calls = ranks[rank].calls;
    EXPECT_EQ(calls[init], 1);
    EXPECT_EQ(calls["ncclCommDestroy"], 1);
    for (const char* op : {"ncclAllReduce", "ncclBroadcast", "ncclAllGather", "ncclReduceScatter", "ncclReduce",
                           "ncclSend", "ncclRecv", "ncclGroupStart", "ncclGroupEnd"})
      EXPECT_EQ(calls[op], kWrapperSteps) << op;
    // The innermost Python frame of each all-reduce is the wrapper's own method, in the client's file.
    ASSERT_EQ(ranks[rank].frames_of_op.size(), static_cast<size_t>(kWrapperSteps));
    for (const json& frame : ranks[rank].frames_of_op) {
      ASSERT_TRUE(frame.is_object()) << frame.dump();
      EXPECT_EQ(frame["file"], wrapper_of(client_));
      EXPECT_EQ(frame["function"], "ncclAllReduce");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Versions, ClientWrappers,
                         ::testing::Combine(::testing::Values(kVllm, kSglang),
                                            ::testing::Range(testing::kFirstPythonMinor,
                                                             testing::kLastPythonMinor + 1)),
                         [](const ::testing::TestParamInfo<std::tuple<Client, int>>& param_info) {
                           return std::string(std::get<0>(param_info.param).name) + "_Python3_" +
                                  std::to_string(std::get<1>(param_info.param));
                         });

// Rank 1 all-reduces half the elements at step 1 through the wrapper: without trainscope both ranks would wait
// forever (as on real NCCL); under it the job stops with the mismatch verdict, the report naming both shapes.
TEST(ClientWrapperFaults, ACountMismatchThroughEachWrapperGetsTheMismatchVerdict) {
  const FoundPython python = newest_python();
  std::string skipped;
  for (const Client& client : {kVllm, kSglang}) {
    SCOPED_TRACE(client.name);
    if (const std::string why = why_client_cannot_run(client, python); !why.empty()) {
      skipped += (skipped.empty() ? "" : "; ") + why;
      continue;
    }
    TempDir dir;
    const ProcessResult run = testing::run_process(
        launch(
            2, 60,
            client_job(python, client, nccl_for(client, dir), {"--fault", "half-count", "--rank", "1", "--step", "1"})),
        python_shim_options(dir));
    EXPECT_FALSE(run.timed_out);
    EXPECT_EQ(run.exit_code, kVerdictExit) << run.err;
    expect_half_count_mismatch_report(dir, kWrapperCount, wrapper_of(client), run.err);
  }
  if (!skipped.empty()) GTEST_SKIP() << skipped;
}

}  // namespace
}  // namespace trainscope
