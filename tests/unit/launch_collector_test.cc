// The launch collector (collectors/launches/launch_collector.h) fed synthetic CUPTI callback streams, its records read
// back with the flight recorder reader: nesting, names, graphs, capture, errors, synchronisations, completions,
// watched kernels, own calls and concurrent threads.
#include "collectors/launches/launch_collector.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/flight_recorder_reader.h"
#include "base/flight_recorder_writer.h"
#include "collectors/launches/kernel_buffers.h"
#include "collectors/launches/kernel_names.h"
#include "support/subprocess.h"
#include "tests/unit/fake_cuda_queries.h"
#include "tests/unit/synthetic_api_calls.h"

namespace trainscope::launches {
namespace {

using recorder::Op;
using recorder::RecordedCall;
using recorder::RecorderFile;

constexpr uint64_t kContext = kSyntheticContext;
constexpr uint64_t kStreamA = 0x5A;
constexpr uint64_t kStreamB = 0x5B;
constexpr uint64_t kScale = 0xF1;  // CUfunctions
constexpr uint64_t kAdd = 0xF2;
constexpr uint64_t kAdam = 0xF3;
constexpr const char* kScaleSymbol = "_Z5scalePfPKfi";  // scale(float*, float const*, int)
constexpr const char* kAddSymbol =
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIfEENS_6detail5ArrayIPcLi3EEEEEviT0_T1_";
constexpr const char* kAdamSymbol = "multi_tensor_apply_kernel_FusedAdamMathFunctor";  // extern "C" stand-in
// CUPTI callback ids as the adapter passes them (values of cupti_runtime_cbid.h / cupti_driver_cbid.h).
constexpr uint32_t kCudaLaunchKernel = 211;
constexpr uint32_t kCudaStreamSynchronize = 131;
constexpr uint32_t kCudaDeviceSynchronize = 165;
constexpr uint32_t kCudaEventSynchronize = 139;
constexpr uint32_t kCudaMemcpyAsync = 41;
constexpr uint32_t kCudaGraphLaunch = 311;
constexpr uint32_t kCuLaunchKernel = 307;
constexpr uint32_t kCuLaunchCooperativeKernel = 442;

class RecordingWatcher : public LaunchWatcher {
 public:
  struct Seen {
    bool after = false;
    WatchedLaunch launch;
    uint64_t index = 0;
    int32_t result = 0;
    bool own_calls_marked = false;
  };
  std::vector<Seen> seen;
  void before_launch(const WatchedLaunch& launch, uint64_t index) override {
    seen.push_back({false, launch, index, 0, own_cuda_call_active()});
  }
  void after_launch(const WatchedLaunch& launch, uint64_t index, int32_t result) override {
    seen.push_back({true, launch, index, result, own_cuda_call_active()});
  }
};

class LaunchCollectorTest : public ::testing::Test {
 protected:
  void start(const CollectorOptions& options = {}, bool with_watcher = false, uint32_t max_names = 64,
             uint32_t max_streams = 16) {
    path_ = dir_.path() + "/rank0.tsrec";
    recorder::WriterOptions o{};
    o.path = path_.c_str();
    o.capacity = 8192;
    o.max_comms = 4;
    o.max_sites = 4;
    o.max_names = max_names;
    o.max_streams = max_streams;
    o.pid = 4242;
    o.launcher_rank = 0;
    o.launcher_world = 1;
    o.local_rank = 0;
    o.host = "node";
    o.run_id = "run";
    o.exe = "/usr/bin/python3";
    o.start_ns = 1;
    ASSERT_EQ(writer_.open(o), 0);
    collector_ = std::make_unique<LaunchCollector>(&writer_, &queries_, with_watcher ? &watcher_ : nullptr, options);
  }

  void TearDown() override {
    collector_.reset();
    if (writer_.is_open()) writer_.close(2);
  }

  RecorderFile read() {
    RecorderFile file;
    std::string error;
    EXPECT_TRUE(recorder::read_recorder_file(path_, &file, &error)) << error;
    return file;
  }

