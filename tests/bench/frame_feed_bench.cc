// The frame machinery's CPU per watched call, on one thread and without sleeps, so the figure repeats: each call is
// appended to a flight recorder, watched as the job's thread watches it (the send buffer's statistics before, the
// receive buffer's after: 16 floats on the host), and every 64 calls the frame feed passes as the frame thread
// would (the batch tracker under auto, frames into the window). The calls cycle through the whole-job loop's six
// (all-reduce, broadcast, all-gather, reduce-scatter, send, recv on one communicator), so auto learns a period of 6.
// Split: BM_WatchedCallJobSide is the job's thread's share alone (its board entries taken back unread).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/flight_recorder_writer.h"
#include "shim/engine/engine_frame_feed.h"
#include "shim/engine/job_thread/engine_watch.h"

namespace {

using trainscope::recorder::Op;
namespace engine = trainscope::engine;

constexpr int8_t kNcclFloat32 = 7;
constexpr Op kLoop[] = {Op::kAllReduce, Op::kBroadcast, Op::kAllGather, Op::kReduceScatter, Op::kSend, Op::kRecv};

trainscope::recorder::Writer& writer() {
  static trainscope::recorder::Writer w;
  if (!w.is_open()) {
    const std::string path = "/tmp/trainscope-frame-feed-bench-" + std::to_string(getpid()) + ".tsrec";
    trainscope::recorder::WriterOptions options{};
    options.path = path.c_str();
    options.capacity = 1 << 16;
    options.max_comms = 16;
    options.pid = getpid();
    options.launcher_rank = options.launcher_world = options.local_rank = -1;
    options.host = "bench";
    options.run_id = "bench";
    options.exe = "bench";
    if (w.open(options) == 0) unlink(path.c_str());  // the mapping stays valid
  }
  return w;
}

struct Job {
  std::vector<float> send = std::vector<float>(16 * 4, 0.5f);
  std::vector<float> recv = std::vector<float>(16 * 4, 0.25f);
  uint64_t call = 0;
  uint64_t seq[2] = {0, 0};  // collectives; send/recv per direction

  // One watched call of the loop: its record appended, its buffers taken; returns its record index.
  uint64_t next() {
    const Op op = kLoop[call++ % 6];
    trainscope::recorder::Record r{};
    r.op = static_cast<uint16_t>(op);
    r.comm_id = 0xaada17;
    r.rank = 0;
    r.nranks = 4;
    r.peer = op == Op::kSend || op == Op::kRecv ? 1 : (op == Op::kBroadcast ? 0 : -1);
    r.seq = ++seq[op == Op::kSend || op == Op::kRecv ? 1 : 0];
    r.count = 16;
    r.dtype = kNcclFloat32;
    r.sendbuff = reinterpret_cast<uint64_t>(send.data());
    r.recvbuff = reinterpret_cast<uint64_t>(recv.data());
    r.flags = trainscope::recorder::kFlagWatched;
    const auto pending = writer().append(r);
    engine::WatchedCall* watched = engine::watch_begin(r, pending.commit - 1);
    engine::watch_end(watched, 0);
    trainscope::recorder::Writer::complete(pending, 0, 0);
    return pending.commit - 1;
  }
};

void BM_WatchedCallWithItsFrame(benchmark::State& state) {
  if (!writer().is_open()) {
    state.SkipWithError("cannot create the recorder file in /tmp");
    return;
  }
  engine::FrameFeedOptions options;  // auto batches, the default window
  uint64_t frames = 0;
  engine::FrameFeed feed(
      options,
      [&](const trainscope::frames::FrameUpdate&, const trainscope::frames::Frame* f) { frames += f != nullptr; },
      [](bool, const std::string&) {});
  Job job;
  for (auto _ : state) {
    job.next();
    if (job.call % 64 == 0) feed.pass(writer().header());
  }
  feed.pass(writer().header());
  state.counters["frames"] = static_cast<double>(frames);
  state.counters["period"] = static_cast<double>(feed.tracker().period());
}
BENCHMARK(BM_WatchedCallWithItsFrame)->Repetitions(5)->ReportAggregatesOnly(true);

void BM_WatchedCallJobSide(benchmark::State& state) {
  if (!writer().is_open()) {
    state.SkipWithError("cannot create the recorder file in /tmp");
    return;
  }
  Job job;
  for (auto _ : state) {
    const uint64_t index = job.next();
    bool present = false;
    benchmark::DoNotOptimize(engine::watch_board().take_if_complete(index, &present));
  }
}
BENCHMARK(BM_WatchedCallJobSide)->Repetitions(5)->ReportAggregatesOnly(true);

}  // namespace

BENCHMARK_MAIN();
