// An unmodified NCCL program that trains for a few steps and, on request, goes wrong on one rank in one of the
// ways our users meet: a collective with another shape, type, reduction op, root or operation, a send/recv pair
// that disagrees, a rank that leaves the loop early (destroying its communicator, or just exiting), or one that
// skips its send to the next rank and then ends as if that step were its last (skip-send: its neighbour waits in
// that receive forever, as a pipeline stage whose peer counted one micro-batch less).
//
//   scenario_program [--steps N] [--count N] [--digest] [--fault KIND --rank R --step S]
// KIND: half-count, dtype, redop, root, op, p2p-count, early-destroy, early-exit, hang, skip-send, exit-3 (the rank
// exits with status 3 after its last step)
// N for --count: at least 128 (each step also sends and receives 128 elements of the same buffers).
// --digest: after the loop, each rank prints "rank R digest D" (its buffers' FNV-1a), for comparing its twins
// (dlopen_program, tests/programs/python/scenario_job.py) by their results. The loop is in scenario.h.
#include <nccl.h>

#include <cstdio>

#include "scenario.h"

int main(int argc, char** argv) {
  tsprog::ScenarioOptions options;
  for (int i = 1; i < argc; ++i) {
    if (!tsprog::parse_scenario_option(argc, argv, &i, &options)) {
      std::fprintf(stderr, "usage: scenario_program %s", tsprog::kScenarioUsage);
      return 2;
    }
  }
  const tsprog::ScenarioNccl nccl{&ncclGetUniqueId, &ncclCommInitRank, &ncclCommDestroy, &ncclAllReduce, &ncclBroadcast,
                                  &ncclGroupStart,  &ncclGroupEnd,     &ncclSend,        &ncclRecv};
  return tsprog::run_scenario(nccl, options);
}
