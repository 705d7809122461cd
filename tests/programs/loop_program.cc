// An unmodified NCCL program that all-reduces in a loop: for crash tests (a rank is SIGKILLed mid-run) and the
// end-to-end overhead measurement. --iterations 0 loops until killed.
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bootstrap.h"

int main(int argc, char** argv) {
  long iterations = 0;
  size_t count = 256;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--iterations") == 0 && i + 1 < argc) {
      iterations = std::atol(argv[++i]);
    } else if (std::strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
      count = static_cast<size_t>(std::atoll(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: loop_program [--iterations N (0: forever)] [--count N]\n");
      return 2;
    }
  }
  const tsprog::Job job = tsprog::job();
  const ncclUniqueId id = tsprog::shared_unique_id(job);
  ncclComm_t comm = nullptr;
  tsprog::check(ncclCommInitRank(&comm, job.world, id, job.rank), "ncclCommInitRank");
  std::vector<float> buf(count, 1.0f);
  for (long it = 0; iterations == 0 || it < iterations; ++it) {
    tsprog::check(ncclAllReduce(buf.data(), buf.data(), count, ncclFloat32, ncclAvg, comm, nullptr), "allreduce");
  }
  tsprog::check(ncclCommDestroy(comm), "destroy");
  std::printf("rank %d done %g\n", job.rank, static_cast<double>(buf[0]));
  return 0;
}
