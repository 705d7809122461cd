// An unmodified NCCL program that drives N in-process communicators from ncclCommInitAll: first one thread per
// communicator (the one-thread-per-GPU pattern), then a single thread issuing all of them inside one group.
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "bootstrap.h"

int main(int argc, char** argv) {
  const int ndev = argc > 1 ? std::atoi(argv[1]) : 4;
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 50;
  if (ndev < 1 || ndev > 16 || iterations < 1) {
    std::fprintf(stderr, "usage: threads_program [NDEV 1..16] [ITERATIONS >= 1]\n");
    return 2;
  }
  std::vector<ncclComm_t> comms(static_cast<size_t>(ndev));
  tsprog::check(ncclCommInitAll(comms.data(), ndev, nullptr), "ncclCommInitAll");
  constexpr size_t kCount = 4096;
  std::vector<std::vector<float>> buffers(static_cast<size_t>(ndev), std::vector<float>(kCount));
  std::vector<unsigned long long> digests(static_cast<size_t>(ndev));
  std::vector<std::thread> threads;
  for (int d = 0; d < ndev; ++d) {
    threads.emplace_back([&, d] {
      auto& buf = buffers[static_cast<size_t>(d)];
      for (int it = 0; it < iterations; ++it) {
        for (size_t i = 0; i < kCount; ++i) buf[i] = static_cast<float>(d + 1 + static_cast<int>(i % 7));
        tsprog::check(
            ncclAllReduce(buf.data(), buf.data(), kCount, ncclFloat32, ncclSum, comms[static_cast<size_t>(d)], nullptr),
            "threaded allreduce");
      }
      digests[static_cast<size_t>(d)] = tsprog::digest(buf.data(), kCount * sizeof(float));
    });
  }
  for (auto& t : threads) t.join();
  tsprog::check(ncclGroupStart(), "group start");
  for (int d = 0; d < ndev; ++d)
    tsprog::check(ncclBroadcast(buffers[static_cast<size_t>(d)].data(), buffers[static_cast<size_t>(d)].data(), kCount,
                                ncclFloat32, 0, comms[static_cast<size_t>(d)], nullptr),
                  "grouped broadcast");
  tsprog::check(ncclGroupEnd(), "group end");
  for (int d = 0; d < ndev; ++d) tsprog::check(ncclCommDestroy(comms[static_cast<size_t>(d)]), "destroy");
  unsigned long long h = tsprog::digest(nullptr, 0);
  for (auto& b : buffers) h = tsprog::digest(b.data(), kCount * sizeof(float), h);
  for (auto d : digests) h = tsprog::digest(&d, sizeof(d), h);
  std::printf("threads digest %016llx\n", h);
  return 0;
}
