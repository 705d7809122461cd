// An unmodified NCCL pipeline-parallel "training" job for the inf/nan origin across send/recv: rank r is stage r.
// Each step, inside an NVTX range "train_step", stage r receives its activations from stage r-1 (stage 0 makes its
// own), computes on them (adds 1), and sends them to stage r+1 (the last stage keeps them). The sends and receives
// are plain ncclSend/ncclRecv calls, numbered per peer and direction: step s is send #s+1 and recv #s+1.
//
//   pipeline_program [--steps N] [--count N] [--inject inf|nan --rank R --step S]
//     --inject   on stage R at step S: inf or NaN in the activations it sends on
#include <nccl.h>
#include <nvtx3/nvToolsExt.h>

#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "bootstrap.h"

int main(int argc, char** argv) {
  int steps = 6;
  size_t count = 1024;
  std::string inject;
  int inject_rank = -1;
  int inject_step = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--steps" && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (arg == "--count" && i + 1 < argc) {
      count = static_cast<size_t>(std::atol(argv[++i]));
    } else if (arg == "--inject" && i + 1 < argc) {
      inject = argv[++i];
    } else if (arg == "--rank" && i + 1 < argc) {
      inject_rank = std::atoi(argv[++i]);
    } else if (arg == "--step" && i + 1 < argc) {
      inject_step = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: pipeline_program [--steps N] [--count N] [--inject inf|nan --rank R --step S]\n");
      return 2;
    }
  }
  if (!inject.empty() && inject != "inf" && inject != "nan") {
    std::fprintf(stderr, "pipeline_program: --inject takes inf or nan, not '%s'\n", inject.c_str());
    return 2;
  }
  const tsprog::Job job = tsprog::job();
  const ncclUniqueId id = tsprog::shared_unique_id(job);
  ncclComm_t comm = nullptr;
  tsprog::check(ncclCommInitRank(&comm, job.world, id, job.rank), "ncclCommInitRank");
  std::vector<float> activations(count);
  for (int step = 0; step < steps; ++step) {
    nvtxRangePushA("train_step");
    if (job.rank == 0) {
      for (size_t i = 0; i < count; ++i) activations[i] = 0.001f * static_cast<float>(i % 100 + 1);
    } else {
      tsprog::check(ncclRecv(activations.data(), count, ncclFloat32, job.rank - 1, comm, nullptr), "ncclRecv");
    }
    for (auto& a : activations) a += 1.0f;
    if (job.rank == inject_rank && step == inject_step) {
      activations[5] =
          inject == "nan" ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
    }
    if (job.rank + 1 < job.world) {
      tsprog::check(ncclSend(activations.data(), count, ncclFloat32, job.rank + 1, comm, nullptr), "ncclSend");
    }
    nvtxRangePop();
  }
  tsprog::check(ncclCommDestroy(comm), "ncclCommDestroy");
  std::printf("stage %d: %d steps done\n", job.rank, steps);
  return 0;
}
