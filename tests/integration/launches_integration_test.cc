// CUDA launches end to end: real processes under LD_PRELOAD on the CPU stand-ins of the CUDA driver, CUPTI
// (tests/fakes/cuda) and NCCL. The job (tests/programs/cuda_launches_program.cc) initialises CUDA, launches named
// kernels on two streams with NCCL calls between them, captures and launches a graph, and makes a synchronisation fail
// with 700 after a faulting kernel. What is checked: the recorder holds the launches in order with the NCCL calls
// (from the first cuInit on, through InitializeInjection), runtime launches once with the driver launch inside, kernel
// names interned once, the capture flag, the first error and its report, a watched kernel's frames,
// `trainscope report`'s last launches per stream, CUPTI held by another tool, TRAINSCOPE_LAUNCHES=off / calls, and the
// Python twin. Every wait is bounded (the process timeout).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "base/flight_record_format.h"
#include "base/flight_recorder_reader.h"
#include "integration_helpers.h"
#include "python_helpers.h"
#include "support/subprocess.h"
#include "support/text_files.h"

namespace trainscope {
namespace {

namespace fs = std::filesystem;
using recorder::Op;
using recorder::RecordedCall;
using recorder::RecorderFile;
using testing::ProcessOptions;
using testing::ProcessResult;
using testing::TempDir;

constexpr int32_t kIllegalAddress = 700;  // CUDA_ERROR_ILLEGAL_ADDRESS

ProcessResult run_job(const ProcessOptions& options, const std::vector<std::string>& args = {}) {
  std::vector<std::string> argv = {program("cuda_launches_program")};
  argv.insert(argv.end(), args.begin(), args.end());
  return testing::run_process(argv, options);
}

// The job's one flight recorder.
RecorderFile recorder_of(const TempDir& dir) {
  RecorderFile file;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir(dir), ec)) {
    if (entry.path().extension() != ".tsrec") continue;
    std::string error;
    EXPECT_TRUE(recorder::read_recorder_file(entry.path().string(), &file, &error)) << error;
    return file;
  }
  ADD_FAILURE() << "no flight recorder in " << run_dir(dir);
  return file;
}

std::string log_of(const TempDir& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir(dir), ec))
    if (entry.path().extension() == ".log") return testing::read_file(entry.path());
  return "";
}

std::vector<const RecordedCall*> with_op(const RecorderFile& file, Op op) {
  std::vector<const RecordedCall*> found;
  for (const RecordedCall& call : file.records)
    if (call.record.op == static_cast<uint16_t>(op)) found.push_back(&call);
  return found;
}

// A launch as a short string: "scale_kernel@A" (the kernel's name up to its parameters, the stream's letter).
std::string describe(const RecorderFile& file, const recorder::Record& r, uint64_t stream_a) {
  if (r.op == static_cast<uint16_t>(Op::kGraphLaunch))
    return std::string("graph@") + (r.stream == stream_a ? "A" : "B");
  std::string name = file.name(static_cast<uint32_t>(r.peer));
  name = name.substr(0, name.find('('));
  return name + "@" + (r.stream == stream_a ? "A" : "B");
}

// The launches and the calls around them, in ring order: "scale_kernel@A capturing", "ncclAllReduce",
// "error cuStreamSynchronize 700", "scale_kernel@A -> 700" (the launch's result when it failed).
std::vector<std::string> launch_sequence(const RecorderFile& file) {
  std::vector<std::string> sequence;
  uint64_t stream_a = 0;
  for (const RecordedCall& call : file.records) {
    const recorder::Record& r = call.record;
    const auto op = static_cast<Op>(r.op);
    if (op == Op::kKernelLaunch && stream_a == 0) stream_a = r.stream;
    if (op == Op::kKernelLaunch || op == Op::kGraphLaunch) {
      std::string entry = describe(file, r, stream_a);
      if ((r.flags & recorder::kFlagCapturing) != 0) entry += " capturing";
      if (r.result != 0) entry += " -> " + std::to_string(r.result);
      sequence.push_back(entry);
    } else if (op == Op::kAllReduce || op == Op::kCommInitRank) {
      sequence.push_back(recorder::op_name(op));
    } else if (op == Op::kCudaError) {
      sequence.push_back(std::string("error ") + file.name(static_cast<uint32_t>(r.peer)) + " " +
                         std::to_string(r.result));
    }
  }
  return sequence;
}

