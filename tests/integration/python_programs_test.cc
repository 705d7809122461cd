// The jobs that reach NCCL through a handle (tests/programs/python/ through ctypes, dlopen_program through dlopen)
// against their C twins, WITHOUT trainscope: on 2 and 4 ranks through ts-launch with the CPU stand-in NCCL, for
// every Python from 3.9 to 3.13 found here (the others are skipped). Each twin must print exactly what the C
// program prints and end with its status; the ways of loading NCCL (a handle, the global scope, a renamed copy)
// must give the same digests; gil_job must run to completion; libts_open_counter.so must count opens.
//
// Only jobs that end are run: a mismatch, a hang or a skipped send blocks the other ranks forever on the stand-in,
// as on real NCCL. early-destroy and early-exit end the faulty rank but leave the others waiting in their next
// collective: those are run under a short ts-launch deadline, and the twins must agree on the output and on the
// deadline's status (124). Every wait is bounded (ts-launch --timeout, run_process's timeout).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <future>
#include <string>
#include <vector>

#include "integration_helpers.h"
#include "python_helpers.h"
#include "support/python_interpreters.h"
#include "support/subprocess.h"

namespace trainscope {
namespace {

namespace fs = std::filesystem;
using testing::FoundPython;
using testing::ProcessOptions;
using testing::ProcessResult;
using testing::TempDir;

constexpr int kDeadlineStatus = 124;  // ts-launch's status when its deadline kills the ranks

// The deadline of the early faults' runs: every run waits it out, so short, but long enough for 4 ranks to reach
// the faulty step with all the runs of a test at once (and, in a sanitizer build, with the sanitizer's runtime).
int early_fault_deadline() { return sanitized() ? 20 : 6; }

// scenario's options for an early fault (each step's collectives kept small: the deadline is short).
std::vector<std::string> early_fault(const char* fault, int rank, int step) {
  return {"--steps",           "5", "--count", "4096", "--fault", fault, "--rank", std::to_string(rank), "--step",
          std::to_string(step)};
}

std::string joined(const std::vector<std::string>& words) {
  std::string text;
  for (const auto& word : words) text += (text.empty() ? "" : " ") + word;
  return text;
}

// The ranks print in any order: their lines are compared as sorted lists (each line is one write, never split).
void expect_same_run(const ProcessResult& c, const ProcessResult& twin, const std::string& what) {
  EXPECT_EQ(twin.exit_code, c.exit_code) << what << "\nC stderr:\n" << c.err << "\ntwin stderr:\n" << twin.err;
  EXPECT_EQ(sorted_lines(twin.out), sorted_lines(c.out)) << what;
  EXPECT_EQ(sorted_lines(twin.err), sorted_lines(c.err)) << what;
}

// Runs every command at once (the early faults each wait out a deadline) and returns their results in order.
std::vector<ProcessResult> run_all(const std::vector<std::vector<std::string>>& commands,
                                   const ProcessOptions& options) {
  std::vector<std::future<ProcessResult>> running;
  for (const auto& command : commands)
    running.push_back(
        std::async(std::launch::async, [&options, command] { return testing::run_process(command, options); }));
  std::vector<ProcessResult> results;
  for (auto& result : running) results.push_back(result.get());
  return results;
}

// tsprog::digest, for expected results computed here.
unsigned long long fnv1a(const void* data, size_t bytes, unsigned long long h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

std::string hex16(unsigned long long value) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", value);
  return text;
}

// The one "open_counter: N calls" line of `path`; -1 if it is not exactly one such line.
long counted_opens(const std::string& path) {
  const std::vector<std::string> lines = testing::split_lines(testing::read_file(path));
  long calls = -1;
  if (lines.size() != 1 || std::sscanf(lines[0].c_str(), "open_counter: %ld calls", &calls) != 1) return -1;
  return lines[0] == "open_counter: " + std::to_string(calls) + " calls" ? calls : -1;
}

ProcessOptions preloading_open_counter(const std::string& out) {
  ProcessOptions options = plain_python_options();
  options.env["LD_PRELOAD"] =
      sanitized() ? std::string(TS_SANITIZER_RUNTIME) + ":" + TS_OPEN_COUNTER : std::string(TS_OPEN_COUNTER);
  options.env["TS_OPEN_COUNTER_OUT"] = out;
  return options;
}

// ---- every Python found, 3.9 to 3.13 ----

class PythonJobs : public EveryPython {
 protected:
  std::vector<std::string> job(const std::string& name, const std::vector<std::string>& args = {}) const {
    return with_args({python_.path, python_job(name)}, args);
  }
};

TEST_P(PythonJobs, InterpreterIsTheVersionItWasFoundFor) {
  const ProcessResult run = testing::run_process(
      {python_.path, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"}, plain_python_options());
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, python_.version + "\n") << python_.path;
}

TEST_P(PythonJobs, ScenarioJobPrintsWhatScenarioProgramPrints) {
  const ProcessOptions options = plain_python_options();
  for (int ranks : {2, 4}) {
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{}, std::vector<std::string>{"--steps", "4", "--count", "4096", "--digest"},
          std::vector<std::string>{"--steps", "3", "--count", "256", "--digest"}}) {
      const std::string what = std::to_string(ranks) + " ranks, scenario " + joined(args);
      const ProcessResult c =
          testing::run_process(launch(ranks, 60, with_args({program("scenario_program")}, args)), options);
      const ProcessResult twin = testing::run_process(launch(ranks, 60, job("scenario_job.py", args)), options);
      ASSERT_EQ(c.exit_code, 0) << what << "\n" << c.err;
      EXPECT_EQ(sorted_lines(c.out).size(), static_cast<size_t>(ranks * (args.empty() ? 1 : 2))) << what << c.out;
      expect_same_run(c, twin, what);
    }
  }
}

// The two early faults end the faulty rank; the others wait in their next collective until the deadline.
TEST_P(PythonJobs, ScenarioJobLeavesEarlyAsScenarioProgramDoes) {
  std::vector<std::vector<std::string>> commands;
  std::vector<std::string> whats;
  for (const char* fault : {"early-destroy", "early-exit"}) {
    for (int ranks : {2, 4}) {
      const std::vector<std::string> args = early_fault(fault, 1, 2);
      commands.push_back(launch(ranks, early_fault_deadline(), with_args({program("scenario_program")}, args)));
      commands.push_back(launch(ranks, early_fault_deadline(), job("scenario_job.py", args)));
      whats.push_back(std::to_string(ranks) + " ranks, scenario " + joined(args));
    }
  }
  const std::vector<ProcessResult> results = run_all(commands, plain_python_options());
  for (size_t i = 0; i < whats.size(); ++i) {
    const ProcessResult& c = results[2 * i];
    const ProcessResult& twin = results[2 * i + 1];
    EXPECT_FALSE(c.timed_out || twin.timed_out) << whats[i];
    EXPECT_EQ(c.exit_code, kDeadlineStatus) << whats[i] << "\n" << c.err;
    ASSERT_EQ(sorted_lines(c.out).size(), 1u) << whats[i] << "\n" << c.out;
    EXPECT_EQ(c.out.rfind("rank 1 leaves the loop at step 2 and ", 0), 0u) << c.out;
    expect_same_run(c, twin, whats[i]);
  }
}

TEST_P(PythonJobs, TrainJobPrintsWhatTrainProgramPrints) {
  const ProcessOptions options = plain_python_options();
  for (int ranks : {2, 4}) {
    for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
             {"--steps", "4"},
             {"--steps", "4", "--count", "1000", "--inject", "inf", "--rank", "1", "--step", "2"},
             {"--steps", "4", "--inject", "nan", "--rank", "0", "--step", "1"},
             {"--steps", "5", "--inject", "big", "--rank", "1", "--step", "1", "--streak", "3"},
             {"--steps", "4", "--nonblocking"},
             {"--steps", "4", "--nonblocking", "--no-poll"},
             {"--steps", "3", "--inject", "nan", "--rank", "1", "--step", "0", "--nonblocking"}}) {
      const std::string what = std::to_string(ranks) + " ranks, train " + joined(args);
      const ProcessResult c =
          testing::run_process(launch(ranks, 60, with_args({program("train_program")}, args)), options);
      const ProcessResult twin = testing::run_process(launch(ranks, 60, job("train_job.py", args)), options);
      ASSERT_EQ(c.exit_code, 0) << what << "\n" << c.err;
      expect_same_run(c, twin, what);
    }
  }
  // A bad option is refused alike (train_job has no --nvtx; see its header).
  const ProcessResult c = testing::run_process({program("train_program"), "--inject", "zero"}, options);
  const ProcessResult twin = testing::run_process(job("train_job.py", {"--inject", "zero"}), options);
  EXPECT_EQ(c.exit_code, 2);
  EXPECT_EQ(twin.exit_code, 2) << twin.err;
  EXPECT_EQ(testing::run_process(job("train_job.py", {"--nvtx"}), options).exit_code, 2);
}