  static std::vector<RecordedCall> of_op(const RecorderFile& file, Op op) {
    std::vector<RecordedCall> out;
    for (const RecordedCall& call : file.records)
      if (call.record.op == static_cast<uint16_t>(op)) out.push_back(call);
    return out;
  }

  void on(const Call& call) { collector_->on_call(call.api); }

  // cudaLaunchKernel with the cuLaunchKernel it makes inside: the runtime callback lacks the CUfunction.
  void runtime_launch(uint32_t correlation, uint64_t function, const char* symbol, uint64_t stream, uint64_t t,
                      int32_t result = 0, void** params = nullptr) {
    on(Call(Phase::kEnter, CudaDomain::kRuntime, CallClass::kLaunch, kCudaLaunchKernel, "cudaLaunchKernel", correlation,
            t)
           .stream(stream)
           .kernel(0, ""));
    on(Call(Phase::kEnter, CudaDomain::kDriver, CallClass::kLaunch, kCuLaunchKernel, "cuLaunchKernel", correlation + 1,
            t + 1)
           .stream(stream)
           .kernel(function, symbol)
           .params(params));
    on(Call(Phase::kExit, CudaDomain::kDriver, CallClass::kLaunch, kCuLaunchKernel, "cuLaunchKernel", correlation + 1,
            t + 2)
           .stream(stream)
           .kernel(function, symbol)
           .result(result == 0 ? 0 : 1));
    on(Call(Phase::kExit, CudaDomain::kRuntime, CallClass::kLaunch, kCudaLaunchKernel, "cudaLaunchKernel", correlation,
            t + 3)
           .stream(stream)
           .kernel(0, "")
           .result(result));
  }

  void sync(CallClass klass, uint32_t cbid, const char* function, uint32_t correlation, uint64_t stream, uint64_t t,
            int32_t result = 0) {
    on(Call(Phase::kEnter, CudaDomain::kRuntime, klass, cbid, function, correlation, t).stream(stream));
    on(Call(Phase::kExit, CudaDomain::kRuntime, klass, cbid, function, correlation, t + 10)
           .stream(stream)
           .result(result));
  }

  void other_call(uint32_t cbid, const char* function, uint32_t correlation, uint64_t stream, uint64_t t,
                  int32_t result) {
    on(Call(Phase::kEnter, CudaDomain::kRuntime, CallClass::kOther, cbid, function, correlation, t).stream(stream));
    on(Call(Phase::kExit, CudaDomain::kRuntime, CallClass::kOther, cbid, function, correlation, t + 5)
           .stream(stream)
           .result(result));
  }