// cuda_launches_program's (and cuda_launches_job.py's) default scenario.
const std::vector<std::string> kExpectedSequence = {
    "scale_kernel@A",  // before any NCCL call: the driver's injection started the collector
    "ncclCommInitRank", "add_kernel@B",  "ncclAllReduce",  "scale_kernel@A capturing",      "graph@A",
    "add_kernel@B",     "ncclAllReduce", "fault_kernel@B", "error cuStreamSynchronize 700", "scale_kernel@A -> 700",
};

TEST(Launches, AreRecordedInOrderWithTheNcclCallsFromTheFirstCuInit) {
  TempDir dir;
  const ProcessResult result = run_job(cuda_job_options(dir));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_TRUE(testing::contains(result.out, "sync 700 launch 700")) << result.out;
  const RecorderFile file = recorder_of(dir);
  EXPECT_EQ(file.header.launch_mode, static_cast<uint32_t>(recorder::LaunchMode::kCompletions))
      << file.header.launch_note;

  EXPECT_EQ(launch_sequence(file), kExpectedSequence) << ::testing::PrintToString(launch_sequence(file));

  // Names: interned once per function although scale_kernel was launched four times.
  size_t scale_names = 0;
  for (const recorder::NameEntry& name : file.names)
    if (name.commit != 0 && testing::contains(name.text, "scale_kernel")) ++scale_names;
  EXPECT_EQ(scale_names, 1u);
  const auto launches = with_op(file, Op::kKernelLaunch);
  ASSERT_FALSE(launches.empty());
  const recorder::Record& first = launches.front()->record;
  EXPECT_STREQ(file.name(static_cast<uint32_t>(first.peer)), "scale_kernel(float*, float const*, int)");
  const recorder::Dim3 grid = recorder::unpack_grid(first.count);
  const recorder::Dim3 block = recorder::unpack_block(first.sendbuff);
  EXPECT_EQ(grid.x, 4u);
  EXPECT_EQ(block.x, 64u);
  EXPECT_EQ(launches[1]->record.recvbuff, 128u) << "add_kernel's dynamic shared memory";

  // The first error: one kCudaError record, 700, on stream B; the later failing launch is only counted.
  const RecordedCall* error = file.first_error();
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(error->record.result, kIllegalAddress);
  EXPECT_EQ(error->record.stream, launches[1]->record.stream) << "the failing synchronisation was of stream B";
  EXPECT_EQ(with_op(file, Op::kCudaError).size(), 1u);
  EXPECT_GE(file.header.cuda_errors, 2u);
}