TEST_P(PythonJobs, PipelineJobPrintsWhatPipelineProgramPrints) {
  const ProcessOptions options = plain_python_options();
  for (int ranks : {2, 4}) {
    for (const std::vector<std::string>& args :
         std::vector<std::vector<std::string>>{{},
                                               {"--steps", "4", "--inject", "inf", "--rank", "1", "--step", "2"},
                                               {"--count", "300", "--inject", "nan", "--rank", "0", "--step", "3"}}) {
      const std::string what = std::to_string(ranks) + " ranks, pipeline " + joined(args);
      const ProcessResult c =
          testing::run_process(launch(ranks, 60, with_args({program("pipeline_program")}, args)), options);
      const ProcessResult twin = testing::run_process(launch(ranks, 60, job("pipeline_job.py", args)), options);
      ASSERT_EQ(c.exit_code, 0) << what << "\n" << c.err;
      expect_same_run(c, twin, what);
    }
  }
}

// handle (ctypes.CDLL: RTLD_LOCAL, dlsym on the handle), global (RTLD_GLOBAL, dlsym on the global scope), each with
// the library under its own name and as a renamed copy found by nothing but TS_NCCL_PATH.
TEST_P(PythonJobs, EveryWayOfLoadingNcclGivesTheSameDigests) {
  TempDir dir;
  const std::string copy = renamed_copy(dir);
  struct Mode {
    std::string name;
    ProcessOptions options;
  };
  std::vector<Mode> modes;
  for (const char* load : {"handle", "global"}) {
    ProcessOptions options = plain_python_options();
    options.env["TS_NCCL_LOAD"] = load;
    modes.push_back({std::string(load) + " libnccl.so.2", options});
    options.env["TS_NCCL_PATH"] = copy;
    options.env["LD_LIBRARY_PATH"] = std::nullopt;  // no libnccl.so.2 to be found by its name
    modes.push_back({std::string(load) + " " + copy, options});
  }
  const std::vector<std::string> scenario_args = {"--steps", "4", "--count", "2048", "--digest"};
  for (int ranks : {2, 4}) {
    const ProcessResult c = testing::run_process(
        launch(ranks, 60, with_args({program("scenario_program")}, scenario_args)), plain_python_options());
    ASSERT_EQ(c.exit_code, 0) << c.err;
    ProcessResult first_forward_backward;
    ProcessResult first_gil;
    for (size_t m = 0; m < modes.size(); ++m) {
      const std::string what = std::to_string(ranks) + " ranks, " + modes[m].name;
      expect_same_run(c,
                      testing::run_process(launch(ranks, 60, job("scenario_job.py", scenario_args)), modes[m].options),
                      "scenario, " + what);
      const ProcessResult forward_backward =
          testing::run_process(launch(ranks, 60, job("forward_backward_job.py", {"--steps", "3"})), modes[m].options);
      const ProcessResult gil = testing::run_process(
          launch(ranks, 60, job("gil_job.py", {"--steps", "3", "--count", "512"})), modes[m].options);
      EXPECT_EQ(forward_backward.exit_code, 0) << what << "\n" << forward_backward.err;
      EXPECT_EQ(gil.exit_code, 0) << what << "\n" << gil.err;
      if (m == 0) {
        first_forward_backward = forward_backward;
        first_gil = gil;
      } else {
        expect_same_run(first_forward_backward, forward_backward, "forward_backward, " + what);
        expect_same_run(first_gil, gil, "gil, " + what);
      }
    }
  }
  // The modes are what they say: only global mode puts NCCL in the process's global scope.
  for (size_t m = 0; m < modes.size(); ++m) {
    const ProcessResult run = testing::run_process(
        {python_.path, "-c",
         "import ctypes, sys; sys.path.insert(0, sys.argv[1]); import nccl_ctypes; n = nccl_ctypes.load(); "
         "print(n.mode, n.path, hasattr(ctypes.CDLL(None), 'ncclAllReduce'), n.ncclAllReduce is not None)",
         TS_PYTHON_JOB_DIR},
        modes[m].options);
    const bool global = modes[m].name.rfind("global", 0) == 0;
    const std::string path = modes[m].name.substr(modes[m].name.find(' ') + 1);
    EXPECT_EQ(run.out, std::string(global ? "global " : "handle ") + path + (global ? " True" : " False") + " True\n")
        << modes[m].name << "\n"
        << run.err;
  }
}

