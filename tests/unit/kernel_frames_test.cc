// Kernel frames (TRAINSCOPE_WATCH=kernels:REGEX) through the frame machinery, without a GPU: synthetic CUPTI callback
// streams go through the real launch collector, whose watched launches reach the engine's watcher (host buffers: the
// statistics are taken on the launching thread), and the frame feed reads the flight recorder as the frame thread
// does. Collectives are watched with the engine's own watch_begin/watch_end on host buffers, in the same recorder.
#include <gtest/gtest.h>

#include <chrono>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/flight_recorder_writer.h"
#include "collectors/launches/kernel_buffers.h"
#include "collectors/launches/launch_collector.h"
#include "reports/frame_report.h"
#include "shim/engine/engine_frame_feed.h"
#include "shim/engine/job_thread/engine_kernel_frames.h"
#include "shim/engine/job_thread/engine_watch.h"
#include "support/launch_recorder.h"
#include "support/subprocess.h"
#include "tests/unit/fake_cuda_queries.h"
#include "tests/unit/synthetic_api_calls.h"

namespace trainscope::engine {
namespace {

using launches::ApiCall;
using launches::Call;
using launches::CallClass;
using launches::CudaDomain;
using launches::LaunchKind;
using launches::Phase;
using recorder::Op;

constexpr uint64_t kContext = launches::kSyntheticContext;
constexpr uint64_t kStream = 0x5A;
constexpr uint64_t kScale = 0xF1;  // CUfunctions
constexpr uint64_t kAdam = 0xF3;
constexpr uint64_t kOther = 0xF4;
constexpr const char* kScaleSymbol = "_Z5scalePfPKfi";  // scale(float*, float const*, int)
constexpr const char* kAdamSymbol = "multi_tensor_apply_kernel_FusedAdamMathFunctor";  // extern "C" stand-in
constexpr const char* kOtherSymbol = "_Z4fillPfi";                                     // fill(float*, int)
constexpr uint32_t kCuLaunchKernel = 307;
constexpr int8_t kFloat32Dtype = 7;
constexpr uint64_t kComm = 0x3f2a9c0000000000ull;
constexpr float kFloatInf = std::numeric_limits<float>::infinity();

// What the window handed out, kept for the assertions.
struct Seen {
  std::vector<frames::Frame> frames;  // every frame, in the order the window got them
  std::vector<uint64_t> batch_starts;
  std::optional<frames::Detection> detection;
  std::vector<frames::Frame> traced;
  std::vector<uint64_t> traced_batch_starts;
  std::vector<frames::NearOverflow> near;
};

class KernelFramesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(recorder_.opened());
    start_kernel_frames();
    // The parameters of scale(float* out, float const* in, int n) and fill(float* out, int n); the buffers are this
    // test's host vectors, which the fake driver calls device memory and the statistics (no GPU) read on the host.
    queries_.layouts[kScale] = {{0, 8}, {8, 8}, {16, 4}};
    queries_.layouts[kOther] = {{0, 8}, {8, 4}};
    queries_.allocations.push_back(
        {reinterpret_cast<uint64_t>(out_.data()), out_.size() * sizeof(float), /*device=*/true});
    queries_.allocations.push_back(
        {reinterpret_cast<uint64_t>(in_.data()), in_.size() * sizeof(float), /*device=*/true});
  }

  void TearDown() override {
    // The board is the process's: the next test's records start from index 0 again.
    for (uint64_t index = 0; index < writer_.header()->next; ++index) {
      bool present = false;
      watch_board().take_if_complete(index, &present);
    }
    collector_.reset();
    set_optimizer_kernel_predicate(nullptr);
  }