  trainscope::testing::TempDir dir_;
  std::string path_;
  recorder::Writer writer_;
  FakeCudaQueries queries_;
  RecordingWatcher watcher_;
  std::unique_ptr<LaunchCollector> collector_;
};

TEST_F(LaunchCollectorTest, RuntimeLaunchAndItsDriverLaunchAreOneRecord) {
  start();
  runtime_launch(10, kScale, kScaleSymbol, kStreamA, 1000);
  const RecorderFile file = read();
  ASSERT_EQ(file.records.size(), 1u);
  const recorder::Record& r = file.records[0].record;
  EXPECT_EQ(r.op, static_cast<uint16_t>(Op::kKernelLaunch));
  EXPECT_EQ(r.seq, 10u);  // the outer call's correlation id
  EXPECT_EQ(r.start_ns, 1000u);
  EXPECT_EQ(r.end_ns, 1003u);
  EXPECT_EQ(r.result, 0);
  EXPECT_EQ(r.caller, kScale);  // from the nested driver call
  EXPECT_STREQ(file.name(static_cast<uint32_t>(r.peer)), "scale(float*, float const*, int)");
  EXPECT_EQ(r.count, recorder::pack_grid(120, 2, 1));
  EXPECT_EQ(r.sendbuff, recorder::pack_block(256, 1, 1));
  EXPECT_EQ(r.recvbuff, 1024u);
  EXPECT_EQ(r.stream, kStreamA);
  EXPECT_EQ(r.aux, kContext);
  EXPECT_EQ(recorder::launch_domain(r.redop), CudaDomain::kRuntime);
  EXPECT_EQ(recorder::launch_kind(r.redop), LaunchKind::kKernel);
  EXPECT_EQ(r.rank, recorder::kUnknown);
  EXPECT_EQ(r.comm_id, 0u);
  EXPECT_EQ(r.flags, 0);
  EXPECT_NE(r.tid, 0u);
  ASSERT_EQ(file.streams.size(), 1u);
  EXPECT_EQ(file.streams[0].stream, kStreamA);
  EXPECT_EQ(file.streams[0].context, kContext);
  EXPECT_EQ(file.streams[0].launched_seq, 10u);
  EXPECT_EQ(file.header.cuda_errors, 0u);
}

TEST_F(LaunchCollectorTest, EachKernelAndApiNameIsInternedOnce) {
  start();
  uint32_t correlation = 100;
  for (int i = 0; i < 3; ++i) {
    runtime_launch(correlation, kScale, kScaleSymbol, kStreamA, 1000 + i * 10);
    correlation += 2;
    runtime_launch(correlation, kAdd, kAddSymbol, kStreamB, 1005 + i * 10);
    correlation += 2;
    sync(CallClass::kStreamSync, kCudaStreamSynchronize, "cudaStreamSynchronize", correlation++, kStreamA, 2000 + i);
  }
  const RecorderFile file = read();
  EXPECT_EQ(of_op(file, Op::kKernelLaunch).size(), 6u);
  EXPECT_EQ(of_op(file, Op::kStreamSync).size(), 3u);
  EXPECT_EQ(file.header.names_used, 3u);  // two kernels, one API function
  std::set<std::string> names;
  for (const RecordedCall& call : file.records) names.insert(file.name(static_cast<uint32_t>(call.record.peer)));
  EXPECT_EQ(names, (std::set<std::string>{"scale(float*, float const*, int)", "cudaStreamSynchronize",
                                          "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_"
                                          "add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_"
                                          "add<float>, at::detail::Array<char*, 3>)"}));
  EXPECT_EQ(file.streams.size(), 2u);
}

TEST_F(LaunchCollectorTest, ARuntimeCallbackWithTheSymbolDoesNotNameTheKernelTwice) {
  start();
  // The runtime callbacks carry the symbol but no CUfunction; the driver launch inside carries both.
  for (uint32_t correlation : {10u, 12u}) {
    on(Call(Phase::kEnter, CudaDomain::kRuntime, CallClass::kLaunch, kCudaLaunchKernel, "cudaLaunchKernel", correlation,
            100)
           .stream(kStreamA)
           .kernel(0, kScaleSymbol));
    on(Call(Phase::kEnter, CudaDomain::kDriver, CallClass::kLaunch, kCuLaunchKernel, "cuLaunchKernel", correlation + 1,
            101)
           .stream(kStreamA)
           .kernel(kScale, kScaleSymbol));
    on(Call(Phase::kExit, CudaDomain::kDriver, CallClass::kLaunch, kCuLaunchKernel, "cuLaunchKernel", correlation + 1,
            102)
           .stream(kStreamA)
           .kernel(kScale, kScaleSymbol));
    on(Call(Phase::kExit, CudaDomain::kRuntime, CallClass::kLaunch, kCudaLaunchKernel, "cudaLaunchKernel", correlation,
            103)
           .stream(kStreamA)
           .kernel(0, kScaleSymbol));
  }
  // A runtime launch with no driver callback inside (driver callbacks not subscribed): named by its symbol.
  on(Call(Phase::kEnter, CudaDomain::kRuntime, CallClass::kLaunch, kCudaLaunchKernel, "cudaLaunchKernel", 20, 200)
         .stream(kStreamA)
         .kernel(0, kAddSymbol));
  on(Call(Phase::kExit, CudaDomain::kRuntime, CallClass::kLaunch, kCudaLaunchKernel, "cudaLaunchKernel", 20, 201)
         .stream(kStreamA)
         .kernel(0, kAddSymbol));
  const RecorderFile file = read();
  EXPECT_EQ(file.header.names_used, 2u);
  const std::vector<RecordedCall> launches = of_op(file, Op::kKernelLaunch);
  ASSERT_EQ(launches.size(), 3u);
  EXPECT_EQ(launches[0].record.peer, launches[1].record.peer);
  EXPECT_EQ(launches[1].record.caller, kScale);
  EXPECT_EQ(launches[2].record.caller, 0u);
  EXPECT_EQ(kernel_short_name(file.name(static_cast<uint32_t>(launches[2].record.peer))),
            "vectorized_elementwise_kernel");
}

TEST_F(LaunchCollectorTest, GraphAndCooperativeLaunches) {
  start();
  Call graph(Phase::kEnter, CudaDomain::kRuntime, CallClass::kLaunch, kCudaGraphLaunch, "cudaGraphLaunch", 50, 100);
  graph.stream(kStreamA).api.kind = LaunchKind::kGraph;
  graph.api.graph_exec = 0x6A;
  on(graph);
  graph.api.phase = Phase::kExit;
  graph.api.time_ns = 120;
  on(graph);
  on(Call(Phase::kEnter, CudaDomain::kDriver, CallClass::kLaunch, kCuLaunchCooperativeKernel,
          "cuLaunchCooperativeKernel", 51, 200)
         .stream(kStreamB)
         .kernel(kAdd, kAddSymbol, LaunchKind::kCooperative));
  on(Call(Phase::kExit, CudaDomain::kDriver, CallClass::kLaunch, kCuLaunchCooperativeKernel,
          "cuLaunchCooperativeKernel", 51, 210)
         .stream(kStreamB)
         .kernel(kAdd, kAddSymbol, LaunchKind::kCooperative));
  const RecorderFile file = read();
  ASSERT_EQ(file.records.size(), 2u);
  const recorder::Record& g = file.records[0].record;
  EXPECT_EQ(g.op, static_cast<uint16_t>(Op::kGraphLaunch));
  EXPECT_EQ(g.group, 0x6Au);
  EXPECT_EQ(g.caller, 0u);
  EXPECT_EQ(g.peer, 0);
  EXPECT_EQ(recorder::launch_kind(g.redop), LaunchKind::kGraph);
  const recorder::Record& c = file.records[1].record;
  EXPECT_EQ(c.op, static_cast<uint16_t>(Op::kKernelLaunch));
  EXPECT_EQ(recorder::launch_domain(c.redop), CudaDomain::kDriver);
  EXPECT_EQ(recorder::launch_kind(c.redop), LaunchKind::kCooperative);
  EXPECT_EQ(c.caller, kAdd);
  ASSERT_NE(file.stream_entry(kStreamA, kContext), nullptr);
  EXPECT_EQ(file.stream_entry(kStreamA, kContext)->launched_seq, 50u);
}

TEST_F(LaunchCollectorTest, CapturingLaunchesAreFlaggedNeverWatchedAndNoStreamProgress) {
  CollectorOptions options;
  options.watch_kernels = "scale";
  start(options, /*with_watcher=*/true);
  queries_.layouts[kScale] = {{0, 8}};
  queries_.allocations.push_back({0x10000, 4096, true});
  uint64_t buffer = 0x10000;
  void* params[] = {&buffer};
  on(Call(Phase::kEnter, CudaDomain::kDriver, CallClass::kLaunch, kCuLaunchKernel, "cuLaunchKernel", 7, 10)
         .stream(kStreamA)
         .kernel(kScale, kScaleSymbol)
         .params(params)
         .capturing());
  on(Call(Phase::kExit, CudaDomain::kDriver, CallClass::kLaunch, kCuLaunchKernel, "cuLaunchKernel", 7, 11)
         .stream(kStreamA)
         .kernel(kScale, kScaleSymbol)
         .capturing());
  EXPECT_TRUE(watcher_.seen.empty());
  const RecorderFile file = read();
  ASSERT_EQ(file.records.size(), 1u);
  EXPECT_EQ(file.records[0].record.flags, recorder::kFlagCapturing);
  EXPECT_TRUE(file.streams.empty());
}

TEST_F(LaunchCollectorTest, FirstErrorIsRecordedLaterOnesCounted) {
  start();
  std::vector<uint64_t> handled;
  collector_->set_first_error_handler([&](uint64_t index) {
    EXPECT_TRUE(own_cuda_call_active());
    handled.push_back(index);
  });
  runtime_launch(10, kScale, kScaleSymbol, kStreamA, 100);
  other_call(kCudaMemcpyAsync, "cudaMemcpyAsync", 20, kStreamA, 200, 700);  // cudaErrorIllegalAddress, sticky
  runtime_launch(30, kScale, kScaleSymbol, kStreamA, 300, 700);
  other_call(kCudaMemcpyAsync, "cudaMemcpyAsync", 40, kStreamA, 400, 700);
  const RecorderFile file = read();
  EXPECT_EQ(file.header.cuda_errors, 3u);
  const std::vector<RecordedCall> errors = of_op(file, Op::kCudaError);
  ASSERT_EQ(errors.size(), 1u);
  const recorder::Record& e = errors[0].record;
  EXPECT_EQ(e.seq, 20u);
  EXPECT_EQ(e.start_ns, 200u);
  EXPECT_EQ(e.end_ns, 205u);
  EXPECT_EQ(e.result, 700);
  EXPECT_EQ(e.stream, kStreamA);
  EXPECT_EQ(e.count, kCudaMemcpyAsync);
  EXPECT_STREQ(file.name(static_cast<uint32_t>(e.peer)), "cudaMemcpyAsync");
  EXPECT_EQ(static_cast<CudaDomain>(e.redop), CudaDomain::kRuntime);
  ASSERT_EQ(handled.size(), 1u);
  EXPECT_EQ(handled[0], errors[0].index);
  ASSERT_NE(file.first_error(), nullptr);
  EXPECT_EQ(file.first_error()->index, errors[0].index);
  // The failed launch is recorded with its result, and is no progress of its stream.
  const std::vector<RecordedCall> launches = of_op(file, Op::kKernelLaunch);
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_EQ(launches[1].record.result, 700);
  EXPECT_EQ(file.stream_entry(kStreamA, kContext)->launched_seq, 10u);
}

// The adapter reads no clock for a call that is no launch or synchronisation (time 0 at its entry): its error, if it
// fails, is dated by its exit.
TEST_F(LaunchCollectorTest, AnUntimedCallThatFailsIsDatedByItsExit) {
  start();
  on(Call(Phase::kEnter, CudaDomain::kRuntime, CallClass::kOther, kCudaMemcpyAsync, "cudaMemcpyAsync", 20, 0)
         .stream(kStreamA));
  on(Call(Phase::kExit, CudaDomain::kRuntime, CallClass::kOther, kCudaMemcpyAsync, "cudaMemcpyAsync", 20, 205)
         .stream(kStreamA)
         .result(700));
  const std::vector<RecordedCall> errors = of_op(read(), Op::kCudaError);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].record.start_ns, 205u);
  EXPECT_EQ(errors[0].record.end_ns, 205u);
}

