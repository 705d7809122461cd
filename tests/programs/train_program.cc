// An unmodified NCCL "training" job for the frame reports: each step all-reduces an fp32 gradient bucket (out of
// place), all-reduces an fp16 bucket in place inside a group with a broadcast, and broadcasts a small fp32 buffer
// from rank 0 — the same sequence every step, as a real step repeats its collectives. Gradients are recomputed
// (reset) every step, so a bad value lives in one step only unless it is injected again.
//
//   train_program [--steps N] [--count N] [--nvtx] [--nonblocking [--no-poll]]
//                 [--inject inf|nan|big --rank R --step S [--streak K]]
//     --nvtx     each step opens an NVTX range "train_step" (and an inner "forward" range that is no marker)
//     --nonblocking  the communicator is created with ncclCommInitRankConfig, config.blocking = 0; after each call
//                or group that returns ncclInProgress the program polls ncclCommGetAsyncError until it reads
//                ncclSuccess, as NCCL requires before the stream or the communicator is used again
//     --no-poll  (with --nonblocking) never polls: a job that breaks that rule, whose results are not to be trusted
//     --wait-before S FILE  before step S (S = the step count: before the communicator's end), wait at most 60 s for
//                FILE to exist (a test's signal); may be given more than once
//     --inject   on rank R at step S (and the K-1 steps after it): inf or NaN in the fp32 gradient bucket's send
//                buffer, or (big) 6.27e+04 in the fp16 bucket, 96% of float16's largest finite value
#include <nccl.h>
#include <nvtx3/nvToolsExt.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "bootstrap.h"

int main(int argc, char** argv) {
  int steps = 10;
  size_t count = 4096;
  bool nvtx = false;
  std::string inject;
  int inject_rank = -1;
  int inject_step = -1;
  int streak = 1;
  bool nonblocking = false;
  bool poll = true;
  std::vector<std::pair<int, std::string>> waits;  // --wait-before
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--steps" && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (arg == "--count" && i + 1 < argc) {
      count = static_cast<size_t>(std::atoll(argv[++i]));
    } else if (arg == "--nvtx") {
      nvtx = true;
    } else if (arg == "--nonblocking") {
      nonblocking = true;
    } else if (arg == "--no-poll") {
      poll = false;
    } else if (arg == "--inject" && i + 1 < argc) {
      inject = argv[++i];
    } else if (arg == "--rank" && i + 1 < argc) {
      inject_rank = std::atoi(argv[++i]);
    } else if (arg == "--step" && i + 1 < argc) {
      inject_step = std::atoi(argv[++i]);
    } else if (arg == "--streak" && i + 1 < argc) {
      streak = std::atoi(argv[++i]);
    } else if (arg == "--wait-before" && i + 2 < argc) {
      const int step = std::atoi(argv[++i]);
      waits.emplace_back(step, argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: train_program [--steps N] [--count N] [--nvtx] [--nonblocking [--no-poll]] "
                   "[--inject inf|nan|big --rank R --step S [--streak K]] [--wait-before S FILE]...\n");
      return 2;
    }
  }
  if (!inject.empty() && inject != "inf" && inject != "nan" && inject != "big") {
    std::fprintf(stderr, "train_program: --inject takes inf, nan or big, not '%s'\n", inject.c_str());
    return 2;
  }
  const tsprog::Job job = tsprog::job();
  const ncclUniqueId id = tsprog::shared_unique_id(job);
  ncclComm_t comm = nullptr;
  if (nonblocking) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t r = ncclCommInitRankConfig(&comm, job.world, id, job.rank, &config);
    tsprog::check(r == ncclInProgress ? ncclSuccess : r, "ncclCommInitRankConfig");
  } else {
    tsprog::check(ncclCommInitRank(&comm, job.world, id, job.rank), "ncclCommInitRank");
  }
  // A call on the non-blocking communicator: ncclInProgress is success once ncclCommGetAsyncError reads ncclSuccess.
  auto done = [&](ncclResult_t result, const char* what) {
    if (nonblocking && result == ncclInProgress) {
      if (!poll) return;
      ncclResult_t state = ncclInProgress;
      while (state == ncclInProgress) tsprog::check(ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError");
      result = state;
    }
    tsprog::check(result, what);
  };
  if (nonblocking && poll) done(ncclInProgress, "ncclCommInitRankConfig");
  // A call inside a group: only queued; the group's end is what may be in progress.
  auto queued = [&](ncclResult_t result, const char* what) {
    tsprog::check(nonblocking && result == ncclInProgress ? ncclSuccess : result, what);
  };

  std::vector<float> grads(count), reduced(count), params(16);
  std::vector<uint16_t> halves(count / 2);
  constexpr uint16_t kHalfOne = 0x3C00;
  constexpr uint16_t kHalfBig = 0x7BA8;  // 62720 = 6.27e+04
  const auto wait_before = [&](int step) {
    for (const auto& [at, file] : waits)
      if (at == step && !tsprog::wait_for_file(file.c_str())) tsprog::fail(("waiting for " + file).c_str(), 0);
  };
  for (int step = 0; step < steps; ++step) {
    wait_before(step);
    if (nvtx) nvtxRangePushA("train_step");
    if (nvtx) nvtxRangePushA("forward");
    for (size_t i = 0; i < count; ++i) grads[i] = 0.001f * static_cast<float>(i % 100 + 1);
    for (auto& h : halves) h = kHalfOne;
    for (size_t i = 0; i < params.size(); ++i) params[i] = job.rank == 0 ? 0.5f : 0.0f;
    const bool injecting = job.rank == inject_rank && step >= inject_step && step < inject_step + streak;
    if (injecting && inject == "inf") grads[7] = std::numeric_limits<float>::infinity();
    if (injecting && inject == "nan") grads[7] = std::numeric_limits<float>::quiet_NaN();
    if (injecting && inject == "big" && !halves.empty()) halves[3] = kHalfBig;
    if (nvtx) nvtxRangePop();

    done(ncclAllReduce(grads.data(), reduced.data(), count, ncclFloat32, ncclSum, comm, nullptr), "ncclAllReduce");
    tsprog::check(ncclGroupStart(), "ncclGroupStart");
    queued(ncclAllReduce(halves.data(), halves.data(), halves.size(), ncclFloat16, ncclMax, comm, nullptr),
           "ncclAllReduce");
    queued(ncclBroadcast(params.data(), params.data(), params.size(), ncclFloat32, 0, comm, nullptr), "ncclBroadcast");
    done(ncclGroupEnd(), "ncclGroupEnd");
    if (nvtx) nvtxRangePop();
  }
  wait_before(steps);
  tsprog::check(ncclCommDestroy(comm), "ncclCommDestroy");
  std::printf("rank %d: %d steps done\n", job.rank, steps);
  return 0;
}