TEST_P(PythonJobs, ForwardBackwardJobRunsAndEveryRankGetsTheSameSums) {
  for (int ranks : {2, 4}) {
    const ProcessResult run =
        testing::run_process(launch(ranks, 60, job("forward_backward_job.py")), plain_python_options());
    EXPECT_EQ(run.exit_code, 0) << run.err;
    EXPECT_EQ(run.err, "");
    const std::vector<std::string> lines = sorted_lines(run.out);
    ASSERT_EQ(lines.size(), static_cast<size_t>(2 * ranks)) << run.out;
    const std::string digest = lines[0].substr(lines[0].find(" digest "));
    for (int r = 0; r < ranks; ++r) {
      EXPECT_EQ(lines[2 * r], "rank " + std::to_string(r) + digest) << run.out;
      EXPECT_EQ(lines[2 * r + 1], "rank " + std::to_string(r) + ": 5 steps done") << run.out;
    }
  }
}

// Each step's all-reduce runs while another thread holds the GIL; the results are the exact sums, digested as
// tsprog::digest does.
TEST_P(PythonJobs, GilJobRunsToCompletionWithTheGilHeldDuringEveryAllReduce) {
  constexpr int kSteps = 4;
  constexpr int kCount = 1024;
  for (int ranks : {1, 2, 4}) {
    const ProcessResult run = testing::run_process(
        launch(ranks, 60, job("gil_job.py", {"--steps", std::to_string(kSteps), "--count", std::to_string(kCount)})),
        plain_python_options());
    EXPECT_FALSE(run.timed_out);
    EXPECT_EQ(run.exit_code, 0) << run.err;
    EXPECT_EQ(run.err, "");
    std::vector<std::string> expected;
    for (int r = 0; r < ranks; ++r) {
      for (int step = 0; step < kSteps; ++step) {
        std::vector<float> sum(kCount);
        for (int i = 0; i < kCount; ++i)
          for (int peer = 0; peer < ranks; ++peer) sum[i] += static_cast<float>(peer + 1 + i % 7 + step);
        expected.push_back("rank " + std::to_string(r) + " step " + std::to_string(step) + " digest " +
                           hex16(fnv1a(sum.data(), sum.size() * sizeof(float))));
      }
      expected.push_back("rank " + std::to_string(r) + ": " + std::to_string(kSteps) + " steps done");
    }
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(sorted_lines(run.out), expected) << ranks << " ranks";
  }
}

