// Micro benchmarks of the shim's cost on the calling thread: an intercepted call with recording on, against the
// same no-op NCCL function called directly, and the flight recorder's append on its own.
//
// The binary links libtrainscope.so before the no-op libnccl.so.2, so `ncclAllReduce` here is the shim's hook
// and REAL(ncclAllReduce) is the no-op. Run it with TRAINSCOPE_DIR pointing at a scratch folder.
#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <nccl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "reports/flight_recorder_writer.h"

namespace {

using AllReduceFn = decltype(&ncclAllReduce);

AllReduceFn direct_allreduce() {
  void* nccl = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
  return nccl != nullptr ? reinterpret_cast<AllReduceFn>(dlsym(nccl, "ncclAllReduce")) : nullptr;
}

ncclComm_t bench_comm() {
  static ncclComm_t comm = [] {
    ncclUniqueId id{};
    ncclGetUniqueId(&id);
    ncclComm_t c = nullptr;
    ncclCommInitRank(&c, 1, id, 0);
    return c;
  }();
  return comm;
}

float g_buffer[16];

void BM_AllReduceDirect(benchmark::State& state) {
  const AllReduceFn fn = direct_allreduce();
  if (fn == nullptr) {
    state.SkipWithError("the no-op libnccl.so.2 is not loaded");
    return;
  }
  ncclComm_t comm = bench_comm();
  for (auto _ : state) benchmark::DoNotOptimize(fn(g_buffer, g_buffer, 16, ncclFloat32, ncclSum, comm, nullptr));
}
BENCHMARK(BM_AllReduceDirect)->Repetitions(5)->ReportAggregatesOnly(true);

void BM_AllReduceThroughShim(benchmark::State& state) {
  ncclComm_t comm = bench_comm();
  for (auto _ : state)
    benchmark::DoNotOptimize(ncclAllReduce(g_buffer, g_buffer, 16, ncclFloat32, ncclSum, comm, nullptr));
}
BENCHMARK(BM_AllReduceThroughShim)->Repetitions(5)->ReportAggregatesOnly(true)->Threads(1)->Threads(2);

void BM_SendThroughShim(benchmark::State& state) {
  ncclComm_t comm = bench_comm();
  for (auto _ : state) benchmark::DoNotOptimize(ncclSend(g_buffer, 16, ncclFloat32, 0, comm, nullptr));
}
BENCHMARK(BM_SendThroughShim)->Repetitions(5)->ReportAggregatesOnly(true);

void BM_GroupOfTwoThroughShim(benchmark::State& state) {
  ncclComm_t comm = bench_comm();
  for (auto _ : state) {
    ncclGroupStart();
    ncclSend(g_buffer, 16, ncclFloat32, 0, comm, nullptr);
    ncclRecv(g_buffer, 16, ncclFloat32, 0, comm, nullptr);
    benchmark::DoNotOptimize(ncclGroupEnd());
  }
}
BENCHMARK(BM_GroupOfTwoThroughShim)->Repetitions(5)->ReportAggregatesOnly(true);

// The recorder on its own: claim, fill, checksum, commit, then complete.
void BM_RecorderAppend(benchmark::State& state) {
  static trainscope::recorder::Writer writer;
  if (!writer.is_open()) {
    const std::string path = "/tmp/trainscope-bench-" + std::to_string(getpid()) + ".tsrec";
    trainscope::recorder::WriterOptions options{};
    options.path = path.c_str();
    options.capacity = 65536;
    options.max_comms = 16;
    options.pid = getpid();
    options.launcher_rank = options.launcher_world = options.local_rank = -1;
    options.host = "bench";
    options.run_id = "bench";
    options.exe = "bench";
    if (writer.open(options) != 0) {
      state.SkipWithError("cannot create the recorder file in /tmp");
      return;
    }
    unlink(path.c_str());  // the mapping stays valid
  }
  trainscope::recorder::Record record{};
  record.op = static_cast<uint16_t>(trainscope::recorder::Op::kAllReduce);
  for (auto _ : state) {
    record.seq++;
    const auto pending = writer.append(record);
    trainscope::recorder::Writer::complete(pending, 0, record.seq);
  }
}
BENCHMARK(BM_RecorderAppend)->Repetitions(5)->ReportAggregatesOnly(true)->Threads(1)->Threads(2);

}  // namespace

BENCHMARK_MAIN();
