// The launch collector's cost on the job's launching thread (issue 12's figure): per kernel launch (the runtime
// call's enter and exit with the driver launch nested inside, a kernel and stream already known) and per other CUDA
// API call, into a real recorder file. The CUPTI callback's own cost is not in these figures.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "base/flight_recorder_writer.h"
#include "collectors/launches/launch_collector.h"

namespace trainscope::launches {
namespace {

constexpr uint64_t kContext = 0xC0;
constexpr uint64_t kFunction = 0xF1;
constexpr const char* kSymbol =
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIfEENS_6detail5ArrayIPcLi3EEEEEviT0_T1_";

class NoQueries : public CudaQueries {
 public:
  bool param_layout(uint64_t, ParamInfo*, uint32_t, uint32_t*) override { return false; }
  bool allocation_of(uint64_t, Allocation*) override { return false; }
};

// One recorder and collector for the whole run (leaked: the benchmark threads may still be using them at exit).
struct Setup {
  recorder::Writer writer;
  NoQueries queries;
  LaunchCollector* collector = nullptr;
  std::atomic<uint32_t> correlation{1};
  std::string dir;

  Setup() {
    char pattern[] = "/tmp/ts-launch-bench-XXXXXX";
    dir = mkdtemp(pattern);
    const std::string path = dir + "/bench.tsrec";
    recorder::WriterOptions o{};
    o.path = path.c_str();
    o.capacity = 1 << 16;
    o.max_comms = 4;
    o.max_sites = 4;
    o.max_names = recorder::kDefaultMaxNames;
    o.max_streams = recorder::kDefaultMaxStreams;
    o.pid = getpid();
    o.host = "bench";
    o.run_id = "bench";
    o.exe = "launch_bench";
    if (writer.open(o) != 0) {
      std::fprintf(stderr, "cannot create %s\n", path.c_str());
      std::exit(1);
    }
    collector = new LaunchCollector(&writer, &queries, nullptr, CollectorOptions{});
  }
};

Setup& setup() {
  static Setup* s = new Setup;
  return *s;
}

ApiCall call(Phase phase, CudaDomain domain, CallClass klass, uint32_t cbid, const char* function, uint32_t correlation,
             uint64_t stream) {
  ApiCall c;
  c.phase = phase;
  c.domain = domain;
  c.klass = klass;
  c.cbid = cbid;
  c.function = function;
  c.correlation = correlation;
  c.context = kContext;
  c.stream = stream;
  c.time_ns = 1700000000000000000ull + correlation;
  return c;
}

ApiCall launch(Phase phase, CudaDomain domain, uint32_t correlation, uint64_t stream, uint64_t function) {
  ApiCall c = call(phase, domain, CallClass::kLaunch, domain == CudaDomain::kRuntime ? 211 : 307,
                   domain == CudaDomain::kRuntime ? "cudaLaunchKernel" : "cuLaunchKernel", correlation, stream);
  c.kind = LaunchKind::kKernel;
  c.function_handle = function;
  c.symbol = function != 0 ? kSymbol : "";
  c.grid[0] = 1024;
  c.grid[1] = c.grid[2] = 1;
  c.block[0] = 256;
  c.block[1] = c.block[2] = 1;
  return c;
}

// One API call without nesting: its enter and its (successful) exit, a fresh correlation id each time.
void enter_and_exit(benchmark::State& state, ApiCall enter) {
  Setup& s = setup();
  ApiCall exit = enter;
  exit.phase = Phase::kExit;
  for (auto _ : state) {
    enter.correlation = exit.correlation = s.correlation.fetch_add(1, std::memory_order_relaxed);
    s.collector->on_call(enter);
    s.collector->on_call(exit);
  }
  state.SetItemsProcessed(state.iterations());
}

// cudaLaunchKernel (no CUfunction in the runtime callback) with cuLaunchKernel inside: four callbacks, one record.
void BM_RuntimeLaunch(benchmark::State& state) {
  Setup& s = setup();
  const uint64_t stream = 0x1000 + static_cast<uint64_t>(state.thread_index());
  ApiCall runtime_enter = launch(Phase::kEnter, CudaDomain::kRuntime, 0, stream, 0);
  ApiCall driver_enter = launch(Phase::kEnter, CudaDomain::kDriver, 0, stream, kFunction);
  ApiCall driver_exit = launch(Phase::kExit, CudaDomain::kDriver, 0, stream, kFunction);
  ApiCall runtime_exit = launch(Phase::kExit, CudaDomain::kRuntime, 0, stream, 0);
  for (auto _ : state) {
    const uint32_t correlation = s.correlation.fetch_add(2, std::memory_order_relaxed);
    runtime_enter.correlation = runtime_exit.correlation = correlation;
    driver_enter.correlation = driver_exit.correlation = correlation + 1;
    s.collector->on_call(runtime_enter);
    s.collector->on_call(driver_enter);
    s.collector->on_call(driver_exit);
    s.collector->on_call(runtime_exit);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RuntimeLaunch)->Threads(1)->Threads(2)->Threads(4);

// cuLaunchKernel alone (Triton, cuBLAS's own launches): two callbacks, one record.
void BM_DriverLaunch(benchmark::State& state) {
  enter_and_exit(state, launch(Phase::kEnter, CudaDomain::kDriver, 0, 0x2000, kFunction));
}
BENCHMARK(BM_DriverLaunch);

// Any other API call that succeeds (cudaMemcpyAsync, cudaEventRecord ...): nothing is recorded.
void BM_OtherApiCall(benchmark::State& state) {
  enter_and_exit(state, call(Phase::kEnter, CudaDomain::kRuntime, CallClass::kOther, 41, "cudaMemcpyAsync", 0, 0x3000));
}
BENCHMARK(BM_OtherApiCall);

// cudaStreamSynchronize: one kStreamSync record and the stream marked finished.
void BM_StreamSynchronize(benchmark::State& state) {
  enter_and_exit(state, call(Phase::kEnter, CudaDomain::kRuntime, CallClass::kStreamSync, 131, "cudaStreamSynchronize",
                             0, 0x1000));
}
BENCHMARK(BM_StreamSynchronize);

}  // namespace
}  // namespace trainscope::launches

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::error_code ec;
  std::filesystem::remove_all(trainscope::launches::setup().dir, ec);
  return 0;
}
