// The scenario job's loop, shared by scenario_program (NCCL linked with -lnccl) and dlopen_program (NCCL looked up
// in a dlopen() handle): the same options, the same NCCL calls, the same output. See scenario_program.cc.
#pragma once

#include <nccl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bootstrap.h"

namespace tsprog {

// The NCCL functions the scenario calls, however the program found them.
struct ScenarioNccl {
  decltype(&ncclGetUniqueId) get_unique_id;
  decltype(&ncclCommInitRank) comm_init_rank;
  decltype(&ncclCommDestroy) comm_destroy;
  decltype(&ncclAllReduce) all_reduce;
  decltype(&ncclBroadcast) broadcast;
  decltype(&ncclGroupStart) group_start;
  decltype(&ncclGroupEnd) group_end;
  decltype(&ncclSend) send;
  decltype(&ncclRecv) recv;
};

struct ScenarioOptions {
  int steps = 10;
  size_t count = 1 << 16;
  std::string fault;
  int fault_rank = -1;
  int fault_step = -1;
  bool digest = false;  // print a digest of each rank's buffers after the loop
};

inline constexpr const char* kScenarioUsage =
    "[--steps N] [--count N] [--digest] [--fault KIND --rank R --step S]\n"
    "  KIND: half-count, dtype, redop, root, op, p2p-count, early-destroy, early-exit, hang, skip-send, exit-3\n";

// Consumes the scenario option at argv[*i] (and its value); false if it is not one.
inline bool parse_scenario_option(int argc, char** argv, int* i, ScenarioOptions* options) {
  const std::string arg = argv[*i];
  const bool has_value = *i + 1 < argc;
  if (arg == "--steps" && has_value) {
    options->steps = std::atoi(argv[++*i]);
  } else if (arg == "--count" && has_value) {
    options->count = static_cast<size_t>(std::atoll(argv[++*i]));
  } else if (arg == "--digest") {
    options->digest = true;
  } else if (arg == "--fault" && has_value) {
    options->fault = argv[++*i];
  } else if (arg == "--rank" && has_value) {
    options->fault_rank = std::atoi(argv[++*i]);
  } else if (arg == "--step" && has_value) {
    options->fault_step = std::atoi(argv[++*i]);
  } else {
    return false;
  }
  return true;
}

// Runs the job; returns main's exit status. Always inlined, so that the NCCL calls are made from the program's own
// main (the reports' native stacks of scenario_program name it, and the tests expect "#0 main+0x").
[[gnu::always_inline]] inline int run_scenario(const ScenarioNccl& nccl, const ScenarioOptions& options) {
  const std::string& fault = options.fault;
  const size_t count = options.count;
  const tsprog::Job job = tsprog::job();
  const ncclUniqueId id = tsprog::shared_unique_id(job, nccl.get_unique_id);
  ncclComm_t comm = nullptr;
  tsprog::check(nccl.comm_init_rank(&comm, job.world, id, job.rank), "ncclCommInitRank");
  std::vector<float> grads(count, 1.0f);
  std::vector<float> other(count, 0.0f);
  std::vector<double> wide(count, 1.0);
  for (int step = 0; step < options.steps; ++step) {
    const bool faulty = job.rank == options.fault_rank && step == options.fault_step;
    if (faulty && fault == "early-destroy") {
      std::printf("rank %d leaves the loop at step %d and destroys its communicator\n", job.rank, step);
      std::fflush(stdout);
      tsprog::check(nccl.comm_destroy(comm), "destroy");
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
      result = nccl.all_reduce(grads.data(), grads.data(), count / 2, ncclFloat32, ncclSum, comm, nullptr);
    } else if (faulty && fault == "dtype") {
      result = nccl.all_reduce(wide.data(), wide.data(), count, ncclFloat64, ncclSum, comm, nullptr);
    } else if (faulty && fault == "redop") {
      result = nccl.all_reduce(grads.data(), grads.data(), count, ncclFloat32, ncclMax, comm, nullptr);
    } else if (faulty && fault == "op") {
      result = nccl.broadcast(grads.data(), grads.data(), count, ncclFloat32, 0, comm, nullptr);
    } else {
      result = nccl.all_reduce(grads.data(), grads.data(), count, ncclFloat32, ncclSum, comm, nullptr);
    }
    tsprog::check(result, "gradient all-reduce");
    const int root = faulty && fault == "root" ? 1 : 0;
    tsprog::check(nccl.broadcast(other.data(), other.data(), 16, ncclFloat32, root, comm, nullptr), "broadcast");
    if (job.world > 1) {
      const int right = (job.rank + 1) % job.world;
      const int left = (job.rank + job.world - 1) % job.world;
      const size_t sent = faulty && fault == "p2p-count" ? 64 : 128;
      const bool skip_send = faulty && fault == "skip-send";
      tsprog::check(nccl.group_start(), "group start");
      if (!skip_send) tsprog::check(nccl.send(grads.data(), sent, ncclFloat32, right, comm, nullptr), "send");
      tsprog::check(nccl.recv(other.data(), 128, ncclFloat32, left, comm, nullptr), "recv");
      tsprog::check(nccl.group_end(), "group end");
      if (skip_send) {
        std::printf("rank %d skipped its send to rank %d at step %d and leaves the loop\n", job.rank, right, step);
        std::fflush(stdout);
        break;
      }
    }
  }
  if (options.digest) {
    unsigned long long h = tsprog::digest(grads.data(), grads.size() * sizeof(float));
    h = tsprog::digest(other.data(), other.size() * sizeof(float), h);
    std::printf("rank %d digest %016llx\n", job.rank, h);
  }
  tsprog::check(nccl.comm_destroy(comm), "destroy");
  std::printf("rank %d finished %d steps\n", job.rank, options.steps);
  // exit-3: the faulty rank ends like the others, then exits with status 3 (a job's own failure after its last step).
  return fault == "exit-3" && job.rank == options.fault_rank ? 3 : 0;
}

}  // namespace tsprog