TEST_F(LaunchCollectorTest, AnErrorInsideAnOuterCallIsTheOuterCallsToReport) {
  start();
  // The driver launch fails inside the runtime launch, which fails too: one error, the runtime call's.
  runtime_launch(10, kScale, kScaleSymbol, kStreamA, 100, /*result=*/98);  // cudaErrorInvalidDeviceFunction
  RecorderFile file = read();
  EXPECT_EQ(file.header.cuda_errors, 1u);
  std::vector<RecordedCall> errors = of_op(file, Op::kCudaError);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].record.result, 98);
  EXPECT_EQ(errors[0].record.seq, 10u);
  EXPECT_STREQ(file.name(static_cast<uint32_t>(errors[0].record.peer)), "cudaLaunchKernel");
  // A driver call that fails inside a runtime call which succeeds (the runtime handled it) is no error of the job.
  on(Call(Phase::kEnter, CudaDomain::kRuntime, CallClass::kOther, 5, "cudaGetDevice", 20, 200));
  on(Call(Phase::kEnter, CudaDomain::kDriver, CallClass::kOther, 9, "cuCtxGetDevice", 21, 201));
  on(Call(Phase::kExit, CudaDomain::kDriver, CallClass::kOther, 9, "cuCtxGetDevice", 21, 202).result(201));
  on(Call(Phase::kExit, CudaDomain::kRuntime, CallClass::kOther, 5, "cudaGetDevice", 20, 203));
  file = read();
  EXPECT_EQ(file.header.cuda_errors, 1u);
}