TEST(Launches, RuntimeLaunchesAreRecordedOnceWithTheDriverLaunchInside) {
  TempDir dir;
  const ProcessResult result = run_job(cuda_job_options(dir), {"--runtime"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_TRUE(testing::contains(result.out, "sync 700 launch 700")) << result.out;
  const RecorderFile file = recorder_of(dir);
  std::vector<std::string> expected = kExpectedSequence;
  for (std::string& entry : expected)
    if (entry == "error cuStreamSynchronize 700") entry = "error cudaStreamSynchronize 700";  // the job's own call
  EXPECT_EQ(launch_sequence(file), expected) << ::testing::PrintToString(launch_sequence(file));
  const auto launches = with_op(file, Op::kKernelLaunch);
  ASSERT_EQ(launches.size(), 6u);
  for (const RecordedCall* launch : launches) {
    EXPECT_EQ(recorder::launch_domain(launch->record.redop), recorder::CudaDomain::kRuntime) << launch->index;
    EXPECT_NE(launch->record.caller, 0u) << "the CUfunction, from the driver launch inside";
  }
  // Kernel activity carries the runtime call's correlation id: the launches before the first sync finished.
  EXPECT_EQ(file.launch_progress(launches[0]->record).state, recorder::LaunchState::kFinished);
  EXPECT_EQ(file.launch_progress(launches[1]->record).state, recorder::LaunchState::kFinished);
}

TEST(Launches, AWatchedKernelThatWritesInfIsTheLastFrameOfTheNonfiniteReport) {
  TempDir dir;
  ProcessOptions options = cuda_job_options(dir);
  options.env["TRAINSCOPE_WATCH"] = "kernels:add_kernel|inf_kernel";
  options.env["TRAINSCOPE_STEP_MARKER"] = "every:1";
  const ProcessResult result = run_job(options, {"--train", "6", "3"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  int reports = 0;
  const std::string text = report(dir, "nonfinite-rank0", &reports);
  ASSERT_EQ(reports, 1) << log_of(dir);
  EXPECT_TRUE(testing::contains(text, "Detected inf/nan during batch_number=")) << text;
  // Seed format: the kernel's short name as the frame header, its buffers by parameter index.
  EXPECT_TRUE(testing::contains(text, "                  add_kernel kernel\n0.00e+00 0.00e+00 output[0]\n")) << text;
  const std::string last_frame = "                  inf_kernel kernel\n     inf      inf output[0]\n";
  ASSERT_GE(text.size(), last_frame.size());
  EXPECT_EQ(text.substr(text.size() - last_frame.size()), last_frame) << text;
  const RecorderFile file = recorder_of(dir);
  size_t watched = 0;
  for (const RecordedCall* launch : with_op(file, Op::kKernelLaunch))
    if ((launch->record.flags & recorder::kFlagWatched) != 0) ++watched;
  EXPECT_EQ(watched, 7u) << "six add_kernel launches and the inf_kernel one";
}

// The GPU check's story on the stand-ins: batches counted without a marker, from the fused optimizer kernel that ends
// each step (TRAINSCOPE_STEP_MARKER=auto), and the kernel that made the inf named with its batch.
TEST(Launches, OptimizerKernelsCountTheBatchesAndTheInfIsNamedWithItsBatch) {
  TempDir dir;
  ProcessOptions options = cuda_job_options(dir);
  options.env["TRAINSCOPE_WATCH"] = "kernels:add_kernel|inf_kernel";
  options.env["TRAINSCOPE_STEP_MARKER"] = "auto";
  const ProcessResult result = run_job(options, {"--train", "6", "3", "--optimizer"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  int reports = 0;
  const std::string text = report(dir, "nonfinite-rank0", &reports);
  ASSERT_EQ(reports, 1) << log_of(dir);
  EXPECT_TRUE(testing::contains(text, "Detected inf/nan during batch_number=3\n")) << text;
  EXPECT_TRUE(testing::contains(text, "                  inf_kernel kernel\n     inf      inf output[0]\n")) << text;
}

TEST(Launches, FirstCudaErrorHasAReportNamingTheCallAndTheKernelBeforeIt) {
  TempDir dir;
  const ProcessResult result = run_job(cuda_job_options(dir));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  int reports = 0;
  const std::string text = report(dir, "cuda-error-rank0", &reports);  // also checks the JSON twin
  ASSERT_EQ(reports, 1) << log_of(dir);
  EXPECT_TRUE(testing::contains(text, "cuStreamSynchronize")) << text;
  EXPECT_TRUE(testing::contains(text, "700")) << text;
  EXPECT_TRUE(testing::contains(text, "fault_kernel")) << text;
  EXPECT_TRUE(testing::contains(text, "add_kernel"))
      << "the launches on the stream since its last good synchronisation\n"
      << text;
}

TEST(Launches, ReportShowsTheLastLaunchesOfEachStream) {
  TempDir dir;
  const ProcessResult result = run_job(cuda_job_options(dir), {"--no-fault"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const ProcessResult shown = testing::run_process({TS_TOOL, "report", run_dir(dir)});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_TRUE(testing::contains(shown.out, "add_kernel")) << shown.out;
  EXPECT_TRUE(testing::contains(shown.out, "scale_kernel")) << shown.out;
  EXPECT_TRUE(testing::contains(shown.out, "ncclAllReduce")) << shown.out;
}

TEST(Launches, CuptiHeldByAnotherToolIsSaidOnceAndTheJobRunsOn) {
  TempDir dir;
  ProcessOptions options = cuda_job_options(dir);
  options.env["TRAINSCOPE_LOG_LEVEL"] = "info";
  const ProcessResult result = run_job(options, {"--profiler-first", "--no-fault"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const std::string said = result.err + log_of(dir);
  EXPECT_EQ(count(log_of(dir), "CUPTI is in use by another tool"), 1u) << said;
  const RecorderFile file = recorder_of(dir);
  EXPECT_EQ(file.header.launch_mode, static_cast<uint32_t>(recorder::LaunchMode::kUnavailable));
  EXPECT_TRUE(testing::contains(file.header.launch_note, "another tool")) << file.header.launch_note;
  EXPECT_TRUE(with_op(file, Op::kKernelLaunch).empty());
  EXPECT_EQ(with_op(file, Op::kAllReduce).size(), 2u) << "NCCL calls are recorded as usual";
}

TEST(Launches, OffRecordsNoLaunchAndCallsModeNoCompletion) {
  TempDir dir;
  ProcessOptions options = cuda_job_options(dir);
  options.env["TRAINSCOPE_LAUNCHES"] = "off";
  ProcessResult result = run_job(options, {"--no-fault"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  RecorderFile file = recorder_of(dir);
  EXPECT_EQ(file.header.launch_mode, static_cast<uint32_t>(recorder::LaunchMode::kNone));
  EXPECT_TRUE(with_op(file, Op::kKernelLaunch).empty());
  EXPECT_TRUE(with_op(file, Op::kStreamSync).empty());
  EXPECT_EQ(with_op(file, Op::kAllReduce).size(), 2u);

  TempDir calls_dir;
  options = cuda_job_options(calls_dir);
  options.env["TRAINSCOPE_LAUNCHES"] = "calls";
  result = run_job(options, {"--no-fault"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  file = recorder_of(calls_dir);
  EXPECT_EQ(file.header.launch_mode, static_cast<uint32_t>(recorder::LaunchMode::kCallbacks));
  EXPECT_EQ(with_op(file, Op::kKernelLaunch).size(), 4u);
}

TEST(Launches, AnInjectionLibraryOfTheJobKeepsItsPlaceAndLaunchesStartWithTheEngine) {
  TempDir dir;
  ProcessOptions options = cuda_job_options(dir);
  options.env["CUDA_INJECTION64_PATH"] = dir.path() + "/libanother_tool.so";  // the stand-in driver cannot load it
  const ProcessResult result = run_job(options, {"--no-fault"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(count(log_of(dir), "CUDA_INJECTION64_PATH is set to"), 1u) << log_of(dir);
  const RecorderFile file = recorder_of(dir);
  const auto launches = with_op(file, Op::kKernelLaunch);
  // The engine started at the communicator's creation (the driver already loaded): the launch before it is not seen.
  ASSERT_EQ(launches.size(), 3u);
  const auto init = with_op(file, Op::kCommInitRank);
  ASSERT_EQ(init.size(), 1u);
  EXPECT_GT(launches.front()->index, init.front()->index);
}

TEST(Launches, SyncedLaunchesAreFinishedAndTheSpinningOneIsNot) {
  TempDir dir;
  const ProcessResult result = run_job(cuda_job_options(dir), {"--no-fault", "--spin"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const RecorderFile file = recorder_of(dir);
  const auto launches = with_op(file, Op::kKernelLaunch);
  ASSERT_GE(launches.size(), 2u);
  // Both streams were synchronised after the first two launches.
  EXPECT_EQ(file.launch_progress(launches[0]->record).state, recorder::LaunchState::kFinished);
  EXPECT_EQ(file.launch_progress(launches[1]->record).state, recorder::LaunchState::kFinished);
  EXPECT_NE(file.launch_progress(launches.back()->record).state, recorder::LaunchState::kFinished)
      << "spin_kernel never finishes";
}

TEST(Launches, TrainscopeRunMakesTheLibraryTheDriversInjectionUnlessTheJobChoseOne) {
  TempDir dir;
  ProcessOptions options = cuda_job_options(dir);
  options.env["LD_PRELOAD"] =
      sanitized() ? std::optional<std::string>(TS_SANITIZER_RUNTIME) : std::optional<std::string>();
  options.env["TRAINSCOPE_RUN_ID"] = std::nullopt;
  options.env["TRAINSCOPE_COORDINATOR"] = std::nullopt;
  const std::vector<std::string> run = {TS_TOOL,     "run",
                                        "--dir",     dir.path() + "/runs",
                                        "--run-id",  "job",
                                        "--library", TS_SHIM,
                                        "--",        program("cuda_launches_program")};
  const ProcessResult result = testing::run_process(run, options);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(launch_sequence(recorder_of(dir)), kExpectedSequence);

  TempDir other_dir;
  options.env["CUDA_INJECTION64_PATH"] = other_dir.path() + "/libanother_tool.so";
  std::vector<std::string> other_run = run;
  other_run[3] = other_dir.path() + "/runs";
  const ProcessResult other = testing::run_process(other_run, options);
  ASSERT_EQ(other.exit_code, 0) << other.err;
  EXPECT_TRUE(
      testing::contains(other.err, "[trainscope][run] CUDA_INJECTION64_PATH is set (" + other_dir.path() +
                                       "/libanother_tool.so): CUDA launches are recorded from the first NCCL call on"))
      << other.err;
  EXPECT_EQ(launch_sequence(recorder_of(other_dir)).front(), "ncclCommInitRank");
}

// ---- the Python twin, on every CPython 3.9-3.13 found ----

class LaunchesFromPython : public EveryPython {
 protected:
  // A one-rank ctypes job on the stand-in driver, CUPTI and NCCL.
  static ProcessOptions job_options(const TempDir& dir) {
    ProcessOptions options = cuda_job_options(dir);
    clean_python_environment(&options);
    options.env["RANK"] = "0";
    options.env["WORLD_SIZE"] = "1";
    return options;
  }
};

TEST_P(LaunchesFromPython, CtypesJobIsRecordedAsTheCProgramIs) {
  TempDir dir;
  ProcessOptions options = job_options(dir);
  const ProcessResult result = testing::run_process({python_.path, python_job("cuda_launches_job.py")}, options);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, "sync 700 launch 700\ndone\n");
  const RecorderFile file = recorder_of(dir);
  EXPECT_EQ(launch_sequence(file), kExpectedSequence) << ::testing::PrintToString(launch_sequence(file));
  int reports = 0;
  const std::string text = report(dir, "cuda-error-rank0", &reports);
  EXPECT_EQ(reports, 1);
  EXPECT_TRUE(testing::contains(text, "fault_kernel")) << text;
}

// The optimizer story from Python (PyTorch's fused Adam is launched from a Python training loop): batches counted from
// the fused optimizer kernel under TRAINSCOPE_STEP_MARKER=auto, the inf named with its batch, as from C.
TEST_P(LaunchesFromPython, OptimizerKernelsCountTheBatchesAndTheInfIsNamedWithItsBatch) {
  TempDir dir;
  ProcessOptions options = job_options(dir);
  options.env["TRAINSCOPE_WATCH"] = "kernels:add_kernel|inf_kernel";
  options.env["TRAINSCOPE_STEP_MARKER"] = "auto";
  const ProcessResult result = testing::run_process(
      {python_.path, python_job("cuda_launches_job.py"), "--train", "6", "3", "--optimizer"}, options);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, "trained 6 steps\n");
  int reports = 0;
  const std::string text = report(dir, "nonfinite-rank0", &reports);
  ASSERT_EQ(reports, 1) << log_of(dir);
  EXPECT_TRUE(testing::contains(text, "Detected inf/nan during batch_number=3\n")) << text;
  EXPECT_TRUE(testing::contains(text, "                  inf_kernel kernel\n     inf      inf output[0]\n")) << text;
}

INSTANTIATE_TEST_SUITE_P(Versions, LaunchesFromPython, TS_EVERY_PYTHON);

}  // namespace
}  // namespace trainscope
