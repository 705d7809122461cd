#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "analysis/run_summary.h"
#include "base/flight_recorder_reader.h"
#include "reports/cuda_error_report.h"
#include "reports/cuda_launches.h"
#include "tests/support/launch_recorder.h"
#include "tests/support/subprocess.h"

namespace trainscope::reports {
namespace {

namespace fs = std::filesystem;
using testing::LaunchRecorder;

using testing::TempDir;

recorder::RecorderFile read_recorder(const std::string& path) {
  recorder::RecorderFile file;
  std::string error;
  EXPECT_TRUE(recorder::read_recorder_file(path, &file, &error)) << error;
  return file;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

constexpr uint64_t kStream = 0x7f3a5c001200;
constexpr uint64_t kOther = 0x7f3a5c009900;

TEST(CudaResults, NamesAndMessagesByDomain) {
  using recorder::CudaDomain;
  EXPECT_EQ(recorder::cuda_result_name(CudaDomain::kRuntime, 700), "cudaErrorIllegalAddress");
  EXPECT_EQ(recorder::cuda_result_name(CudaDomain::kDriver, 700), "CUDA_ERROR_ILLEGAL_ADDRESS");
  EXPECT_EQ(recorder::cuda_result_message(CudaDomain::kRuntime, 700), "an illegal memory access was encountered");
  EXPECT_EQ(recorder::cuda_result_name(CudaDomain::kRuntime, 719), "cudaErrorLaunchFailure");
  EXPECT_EQ(recorder::cuda_result_name(CudaDomain::kDriver, 719), "CUDA_ERROR_LAUNCH_FAILED");
  EXPECT_EQ(recorder::cuda_result_name(CudaDomain::kRuntime, 716), "cudaErrorMisalignedAddress");
  EXPECT_EQ(recorder::cuda_result_name(CudaDomain::kRuntime, 710), "cudaErrorAssert");
  EXPECT_EQ(recorder::cuda_result_name(CudaDomain::kRuntime, 2), "cudaErrorMemoryAllocation");
  EXPECT_EQ(recorder::cuda_result_name(CudaDomain::kDriver, 2), "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(recorder::cuda_result_name(CudaDomain::kRuntime, 1), "cudaErrorInvalidValue");
  EXPECT_EQ(recorder::cuda_result_name(CudaDomain::kRuntime, 0), "cudaSuccess");
  EXPECT_EQ(recorder::cuda_result_text(CudaDomain::kRuntime, 700),
            "700 cudaErrorIllegalAddress (an illegal memory access was encountered)");
  // A runtime-only code has no driver name; unknown codes and domains are said as numbers.
  EXPECT_EQ(recorder::cuda_result_name(CudaDomain::kDriver, 98), "error 98");
  EXPECT_EQ(recorder::cuda_result_name(CudaDomain::kRuntime, 12345), "error 12345");
  EXPECT_EQ(recorder::cuda_result_text(CudaDomain::kUnknown, 700), "error 700");
  EXPECT_EQ(recorder::cuda_result_message(CudaDomain::kRuntime, 12345), "");
}

TEST(CudaErrorReport, TheErrorAndTheLaunchesOnItsStreamSinceItsLastSync) {
  TempDir dir;
  const std::string path = dir.file("rank3.tsrec");
  {
    LaunchRecorder rec(path, 3);
    ASSERT_TRUE(rec.opened());
    rec.writer().set_launch_mode(recorder::LaunchMode::kCompletions, "");
    rec.launch("warmup", kStream, 10);
    rec.sync("cudaStreamSynchronize", kStream, 20);
    rec.launch("gemm", kStream, 30);
    rec.launch("elsewhere", kOther, 31);            // another stream: not listed
    rec.sync("cudaEventSynchronize", kStream, 32);  // an event: no stream's completion
    rec.sync("cudaStreamSynchronize", kOther, 33);  // another stream's sync: changes nothing here
    const uint64_t bad = rec.launch("void scatter<float>(float*, int const*)", kStream, 40);
    rec.completed(kStream, bad - 1, 35, 45);  // gemm finished; the bad one had not by 45
    rec.error("cudaStreamSynchronize", kStream, 50, 700);
    rec.error("cudaMemcpyAsync", kStream, 60, 700);  // counted only
  }
  const recorder::RecorderFile file = read_recorder(path);
  CudaErrorReport report;
  ASSERT_TRUE(build_cuda_error_report(file, &report));
  EXPECT_EQ(report.rank, 3);
  EXPECT_EQ(report.api, "cudaStreamSynchronize");
  EXPECT_EQ(report.result, 700);
  EXPECT_EQ(report.cuda_errors, 2u);
  EXPECT_FALSE(report.streamless);
  EXPECT_TRUE(report.has_sync);
  EXPECT_EQ(report.sync_api, "cudaStreamSynchronize");
  ASSERT_EQ(report.launches.size(), 2u);
  EXPECT_EQ(report.launches[0].kernel, "gemm");
  EXPECT_EQ(report.launches[0].progress.state, recorder::LaunchState::kFinished);
  EXPECT_EQ(report.launches[1].kernel, "void scatter<float>(float*, int const*)");
  EXPECT_EQ(report.launches[1].progress.state, recorder::LaunchState::kNotFinished);

  const std::string summary = cuda_error_summary(report);
  EXPECT_EQ(summary,
            "cudaStreamSynchronize returned 700 cudaErrorIllegalAddress (an illegal memory access was encountered) "
            "at 2025-12-01 12:00:00.050000 UTC, after kernel void scatter<float>(float*, int const*) on stream "
            "0x7f3a5c001200");
  const std::string text = format_cuda_error_text(report);
  EXPECT_NE(text.find("First CUDA error on rank 3 (pid 4003, host node-1): cudaStreamSynchronize returned 700 "
                      "cudaErrorIllegalAddress (an illegal memory access was encountered)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("Stream: 0x7f3a5c001200 (context 0000000000c0ffee)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("CUDA errors in this process: 2 (only the first is described"), std::string::npos) << text;
  EXPECT_NE(text.find("Launches: callbacks and kernel completion\n"), std::string::npos) << text;
  EXPECT_NE(text.find("Last successful synchronisation of the stream: cudaStreamSynchronize at 12:00:00.020"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("Launches on the stream since then (2):\n"), std::string::npos) << text;
  EXPECT_NE(text.find("not finished as of 12:00:00.045000"), std::string::npos) << text;
  EXPECT_NE(text.find("finished by 12:00:00.035000"), std::string::npos) << text;
  EXPECT_EQ(text.find("warmup"), std::string::npos) << "before the sync";
  EXPECT_EQ(text.find("elsewhere"), std::string::npos) << "another stream";
  EXPECT_NE(text.find("The error came after kernel void scatter<float>(float*, int const*) on stream 0x7f3a5c001200"),
            std::string::npos)
      << text;

  // The JSON says the same.
  const nlohmann::json j = cuda_error_json(report);
  EXPECT_EQ(j["kind"], "cuda_error");
  EXPECT_EQ(j["process"], 3);
  EXPECT_EQ(j["api"], "cudaStreamSynchronize");
  EXPECT_EQ(j["result"], 700);
  EXPECT_EQ(j["result_name"], "cudaErrorIllegalAddress");
  EXPECT_EQ(j["message"], "an illegal memory access was encountered");
  EXPECT_EQ(j["domain"], "runtime");
  EXPECT_EQ(j["stream"], kStream);
  EXPECT_EQ(j["cuda_errors"], 2);
  EXPECT_EQ(j["launch_mode"], "completions");
  EXPECT_EQ(j["since"]["api"], "cudaStreamSynchronize");
  ASSERT_EQ(j["launches"].size(), 2u);
  EXPECT_EQ(j["launches"][1]["kernel"], "void scatter<float>(float*, int const*)");
  EXPECT_EQ(j["launches"][1]["finished"], "not_finished");
  EXPECT_EQ(j["launches"][0]["finished"], "finished");
  EXPECT_EQ(j["launches"][1]["grid"], nlohmann::json::array({1024, 1, 1}));
  EXPECT_EQ(j["summary"], summary);
  EXPECT_EQ(cuda_error_base_name(report), "cuda-error-rank3");
}

TEST(CudaErrorReport, AStreamlessCallListsEveryStreamSinceTheContextSync) {
  TempDir dir;
  const std::string path = dir.file("r.tsrec");
  {
    LaunchRecorder rec(path, 0);
    rec.writer().set_launch_mode(recorder::LaunchMode::kCallbacks, "");
    rec.launch("before", kStream, 5);
    rec.sync("cudaDeviceSynchronize", 0, 10);
    rec.launch("a", kStream, 20);
    rec.launch("b", kOther, 21);
    rec.sync("cudaStreamSynchronize", kOther, 22);  // b is done: only `a` and `c` may be to blame
    rec.launch("c", kStream, 23);
    rec.error("cudaMalloc", 0, 30, 2);
  }
  CudaErrorReport report;
  ASSERT_TRUE(build_cuda_error_report(read_recorder(path), &report));
  EXPECT_TRUE(report.streamless);
  EXPECT_EQ(report.sync_api, "cudaDeviceSynchronize");
  ASSERT_EQ(report.launches.size(), 2u);
  EXPECT_EQ(report.launches[0].kernel, "a");
  EXPECT_EQ(report.launches[1].kernel, "c");
  EXPECT_EQ(report.launches[1].progress.state, recorder::LaunchState::kNotKnown) << "callbacks only";
  const std::string text = format_cuda_error_text(report);
  EXPECT_NE(text.find("cudaMalloc returned 2 cudaErrorMemoryAllocation (out of memory)"), std::string::npos) << text;
  EXPECT_NE(text.find("Stream: none"), std::string::npos) << text;
  EXPECT_NE(text.find("Launches on every stream since then (2):"), std::string::npos) << text;
  EXPECT_NE(text.find("Launches: callbacks only: kernel completion not tracked"), std::string::npos) << text;
  EXPECT_TRUE(cuda_error_json(report)["stream"].is_null());
}

TEST(CudaErrorReport, ALappedRingSaysItsHistoryIsCutAndCapsTheList) {
  TempDir dir;
  const std::string path = dir.file("r.tsrec");
  {
    LaunchRecorder rec(path, 1, 64);
    for (uint64_t i = 0; i < 100; ++i) rec.launch("k" + std::to_string(i % 8), kStream, 100 + i);
    rec.error("cudaStreamSynchronize", kStream, 300, 719, recorder::CudaDomain::kDriver);
  }
  CudaErrorReport report;
  ASSERT_TRUE(build_cuda_error_report(read_recorder(path), &report));
  EXPECT_FALSE(report.has_sync);
  EXPECT_TRUE(report.history_cut);
  EXPECT_EQ(report.launches.size(), kMaxLaunchesShown);
  EXPECT_EQ(report.launches_not_listed, 63u - kMaxLaunchesShown);
  EXPECT_EQ(report.launches.back().kernel, "k3");
  const std::string text = format_cuda_error_text(report);
  EXPECT_NE(text.find("returned 719 CUDA_ERROR_LAUNCH_FAILED (unspecified launch failure)"), std::string::npos);
  EXPECT_NE(text.find("none held (the recorder holds records from #37 on)"), std::string::npos) << text;
  EXPECT_NE(text.find("(31 earlier launches not listed)"), std::string::npos) << text;
}

TEST(CudaErrorReport, NoneWithoutAFirstErrorOrWhenItsRecordIsGone) {
  TempDir dir;
  const std::string path = dir.file("r.tsrec");
  {
    LaunchRecorder rec(path, 1, 8);
    rec.launch("k", kStream, 1);
  }
  CudaErrorReport report;
  EXPECT_FALSE(build_cuda_error_report(read_recorder(path), &report));
  const std::string lapped = dir.file("lapped.tsrec");
  {
    LaunchRecorder rec(lapped, 1, 8);
    rec.error("cudaStreamSynchronize", kStream, 1, 700);
    for (uint64_t i = 0; i < 10; ++i) rec.launch("k", kStream, 2 + i);
  }
  const recorder::RecorderFile file = read_recorder(lapped);
  EXPECT_EQ(file.header.cuda_errors, 1u);
  EXPECT_FALSE(build_cuda_error_report(file, &report)) << "its record was overwritten";
  EXPECT_NE(write_cuda_error_report(dir.path(), file).error.find("no first CUDA error recorded"), std::string::npos);
}

TEST(CudaErrorReport, WrittenPrivateAndReplacedWhole) {
  TempDir dir;
  const std::string path = dir.file("r.tsrec");
  const std::string run = dir.file("run");
  {
    LaunchRecorder rec(path, 2);
    rec.launch("k", kStream, 1);
    rec.error("cudaLaunchKernel", kStream, 2, 1);
  }
  CudaErrorFiles written = write_cuda_error_report(run, path);
  ASSERT_EQ(written.error, "");
  EXPECT_EQ(written.text_path, run + "/cuda-error-rank2.txt");
  EXPECT_EQ(written.json_path, run + "/cuda-error-rank2.json");
  struct stat st {};
  ASSERT_EQ(stat(written.text_path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const nlohmann::json j = nlohmann::json::parse(read_text(written.json_path));
  EXPECT_EQ(j["api"], "cudaLaunchKernel");
  EXPECT_NE(read_text(written.text_path).find("cudaLaunchKernel returned 1 cudaErrorInvalidValue (invalid argument)"),
            std::string::npos);
  // Written again (the engine at stop): the same names, replaced.
  written = write_cuda_error_report(run, path);
  ASSERT_EQ(written.error, "");
  EXPECT_EQ(written.text_path, run + "/cuda-error-rank2.txt");
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(run)) files += entry.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 2u);
  // A link in the report's place is never written through.
  fs::remove(written.text_path);
  fs::create_symlink(dir.file("elsewhere"), written.text_path);
  written = write_cuda_error_report(run, path);
  EXPECT_NE(written.error.find("cannot write " + run + "/cuda-error-rank2.txt"), std::string::npos) << written.error;
  EXPECT_FALSE(fs::exists(dir.file("elsewhere")));
  EXPECT_NE(write_cuda_error_report(run, dir.file("missing.tsrec")).error.find("cannot open"), std::string::npos);
}

// The run summary says each process's first CUDA error in a line, from its recorder or, without one, from its report.
TEST(CudaErrorReport, TheRunSummaryHasALinePerProcessAndTheLaunchModes) {
  TempDir dir;
  {
    LaunchRecorder rec(dir.file("rank0.tsrec"), 0);
    rec.writer().set_launch_mode(recorder::LaunchMode::kCompletions, "");
    rec.launch("gemm", kStream, 1);
  }
  {
    LaunchRecorder rec(dir.file("rank3.tsrec"), 3);
    rec.writer().set_launch_mode(recorder::LaunchMode::kCompletions, "");
    rec.launch("void scatter<float>(float*, int const*)", kStream, 40);
    rec.error("cudaStreamSynchronize", kStream, 50, 700);
  }
  {
    LaunchRecorder rec(dir.file("rank4.tsrec"), 4);
    rec.writer().set_launch_mode(recorder::LaunchMode::kUnavailable,
                                 "CUPTI is in use by another tool (Nsight Systems?)");
  }
  // Rank 5's recorder is gone; its report remains (written by its engine).
  {
    LaunchRecorder rec(dir.file("elsewhere.tsrec"), 5);
    rec.launch("k", kOther, 1);
    rec.error("cudaLaunchKernel", kOther, 2, 719);
  }
  ASSERT_EQ(write_cuda_error_report(dir.path(), dir.file("elsewhere.tsrec")).error, "");
  fs::remove(dir.file("elsewhere.tsrec"));

  RunSummary summary;
  std::string error;
  ASSERT_TRUE(read_run_summary(dir.path(), &summary, &error)) << error;
  recorder::RunDirectory run;
  ASSERT_TRUE(recorder::read_run_directory(dir.path(), &run, &error)) << error;
  recorder::ReportOptions options;
  options.liveness = [](const recorder::FileHeader&) { return recorder::Liveness::kGone; };
  note_recorders(&summary, run, options);
  const std::string text = format_summary_text(summary);
  EXPECT_NE(text.find("  first CUDA errors: 2\n"
                      "    rank 3: first CUDA error: cudaStreamSynchronize returned 700 cudaErrorIllegalAddress (an "
                      "illegal memory access was encountered) at 2025-12-01 12:00:00.050000 UTC, after kernel void "
                      "scatter<float>(float*, int const*) on stream 0x7f3a5c001200\n"
                      "    rank 5: first CUDA error: cudaLaunchKernel returned 719 cudaErrorLaunchFailure (unspecified "
                      "launch failure) at 2025-12-01 12:00:00.002000 UTC, after kernel k on stream 0x7f3a5c009900\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  launches: callbacks and kernel completion on ranks 0 and 3; unavailable on rank 4: CUPTI is "
                      "in use by another tool (Nsight Systems?)\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("nothing went wrong"), std::string::npos);
  const nlohmann::json j = summary_json(summary);
  ASSERT_EQ(j["cuda_errors"].size(), 2u);
  EXPECT_EQ(j["cuda_errors"][0]["rank"], 3);
  EXPECT_TRUE(j["cuda_errors"][0]["file"].is_null()) << "from the recorder";
  EXPECT_EQ(j["cuda_errors"][1]["file"], "cuda-error-rank5.json");
  EXPECT_EQ(j["launches"][2]["mode"], "unavailable");
  // The report is read like any other (its text is shown in full by `trainscope report`).
  ASSERT_EQ(summary.reports.size(), 1u);
  EXPECT_EQ(summary.reports[0].kind, ReportKind::kCudaError);
  EXPECT_EQ(summary.reports[0].rank, 5);
  EXPECT_TRUE(summary.reports[0].has_json);
}

}  // namespace
}  // namespace trainscope::reports