  void start(const char* marker, const char* watch_kernels, frames::FrameWindowOptions window = {}) {
    launches::CollectorOptions options;
    options.watch_kernels = watch_kernels;
    collector_ = std::make_unique<launches::LaunchCollector>(&writer_, &queries_, kernel_watcher(), options);
    set_optimizer_kernel_predicate([this](uint64_t f) { return collector_->is_optimizer_kernel(f); });
    FrameFeedOptions feed;
    std::string error;
    ASSERT_TRUE(batch::parse_step_marker(marker, &feed.marker, &error)) << error;
    feed.window = std::move(window);
    feed.is_optimizer_kernel = [](uint64_t f) { return is_optimizer_kernel(f); };
    feed_ = std::make_unique<FrameFeed>(
        std::move(feed), [this](const frames::FrameUpdate& u, const frames::Frame* f) { collect(u, f); },
        [](bool, const std::string&) {});
  }

  void collect(const frames::FrameUpdate& update, const frames::Frame* frame) {
    if (frame != nullptr) {
      seen_.frames.push_back(*frame);
    } else {
      seen_.batch_starts.push_back(feed_->window().current_batch());
    }
    if (update.detection) seen_.detection = update.detection;
    if (update.trace_batch_start) seen_.traced_batch_starts.push_back(update.trace_frame->batch);
    if (update.trace_frame) seen_.traced.push_back(*update.trace_frame);
    for (const frames::NearOverflow& near : update.near_overflow) seen_.near.push_back(near);
  }

  ApiCall launch_call(Phase phase, uint64_t function, const char* symbol, uint32_t correlation) {
    Call call(phase, CudaDomain::kDriver, CallClass::kLaunch, kCuLaunchKernel, "cuLaunchKernel", correlation,
              1000 + correlation);
    call.stream(kStream).kernel(function, symbol).dims(80, 256, 512).params(params_);
    if (capturing_) call.capturing();
    return call.api;
  }

  // One driver launch of `function`, through the collector (its record, then the watcher, on this thread).
  void launch(uint64_t function, const char* symbol, int32_t result = 0) {
    const uint32_t correlation = next_correlation_++;
    collector_->on_call(launch_call(Phase::kEnter, function, symbol, correlation));
    ApiCall exit = launch_call(Phase::kExit, function, symbol, correlation);
    exit.result = result;
    collector_->on_call(exit);
  }

  // A collective on host buffers: its record, watched (kFlagWatched, as the shim does it) or not.
  void all_reduce(bool watched, std::vector<float>* send = nullptr, std::vector<float>* recv = nullptr) {
    recorder::Record r{};
    r.op = static_cast<uint16_t>(Op::kAllReduce);
    r.comm_id = kComm;
    r.rank = 0;
    r.nranks = 2;
    r.seq = ++collective_seq_;
    r.count = send != nullptr ? send->size() : 1024;
    r.dtype = kFloat32Dtype;
    r.sendbuff = send != nullptr ? reinterpret_cast<uint64_t>(send->data()) : 0;
    r.recvbuff = recv != nullptr ? reinterpret_cast<uint64_t>(recv->data()) : 0;
    r.flags = watched ? recorder::kFlagWatched : 0;
    const recorder::Pending pending = writer_.append(r);
    const uint64_t index = pending.commit - 1;
    WatchedCall* call = watched ? watch_begin(r, index) : nullptr;
    recorder::Writer::complete(pending, 0, 2000 + index);
    if (call != nullptr) watch_end(call, 0);
  }

  void pass() { feed_->pass(writer_.header()); }

  trainscope::testing::TempDir dir_;
  trainscope::testing::LaunchRecorder recorder_{dir_.path() + "/rank0.tsrec", 0, 4096};
  recorder::Writer& writer_ = recorder_.writer();
  launches::FakeCudaQueries queries_;
  std::unique_ptr<launches::LaunchCollector> collector_;
  std::unique_ptr<FrameFeed> feed_;
  Seen seen_;
  std::vector<float> out_ = std::vector<float>(8, 2.0f);
  std::vector<float> in_ = std::vector<float>(8, 0.5f);
  uint64_t out_address_ = reinterpret_cast<uint64_t>(out_.data());
  uint64_t in_address_ = reinterpret_cast<uint64_t>(in_.data());
  int n_ = 8;
  void* params_[3] = {&out_address_, &in_address_, &n_};
  bool capturing_ = false;
  uint32_t next_correlation_ = 10;
  uint64_t collective_seq_ = 0;
};

