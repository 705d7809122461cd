// `trainscope report RUN_DIR --trace FILE` on real jobs, the timeline parsed back: four ranks on the CPU stand-in NCCL
// under `trainscope run`, one of which all-reduces half the count at step 3, so the coordinator's mismatch verdict
// stops them all (every rank's process, calls, the call it was stopped in, the verdict); four ranks one of which puts
// inf into an all-reduce (every rank's first inf/nan, the origin); one process launching kernels on two streams of
// the stand-in CUDA driver and CUPTI (the launches on their streams' tracks, the CUDA error).
// Every wait is bounded: ts-launch kills the job past its deadline, run_process past its timeout.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "integration_helpers.h"
#include "python_helpers.h"
#include "support/subprocess.h"

namespace trainscope {
namespace {

using nlohmann::json;
using testing::ProcessOptions;
using testing::ProcessResult;
using testing::TempDir;

constexpr int kRanks = 4;

// `trainscope run` around `kRanks` ranks of `job` (a program and its arguments).
ProcessResult run_job(const TempDir& dir, const std::vector<std::string>& job, int ranks = kRanks,
                      bool python = false) {
  ProcessOptions options = job_options(dir);
  if (python) clean_python_environment(&options);
  options.env["LD_PRELOAD"] = sanitized() ? std::optional<std::string>(TS_SANITIZER_RUNTIME) : std::nullopt;
  options.env["TRAINSCOPE_RUN_ID"] = std::nullopt;
  std::vector<std::string> argv = {
      TS_TOOL, "run",     "--dir", dir.path() + "/runs",  "--run-id",  "job", "--library", TS_SHIM,
      "--",    TS_LAUNCH, "-n",    std::to_string(ranks), "--timeout", "60",  "--"};
  argv.insert(argv.end(), job.begin(), job.end());
  return testing::run_process(argv, options);
}

// `trainscope report RUN_DIR --trace FILE` on the job's run, its summary holding `summary_line`; the file parsed.
json timeline(const TempDir& dir, const std::string& summary_line) {
  const std::string out = dir.file("trace.json");
  ProcessOptions options;
  options.timeout_seconds = 60;
  const ProcessResult report = testing::run_process({TS_TOOL, "report", run_dir(dir), "--trace", out}, options);
  EXPECT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.err.find("timeline written to " + out), std::string::npos) << report.err;
  EXPECT_NE(report.out.find(summary_line), std::string::npos) << report.out;
  return json::parse(testing::read_file(out));
}

std::vector<json> events_of(const json& trace, int64_t pid, const std::string& ph) {
  std::vector<json> out;
  for (const json& e : trace.at("traceEvents"))
    if (e.at("pid") == pid && e.at("ph") == ph) out.push_back(e);
  return out;
}

TEST(Timeline, AMismatchedJobsTimelineShowsEveryRanksCallsTheCallItStoppedInAndTheVerdict) {
  TempDir dir;
  const ProcessResult job = run_job(
      dir, {program("scenario_program"), "--steps", "10", "--fault", "half-count", "--rank", "2", "--step", "3"});
  ASSERT_EQ(job.exit_code, kVerdictExit) << job.err;
  const json trace = timeline(dir, "mismatches: 1");
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

// Most jobs are Python: a ctypes job's calls carry the job's own line, and the mismatch its verdict, as a C job's do.
// forward() and backward() share the helper that calls NCCL; rank 1 all-reduces half the count in backward at step 2.
TEST(Timeline, APythonJobsCallsNameItsLinesAndTheCallItStoppedIn) {
  const testing::FoundPython python = newest_python();
  if (const std::string why = reason_to_skip(python); !why.empty()) GTEST_SKIP() << why;
  TempDir dir;
  const std::string script = python_job("forward_backward_job.py");
  const ProcessResult job = run_job(
      dir, {python.path, script, "--steps", "4", "--fault", "backward-count", "--rank", "1", "--step", "2"}, 2, true);
  ASSERT_EQ(job.exit_code, kVerdictExit) << job.err;
  const json trace = timeline(dir, "mismatches: 1");
  for (int64_t rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    size_t calls = 0, pending = 0;
    for (const json& x : events_of(trace, rank, "X")) {
      if (x.at("name") != "ncclAllReduce") continue;
      ++calls;
      const std::string where = x.at("args").value("python", "");
      EXPECT_NE(where.find("forward_backward_job.py:"), std::string::npos) << x.dump();
      EXPECT_NE(where.find(" in all_reduce"), std::string::npos) << x.dump();
      if (x.at("args").at("result") == "pending (never returned)") ++pending;
    }
    EXPECT_GE(calls, 3u);  // forward and backward of step 1, then the mismatched one
    EXPECT_EQ(pending, 1u);
    bool verdict = false;
    for (const json& i : events_of(trace, rank, "i"))
      verdict = verdict || (i.at("cat") == "verdict" && i.at("name").get<std::string>().rfind("mismatch: ", 0) == 0);
    EXPECT_TRUE(verdict);
  }
}

// Rank 2 puts inf into all-reduce #10 (batch 3): every rank's first inf/nan is marked at that call on its
// communicator's track, and the origin on rank 2, the sender.
TEST(Timeline, AnInfJobsTimelineMarksEveryRanksFirstInfNanAtTheCallAndTheOrigin) {
  TempDir dir;
  const ProcessResult job =
      run_job(dir, {program("train_program"), "--steps", "8", "--inject", "inf", "--rank", "2", "--step", "3"});
  ASSERT_EQ(job.exit_code, 0) << job.err;
  const json trace = timeline(dir, "first inf/nan: batch 3 on ranks 0");
  for (int64_t rank = 0; rank < kRanks; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    std::vector<json> firsts, origins;
    for (const json& i : events_of(trace, rank, "i")) {
      if (i.at("name") == "first inf/nan (batch 3)") firsts.push_back(i);
      if (i.at("name") == "inf/nan origin: ncclAllReduce call #10") origins.push_back(i);
    }
    ASSERT_EQ(firsts.size(), 1u);
    EXPECT_EQ(firsts[0].at("cat"), "nonfinite");
    EXPECT_EQ(firsts[0].at("args").at("time_of"), "the call's record");
    const std::string frame = firsts[0].at("args").at("frame");
    EXPECT_TRUE(frame.rfind("comm ", 0) == 0 && frame.find(" all-reduce #10") != std::string::npos) << frame;
    // At the start of that all-reduce, on the same track.
    bool at_call = false;
    for (const json& x : events_of(trace, rank, "X")) {
      if (x.at("name") == "ncclAllReduce" && x.at("args").at("seq") == 10)
        at_call = x.at("ts") == firsts[0].at("ts") && x.at("tid") == firsts[0].at("tid") &&
                  x.at("args").at("record") == firsts[0].at("args").at("record");
    }
    EXPECT_TRUE(at_call);
    EXPECT_EQ(origins.size(), rank == 2 ? 1u : 0u);
  }
}

// cuda_launches_program on the stand-in driver and CUPTI: kernels on streams A and B around two all-reduces, a graph
// captured and launched on A, a faulting kernel on B whose synchronisation fails with 700.
TEST(Timeline, LaunchesAreSlicesOnTheirStreamsTracksBesideTheNcclCallsAndTheCudaErrorIsMarked) {
  TempDir dir;
  const ProcessResult job = testing::run_process({program("cuda_launches_program")}, cuda_job_options(dir));
  ASSERT_EQ(job.exit_code, 0) << job.err;
  const json trace = timeline(dir, "first CUDA errors: 1");

  std::map<int64_t, std::string> tracks;  // tid -> name
  for (const json& m : events_of(trace, 0, "M"))
    if (m.at("name") == "thread_name") tracks[m.at("tid").get<int64_t>()] = m.at("args").at("name");
  // Kernel short name -> the tracks it ran on; the graph's launch.
  std::map<std::string, std::set<std::string>> kernels;
  size_t graphs = 0, capturing = 0;
  for (const json& x : events_of(trace, 0, "X")) {
    const std::string track = tracks[x.at("tid").get<int64_t>()];
    if (x.at("cat") == "launch") {
      EXPECT_EQ(track.rfind("stream 0x", 0), 0u) << x;
      kernels[x.at("name")].insert(track);
      if (x.at("args").at("api") == "driver graph") {
        ++graphs;
        EXPECT_FALSE(x.at("args").contains("grid")) << x;  // a graph has no dimensions of its own
      }
      if (x.at("args").contains("capturing")) ++capturing;
    }
    if (x.at("name") == "ncclAllReduce") {
      EXPECT_EQ(track.rfind("comm ", 0), 0u) << x;
    }
  }
  ASSERT_EQ(kernels.count("scale_kernel"), 1u);
  ASSERT_EQ(kernels.count("add_kernel"), 1u);
  ASSERT_EQ(kernels.count("fault_kernel"), 1u);
  const std::string stream_a = *kernels["scale_kernel"].begin();
  const std::string stream_b = *kernels["fault_kernel"].begin();
  EXPECT_NE(stream_a, stream_b);
  EXPECT_EQ(kernels["scale_kernel"], std::set<std::string>{stream_a});
  EXPECT_EQ(kernels["add_kernel"], std::set<std::string>{stream_b});
  EXPECT_EQ(graphs, 1u);
  EXPECT_EQ(capturing, 1u);

  size_t errors = 0;
  for (const json& i : events_of(trace, 0, "i")) {
    if (i.at("cat") != "cuda_error") continue;
    ++errors;
    EXPECT_EQ(i.at("name"), "CUDA error: cuStreamSynchronize returned CUDA_ERROR_ILLEGAL_ADDRESS");
    EXPECT_EQ(tracks[i.at("tid").get<int64_t>()], stream_b);
  }
  EXPECT_EQ(errors, 1u);
}

// `--trace FILE` and `--html FILE` never write over what the run left: a recorder, the manifest, a report, a log, the
// run directory itself — named by its path, through a symbolic link, `..` or another hard link — is refused (status
// 2, saying which file and what to do) and stays as it was; so is a new name the run's readers would take as the
// run's own. A new page in the run directory is written.
TEST(Timeline, AFileOfTheRunIsNeverOverwrittenByTheTimelineOrThePage) {
  TempDir dir;
  const ProcessResult job = run_job(
      dir, {program("scenario_program"), "--steps", "10", "--fault", "half-count", "--rank", "2", "--step", "3"});
  ASSERT_EQ(job.exit_code, kVerdictExit) << job.err;
  const std::string run = run_dir(dir);
  std::string recorder, log, mismatch;
  for (const auto& entry : std::filesystem::directory_iterator(run)) {
    const std::string name = entry.path().filename().string();
    if (name.ends_with(".tsrec")) recorder = name;
    if (name.ends_with(".log")) log = name;
    if (name.starts_with("mismatch-") && name.ends_with(".json")) mismatch = name;
  }
  ASSERT_FALSE(recorder.empty());
  ASSERT_FALSE(log.empty());
  ASSERT_FALSE(mismatch.empty());
  ASSERT_TRUE(std::filesystem::exists(run + "/manifest.json"));
  ASSERT_EQ(symlink((run + "/manifest.json").c_str(), dir.file("manifest-link.json").c_str()), 0);
  ASSERT_EQ(link((run + "/" + recorder).c_str(), dir.file("hard-link.tsrec").c_str()), 0);
  ASSERT_EQ(symlink(run.c_str(), dir.file("run-link").c_str()), 0);

  struct Case {
    std::string option, path, names;  // names: the file of the run the refusal names
  };
  const std::vector<Case> cases = {
      {"--trace", run + "/" + recorder, recorder},
      {"--html", run + "/manifest.json", "manifest.json"},
      {"--trace", run + "/" + mismatch, mismatch},
      {"--html", run + "/" + log, log},
      {"--html", dir.file("manifest-link.json"), "manifest.json"},
      {"--trace", dir.file("hard-link.tsrec"), recorder},
      {"--trace", dir.file("run-link") + "/../job/" + recorder, recorder},
      {"--html", run, "the run directory"},
      {"--trace", run + "/", "the run directory"},
      {"--html", dir.file("run-link") + "/rank-9.pid-1.tsrec", "rank-9.pid-1.tsrec"},
  };
  ProcessOptions options;
  options.timeout_seconds = 60;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.option + " " + c.path);
    const std::string target = c.names == "the run directory" ? std::string() : run + "/" + c.names;
    const bool existed = !target.empty() && std::filesystem::exists(target);
    const std::string before = existed ? testing::read_file(target) : "";
    const ProcessResult report = testing::run_process({TS_TOOL, "report", run, c.option, c.path}, options);
    EXPECT_EQ(report.exit_code, 2) << report.err;
    EXPECT_NE(report.err.find("trainscope report: " + c.option + " '" + c.path + "'"), std::string::npos) << report.err;
    EXPECT_NE(report.err.find(c.names), std::string::npos) << report.err;
    EXPECT_NE(report.err.find("choose a path outside the run directory, or a new name in it"), std::string::npos)
        << report.err;
    if (!target.empty()) {
      EXPECT_EQ(std::filesystem::exists(target), existed) << "nothing created";
      if (existed) {
        EXPECT_EQ(testing::read_file(target), before) << "the run's file is as it was";
      }
    }
  }

  const ProcessResult page = testing::run_process({TS_TOOL, "report", run, "--html", run + "/page.html"}, options);
  EXPECT_EQ(page.exit_code, 0) << page.err;
  EXPECT_TRUE(std::filesystem::exists(run + "/page.html"));
}

}  // namespace
}  // namespace trainscope
