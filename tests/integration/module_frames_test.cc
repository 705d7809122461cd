// TRAINSCOPE_WATCH=modules on real PyTorch and transformers (CPU): the frames of an unmodified job equal those of the
// seed's own tool, transformers' DebugUnderflowOverflow (DUO), attached to the same seeded model; and the hooks' way
// into the interpreter (a sitecustomize on PYTHONPATH) keeps the job's own sitecustomize and costs a process without
// torch nothing of ours.
//
// torch and transformers come from scripts/torch_env.sh (the README's test command runs it), in one environment for
// each CPython torch has a wheel for: every torch test runs on the first (.torch), those whose path changes with the
// interpreter on each (kTorchTestsOnEveryPython); where one is missing its tests skip, naming the script. They run in
// the plain build only: a sanitizer's runtime preloaded into an uninstrumented interpreter that loads torch's own
// libraries is slow and proves nothing about our code that the unit tests of the engine's side
// (engine_module_frames_test.cc) do not.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "integration_helpers.h"
#include "python_helpers.h"

namespace trainscope {
namespace {

// The CPython versions the torch tests run on: each one torch has a wheel for, in an environment of its own that
// scripts/torch_env.sh makes: .torch (the first of 3.11, 3.12, 3.13, 3.10 found; the benchmark's too) and .torch-3.N
// for each other version.
constexpr int kFirstTorchPythonMinor = 10;
constexpr int kLastTorchPythonMinor = 14;

// The minor version of .torch's interpreter, 0 where there is none.
int main_torch_minor() {
  static const int minor = [] {
    if (!std::filesystem::exists(TS_TORCH_PYTHON)) return 0;
    const testing::ProcessResult result =
        testing::run_process({TS_TORCH_PYTHON, "-c", "import sys; print(sys.version_info[1])"}, plain_python_options());
    return result.exit_code == 0 ? std::atoi(result.out.c_str()) : 0;
  }();
  return minor;
}

std::string torch_python_for(int minor) {
  if (minor == main_torch_minor()) return TS_TORCH_PYTHON;
  return std::string(TS_TORCH_ENV_PREFIX) + "3." + std::to_string(minor) + "/bin/python";
}

// Why the torch tests of CPython 3.<minor> skip here, "" when they run.
std::string why_no_torch(int minor) {
  if (sanitized()) return "sanitizer build: the torch jobs run in the plain build";
  const std::string python = torch_python_for(minor);
  if (std::filesystem::exists(python)) return "";
  const std::string version = "3." + std::to_string(minor);
  if (!testing::find_python(minor).found) return "CPython " + version + " is not on this machine";
  const std::string env = std::filesystem::path(python).parent_path().parent_path().string();
  return "no torch environment for CPython " + version + " at " + env + " (run scripts/torch_env.sh " + env + " " +
         version + "; it says why where it makes none)";
}

// The name of a test's CPython in its parameterised name: "Python3_12".
std::string python_name(int minor) { return "Python3_" + std::to_string(minor); }

// The torch tests that run on every CPython torch has a wheel for: those whose path changes with the interpreter
// (how the hooks get in, DUO's dump through our forward hooks, backward hooks, the import hooks that wrap GradScaler
// and DeepSpeed, TorchDynamo's frame evaluation, the DataLoader's worker processes). The others run on .torch's CPython
// only: on CI's two cores the torch tests took 2200 of the 2500 s of test time when every one ran on four CPythons,
// and each costs ten seconds of torch and transformers imports per process whichever interpreter runs it.
constexpr std::string_view kTorchTestsOnEveryPython[] = {
    "TheDumpOfAnUnmodifiedJobEqualsDebugUnderflowOverflowsLineForLine",
    "TheModuleWhoseBackwardOverflowsIsNamed",
    "AStepTheGradScalerSkippedIsToldNotCalledBroken",
    "ATorchCompiledModelRunsAsWithoutTrainscopeAndIsToldOnce",
    "ADataLoaderWithWorkerProcessesRunsAsWithoutTrainscope",
    "ItsLossScalersSkipIsToldAndTheTrainingIsUnchanged",
};

// A parameterised test's name without its parameter: "ATracedBatchShowsDuosTraceFrames/Python3_12_t5" ->
// "ATracedBatchShowsDuosTraceFrames".
std::string_view without_parameter(std::string_view name) { return name.substr(0, name.find('/')); }

std::string_view current_test_name() {
  return without_parameter(::testing::UnitTest::GetInstance()->current_test_info()->name());
}

// What a test of torch jobs on one CPython holds: that version's interpreter with torch, or why it skips (set_up).
class TorchTest {
 protected:
  bool set_up(int minor) {
    why_not_ = why_no_torch(minor);
    python_ = torch_python_for(minor);
    if (why_not_.empty() && minor != main_torch_minor() &&
        std::ranges::find(kTorchTestsOnEveryPython, current_test_name()) == std::end(kTorchTestsOnEveryPython))
      why_not_ = "runs on .torch's CPython 3." + std::to_string(main_torch_minor()) +
                 " only (kTorchTestsOnEveryPython in module_frames_test.cc names those that run on each CPython)";
    return why_not_.empty();
  }
  // Whether python_ finds `module`: a package scripts/torch_env.sh installs beside torch.
  bool finds(const std::string& module) const {
    return testing::run_process(
               {python_, "-c",
                "import importlib.util, sys; sys.exit(importlib.util.find_spec('" + module + "') is None)"},
               plain_python_options())
               .exit_code == 0;
  }
  std::string python_;
  std::string why_not_;
};

testing::ProcessOptions torch_options(const testing::TempDir& dir) {
  testing::ProcessOptions options = python_shim_options(dir);
  options.env["TRAINSCOPE_WATCH"] = "modules";
  options.env["OMP_NUM_THREADS"] = "1";
  options.env["TRANSFORMERS_OFFLINE"] = "1";
  options.env["HF_HUB_OFFLINE"] = "1";
  options.timeout_seconds = 240;
  return options;
}

// The same with backward frames (TRAINSCOPE_WATCH=modules,backward).
testing::ProcessOptions backward_torch_options(const testing::TempDir& dir) {
  testing::ProcessOptions options = torch_options(dir);
  options.env["TRAINSCOPE_WATCH"] = "modules,backward";
  return options;
}

// DUO's dump as it printed it: from "Detected inf/nan" to the last frame (its three closing blank lines left out).
std::string duo_dump(const std::string& out) {
  const size_t start = out.find("Detected inf/nan");
  const size_t end = out.find("\n\n\n\njob: stopped");
  if (start == std::string::npos || end == std::string::npos || end < start) return "";
  return out.substr(start, end + 1 - start);
}

// trainscope's report of the same: from "Detected inf/nan" to its end.
std::string trainscope_dump(const std::string& text) {
  const size_t start = text.find("Detected inf/nan");
  return start == std::string::npos ? "" : text.substr(start);
}

// The forward tests on two transformers models, on each CPython: the parameter is (minor version, "t5" or "gpt2").
class ModuleFrames : public ::testing::TestWithParam<std::tuple<int, std::string>>, protected TorchTest {
 protected:
  void SetUp() override {
    if (!set_up(std::get<0>(GetParam()))) GTEST_SKIP() << why_not_;
  }
  static std::string model() { return std::get<1>(GetParam()); }
  std::vector<std::string> job(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {python_, python_job("module_overflow_job.py")};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }
};

TEST_P(ModuleFrames, TheDumpOfAnUnmodifiedJobEqualsDebugUnderflowOverflowsLineForLine) {
  testing::TempDir plain_dir;
  testing::ProcessOptions plain = plain_python_options();
  plain.env["OMP_NUM_THREADS"] = "1";
  plain.timeout_seconds = 240;
  const testing::ProcessResult duo = testing::run_process(job({"--model", model(), "--duo"}), plain);
  ASSERT_EQ(duo.exit_code, 0) << duo.out << duo.err;
  const std::string expected = duo_dump(duo.out);
  ASSERT_NE(expected, "") << duo.out;
  ASSERT_NE(expected.find("Detected inf/nan during batch_number=2\nLast 21 forward frames:\n"), std::string::npos)
      << expected;

  testing::TempDir dir;
  const testing::ProcessResult watched = testing::run_process(job({"--model", model()}), torch_options(dir));
  ASSERT_EQ(watched.exit_code, 0) << watched.out << watched.err;
  EXPECT_NE(watched.out.find("job: step 3"), std::string::npos) << "the job runs on: " << watched.out;
  int reports = 0;
  const std::string text = report(dir, "nonfinite-", &reports);
  ASSERT_EQ(reports, 1) << watched.err;
  EXPECT_EQ(trainscope_dump(text), expected);

  // The summary names the module, as the seed's workflow asks ("now you know where the error occurs").
  const testing::ProcessResult summary = testing::run_process({TS_TOOL, "report", run_dir(dir)});
  EXPECT_NE(summary.out.find("first inf/nan: batch 2"), std::string::npos) << summary.out;
  const std::string module = model() == "t5" ? "encoder.block.1.layer.1.DenseReluDense.wo Linear output"
                                             : "transformer.ln_f LayerNorm output";  // its variance overflows
  EXPECT_NE(summary.out.find(module), std::string::npos) << summary.out;
  EXPECT_EQ(summary.out.find("called NCCL but made no communicator"), std::string::npos)
      << "module frames are not NCCL calls: " << summary.out;
}

TEST_P(ModuleFrames, ARegexKeepsTheFramesOfMatchingModulesAndTheBatchesOfTheRoot) {
  testing::TempDir dir;
  testing::ProcessOptions options = torch_options(dir);
  // The module where the first inf/nan appears is matched (GPT-2's: its final layer norm), and others.
  const std::vector<std::string> words =
      model() == "t5" ? std::vector<std::string>{"DenseReluDense"} : std::vector<std::string>{"mlp", "ln_f"};
  const std::string pattern = model() == "t5" ? "DenseReluDense" : "mlp|ln_f";
  options.env["TRAINSCOPE_WATCH"] = "modules:" + pattern;
  const testing::ProcessResult watched = testing::run_process(job({"--model", model()}), options);
  ASSERT_EQ(watched.exit_code, 0) << watched.out << watched.err;
  const std::string text = report(dir, "nonfinite-");
  ASSERT_NE(text.find("Detected inf/nan during batch_number=2\n"), std::string::npos) << text << watched.err;
  int headers = 0;
  for (const std::string& line : testing::split_lines(text)) {
    if (line.rfind("                  ", 0) != 0 || line.find("***") != std::string::npos) continue;
    ++headers;
    bool matched = false;
    for (const std::string& word : words) matched = matched || line.find(word) != std::string::npos;
    EXPECT_TRUE(matched) << "a frame of a module the regex does not match: " << line;
  }
  EXPECT_GT(headers, 0) << text;
}

// The text of the run's trace (TRAINSCOPE_TRACE_BATCHES): its twin is a .jsonl stream, not the .json report() expects.
std::string trace_text(const testing::TempDir& dir) {
  std::string trace;
  for (const auto& entry : std::filesystem::directory_iterator(run_dir(dir)))
    if (entry.path().filename().string().rfind("trace-", 0) == 0 && entry.path().extension() == ".txt")
      trace = testing::read_file(entry.path());
  return trace;
}

// The non-blank lines of `text` from the first line holding `from` to the line before the first holding `to` ("":
// to the end).
std::vector<std::string> lines_between(const std::string& text, const std::string& from, const std::string& to) {
  std::vector<std::string> out;
  bool in = false;
  for (const std::string& line : testing::split_lines(text)) {
    if (!in && line.find(from) != std::string::npos) in = true;
    if (in && !to.empty() && line.find(to) != std::string::npos) break;
    if (in && !line.empty()) out.push_back(line);
  }
  return out;
}

TEST_P(ModuleFrames, ATracedBatchShowsDuosTraceFrames) {
  // No overflow: DUO's trace replaces its deque by a list, so a later dump of DUO's is not a window of 21 frames.
  testing::ProcessOptions plain = plain_python_options();
  plain.env["OMP_NUM_THREADS"] = "1";
  plain.timeout_seconds = 240;
  const testing::ProcessResult duo =
      testing::run_process(job({"--model", model(), "--duo", "--trace-batches", "1", "--overflow-batch", "99"}), plain);
  ASSERT_EQ(duo.exit_code, 0) << duo.out << duo.err;
  const std::vector<std::string> expected = lines_between(duo.out, "*** Starting batch number=1 ***", "job: step 1");
  ASSERT_GT(expected.size(), 10u) << duo.out;

  testing::TempDir dir;
  testing::ProcessOptions options = torch_options(dir);
  options.env["TRAINSCOPE_TRACE_BATCHES"] = "1";
  const testing::ProcessResult watched =
      testing::run_process(job({"--model", model(), "--overflow-batch", "99"}), options);
  ASSERT_EQ(watched.exit_code, 0) << watched.out << watched.err;
  // The same lines (trainscope's trace starts its batch with one blank line where DUO prints two).
  const std::string trace = trace_text(dir);
  EXPECT_EQ(lines_between(trace, "*** Starting batch number=1 ***", ""), expected);
}

TEST_P(ModuleFrames, AbortAfterBatchStopsTheRankAtTheFirstModuleOfTheNextBatch) {
  testing::TempDir dir;
  testing::ProcessOptions options = torch_options(dir);
  options.env["TRAINSCOPE_ABORT_AFTER_BATCH"] = "1";
  const testing::ProcessResult watched =
      testing::run_process(job({"--model", model(), "--overflow-batch", "99"}), options);
  // Batch 1 runs whole (its backward and optimizer step: "job: step 1" is printed), batch 2 never starts.
  EXPECT_EQ(watched.exit_code, 87) << watched.out << watched.err;
  EXPECT_NE(watched.out.find("job: step 1 "), std::string::npos) << watched.out;
  EXPECT_EQ(watched.out.find("job: step 2 "), std::string::npos) << watched.out;
  EXPECT_NE(report(dir, "stop-").find("stopping after batch_number=1 (TRAINSCOPE_ABORT_AFTER_BATCH)"),
            std::string::npos);
}

// The job's digest lines ("job: digest <step> <sha>"): its weights and gradients after each step, bit for bit.
std::vector<std::string> digests(const std::string& out) {
  std::vector<std::string> lines;
  for (const std::string& line : testing::split_lines(out))
    if (line.rfind("job: digest ", 0) == 0) lines.push_back(line);
  return lines;
}

TEST_P(ModuleFrames, BackwardFramesLeaveTheTrainingBitwiseUnchanged) {
  testing::ProcessOptions plain = plain_python_options();
  plain.env["OMP_NUM_THREADS"] = "1";
  plain.timeout_seconds = 240;
  const std::vector<std::string> args = {"--model", model(), "--overflow-batch", "99", "--digest"};
  const testing::ProcessResult unwatched = testing::run_process(job(args), plain);
  ASSERT_EQ(unwatched.exit_code, 0) << unwatched.out << unwatched.err;
  ASSERT_EQ(digests(unwatched.out).size(), 4u) << unwatched.out;

  testing::TempDir dir;
  testing::ProcessOptions options = backward_torch_options(dir);
  options.env["TRAINSCOPE_TRACE_BATCHES"] = "1";
  const testing::ProcessResult watched = testing::run_process(job(args), options);
  ASSERT_EQ(watched.exit_code, 0) << watched.out << watched.err;
  EXPECT_EQ(digests(watched.out), digests(unwatched.out));
  EXPECT_EQ(watched.err.find("module frames:"), std::string::npos) << "the hooks stood down: " << watched.err;
  // The traced batch holds the modules' gradients, named like their forwards.
  const std::string trace = trace_text(dir);
  const std::string layer =
      model() == "t5" ? "encoder.block.1.layer.1.DenseReluDense.wo Linear" : "transformer.h.1.mlp.c_proj Conv1D";
  EXPECT_NE(trace.find("                  " + layer + " (backward)\n"), std::string::npos) << trace;
  EXPECT_NE(trace.find(" grad_output\n"), std::string::npos);
  EXPECT_NE(trace.find(" grad_input[0]\n"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Models, ModuleFrames,
                         ::testing::Combine(::testing::Range(kFirstTorchPythonMinor, kLastTorchPythonMinor + 1),
                                            ::testing::Values("t5", "gpt2")),
                         [](const ::testing::TestParamInfo<std::tuple<int, std::string>>& param_info) {
                           return python_name(std::get<0>(param_info.param)) + "_" + std::get<1>(param_info.param);
                         });

// ---- Half precision: GPT-2 in float16 whose activations overflow (what tests/gpu runs on CUDA) -------------------

// The parameter is the minor version of CPython.
class ModuleFramesInFloat16 : public ::testing::TestWithParam<int>, protected TorchTest {
 protected:
  void SetUp() override {
    if (!set_up(GetParam())) GTEST_SKIP() << why_not_;
  }
  std::vector<std::string> job(const std::vector<std::string>& args) const {
    // The first MLP's weight times 3e5 stays finite in float16 (2.6e4); its output does not.
    std::vector<std::string> argv = {
        python_,    python_job("module_overflow_job.py"), "--model", "gpt2", "--dtype", "float16",
        "--weight", "transformer.h.1.mlp.c_fc.weight",    "--scale", "3e5"};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }
};

TEST_P(ModuleFramesInFloat16, TheDumpEqualsDebugUnderflowOverflowsAndEndsAtTheModuleThatOverflowed) {
  testing::ProcessOptions plain = plain_python_options();
  plain.env["OMP_NUM_THREADS"] = "1";
  plain.timeout_seconds = 240;
  const testing::ProcessResult duo = testing::run_process(job({"--duo"}), plain);
  ASSERT_EQ(duo.exit_code, 0) << duo.out << duo.err;
  const std::string expected = duo_dump(duo.out);
  ASSERT_NE(expected.find("Detected inf/nan during batch_number=2\nLast 21 forward frames:\n"), std::string::npos)
      << duo.out;
  ASSERT_NE(expected.find("                  transformer.h.1.mlp.c_fc Conv1D\n6.80e-01 2.60e+04 weight\n"),
            std::string::npos)
      << "the weight stays finite in float16: " << expected;
  const size_t last_frame = expected.rfind("                  ");
  EXPECT_EQ(expected.substr(last_frame, expected.find('\n', last_frame) - last_frame),
            "                  transformer.h.1.mlp.c_fc Conv1D");
  EXPECT_NE(expected.find("      inf output\n", last_frame), std::string::npos) << expected;

  testing::TempDir dir;
  const testing::ProcessResult watched = testing::run_process(job({}), torch_options(dir));
  ASSERT_EQ(watched.exit_code, 0) << watched.out << watched.err;
  int reports = 0;
  const std::string text = report(dir, "nonfinite-", &reports);
  ASSERT_EQ(reports, 1) << watched.err;
  EXPECT_EQ(trainscope_dump(text), expected);
}

INSTANTIATE_TEST_SUITE_P(Python, ModuleFramesInFloat16,
                         ::testing::Range(kFirstTorchPythonMinor, kLastTorchPythonMinor + 1),
                         [](const ::testing::TestParamInfo<int>& param_info) { return python_name(param_info.param); });

// ---- Activation checkpointing: the model's blocks run their forward again, alone, during the backward ------------

// The parameter is the minor version of CPython; the model is GPT-2, whose blocks transformers checkpoints.
class ModuleCheckpointing : public ::testing::TestWithParam<int>, protected TorchTest {
 protected:
  void SetUp() override {
    if (!set_up(GetParam())) GTEST_SKIP() << why_not_;
  }
  std::vector<std::string> job(const std::string& mode, const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {
        python_, python_job("module_overflow_job.py"), "--model", "gpt2", "--checkpointing", mode};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }
};

// The headers of a trace or dump: the module names, as "name Class".
std::vector<std::string> frame_headers(const std::vector<std::string>& lines) {
  std::vector<std::string> headers;
  for (const std::string& line : lines)
    if (line.rfind("                  ", 0) == 0 && line.find("***") == std::string::npos)
      headers.push_back(line.substr(18));
  return headers;
}

TEST_P(ModuleCheckpointing, TheRecomputedBlocksKeepTheirNamesInTheModelAndEndNoBatch) {
  // Reentrant: the recomputed forwards are whole, as DUO sees them: the traced batch (batch 0's backward, with its
  // recomputed blocks, then batch 1's forward) equals DUO's line for line.
  testing::ProcessOptions plain = plain_python_options();
  plain.env["OMP_NUM_THREADS"] = "1";
  plain.timeout_seconds = 240;
  const testing::ProcessResult duo =
      testing::run_process(job("reentrant", {"--duo", "--trace-batches", "1", "--overflow-batch", "99"}), plain);
  ASSERT_EQ(duo.exit_code, 0) << duo.out << duo.err;
  std::vector<std::string> expected;
  for (const std::string& line : lines_between(duo.out, "*** Starting batch number=1 ***", "job: step 1"))
    if (line.rfind("job: ", 0) != 0) expected.push_back(line);  // the job's own "step 0" line, printed meanwhile
  const std::vector<std::string> expected_headers = frame_headers(expected);
  ASSERT_NE(std::find(expected_headers.begin(), expected_headers.end(), "transformer.h.1.mlp.c_proj Conv1D"),
            expected_headers.end());

  for (const std::string mode : {"reentrant", "non-reentrant"}) {
    SCOPED_TRACE(mode);
    testing::TempDir dir;
    testing::ProcessOptions options = torch_options(dir);
    options.env["TRAINSCOPE_TRACE_BATCHES"] = "1";
    const testing::ProcessResult watched = testing::run_process(job(mode, {"--overflow-batch", "99"}), options);
    ASSERT_EQ(watched.exit_code, 0) << watched.out << watched.err;
    const std::string trace = trace_text(dir);
    const std::vector<std::string> traced = lines_between(trace, "*** Starting batch number=1 ***", "");
    if (mode == "reentrant") {
      EXPECT_EQ(traced, expected);
    }
    // Non-reentrant recomputation stops once it has what the backward needs (DUO's own autograd ops move that point,
    // so its frames are no reference there): every recomputed frame still has its name in the model.
    const std::vector<std::string> headers = frame_headers(traced);
    EXPECT_GT(headers.size(), 40u) << trace;
    for (const std::string& header : headers)
      EXPECT_TRUE(header.rfind("transformer", 0) == 0 || header.rfind("lm_head ", 0) == 0 ||
                  header == " GPT2LMHeadModel")
          << "a frame named outside the model: " << header;
  }

  // The batches are the model's: an inf made before batch 2 is in batch 2, as without checkpointing.
  testing::TempDir dir;
  const testing::ProcessResult watched = testing::run_process(job("reentrant", {}), torch_options(dir));
  ASSERT_EQ(watched.exit_code, 0) << watched.out << watched.err;
  EXPECT_NE(report(dir, "nonfinite-").find("Detected inf/nan during batch_number=2\n"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Python, ModuleCheckpointing,
                         ::testing::Range(kFirstTorchPythonMinor, kLastTorchPythonMinor + 1),
                         [](const ::testing::TestParamInfo<int>& param_info) { return python_name(param_info.param); });

// The job was told once, at its first compilation, that what torch.compile compiles (`what`) runs without frames.
void expect_told_once_what_compiles(const testing::ProcessResult& job, const std::string& what) {
  const size_t first = job.err.find("[trainscope] warn: module frames: torch.compile compiles " + what);
  EXPECT_NE(first, std::string::npos) << job.err;
  EXPECT_EQ(job.err.find("torch.compile compiles", job.err.find("torch.compile compiles") + 1), std::string::npos)
      << "said once: " << job.err;
  EXPECT_NE(job.err.find("(TORCHDYNAMO_DISABLE=1 runs the job uncompiled, every module with its frame)"),
            std::string::npos)
      << job.err;
  EXPECT_EQ(job.err.find("failed"), std::string::npos) << job.err;
}

// ---- Backward frames (TRAINSCOPE_WATCH=modules,backward) on a small fp32 model ---------------------------------

// The parameter is the minor version of CPython.
class ModuleBackwardFrames : public ::testing::TestWithParam<int>, protected TorchTest {
 protected:
  void SetUp() override {
    if (!set_up(GetParam())) GTEST_SKIP() << why_not_;
  }
  std::vector<std::string> backward_job(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {python_, python_job("module_backward_job.py")};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }
  // A 2-rank job on gloo, started by torchrun as users start it.
  std::vector<std::string> torchrun_job(const char* script) const {
    return {python_, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", python_job(script)};
  }
  // `job` under `trainscope run`, which preloads the library into it, recording into run_dir(dir).
  static testing::ProcessResult under_trainscope_run(const testing::TempDir& dir, testing::ProcessOptions options,
                                                     const std::vector<std::string>& job) {
    options.env["LD_PRELOAD"] = std::nullopt;
    options.env["TRAINSCOPE_RUN_ID"] = std::nullopt;
    options.timeout_seconds = 300;
    return testing::run_process(
        with_args({TS_TOOL, "run", "--dir", dir.path() + "/runs", "--run-id", "job", "--library", TS_SHIM, "--"}, job),
        options);
  }
};

TEST_P(ModuleBackwardFrames, TheModuleWhoseBackwardOverflowsIsNamed) {
  testing::TempDir dir;
  const testing::ProcessResult watched = testing::run_process(backward_job({"--digest"}), backward_torch_options(dir));
  ASSERT_EQ(watched.exit_code, 0) << watched.out << watched.err;
  const std::string text = report(dir, "nonfinite-");
  ASSERT_NE(text.find("Detected inf/nan during batch_number=2\n"), std::string::npos) << text << watched.err;
  // The forward stayed finite: the first inf is what head.proj's backward passed back, and it is the dump's last frame.
  EXPECT_TRUE(
      text.ends_with("                  head.proj Linear (backward)\n"
                     "1.15e+18 1.15e+18 grad_output\n"
                     "     inf      inf grad_input[0]\n"))
      << text;
  // The loss module called beside the model ends no batch: batch 2 is the job's third step.
  const testing::ProcessResult summary = testing::run_process({TS_TOOL, "report", run_dir(dir)});
  EXPECT_NE(summary.out.find("first inf/nan: batch 2"), std::string::npos) << summary.out;
  EXPECT_NE(summary.out.find("head.proj Linear (backward) grad_input[0]"), std::string::npos) << summary.out;
  EXPECT_EQ(summary.out.find("skipped steps"), std::string::npos) << summary.out;

  // The same job unwatched: the same weights and gradients at every step (its ReLU(inplace=True) included, which
  // PyTorch's own full backward hooks refuse).
  testing::ProcessOptions plain = plain_python_options();
  plain.env["OMP_NUM_THREADS"] = "1";
  const testing::ProcessResult unwatched = testing::run_process(backward_job({"--digest"}), plain);
  ASSERT_EQ(unwatched.exit_code, 0) << unwatched.out << unwatched.err;
  EXPECT_EQ(watched.out, unwatched.out);
}

TEST_P(ModuleBackwardFrames, AStepTheGradScalerSkippedIsToldNotCalledBroken) {
  testing::TempDir dir;
  const testing::ProcessResult watched =
      testing::run_process(backward_job({"--grad-scaler", "--digest"}), backward_torch_options(dir));
  ASSERT_EQ(watched.exit_code, 0) << watched.out << watched.err;
  EXPECT_NE(report(dir, "step-skipped-").find("the loss scaler skipped the optimizer step of batch 2"),
            std::string::npos);
  const testing::ProcessResult summary = testing::run_process({TS_TOOL, "report", run_dir(dir)});
  EXPECT_NE(summary.out.find("first inf/nan: batch 2"), std::string::npos) << summary.out;
  EXPECT_NE(summary.out.find("the loss scaler skipped that batch's optimizer step"), std::string::npos) << summary.out;
  // A one-process job without a launcher: no rank, so its process is named by its pid, in the files too.
  EXPECT_NE(summary.out.find("skipped steps: pid "), std::string::npos) << summary.out;
  EXPECT_NE(summary.out.find(", batch 2 (the loss scaler found inf/nan in the gradients"), std::string::npos)
      << summary.out;
  EXPECT_NE(summary.out.find("inf/nan origin: one process in this run: its first inf/nan is the origin\n"),
            std::string::npos)
      << summary.out;
  const std::string summary_lines = summary.out.substr(0, summary.out.find("\n\n"));  // the process sections follow
  EXPECT_EQ(summary_lines.find("rank ?"), std::string::npos) << summary.out;
  EXPECT_EQ(summary_lines.find("unknown rank"), std::string::npos) << summary.out;
  bool named_by_pid = false;
  for (const auto& entry : std::filesystem::directory_iterator(run_dir(dir)))
    named_by_pid |= entry.path().filename().string().rfind("step-skipped-pid", 0) == 0;
  EXPECT_TRUE(named_by_pid);
  // GradScaler's own result: the same with and without trainscope.
  testing::ProcessOptions plain = plain_python_options();
  plain.env["OMP_NUM_THREADS"] = "1";
  const testing::ProcessResult unwatched = testing::run_process(backward_job({"--grad-scaler", "--digest"}), plain);
  ASSERT_EQ(unwatched.exit_code, 0) << unwatched.out << unwatched.err;
  EXPECT_EQ(watched.out, unwatched.out);
}

// A fused optimizer (SGD(fused=True)) takes GradScaler's found-inf and skips its update itself, never through
// GradScaler's own check: the skip is told from that found-inf, read at once on the CPU. A GPU's is read once its copy
// is back on the host, maybe batches later or at exit; a CPU found-inf not ready until a later look stands in for it
// here (--found-inf-read-late), and the skip must land in its own step's batch all the same.
TEST_P(ModuleBackwardFrames, AStepAFusedOptimizerSkippedIsToldInItsBatchEvenWhenReadLate) {
  struct Case {
    std::vector<std::string> args;
    std::string batch;
  };
  const std::vector<Case> cases = {
      {{"--grad-scaler", "--fused", "--digest"}, "batch 2"},
      {{"--grad-scaler", "--fused", "--steps", "6", "--found-inf-read-late", "2"}, "batch 2"},  // two batches later
      {{"--grad-scaler", "--fused", "--overflow-batch", "3", "--found-inf-read-late", "1"}, "batch 3"},  // at exit
  };
  std::string first_digests;
  for (const Case& c : cases) {
    std::string job_args;
    for (const std::string& arg : c.args) job_args += arg + " ";
    SCOPED_TRACE(job_args);
    testing::TempDir dir;
    const testing::ProcessResult watched = testing::run_process(backward_job(c.args), backward_torch_options(dir));
    ASSERT_EQ(watched.exit_code, 0) << watched.out << watched.err;
    if (first_digests.empty()) first_digests = watched.out;
    const std::string skipped = report(dir, "step-skipped-");
    EXPECT_NE(skipped.find("the loss scaler skipped the optimizer step of " + c.batch + " ("), std::string::npos)
        << skipped;
    EXPECT_EQ(std::count(skipped.begin(), skipped.end(), '\n'), 1) << skipped;
    const testing::ProcessResult summary = testing::run_process({TS_TOOL, "report", run_dir(dir)});
    EXPECT_NE(summary.out.find("first inf/nan: " + c.batch), std::string::npos) << summary.out;
    EXPECT_NE(summary.out.find("the loss scaler skipped that batch's optimizer step"), std::string::npos)
        << summary.out;
  }
  // The fused optimizer's own result: the same with and without trainscope.
  testing::ProcessOptions plain = plain_python_options();
  plain.env["OMP_NUM_THREADS"] = "1";
  const testing::ProcessResult unwatched = testing::run_process(backward_job(cases[0].args), plain);
  ASSERT_EQ(unwatched.exit_code, 0) << unwatched.out << unwatched.err;
  EXPECT_EQ(first_digests, unwatched.out);
}

// TRAINSCOPE_ON_NONFINITE=abort in a job with a loss scaler: the overflow the scaler skips does not stop it; an
// inf/nan the scaler applies a step over does, and so does an overflow the scaler never gets past.
TEST_P(ModuleBackwardFrames, UnderALossScalerAbortStopsOnlyWhereTheStepWasNotSkipped) {
  struct Case {
    std::vector<std::string> args;
    int exit_code;
    std::string stop;  // the stop report's message ("": no stop)
  };
  // The last two call their loss module (MSELoss) beside the model: its frame is of the batch in progress, so each
  // step is told in its own batch, never the next (the last one's skips in 1, 2, 3: only the streak stops it).
  const std::vector<Case> cases = {
      {{"--grad-scaler"}, 0, ""},
      {{"--grad-scaler", "--fused", "--steps", "6", "--found-inf-read-late", "2"}, 0, ""},  // told a batch late
      {{"--grad-scaler", "--no-overflow", "--inf-unused-batch", "2", "--steps", "5"},  // an inf the scaler never sees
       87,
       "trainscope: stopping: inf/nan detected during batch_number=2 in head.proj Linear input[0]; the loss scaler "
       "did not skip the optimizer step after it (TRAINSCOPE_ON_NONFINITE=abort)\n"},
      {{"--grad-scaler", "--no-overflow", "--nan-weight-batch", "1", "--steps", "8"},
       87,
       "trainscope: stopping: inf/nan detected during batch_number=3 in head.proj Linear weight; the loss scaler did "
       "not get past inf/nan in 3 batches in a row (TRAINSCOPE_ON_NONFINITE=abort)\n"},
  };
  for (const Case& c : cases) {
    std::string job_args;
    for (const std::string& arg : c.args) job_args += arg + " ";
    SCOPED_TRACE(job_args);
    testing::TempDir dir;
    testing::ProcessOptions options = backward_torch_options(dir);
    options.env["TRAINSCOPE_ON_NONFINITE"] = "abort";
    options.env["TRAINSCOPE_OVERFLOW_STREAK"] = "3";
    const testing::ProcessResult watched = testing::run_process(backward_job(c.args), options);
    EXPECT_EQ(watched.exit_code, c.exit_code) << watched.out << watched.err;
    EXPECT_NE(report(dir, "nonfinite-").find("Detected inf/nan during batch_number="), std::string::npos);
    if (c.stop.empty()) {
      EXPECT_NE(watched.out.find("done"), std::string::npos) << watched.out << watched.err;
      EXPECT_NE(report(dir, "step-skipped-").find("the loss scaler skipped the optimizer step of batch 2 ("),
                std::string::npos);
      int stops = 0;
      report(dir, "stop-", &stops);
      EXPECT_EQ(stops, 0);
    } else {
      EXPECT_EQ(report(dir, "stop-"), c.stop);
    }
  }
}

TEST_P(ModuleBackwardFrames, WithoutBackwardTheForwardSeesTheInfOnlyAStepLater) {
  testing::TempDir dir;
  testing::ProcessOptions options = torch_options(dir);  // modules only
  const testing::ProcessResult watched = testing::run_process(backward_job({}), options);
  ASSERT_EQ(watched.exit_code, 0) << watched.out << watched.err;
  // The inf gradients of batch 2 were applied: batch 3's first module reads nan weights.
  const std::string text = report(dir, "nonfinite-");
  EXPECT_NE(text.find("Detected inf/nan during batch_number=3\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("(backward)"), std::string::npos) << text;
}

TEST_P(ModuleBackwardFrames, ATorchCompiledModelRunsAsWithoutTrainscopeAndIsToldOnce) {
  testing::TempDir dir;
  // Warnings as errors: nothing of ours may warn through Python's warnings (torch warns of global hooks).
  const std::vector<std::string> argv = {python_, "-W", "error::UserWarning", python_job("module_compile_job.py")};
  // The watched run first, with an empty inductor cache: it compiles everything under trainscope. The plain run then
  // loads what that run compiled (a third of the time of compiling it again), so its digest is also a check that
  // what was compiled under trainscope computes what torch computes.
  const std::string inductor_cache = dir.path() + "/inductor";
  testing::ProcessOptions options = backward_torch_options(dir);
  options.env["TORCHINDUCTOR_CACHE_DIR"] = inductor_cache;
  options.env["TRAINSCOPE_TRACE_BATCHES"] = "1";
  options.timeout_seconds = 300;
  const testing::ProcessResult watched = testing::run_process(argv, options);
  ASSERT_EQ(watched.exit_code, 0) << watched.out << watched.err;

  testing::ProcessOptions plain = plain_python_options();
  plain.env["OMP_NUM_THREADS"] = "1";
  plain.env["TORCHINDUCTOR_CACHE_DIR"] = inductor_cache;
  plain.timeout_seconds = 300;
  const testing::ProcessResult unwatched = testing::run_process(argv, plain);
  ASSERT_EQ(unwatched.exit_code, 0) << unwatched.out << unwatched.err;
  ASSERT_NE(unwatched.out.find("job: digest "), std::string::npos) << unwatched.out;
  EXPECT_EQ(watched.out, unwatched.out);
  expect_told_once_what_compiles(watched, "Sequential's forward");
  // torch.compile(model)'s wrapper runs eagerly: its frame is the model's forward as a whole, named by the model's
  // class and marked compiled.
  const std::string trace = trace_text(dir);
  EXPECT_NE(trace.find("\n                   Sequential (compiled)\n"), std::string::npos) << trace;
  EXPECT_EQ(trace.find("OptimizedModule"), std::string::npos) << trace;
}

// model.compile() and a compiled function that calls the model run nothing of ours eagerly; the job is told at the
// first compilation, naming what was compiled. With TORCHDYNAMO_DISABLE=1 (what the warning says) every module has
// its frame, named as the model names it, and nothing is said. The eager backend: what dynamo traces is the same as
// for inductor, without inductor's compile time.
TEST_P(ModuleBackwardFrames, EveryWayOfCompilingIsToldAndTorchdynamoDisableGivesEveryFrame) {
  std::vector<std::string> digests;
  for (const auto& [way, what] : {std::pair<std::string, std::string>{"inplace", "Sequential's forward"},
                                  {"function", "compute_loss (module_compile_job.py:"}}) {
    SCOPED_TRACE(way);
    testing::TempDir dir;
    const testing::ProcessResult watched = testing::run_process(
        {python_, "-W", "error::UserWarning", python_job("module_compile_job.py"), "--way", way, "--backend", "eager"},
        backward_torch_options(dir));
    ASSERT_EQ(watched.exit_code, 0) << watched.out << watched.err;
    digests.push_back(watched.out);
    expect_told_once_what_compiles(watched, what);
  }
  testing::TempDir dir;
  testing::ProcessOptions options = backward_torch_options(dir);
  options.env["TORCHDYNAMO_DISABLE"] = "1";
  options.env["TRAINSCOPE_TRACE_BATCHES"] = "1";
  const testing::ProcessResult uncompiled = testing::run_process(
      {python_, "-W", "error::UserWarning", python_job("module_compile_job.py"), "--way", "inplace"}, options);
  ASSERT_EQ(uncompiled.exit_code, 0) << uncompiled.out << uncompiled.err;
  EXPECT_EQ(uncompiled.err.find("torch.compile"), std::string::npos) << uncompiled.err;
  // What was compiled (by the eager backend) trained as the uncompiled model did.
  ASSERT_NE(uncompiled.out.find("job: digest "), std::string::npos) << uncompiled.out;
  EXPECT_EQ(digests, std::vector<std::string>(2, uncompiled.out));
  const std::string trace = trace_text(dir);
  EXPECT_NE(trace.find("                  *** Starting batch number=1 ***\n"
                       "abs min  abs max  metadata\n"
                       "                  0 Linear\n"),
            std::string::npos)
      << trace;
  EXPECT_NE(trace.find("\n                   Sequential\n"), std::string::npos) << trace;
  EXPECT_NE(trace.find("\n                  2 Linear (backward)\n"), std::string::npos) << trace;
}

// A DataLoader with worker processes, forked (with the engine) or spawned (new interpreters that import torch, and so
// our hooks): the job prints and ends as without trainscope; the workers neither fail nor hold the job up.
// (forkserver's workers are spawned interpreters too.)
TEST_P(ModuleBackwardFrames, ADataLoaderWithWorkerProcessesRunsAsWithoutTrainscope) {
  for (const char* start : {"fork", "spawn"}) {
    SCOPED_TRACE(start);
    const std::vector<std::string> argv = {python_, python_job("module_dataloader_job.py"), "--start", start};
    testing::ProcessOptions plain = plain_python_options();
    plain.env["OMP_NUM_THREADS"] = "1";
    plain.timeout_seconds = 120;
    const testing::ProcessResult unwatched = testing::run_process(argv, plain);
    ASSERT_EQ(unwatched.exit_code, 0) << unwatched.out << unwatched.err;
    ASSERT_NE(unwatched.out.find("job: done\n"), std::string::npos) << unwatched.out;

    testing::TempDir dir;
    testing::ProcessOptions options = backward_torch_options(dir);
    options.timeout_seconds = 120;
    const testing::ProcessResult watched = testing::run_process(argv, options);
    EXPECT_FALSE(watched.timed_out);
    EXPECT_EQ(watched.exit_code, 0) << watched.err;
    EXPECT_EQ(watched.out, unwatched.out);
    EXPECT_EQ(watched.err.find("Traceback"), std::string::npos) << watched.err;
    EXPECT_EQ(watched.err.find("module frames:"), std::string::npos) << "the hooks stood down: " << watched.err;
    const testing::ProcessResult summary = testing::run_process({TS_TOOL, "report", run_dir(dir)});
    EXPECT_NE(summary.out.find("nothing went wrong"), std::string::npos) << summary.out;
  }
}

// ---- A 2-rank DDP job (gloo) under trainscope run ----------------------------------------------------------------

TEST_P(ModuleBackwardFrames, InADdpJobTheOriginNamesTheRankAndTheModuleThatMadeTheInf) {
  testing::TempDir dir;
  const testing::ProcessResult run = under_trainscope_run(dir, torch_options(dir), torchrun_job("module_ddp_job.py"));
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  // Rank 1's module made the inf in batch 2; rank 0 saw it only in batch 3, through the gradients' all-reduce.
  const std::string origin = testing::read_file(run_dir(dir) + "/origin.txt");
  EXPECT_EQ(origin,
            "rank 1 first saw inf in the output of module module.encoder.1.fc Linear (module frame #24) in batch 2\n"
            "rank 0 first saw nan in the output of module module.encoder.0.fc Linear (module frame #31) in batch 3, "
            "after rank 1\n")
      << run.err;
  EXPECT_NE(run.err.find("\n  first inf/nan: batch 2 on rank 1, batch 3 on rank 0\n"), std::string::npos) << run.err;
  // gloo on the CPU: libnccl was loaded (torch links it), the driver never was; not suspected of a static NCCL.
  EXPECT_NE(run.err.find("  NCCL calls: 3 processes loaded libnccl but never the CUDA driver, so ran no NCCL"),
            std::string::npos)
      << run.err;
  EXPECT_EQ(run.err.find("linked statically"), std::string::npos) << run.err;
  EXPECT_NE(testing::read_file(run_dir(dir) + "/nonfinite-rank0.txt").find("Detected inf/nan during batch_number=3\n"),
            std::string::npos);
  EXPECT_NE(testing::read_file(run_dir(dir) + "/nonfinite-rank1.txt").find("Detected inf/nan during batch_number=2\n"),
            std::string::npos);
}

// ---- A 2-rank FSDP2 job (fully_shard, gloo) under trainscope run ------------------------------------------------

// FSDP2 keeps every parameter as a DTensor shard between forwards and gathers a block's before its forward: the frames
// are named like the model with FSDP2's classes where it sharded (FSDPBlock), the parameter rows are the gathered
// parameters, the training is unchanged (losses and the shards' digests), and the origin names the rank whose input
// carried the inf.
TEST_P(ModuleBackwardFrames, AnFsdp2JobIsNamedLikeTheModelAndTrainsAsWithoutTrainscope) {
  testing::TempDir dir;
  const std::vector<std::string> job = torchrun_job("module_fsdp_job.py");
  testing::ProcessOptions plain = plain_python_options();
  plain.env["OMP_NUM_THREADS"] = "1";
  plain.timeout_seconds = 300;
  const testing::ProcessResult unwatched = testing::run_process(job, plain);
  ASSERT_EQ(unwatched.exit_code, 0) << unwatched.out << unwatched.err;
  ASSERT_NE(unwatched.out.find("rank 1 digest "), std::string::npos) << unwatched.out;

  const testing::ProcessResult run = under_trainscope_run(dir, backward_torch_options(dir), job);
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  // The ranks share torchrun's stdout, in no fixed order.
  EXPECT_EQ(sorted_lines(run.out), sorted_lines(unwatched.out)) << run.err;
  EXPECT_EQ(run.err.find("module frames:"), std::string::npos) << "the hooks stood down: " << run.err;

  // Rank 1's input carried the inf in batch 2 (its first frame, #37); its gradients' reduce-scatter put nan into rank
  // 0's parameter shards, which rank 0's first frame of batch 3 gathered.
  EXPECT_EQ(testing::read_file(run_dir(dir) + "/origin.txt"),
            "rank 1 first saw inf in the input of module encoder.0.fc Linear (module frame #37) in batch 2\n"
            "rank 0 first saw nan in the output of module encoder.0.fc Linear (module frame #55) in batch 3, "
            "after rank 1\n")
      << run.err;
  const std::string rank1 = testing::read_file(run_dir(dir) + "/nonfinite-rank1.txt");
  EXPECT_NE(rank1.find("Detected inf/nan during batch_number=2\n"), std::string::npos) << rank1;
  // DUO's headers: the qualified names from the model (the root, FSDPModel, has none), FSDP2's classes where it
  // sharded (FSDPBlock), the module's own class elsewhere.
  for (const char* header : {"\n                  encoder.0.fc Linear\n", "\n                  encoder.0 FSDPBlock\n",
                             "\n                  encoder Sequential\n", "\n                   FSDPModel\n",
                             "\n                  encoder.1.fc Linear (backward)\n"})
    EXPECT_NE(rank1.find(header), std::string::npos) << header << rank1;
  EXPECT_NE(testing::read_file(run_dir(dir) + "/nonfinite-rank0.txt").find("Detected inf/nan during batch_number=3\n"),
            std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Python, ModuleBackwardFrames,
                         ::testing::Range(kFirstTorchPythonMinor, kLastTorchPythonMinor + 1),
                         [](const ::testing::TestParamInfo<int>& param_info) { return python_name(param_info.param); });

// ---- DeepSpeed's loss scaling: its own overflow check skips the step, not GradScaler's --------------------------

// The lines of a DeepSpeed job's output that are its own ("step N digest ...", "done: ..."): DeepSpeed logs the rest.
std::string job_lines(const std::string& out) {
  std::string lines;
  for (const std::string& line : testing::split_lines(out))
    if (line.starts_with("step ") || line.starts_with("done: ")) lines += line + "\n";
  return lines;
}

// What rank 0 of a one-rank job whose loss scaler skipped the step of batch 2 writes.
void expect_the_skip_told(const testing::TempDir& dir) {
  EXPECT_EQ(report(dir, "step-skipped-"),
            "rank 0: the loss scaler skipped the optimizer step of batch 2 (its gradients held inf/nan, so the "
            "weights were not changed): expected with loss scaling, not a failure\n");
}

// A one-rank DeepSpeed job (module_deepspeed_job.py) on each CPython: the parameter is its minor version. DeepSpeed
// comes with torch from scripts/torch_env.sh; ZeRO 1 to 3 in fp16 and ZeRO with bf16's check_grad_overflow skip the
// step whose gradients hold inf/nan by their own check.
class ModuleDeepSpeed : public ::testing::TestWithParam<int>, protected TorchTest {
 protected:
  void SetUp() override {
    if (!set_up(GetParam())) GTEST_SKIP() << why_not_;
    if (!finds("deepspeed"))
      GTEST_SKIP() << "no DeepSpeed beside torch in " << python_ << " (scripts/torch_env.sh installs it)";
  }
  std::vector<std::string> job(const std::vector<std::string>& args) const {
    return with_args({python_, python_job("module_deepspeed_job.py")}, args);
  }
};

// ZeRO 1 in fp16: the scaled gradient's inf is named by its module, DeepSpeed's skip of that step is told, and the
// training is the same with and without trainscope.
TEST_P(ModuleDeepSpeed, ItsLossScalersSkipIsToldAndTheTrainingIsUnchanged) {
  testing::TempDir dir;
  const testing::ProcessResult watched =
      testing::run_process(job({"--zero", "1", "--digest"}), backward_torch_options(dir));
  ASSERT_EQ(watched.exit_code, 0) << watched.out << watched.err;
  EXPECT_NE(watched.out.find("done: 4 steps, 1 skipped"), std::string::npos) << watched.out;
  expect_the_skip_told(dir);
  const std::string text = report(dir, "nonfinite-");
  EXPECT_NE(text.find("Detected inf/nan during batch_number=2\n"), std::string::npos) << text;
  // The engine is the root: the model's modules are named under it, as DUO names them given the engine.
  EXPECT_TRUE(
      text.ends_with("                  module.head.proj Linear (backward)\n"
                     "4.10e+03 4.10e+03 grad_output\n"
                     "     inf      inf grad_input[0]\n"))
      << text;
  const testing::ProcessResult summary = testing::run_process({TS_TOOL, "report", run_dir(dir)});
  EXPECT_NE(summary.out.find("first inf/nan: batch 2 on rank 0; rank 0 saw it in module.head.proj Linear (backward) "
                             "grad_input[0]; the loss scaler skipped that batch's optimizer step"),
            std::string::npos)
      << summary.out;
  EXPECT_NE(summary.out.find("skipped steps: rank 0, batch 2 (the loss scaler found inf/nan"), std::string::npos)
      << summary.out;

  testing::ProcessOptions plain = plain_python_options();
  plain.env["OMP_NUM_THREADS"] = "1";
  const testing::ProcessResult unwatched = testing::run_process(job({"--zero", "1", "--digest"}), plain);
  ASSERT_EQ(unwatched.exit_code, 0) << unwatched.out << unwatched.err;
  EXPECT_NE(job_lines(watched.out).find("step 4 digest "), std::string::npos) << watched.out;
  EXPECT_EQ(job_lines(watched.out), job_lines(unwatched.out));
}

// TRAINSCOPE_ON_NONFINITE=abort: the overflow DeepSpeed's scaler skips does not stop the job, whichever optimizer of
// DeepSpeed's checks it (ZeRO 3 in fp16, ZeRO 2 in bf16 with check_grad_overflow).
TEST_P(ModuleDeepSpeed, UnderAbortItRunsThroughTheStepsItsLossScalerSkips) {
  const std::vector<std::vector<std::string>> cases = {{"--zero", "3"}, {"--zero", "2", "--bf16"}};
  for (const std::vector<std::string>& args : cases) {
    SCOPED_TRACE(args[1] + (args.size() > 2 ? " " + args[2] : ""));
    testing::TempDir dir;
    testing::ProcessOptions abort = backward_torch_options(dir);
    abort.env["TRAINSCOPE_ON_NONFINITE"] = "abort";
    const testing::ProcessResult run = testing::run_process(job(args), abort);
    EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
    EXPECT_NE(run.out.find("done: 4 steps, 1 skipped"), std::string::npos) << run.out;
    EXPECT_NE(report(dir, "nonfinite-").find("Detected inf/nan during batch_number=2\n"), std::string::npos);
    expect_the_skip_told(dir);
    int stops = 0;
    report(dir, "stop-", &stops);
    EXPECT_EQ(stops, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Python, ModuleDeepSpeed, ::testing::Range(kFirstTorchPythonMinor, kLastTorchPythonMinor + 1),
                         [](const ::testing::TestParamInfo<int>& param_info) { return python_name(param_info.param); });

// ---- Megatron's loss scaling: its optimizer's own overflow check skips the step ----------------------------------

// A one-rank job trained by Megatron Core's float16 optimizer (module_megatron_job.py), on .torch's CPython:
// scripts/torch_env.sh installs Megatron Core there only. The import hooks are DeepSpeed's, tested on every CPython.
class ModuleMegatron : public ::testing::Test, protected TorchTest {
 protected:
  void SetUp() override {
    if (!set_up(main_torch_minor())) GTEST_SKIP() << why_not_;
    if (!finds("megatron.core"))
      GTEST_SKIP() << "no Megatron Core beside torch in " << python_ << " (scripts/torch_env.sh installs it in .torch)";
  }
  std::vector<std::string> job(const std::vector<std::string>& args) const {
    return with_args({python_, python_job("module_megatron_job.py")}, args);
  }
};

// The scaled gradient's inf is named by its module, the step Megatron's optimizer skipped is told as skipped, and the
// training is the same with and without trainscope.
TEST_F(ModuleMegatron, ItsOptimizersSkipIsToldAndTheTrainingIsUnchanged) {
  testing::TempDir dir;
  const testing::ProcessResult watched = testing::run_process(job({"--digest"}), backward_torch_options(dir));
  ASSERT_EQ(watched.exit_code, 0) << watched.out << watched.err;
  EXPECT_NE(watched.out.find("done: 4 steps, 1 skipped"), std::string::npos) << watched.out;
  expect_the_skip_told(dir);
  const std::string text = report(dir, "nonfinite-");
  EXPECT_NE(text.find("Detected inf/nan during batch_number=2\n"), std::string::npos) << text;
  EXPECT_TRUE(
      text.ends_with("                  head.proj Linear (backward)\n"
                     "4.10e+03 4.10e+03 grad_output\n"
                     "     inf      inf grad_input[0]\n"))
      << text;

  testing::ProcessOptions plain = plain_python_options();
  plain.env["OMP_NUM_THREADS"] = "1";
  const testing::ProcessResult unwatched = testing::run_process(job({"--digest"}), plain);
  ASSERT_EQ(unwatched.exit_code, 0) << unwatched.out << unwatched.err;
  EXPECT_NE(job_lines(watched.out).find("step 4 digest "), std::string::npos) << watched.out;
  EXPECT_EQ(job_lines(watched.out), job_lines(unwatched.out));
}

// TRAINSCOPE_ON_NONFINITE=abort: a chain of two optimizers whose head optimizer finds the inf skips the whole step,
// and the job runs on. The body's found none: what is told is the chain's verdict, once per step, also where the
// chain's step() is called by a subclass's (LayerWiseDistributedOptimizer's).
TEST_F(ModuleMegatron, UnderAbortAChainOfOptimizersRunsThroughTheStepItSkips) {
  for (const char* chain : {"--chained", "--layer-wise"}) {
    SCOPED_TRACE(chain);
    testing::TempDir dir;
    testing::ProcessOptions abort = backward_torch_options(dir);
    abort.env["TRAINSCOPE_ON_NONFINITE"] = "abort";
    const testing::ProcessResult run = testing::run_process(job({chain}), abort);
    EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
    EXPECT_NE(run.out.find("done: 4 steps, 1 skipped"), std::string::npos) << run.out;
    EXPECT_NE(report(dir, "nonfinite-").find("Detected inf/nan during batch_number=2\n"), std::string::npos);
    expect_the_skip_told(dir);
    EXPECT_EQ(count(run.err, "the loss scaler skipped the optimizer step of batch 2"), 1u) << run.err;
    int stops = 0;
    report(dir, "stop-", &stops);
    EXPECT_EQ(stops, 0);
  }
}

// A name in kTorchTestsOnEveryPython that no longer names a torch test would quietly leave that test to one CPython.
TEST(TorchTestsOnEveryPython, NameTorchTestsOfThisFile) {
  const ::testing::UnitTest& tests = *::testing::UnitTest::GetInstance();
  for (const std::string_view wanted : kTorchTestsOnEveryPython) {
    bool found = false;
    for (int suite = 0; suite < tests.total_test_suite_count(); ++suite)
      for (int test = 0; test < tests.GetTestSuite(suite)->total_test_count(); ++test)
        found = found || without_parameter(tests.GetTestSuite(suite)->GetTestInfo(test)->name()) == wanted;
    EXPECT_TRUE(found) << wanted;
  }
}

// ---- The way in, on every CPython present (no torch needed) ---------------------------------------------------

class ModuleHooksInjection : public EveryPython {};

TEST_P(ModuleHooksInjection, TheJobsOwnSitecustomizeRunsAndAProcessWithoutTorchLoadsNothingOfOurs) {
  testing::TempDir dir;
  const std::string own = dir.path() + "/own";
  std::filesystem::create_directories(own);
  {
    std::FILE* file = std::fopen((own + "/sitecustomize.py").c_str(), "w");
    ASSERT_NE(file, nullptr);
    std::fputs("import os\nos.environ['JOB_SITECUSTOMIZE'] = 'ran'\n", file);
    std::fclose(file);
  }
  testing::ProcessOptions options = python_shim_options(dir);
  options.env["TRAINSCOPE_WATCH"] = "modules";
  options.env["PYTHONPATH"] = own;
  const testing::ProcessResult result =
      testing::run_process({python_.path, "-c",
                            "import os, sys, json\n"
                            "print(json.dumps({'job': os.environ.get('JOB_SITECUSTOMIZE'),\n"
                            "  'ours': sorted(m for m in sys.modules if 'trainscope' in m),\n"
                            "  'torch': 'torch' in sys.modules,\n"
                            "  'path': os.environ.get('PYTHONPATH', '').split(':')}))\n"},
                           options);
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  EXPECT_NE(result.out.find("\"job\": \"ran\""), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("\"ours\": []"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("\"torch\": false"), std::string::npos) << result.out;
  // Ours first, the job's own after it, unchanged.
  EXPECT_NE(result.out.find("trainscope-python\", \"" + own + "\"]"), std::string::npos) << result.out;
  EXPECT_EQ(result.err.find("Error in sitecustomize"), std::string::npos) << result.err;

  // Without modules in TRAINSCOPE_WATCH nothing is put on the path.
  options.env["TRAINSCOPE_WATCH"] = "collectives";
  const testing::ProcessResult plain =
      testing::run_process({python_.path, "-c", "import os; print(os.environ.get('PYTHONPATH'))"}, options);
  EXPECT_EQ(plain.out, own + "\n") << plain.err;
}

INSTANTIATE_TEST_SUITE_P(Versions, ModuleHooksInjection, TS_EVERY_PYTHON);

}  // namespace
}  // namespace trainscope