TEST_F(KernelFramesTest, InfMadeByAKernelInBatch3IsReportedWithTheKernelsNameInTheSeedsFormat) {
  start("every:1", "^scale\\(");
  for (int batch = 0; batch < 5; ++batch) {
    if (batch == 3) out_[5] = kFloatInf;  // what scale wrote in batch 3
    all_reduce(/*watched=*/false);        // every:1: each call starts a batch
    launch(kScale, kScaleSymbol);
    launch(kOther, kOtherSymbol);  // not watched: no frame
    pass();
  }
  ASSERT_TRUE(seen_.detection.has_value());
  const frames::Detection& detection = *seen_.detection;
  EXPECT_EQ(detection.batch, 3u);
  ASSERT_EQ(detection.frames.size(), 4u) << "one frame per watched launch of batches 0 to 3";
  const reports::DetectionReport report = detection_report(detection, 0, 21);
  EXPECT_EQ(reports::format_detection_text(report),
            "\n"
            "Detected inf/nan during batch_number=3\n"
            "Last 4 forward frames:\n"
            "abs min  abs max  metadata\n"
            "                  scale kernel\n"
            "2.00e+00 2.00e+00 output[0]\n"
            "5.00e-01 5.00e-01 input[1]\n"
            "                  scale kernel\n"
            "2.00e+00 2.00e+00 output[0]\n"
            "5.00e-01 5.00e-01 input[1]\n"
            "                  scale kernel\n"
            "2.00e+00 2.00e+00 output[0]\n"
            "5.00e-01 5.00e-01 input[1]\n"
            "                  scale kernel\n"
            "2.00e+00      inf output[0]\n"
            "5.00e-01 5.00e-01 input[1]\n");
  EXPECT_EQ(report.first_nonfinite_frame, "scale");

  // The JSON twin says which launch it was, as a collective's name says which call.
  const nlohmann::json json = reports::detection_json(report);
  const nlohmann::json& last = json["frames"].back();
  EXPECT_EQ(last["name"], "scale");
  EXPECT_EQ(last["kind"], "kernel");
  EXPECT_EQ(last["launch"]["kernel"], "scale(float*, float const*, int)");
  EXPECT_EQ(last["launch"]["grid"], nlohmann::json({80, 1, 1}));
  EXPECT_EQ(last["launch"]["block"], nlohmann::json({256, 1, 1}));
  EXPECT_EQ(last["launch"]["shared_bytes"], 512);
  EXPECT_EQ(last["launch"]["stream"], "0x5a");
  EXPECT_EQ(json["frames"][0]["launch"]["record_index"], 1) << "after the first all-reduce, record 0";

  // The origin: the kernel and its launch's record index, no communicator.
  const reports::FirstNonfinite first = first_nonfinite(detection, 0);
  EXPECT_EQ(first.op, "scale");
  EXPECT_EQ(first.comm_id, 0u);
  EXPECT_EQ(first.call_number, detection.frames.back().launch->record_index);
  EXPECT_EQ(first.where, reports::NonfiniteWhere::kOutput);
  EXPECT_EQ(reports::format_origin_text({first}),
            "rank 0 first saw inf in the output of kernel scale (launch record #" + std::to_string(first.call_number) +
                ") in batch 3\n");
}

TEST_F(KernelFramesTest, LaunchesIntoACapturingStreamNeverMakeAFrame) {
  start("every:1", "^scale\\(");
  capturing_ = true;
  out_[0] = kFloatInf;
  launch(kScale, kScaleSymbol);
  all_reduce(false);
  capturing_ = false;
  out_[0] = 2.0f;
  launch(kScale, kScaleSymbol);
  pass();
  ASSERT_EQ(seen_.frames.size(), 1u) << "the launch into the capture runs later, in its graph: nothing is taken";
  EXPECT_EQ(seen_.frames[0].batch, 0u);
  EXPECT_FALSE(seen_.detection.has_value());
}