TEST_F(LaunchCollectorTest, SuccessfulSynchronisationsMarkLaunchesFinished) {
  start();
  runtime_launch(20, kScale, kScaleSymbol, kStreamA, 100);
  runtime_launch(22, kScale, kScaleSymbol, kStreamA, 110);
  runtime_launch(24, kAdd, kAddSymbol, kStreamB, 120);
  sync(CallClass::kStreamSync, kCudaStreamSynchronize, "cudaStreamSynchronize", 26, kStreamA, 200);
  RecorderFile file = read();
  EXPECT_EQ(file.stream_entry(kStreamA, kContext)->completed_seq, 22u);
  EXPECT_EQ(file.stream_entry(kStreamA, kContext)->completed_ns, 210u);
  EXPECT_EQ(file.stream_entry(kStreamB, kContext)->completed_seq, 0u);
  const std::vector<RecordedCall> syncs = of_op(file, Op::kStreamSync);
  ASSERT_EQ(syncs.size(), 1u);
  EXPECT_EQ(syncs[0].record.stream, kStreamA);
  EXPECT_EQ(syncs[0].record.aux, kContext);
  EXPECT_STREQ(file.name(static_cast<uint32_t>(syncs[0].record.peer)), "cudaStreamSynchronize");
  EXPECT_EQ(file.launch_progress(of_op(file, Op::kKernelLaunch)[1].record).state, recorder::LaunchState::kFinished);

  // A failed synchronisation says nothing; a context-wide one finishes every stream of the context.
  runtime_launch(30, kScale, kScaleSymbol, kStreamA, 300);
  sync(CallClass::kStreamSync, kCudaStreamSynchronize, "cudaStreamSynchronize", 32, kStreamA, 310, 700);
  file = read();
  EXPECT_EQ(file.stream_entry(kStreamA, kContext)->completed_seq, 22u);
  sync(CallClass::kContextSync, kCudaDeviceSynchronize, "cudaDeviceSynchronize", 34, 0, 400, 0);
  sync(CallClass::kEventSync, kCudaEventSynchronize, "cudaEventSynchronize", 36, 0, 500, 0);
  file = read();
  EXPECT_EQ(file.stream_entry(kStreamA, kContext)->completed_seq, 30u);
  EXPECT_EQ(file.stream_entry(kStreamB, kContext)->completed_seq, 24u);
  EXPECT_EQ(file.stream_entry(kStreamB, kContext)->completed_ns, 410u);
  EXPECT_EQ(of_op(file, Op::kStreamSync).size(), 4u);  // failed and event synchronisations are recorded too
  EXPECT_EQ(of_op(file, Op::kStreamSync)[2].record.stream, 0u);
}

