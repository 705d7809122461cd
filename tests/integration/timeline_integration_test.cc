// `trainscope report RUN_DIR --trace FILE` on a real job: four ranks on the CPU stand-in NCCL under `trainscope run`,
// one of which all-reduces half the count at step 3, so the coordinator's mismatch verdict stops them all. The
// timeline is parsed back and every rank checked: its process, its calls, the call it was stopped in, the verdict.
// Every wait is bounded: ts-launch kills the job past its deadline, run_process past its timeout.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "integration_helpers.h"
#include "support/subprocess.h"

namespace trainscope {
namespace {

using nlohmann::json;
using testing::ProcessOptions;
using testing::ProcessResult;
using testing::TempDir;

constexpr int kVerdictExit = 86;
constexpr int kRanks = 4;

ProcessResult run_mismatch_job(const TempDir& dir) {
  ProcessOptions options = job_options(dir);
  options.env["LD_PRELOAD"] = sanitized() ? std::optional<std::string>(TS_SANITIZER_RUNTIME) : std::nullopt;
  options.env["TRAINSCOPE_RUN_ID"] = std::nullopt;
  return testing::run_process({TS_TOOL,     "run",     "--dir",     dir.path() + "/runs",
                               "--run-id",  "job",     "--library", TS_SHIM,
                               "--",        TS_LAUNCH, "-n",        std::to_string(kRanks),
                               "--timeout", "60",      "--",        program("scenario_program"),
                               "--steps",   "10",      "--fault",   "half-count",
                               "--rank",    "2",       "--step",    "3"},
                              options);
}

std::vector<json> events_of(const json& trace, int64_t pid, const std::string& ph) {
  std::vector<json> out;
  for (const json& e : trace.at("traceEvents"))
    if (e.at("pid") == pid && e.at("ph") == ph) out.push_back(e);
  return out;
}

TEST(Timeline, AMismatchedJobsTimelineShowsEveryRanksCallsTheCallItStoppedInAndTheVerdict) {
  TempDir dir;
  const ProcessResult job = run_mismatch_job(dir);
  ASSERT_EQ(job.exit_code, kVerdictExit) << job.err;

  const std::string out = dir.file("trace.json");
  ProcessOptions options;
  options.timeout_seconds = 60;
  const ProcessResult report = testing::run_process({TS_TOOL, "report", run_dir(dir), "--trace", out}, options);
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.err.find("timeline written to " + out), std::string::npos) << report.err;
  EXPECT_NE(report.out.find("mismatches: 1"), std::string::npos) << report.out;

  const json trace = json::parse(testing::read_file(out));
  ASSERT_TRUE(trace.at("traceEvents").is_array());
  EXPECT_GT(trace.at("otherData").at("start_time_ns").get<uint64_t>(), 0u);
  for (int64_t rank = 0; rank < kRanks; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    bool named = false;
    int64_t comm_track = -1;
    for (const json& m : events_of(trace, rank, "M")) {
      const std::string name = m.at("args").value("name", "");
      if (m.at("name") == "process_name") named = name.rfind("rank " + std::to_string(rank) + " (pid ", 0) == 0;
      if (m.at("name") == "thread_name" && name.rfind("comm ", 0) == 0) comm_track = m.at("tid").get<int64_t>();
    }
    EXPECT_TRUE(named);
    ASSERT_GE(comm_track, 1);

    size_t returned = 0, pending = 0;
    uint64_t last_seq = 0;
    for (const json& x : events_of(trace, rank, "X")) {
      if (x.at("name") != "ncclAllReduce") continue;
      EXPECT_EQ(x.at("tid"), comm_track);
      EXPECT_GE(x.at("dur").get<double>(), 0.0);
      const json& args = x.at("args");
      EXPECT_GT(args.at("count").get<uint64_t>(), 0u);
      EXPECT_TRUE(args.at("type").is_string());
      EXPECT_GT(args.at("seq").get<uint64_t>(), last_seq);  // in call order
      last_seq = args.at("seq").get<uint64_t>();
      if (args.at("result") == "pending (never returned)") {
        ++pending;
      } else {
        EXPECT_EQ(args.at("result"), "ncclSuccess");
        ++returned;
      }
    }
    EXPECT_GE(returned, 2u);  // steps 1 and 2 at least
    EXPECT_EQ(pending, 1u);   // stopped while waiting in the mismatched all-reduce

    bool verdict = false, stopped = false;
    for (const json& i : events_of(trace, rank, "i")) {
      const std::string name = i.at("name");
      if (i.at("cat") == "verdict" && name.rfind("mismatch: ncclAllReduce call #", 0) == 0) verdict = true;
      if (i.at("cat") == "stop") stopped = true;
    }
    EXPECT_TRUE(verdict);
    EXPECT_TRUE(stopped);
  }
}

}  // namespace
}  // namespace trainscope