TEST_F(KernelFramesTest, MaxFramesAndTraceBatchesWorkForKernelFrames) {
  frames::FrameWindowOptions window;
  window.max_frames = 2;
  window.trace_batches = {1};
  start("every:1", "^scale\\(", window);
  for (int batch = 0; batch < 4; ++batch) {
    if (batch == 1) out_[1] = kFloatInf;  // in a trace batch: traced, not detected
    if (batch == 2) out_[1] = 2.0f;
    if (batch == 3) in_[2] = kFloatInf;
    all_reduce(false);
    launch(kScale, kScaleSymbol);
    launch(kScale, kScaleSymbol);
  }
  pass();
  ASSERT_EQ(seen_.traced.size(), 2u);
  EXPECT_EQ(seen_.traced_batch_starts, std::vector<uint64_t>{1});
  EXPECT_EQ(reports::format_trace_batch_start(1) + reports::format_trace_frame(seen_.traced[0]),
            "\n"
            "                  *** Starting batch number=1 ***\n"
            "abs min  abs max  metadata\n"
            "                  scale kernel\n"
            "2.00e+00      inf output[0]\n"
            "5.00e-01 5.00e-01 input[1]\n");
  ASSERT_TRUE(seen_.detection.has_value());
  EXPECT_EQ(seen_.detection->batch, 3u);
  const reports::DetectionReport report = detection_report(*seen_.detection, 0, window.max_frames);
  const std::string text = reports::format_detection_text(report);
  EXPECT_NE(text.find("Last 2 forward frames:\n"), std::string::npos) << text;
  EXPECT_EQ(reports::detection_json(report)["frames"].size(), 2u);
  const reports::FirstNonfinite first = first_nonfinite(*seen_.detection, 0);
  EXPECT_EQ(first.where, reports::NonfiniteWhere::kInput) << "the inf was in what the kernel read";
}

TEST_F(KernelFramesTest, CollectiveAndKernelFramesEnterOneWindowInRecordOrder) {
  start("every:1", "^(scale|fill)\\(");
  std::vector<float> send(4, 3.0f);
  std::vector<float> recv(4, 6.0f);
  all_reduce(/*watched=*/true, &send, &recv);  // batch 0
  launch(kScale, kScaleSymbol);
  launch(kOther, kOtherSymbol);
  all_reduce(/*watched=*/true, &send, &recv);  // batch 1
  launch(kScale, kScaleSymbol);
  pass();
  std::vector<std::string> names;
  std::vector<uint64_t> batches;
  for (const frames::Frame& frame : seen_.frames) {
    names.push_back(frame.name);
    batches.push_back(frame.batch);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"comm 3f2a9c all-reduce #1", "scale", "fill", "comm 3f2a9c all-reduce #2",
                                             "scale"}));
  EXPECT_EQ(batches, (std::vector<uint64_t>{0, 0, 0, 1, 1}));
  EXPECT_EQ(seen_.frames[0].rows.size(), 2u);
  EXPECT_EQ(seen_.frames[2].rows.size(), 1u) << "fill(float*, int): one buffer";
  EXPECT_EQ(seen_.frames[2].rows[0].label, "output[0]");
  EXPECT_FALSE(seen_.frames[0].launch.has_value());
  EXPECT_TRUE(seen_.frames[1].launch.has_value());
}