TEST_F(LaunchCollectorTest, KernelActivityMarksItsStreamByEitherCorrelationId) {
  start();
  writer_.set_launch_mode(recorder::LaunchMode::kCompletions, nullptr);
  runtime_launch(40, kScale, kScaleSymbol, kStreamA, 100);  // the driver call inside is 41
  runtime_launch(42, kScale, kScaleSymbol, kStreamA, 110);
  runtime_launch(44, kAdd, kAddSymbol, kStreamB, 120);
  collector_->on_kernel_completed(41, 150);   // the activity names the driver call: the launch is still 40
  collector_->on_kernel_completed(999, 160);  // no launch of ours
  RecorderFile file = read();
  EXPECT_EQ(file.stream_entry(kStreamA, kContext)->completed_seq, 40u);
  EXPECT_EQ(file.stream_entry(kStreamA, kContext)->completed_ns, 150u);
  collector_->on_kernel_completed(42, 170);
  collector_->on_kernel_completed(40, 180);  // late and out of order: completion never goes back
  collector_->on_completions_checked(190);
  file = read();
  EXPECT_EQ(file.stream_entry(kStreamA, kContext)->completed_seq, 42u);
  EXPECT_EQ(file.stream_entry(kStreamA, kContext)->completed_ns, 170u);
  EXPECT_EQ(file.stream_entry(kStreamA, kContext)->checked_ns, 190u);
  EXPECT_EQ(file.stream_entry(kStreamB, kContext)->checked_ns, 190u);
  EXPECT_EQ(file.header.completions_ns, 190u);
  const std::vector<RecordedCall> launches = of_op(file, Op::kKernelLaunch);
  EXPECT_EQ(file.launch_progress(launches[1].record).state, recorder::LaunchState::kFinished);
  EXPECT_EQ(file.launch_progress(launches[2].record).state, recorder::LaunchState::kNotFinished);
}

