// An unmodified NCCL program that trains for a few steps and, on request, goes wrong on one rank in one of the
// ways our users meet: a collective with another shape, type, reduction op, root or operation, a send/recv pair
// that disagrees, a rank that leaves the loop early (destroying its communicator, or just exiting), or one that
// skips its send to the next rank and then ends as if that step were its last (skip-send: its neighbour waits in
// that receive forever, as a pipeline stage whose peer counted one micro-batch less).
//
//   scenario_program [--steps N] [--count N] [--fault KIND --rank R --step S]
// KIND: half-count, dtype, redop, root, op, p2p-count, early-destroy, early-exit, hang, skip-send
#include <nccl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bootstrap.h"

int main(int argc, char** argv) {
  int steps = 10;
  size_t count = 1 << 16;
  std::string fault;
  int fault_rank = -1;
  int fault_step = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--steps" && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (arg == "--count" && i + 1 < argc) {
      count = static_cast<size_t>(std::atoll(argv[++i]));
    } else if (arg == "--fault" && i + 1 < argc) {
      fault = argv[++i];
    } else if (arg == "--rank" && i + 1 < argc) {
      fault_rank = std::atoi(argv[++i]);
    } else if (arg == "--step" && i + 1 < argc) {
      fault_step = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: scenario_program [--steps N] [--count N] [--fault KIND --rank R --step S]\n");
      return 2;
    }
  }
  const tsprog::Job job = tsprog::job();
  const ncclUniqueId id = tsprog::shared_unique_id(job);
  ncclComm_t comm = nullptr;
  tsprog::check(ncclCommInitRank(&comm, job.world, id, job.rank), "ncclCommInitRank");
  std::vector<float> grads(count, 1.0f);
  std::vector<float> other(count, 0.0f);
  std::vector<double> wide(count, 1.0);
  for (int step = 0; step < steps; ++step) {
    const bool faulty = job.rank == fault_rank && step == fault_step;
    if (faulty && fault == "early-destroy") {
      std::printf("rank %d leaves the loop at step %d and destroys its communicator\n", job.rank, step);
      std::fflush(stdout);
      tsprog::check(ncclCommDestroy(comm), "destroy");
      return 0;
    }
    if (faulty && fault == "early-exit") {
      std::printf("rank %d leaves the loop at step %d and exits\n", job.rank, step);
      std::fflush(stdout);
      return 0;
    }
    if (faulty && fault == "hang") {
      std::printf("rank %d stops calling NCCL at step %d\n", job.rank, step);
      std::fflush(stdout);
      pause();  // alive but silent, as in a long checkpoint save
    }
    ncclResult_t result = ncclSuccess;
    if (faulty && fault == "half-count") {
      result = ncclAllReduce(grads.data(), grads.data(), count / 2, ncclFloat32, ncclSum, comm, nullptr);
    } else if (faulty && fault == "dtype") {
      result = ncclAllReduce(wide.data(), wide.data(), count, ncclFloat64, ncclSum, comm, nullptr);
    } else if (faulty && fault == "redop") {
      result = ncclAllReduce(grads.data(), grads.data(), count, ncclFloat32, ncclMax, comm, nullptr);
    } else if (faulty && fault == "op") {
      result = ncclBroadcast(grads.data(), grads.data(), count, ncclFloat32, 0, comm, nullptr);
    } else {
      result = ncclAllReduce(grads.data(), grads.data(), count, ncclFloat32, ncclSum, comm, nullptr);
    }
    tsprog::check(result, "gradient all-reduce");
    const int root = faulty && fault == "root" ? 1 : 0;
    tsprog::check(ncclBroadcast(other.data(), other.data(), 16, ncclFloat32, root, comm, nullptr), "broadcast");
    if (job.world > 1) {
      const int right = (job.rank + 1) % job.world;
      const int left = (job.rank + job.world - 1) % job.world;
      const size_t sent = faulty && fault == "p2p-count" ? 64 : 128;
      const bool skip_send = faulty && fault == "skip-send";
      tsprog::check(ncclGroupStart(), "group start");
      if (!skip_send) tsprog::check(ncclSend(grads.data(), sent, ncclFloat32, right, comm, nullptr), "send");
      tsprog::check(ncclRecv(other.data(), 128, ncclFloat32, left, comm, nullptr), "recv");
      tsprog::check(ncclGroupEnd(), "group end");
      if (skip_send) {
        std::printf("rank %d skipped its send to rank %d at step %d and leaves the loop\n", job.rank, right, step);
        std::fflush(stdout);
        break;
      }
    }
  }
  tsprog::check(ncclCommDestroy(comm), "destroy");
  std::printf("rank %d finished %d steps\n", job.rank, steps);
  return 0;
}