TEST_F(KernelFramesTest, AWatchedLaunchWaitsForItsStatisticsThenIsDroppedAfterTheBoundedWait) {
  start("every:1", "^scale\\(");
  // A watched launch's record whose launching thread never hands the launch over (it died between the two).
  recorder::Record r{};
  r.op = static_cast<uint16_t>(Op::kKernelLaunch);
  r.flags = recorder::kFlagWatched;
  r.rank = r.nranks = recorder::kUnknown;
  r.dtype = recorder::kUnknown;
  const recorder::Pending pending = writer_.append(r);
  recorder::Writer::complete(pending, 0, 5);
  launch(kScale, kScaleSymbol);
  EXPECT_TRUE(feed_->pass(writer_.header())) << "the front waits for the launch to be handed over";
  EXPECT_TRUE(seen_.frames.empty()) << "frames leave in record order: the next one waits too";

  // A fresh feed (its own cursor, from record 0) that gives up at once: the orphan is dropped, and the launches
  // after it get their frames.
  FrameFeedOptions feed;
  ASSERT_TRUE(batch::parse_step_marker("every:1", &feed.marker, nullptr));
  feed.launch_watch_wait = std::chrono::milliseconds(0);
  feed_ = std::make_unique<FrameFeed>(
      std::move(feed), [this](const frames::FrameUpdate& u, const frames::Frame* f) { collect(u, f); },
      [](bool, const std::string&) {});
  launch(kScale, kScaleSymbol);
  EXPECT_FALSE(feed_->pass(writer_.header()));
  EXPECT_EQ(feed_->launches_unwatched(), 1u);
  ASSERT_EQ(seen_.frames.size(), 2u);
  EXPECT_EQ(seen_.frames[0].name, "scale");
}

TEST_F(KernelFramesTest, OptimizerKernelsEndBatchesUnderAuto) {
  start("auto", "^scale\\(");
  for (int step = 0; step < 4; ++step) {
    if (step == 2) out_[3] = kFloatInf;
    launch(kScale, kScaleSymbol);  // forward and backward
    launch(kOther, kOtherSymbol);
    launch(kAdam, kAdamSymbol);  // the optimizer's step: two kernels, one boundary
    launch(kAdam, kAdamSymbol);
    if (step == 2) out_[3] = 2.0f;
  }
  pass();
  EXPECT_TRUE(feed_->tracker().optimizer_steps());
  std::vector<uint64_t> batches;
  for (const frames::Frame& frame : seen_.frames) batches.push_back(frame.batch);
  EXPECT_EQ(batches, (std::vector<uint64_t>{0, 1, 2, 3})) << "no collective at all: the optimizer ends each step";
  ASSERT_TRUE(seen_.detection.has_value());
  EXPECT_EQ(seen_.detection->batch, 2u);
}

TEST_F(KernelFramesTest, AFailedLaunchMakesNoFrameAndLeavesNothingOnTheBoard) {
  start("auto", "^scale\\(");
  out_[0] = kFloatInf;                         // never written: the launch failed
  launch(kScale, kScaleSymbol, /*result=*/1);  // CUDA_ERROR_INVALID_VALUE
  out_[0] = 2.0f;
  launch(kScale, kScaleSymbol);
  EXPECT_FALSE(feed_->pass(writer_.header()));
  ASSERT_EQ(seen_.frames.size(), 1u);
  EXPECT_FALSE(seen_.frames[0].has_nonfinite());
  EXPECT_EQ(watch_board().size(), 0u) << "the failed launch's skipped buffers were taken off the board";
}

std::vector<uint64_t> g_handled;  // what the launch handler was called with
void count_launch(uint64_t function_handle) { g_handled.push_back(function_handle); }

TEST_F(KernelFramesTest, TheLaunchHandlerSeesEachLaunchThatRanOnce) {
  start("auto", "^scale\\(");
  g_handled.clear();
  collector_->set_launch_handler(&count_launch);
  launch(kScale, kScaleSymbol);
  capturing_ = true;
  launch(kAdam, kAdamSymbol);  // into a graph: it runs later
  capturing_ = false;
  launch(kAdam, kAdamSymbol);
  EXPECT_EQ(g_handled, (std::vector<uint64_t>{kScale, kAdam}));
  EXPECT_TRUE(is_optimizer_kernel(kAdam)) << "the engine asks the collector, which knows once the kernel was seen";
  EXPECT_FALSE(is_optimizer_kernel(kScale));
}

}  // namespace
}  // namespace trainscope::engine