TEST_F(LaunchCollectorTest, TrainscopesOwnCallsAreNeverRecordedOrCounted) {
  start();
  {
    const OwnCudaCalls own;
    EXPECT_TRUE(stats::inside_own_launch());  // one mark for the statistics launcher and the collector
    runtime_launch(10, kScale, kScaleSymbol, kStreamA, 100);
    other_call(kCudaMemcpyAsync, "cudaMemcpyAsync", 20, kStreamA, 200, 700);
  }
  EXPECT_FALSE(own_cuda_call_active());
  const RecorderFile file = read();
  EXPECT_TRUE(file.records.empty());
  EXPECT_EQ(file.header.cuda_errors, 0u);
  EXPECT_EQ(file.header.names_used, 0u);
}

TEST_F(LaunchCollectorTest, WatchedKernelsReachTheWatcherWithTheirBuffers) {
  CollectorOptions options;
  options.watch_kernels = "^scale\\(";
  start(options, /*with_watcher=*/true);
  queries_.layouts[kScale] = {{0, 8}, {8, 8}, {16, 4}};
  queries_.layouts[kAdd] = {{0, 4}};
  queries_.allocations.push_back({0x10000, 4096, true});
  queries_.allocations.push_back({0x20000, 4096, true});
  uint64_t out = 0x10000;
  uint64_t in = 0x20000;
  int n = 1024;
  void* params[] = {&out, &in, &n};
  runtime_launch(10, kScale, kScaleSymbol, kStreamA, 100, 0, params);
  runtime_launch(12, kAdd, kAddSymbol, kStreamA, 110, 0, params);  // no match: not watched
  runtime_launch(14, kScale, kScaleSymbol, kStreamA, 120, 0, params);
  ASSERT_EQ(watcher_.seen.size(), 4u);
  const RecorderFile file = read();
  const std::vector<RecordedCall> launches = of_op(file, Op::kKernelLaunch);
  ASSERT_EQ(launches.size(), 3u);
  EXPECT_EQ(launches[0].record.flags, recorder::kFlagWatched);
  EXPECT_EQ(launches[1].record.flags, 0);
  EXPECT_FALSE(watcher_.seen[0].after);
  EXPECT_TRUE(watcher_.seen[1].after);
  EXPECT_EQ(watcher_.seen[1].index, launches[0].index);
  EXPECT_EQ(watcher_.seen[3].index, launches[2].index);
  for (const RecordingWatcher::Seen& seen : watcher_.seen) EXPECT_TRUE(seen.own_calls_marked);
  const WatchedLaunch& launch = watcher_.seen[1].launch;
  EXPECT_EQ(launch.short_name, "scale");
  EXPECT_EQ(launch.stream, kStreamA);
  EXPECT_EQ(launch.function_handle, kScale);
  ASSERT_EQ(launch.buffers.size(), 2u);
  EXPECT_EQ(launch.buffers[0].label, "output[0]");
  EXPECT_EQ(launch.buffers[0].tensor.count, 1024u);
  EXPECT_EQ(launch.buffers[1].label, "input[1]");
  EXPECT_EQ(launch.buffers[1].tensor.dtype, stats::DType::kFloat32);
}