// Python calls open64 (and openat64 for dir_fd=): three more opens than the same interpreter's start, counted.
TEST_P(PythonJobs, OpenCounterCountsTheOpensOfAPythonProcess) {
  TempDir dir;
  const std::string file = dir.path() + "/data.txt";
  std::fclose(std::fopen(file.c_str(), "w"));
  const std::string base_out = dir.path() + "/base.out";
  const std::string more_out = dir.path() + "/more.out";
  const ProcessResult base = testing::run_process({python_.path, "-c", "import os, sys; p = sys.argv[1]", file},
                                                  preloading_open_counter(base_out));
  const ProcessResult more = testing::run_process(
      {python_.path, "-c",
       "import os, sys; p = sys.argv[1]; os.close(os.open(p, os.O_RDONLY)); "
       "d = os.open(os.path.dirname(p), os.O_RDONLY); os.close(os.open(os.path.basename(p), os.O_RDONLY, dir_fd=d)); "
       "os.close(d)",
       file},
      preloading_open_counter(more_out));
  ASSERT_EQ(base.exit_code, 0) << base.err;
  ASSERT_EQ(more.exit_code, 0) << more.err;
  const long base_calls = counted_opens(base_out);
  EXPECT_GT(base_calls, 0) << testing::read_file(base_out);  // the interpreter's start opens files
  EXPECT_EQ(counted_opens(more_out), base_calls + 3) << testing::read_file(more_out);
}

INSTANTIATE_TEST_SUITE_P(Versions, PythonJobs, TS_EVERY_PYTHON);

// ---- the C jobs ----

