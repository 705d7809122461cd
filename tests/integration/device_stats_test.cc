// The device path, on the CPU: the statistics launcher, the engine's frames of device buffers and of CUDA module
// tensors, run on the stand-in driver with one GPU (tests/fakes/cuda/fake_stats_driver.cc), where device memory is
// host memory and the statistics kernel's launch is replayed on the host by its launch contract. What runs here is
// everything but the kernel's CUDA code: the launcher's slots, descriptors and shapes, the polling of results, the
// frame thread's wait for them, the module rows of device and strided tensors. tests/gpu runs the same binaries on
// a real GPU.
#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "integration_helpers.h"
#include "support/subprocess.h"

namespace trainscope {
namespace {

// A one-process job on the stand-in GPU and the stand-in NCCL, no coordinator, no launch collector (CUPTI has no
// stand-in GPU to trace); `event_polls`: how many queries of each event say "not ready" (the GPU behind the job).
testing::ProcessOptions stand_in_gpu(const testing::TempDir& dir, int event_polls) {
  testing::ProcessOptions options = job_options(dir);
  options.env["LD_LIBRARY_PATH"] = std::string(TS_STATS_DRIVER_DIR) + ":" + TS_FAKE_NCCL_DIR;
  options.env["TSFAKE_CUDA_EVENT_POLLS"] = std::to_string(event_polls);
  options.env["TRAINSCOPE_COORDINATOR"] = "off";
  options.env["TRAINSCOPE_LAUNCHES"] = "off";
  options.env["CUDA_INJECTION64_PATH"] = std::nullopt;
  options.timeout_seconds = 120;
  return options;
}

// The launcher refuses to start without the embedded kernels (TRAINSCOPE_BUILD_KERNELS=OFF), even on a driver that
// would not run them.
class StandInGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!TS_KERNELS_BUILT)
      GTEST_SKIP() << "built with TRAINSCOPE_BUILD_KERNELS=OFF: the launcher has no kernels to load";
  }
};

// A child test binary's output, quoted in a failure message without its "[  SKIPPED ]" lines' marks: ctest takes
// that mark anywhere in a test's output for a skip, and would call this test skipped when it failed.
std::string quoted(const std::string& out) {
  std::string text = out;
  for (size_t at = text.find("[  SKIPPED ]"); at != std::string::npos; at = text.find("[  SKIPPED ]", at))
    text.replace(at, 12, "[ skipped ]");
  return text;
}

TEST_F(StandInGpu, TheGpuTestsOfTheStatisticsLauncherPass) {
  testing::TempDir dir;
  testing::ProcessOptions options = stand_in_gpu(dir, 0);  // they poll with sleeps: no "not ready" to wait out
  options.env["LD_PRELOAD"] = std::nullopt;                // the launcher alone, linked into the test binary
  options.timeout_seconds = 280;
  // 2^31 elements would take 12 GiB of this machine's memory and minutes of the replay. Under TSan the sweeps of every
  // type, pattern, size and view are left to the plain and ASan builds: two minutes of the replay on one thread there,
  // and what TSan checks, the launcher's threads and slots, the other four tests run.
  const bool under_tsan = std::string_view(TS_SANITIZER) == "thread";
  const std::string filter = under_tsan ? "--gtest_filter=-*TwoToTheThirtyOne*:*EveryTypeEveryPattern*:*StridedViews*"
                                        : "--gtest_filter=-*TwoToTheThirtyOne*";
  const testing::ProcessResult run = testing::run_process({TS_STATS_GPU_TESTS, filter}, options);
  EXPECT_EQ(run.exit_code, 0) << quoted(run.out) << run.err;
  EXPECT_NE(run.out.find(under_tsan ? "[  PASSED  ] 4 tests." : "[  PASSED  ] 6 tests."), std::string::npos)
      << quoted(run.out);
  EXPECT_EQ(run.out.find("SKIPPED"), std::string::npos) << "the stand-in GPU was not used: " << quoted(run.out);
}

// watch_gpu_program: an fp32 all-reduce and an fp16 one in a group per step on device buffers, an inf in the fp32
// send buffer at step 3; two calls a batch.
TEST_F(StandInGpu, DeviceBuffersAreFramedWhileTheGpuIsBehindTheJob) {
  for (const int polls : {0, 1, 3}) {
    SCOPED_TRACE("queries not ready per event: " + std::to_string(polls));
    testing::TempDir dir;
    testing::ProcessOptions options = stand_in_gpu(dir, polls);
    options.env["TRAINSCOPE_STEP_MARKER"] = "every:2";
    const testing::ProcessResult run = testing::run_process({TS_WATCH_GPU_PROGRAM, "6"}, options);
    ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
    const std::string text = report(dir, "nonfinite-");
    EXPECT_NE(text.find("Detected inf/nan during batch_number=3\n"), std::string::npos) << text << run.err;
    EXPECT_NE(text.find("2.50e-01      inf input[0]\n"), std::string::npos) << text;
    EXPECT_NE(text.find("1.00e+00 1.00e+00 input[0]\n"), std::string::npos) << "the fp16 call's frame: " << text;
    EXPECT_EQ(run.err.find("got no frame"), std::string::npos) << run.err;
    EXPECT_EQ(run.err.find("skipped"), std::string::npos) << run.err;
  }
}

// A job that ends while its GPU still computes: the frames wait for the statistics a bounded time (2 s) at exit, and
// what never comes is said, the job's exit unchanged.
TEST_F(StandInGpu, AJobEndingBeforeItsGpuIsToldWhatGotNoFrame) {
  testing::TempDir dir;
  testing::ProcessOptions options = stand_in_gpu(dir, 1000000000);
  options.env["TRAINSCOPE_STEP_MARKER"] = "every:2";
  const testing::ProcessResult run = testing::run_process({TS_WATCH_GPU_PROGRAM, "6"}, options);
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_NE(run.err.find("frames: 12 watched calls got no frame: their statistics, or an earlier call's, were still "
                         "not there 2 s after the process began to end"),
            std::string::npos)
      << run.err;
  EXPECT_EQ(report(dir, "nonfinite-"), "");
}

// device_module_frames_program: what the module hooks pack for CUDA tensors, an fp16 weight, a host bias, a
// transposed fp32 view, a view of 9 dimensions that do not merge, and an output holding +inf from batch 2.
TEST_F(StandInGpu, ModuleFramesOfCudaTensorsStridedViewsIncluded) {
  testing::TempDir dir;
  testing::ProcessOptions options = stand_in_gpu(dir, 1);
  options.env["TRAINSCOPE_WATCH"] = "modules";
  const testing::ProcessResult run = testing::run_process({program("device_module_frames_program"), "4"}, options);
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_NE(run.out.find("4 batches, 0 frames refused"), std::string::npos) << run.out;
  const std::string text = report(dir, "nonfinite-");
  EXPECT_NE(text.find("Detected inf/nan during batch_number=2\n"), std::string::npos) << text << run.err;
  // The transposed view's elements are 4 ... 1915; read as a contiguous range from its start they would end at 1539.
  EXPECT_NE(text.find("                  encoder.fc Linear\n"
                      "5.00e-01 3.00e+00 weight\n"
                      "1.25e-01 1.25e-01 bias\n"
                      "4.00e+00 1.92e+03 input[0]\n"
                      "2.50e-01      inf output\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("input[1]"), std::string::npos) << "a view the kernel cannot read has no row: " << text;
  // That view is counted among the skipped buffers, once per batch.
  EXPECT_NE(run.err.find(" 4 skipped otherwise"), std::string::npos) << run.err;
}

}  // namespace
}  // namespace trainscope