TEST_F(LaunchCollectorTest, KernelDtypeTypesBuffersTheNameDoesNot) {
  CollectorOptions options;
  options.watch_kernels = "^triton_";
  options.kernel_dtype = "bfloat16";
  start(options, /*with_watcher=*/true);
  queries_.layouts[kAdd] = {{0, 8}};
  queries_.allocations.push_back({0x10000, 4096, true});
  uint64_t buffer = 0x10000;
  void* params[] = {&buffer};
  runtime_launch(10, kAdd, "triton_poi_fused_add_0", kStreamA, 100, 0, params);
  ASSERT_EQ(watcher_.seen.size(), 2u);
  ASSERT_EQ(watcher_.seen[1].launch.buffers.size(), 1u);
  EXPECT_EQ(watcher_.seen[1].launch.buffers[0].tensor.dtype, stats::DType::kBfloat16);
  EXPECT_EQ(watcher_.seen[1].launch.buffers[0].tensor.count, 2048u);
}

TEST_F(LaunchCollectorTest, OptimizerKernelsAreKnownOnceSeen) {
  start();
  EXPECT_FALSE(collector_->is_optimizer_kernel(kAdam));
  runtime_launch(10, kAdam, kAdamSymbol, kStreamA, 100);
  runtime_launch(12, kAdd, kAddSymbol, kStreamA, 110);
  EXPECT_TRUE(collector_->is_optimizer_kernel(kAdam));
  EXPECT_FALSE(collector_->is_optimizer_kernel(kAdd));
  EXPECT_FALSE(collector_->is_optimizer_kernel(0xDEAD));
}

TEST_F(LaunchCollectorTest, FullTablesStillRecordEveryLaunch) {
  start({}, false, /*max_names=*/1, /*max_streams=*/1);
  runtime_launch(10, kScale, kScaleSymbol, kStreamA, 100);
  runtime_launch(12, kAdd, kAddSymbol, kStreamB, 110);
  runtime_launch(14, kAdd, kAddSymbol, kStreamB, 120);
  const RecorderFile file = read();
  const std::vector<RecordedCall> launches = of_op(file, Op::kKernelLaunch);
  ASSERT_EQ(launches.size(), 3u);
  EXPECT_NE(launches[0].record.peer, 0);
  EXPECT_EQ(launches[1].record.peer, 0);  // no name slot left: unnamed, but recorded
  EXPECT_EQ(launches[2].record.caller, kAdd);
  EXPECT_EQ(file.streams.size(), 1u);
  EXPECT_EQ(file.header.dropped_launches, 0u);
}

TEST_F(LaunchCollectorTest, ThreadsLaunchingConcurrentlyAreEachRecordedOnce) {
  start();
  constexpr int kThreads = 4;
  constexpr int kLaunches = 400;
  std::atomic<uint32_t> next_correlation{1};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const uint64_t stream = 0x100 + static_cast<uint64_t>(t);
      for (int i = 0; i < kLaunches; ++i) {
        const uint32_t correlation = next_correlation.fetch_add(2);
        runtime_launch(correlation, i % 2 == 0 ? kScale : kAdd, i % 2 == 0 ? kScaleSymbol : kAddSymbol, stream,
                       1000 + static_cast<uint64_t>(i));
        if (i % 50 == 49) {
          sync(CallClass::kStreamSync, kCudaStreamSynchronize, "cudaStreamSynchronize", next_correlation.fetch_add(1),
               stream, 5000 + static_cast<uint64_t>(i));
        }
        collector_->on_kernel_completed(correlation + 1, 9000);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const RecorderFile file = read();
  const std::vector<RecordedCall> launches = of_op(file, Op::kKernelLaunch);
  EXPECT_EQ(launches.size(), static_cast<size_t>(kThreads * kLaunches));
  std::set<uint64_t> seqs;
  for (const RecordedCall& call : launches) {
    seqs.insert(call.record.seq);
    EXPECT_NE(call.record.peer, 0);
  }
  EXPECT_EQ(seqs.size(), launches.size());
  EXPECT_EQ(file.header.names_used, 3u);  // two kernels and cudaStreamSynchronize, each once
  EXPECT_EQ(file.streams.size(), static_cast<size_t>(kThreads));
  for (const recorder::StreamEntry& stream : file.streams) EXPECT_EQ(stream.completed_seq, stream.launched_seq);
}

}  // namespace
}  // namespace trainscope::launches