TEST(PythonPrograms, DlopenProgramPrintsWhatScenarioProgramPrints) {
  TempDir dir;
  const std::string copy = renamed_copy(dir);
  const ProcessOptions options = plain_python_options();
  ProcessOptions env_path = options;
  env_path.env["TS_NCCL_PATH"] = copy;
  env_path.env["LD_LIBRARY_PATH"] = std::nullopt;
  const std::string versioned = std::string(TS_VERSIONED_NCCL_DIR) + "/libnccl.so.2";
  for (int ranks : {2, 4}) {
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{}, std::vector<std::string>{"--steps", "4", "--count", "4096", "--digest"}}) {
      const std::string what = std::to_string(ranks) + " ranks, " + joined(args);
      const ProcessResult c =
          testing::run_process(launch(ranks, 60, with_args({program("scenario_program")}, args)), options);
      ASSERT_EQ(c.exit_code, 0) << c.err;
      // libnccl.so.2 through LD_LIBRARY_PATH; a renamed copy by --nccl and by TS_NCCL_PATH; dlvsym in a versioned one.
      expect_same_run(c, testing::run_process(launch(ranks, 60, with_args({program("dlopen_program")}, args)), options),
                      what);
      expect_same_run(c,
                      testing::run_process(
                          launch(ranks, 60, with_args({program("dlopen_program"), "--nccl", copy}, args)), options),
                      "--nccl renamed copy, " + what);
      expect_same_run(c,
                      testing::run_process(launch(ranks, 60, with_args({program("dlopen_program")}, args)), env_path),
                      "TS_NCCL_PATH renamed copy, " + what);
      expect_same_run(
          c,
          testing::run_process(
              launch(ranks, 60,
                     with_args({program("dlopen_program"), "--nccl", versioned, "--dlvsym", "NCCL_2.28"}, args)),
              options),
          "dlvsym, " + what);
    }
  }
}

TEST(PythonPrograms, DlopenProgramLeavesEarlyAsScenarioProgramDoes) {
  std::vector<std::vector<std::string>> commands;
  for (const char* fault : {"early-destroy", "early-exit"}) {
    const std::vector<std::string> args = early_fault(fault, 2, 1);
    commands.push_back(launch(4, early_fault_deadline(), with_args({program("scenario_program")}, args)));
    commands.push_back(launch(4, early_fault_deadline(), with_args({program("dlopen_program")}, args)));
  }
  const std::vector<ProcessResult> results = run_all(commands, plain_python_options());
  for (size_t i = 0; i < results.size(); i += 2) {
    EXPECT_EQ(results[i].exit_code, kDeadlineStatus) << results[i].err;
    EXPECT_EQ(results[i].out.rfind("rank 2 leaves the loop at step 1 and ", 0), 0u) << results[i].out;
    expect_same_run(results[i], results[i + 1], joined(commands[i + 1]));
  }
}

TEST(PythonPrograms, DlopenProgramSaysWhichFunctionItCannotFind) {
  // Neither the plain stand-in nor the real libnccl.so.2 versions its symbols: dlvsym finds nothing there.
  const ProcessResult run =
      testing::run_process({program("dlopen_program"), "--dlvsym", "NCCL_2.28"}, plain_python_options());
  EXPECT_EQ(run.exit_code, 3);
  EXPECT_NE(run.err.find("dlopen_program: ncclGetUniqueId not found in libnccl.so.2 at version NCCL_2.28: "),
            std::string::npos)
      << run.err;
  const ProcessResult missing =
      testing::run_process({program("dlopen_program"), "--nccl", "/nonexistent/libnccl.so.2"}, plain_python_options());
  EXPECT_EQ(missing.exit_code, 3);
  EXPECT_EQ(missing.err.rfind("dlopen_program: cannot load /nonexistent/libnccl.so.2: ", 0), 0u) << missing.err;
}

// cat calls open through its PLT: two more files, two more opens.
TEST(PythonPrograms, OpenCounterCountsTheOpensOfACProgram) {
  TempDir dir;
  const std::string file = dir.path() + "/data.txt";
  std::FILE* f = std::fopen(file.c_str(), "w");
  std::fputs("data\n", f);
  std::fclose(f);
  const ProcessResult one = testing::run_process({"cat", file}, preloading_open_counter(dir.path() + "/one.out"));
  const ProcessResult three =
      testing::run_process({"cat", file, file, file}, preloading_open_counter(dir.path() + "/three.out"));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  ASSERT_EQ(three.exit_code, 0) << three.err;
  EXPECT_EQ(one.out, "data\n");
  const long one_calls = counted_opens(dir.path() + "/one.out");
  EXPECT_GE(one_calls, 1) << testing::read_file(dir.path() + "/one.out");
  EXPECT_EQ(counted_opens(dir.path() + "/three.out"), one_calls + 2) << testing::read_file(dir.path() + "/three.out");
}

}  // namespace
}  // namespace trainscope
