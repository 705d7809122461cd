// The bundled demo: a small data-parallel "training job" written against plain nccl.h, as an unmodified job
// would be. Each rank broadcasts the initial weights from rank 0, then for every step all-reduces its gradient
// buckets (fp32 and bf16), averages the loss, and passes activations to its neighbour in a pipeline group;
// every few steps it all-gathers a small evaluation shard.
//
//   demo_train [STEPS] [--mismatch-at STEP] [--overflow-at STEP]
// With --mismatch-at, rank 1 all-reduces only half of its gradient bucket at that step: the classic shape bug
// that makes every other rank hang in real NCCL. With --overflow-at, one of rank 2's bf16 gradients overflows to
// inf at that step: the all-reduce sum hands it to every rank.
#include <nccl.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tests/programs/bootstrap.h"

namespace {

uint16_t to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 20;
  int mismatch_at = -1;
  int overflow_at = -1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--mismatch-at") == 0 && i + 1 < argc) {
      mismatch_at = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--overflow-at") == 0 && i + 1 < argc) {
      overflow_at = std::atoi(argv[++i]);
    } else {
      steps = std::atoi(argv[i]);
    }
  }
  if (steps < 1 || steps > 100000) {
    std::fprintf(stderr, "usage: demo_train [STEPS 1..100000] [--mismatch-at STEP] [--overflow-at STEP]\n");
    return 2;
  }
  const tsprog::Job job = tsprog::job();
  const ncclUniqueId id = tsprog::shared_unique_id(job);
  ncclComm_t comm = nullptr;
  tsprog::check(ncclCommInitRank(&comm, job.world, id, job.rank), "ncclCommInitRank");

  constexpr size_t kWeights = 1 << 16;
  constexpr size_t kBf16Bucket = 1 << 14;
  std::vector<float> weights(kWeights, job.rank == 0 ? 0.5f : 0.0f);
  std::vector<float> grads(kWeights);
  std::vector<uint16_t> bf16_grads(kBf16Bucket);
  std::vector<float> activations(4096), received(4096);
  std::vector<float> eval_shard(256), eval_all(256 * static_cast<size_t>(job.world));
  tsprog::check(ncclBroadcast(weights.data(), weights.data(), kWeights, ncclFloat32, 0, comm, nullptr), "broadcast");

  const int right = (job.rank + 1) % job.world;
  const int left = (job.rank + job.world - 1) % job.world;
  for (int step = 0; step < steps; ++step) {
    for (size_t i = 0; i < kWeights; ++i)
      grads[i] = 0.001f * static_cast<float>((i + static_cast<size_t>(job.rank + step)) % 13);
    for (size_t i = 0; i < kBf16Bucket; ++i) bf16_grads[i] = to_bf16(0.01f * static_cast<float>(i % 5));
    constexpr uint16_t kBf16Inf = 0x7F80;
    if (step == overflow_at && job.rank == 2) bf16_grads[1234] = kBf16Inf;
    const size_t bucket = step == mismatch_at && job.rank == 1 ? kWeights / 2 : kWeights;
    tsprog::check(ncclAllReduce(grads.data(), grads.data(), bucket, ncclFloat32, ncclAvg, comm, nullptr), "grads");
    tsprog::check(
        ncclAllReduce(bf16_grads.data(), bf16_grads.data(), kBf16Bucket, ncclBfloat16, ncclSum, comm, nullptr),
        "bf16 grads");
    for (size_t i = 0; i < kWeights; ++i) weights[i] -= 0.1f * grads[i];
    float loss = 1.0f / static_cast<float>(step + 1) + 0.01f * static_cast<float>(job.rank);
    tsprog::check(ncclAllReduce(&loss, &loss, 1, ncclFloat32, ncclAvg, comm, nullptr), "loss");
    if (job.world > 1) {
      for (auto& a : activations) a = static_cast<float>(job.rank + step);
      tsprog::check(ncclGroupStart(), "group start");
      tsprog::check(ncclSend(activations.data(), activations.size(), ncclFloat32, right, comm, nullptr), "send");
      tsprog::check(ncclRecv(received.data(), received.size(), ncclFloat32, left, comm, nullptr), "recv");
      tsprog::check(ncclGroupEnd(), "group end");
    }
    if (step % 5 == 4) {
      for (auto& e : eval_shard) e = loss;
      tsprog::check(ncclAllGather(eval_shard.data(), eval_all.data(), eval_shard.size(), ncclFloat32, comm, nullptr),
                    "eval allgather");
    }
    if (job.rank == 0 && (step % 5 == 4 || step == steps - 1))
      std::printf("step %3d  loss %.4f  weight[1] %.5f\n", step, static_cast<double>(loss),
                  static_cast<double>(weights[1]));
  }
  tsprog::check(ncclCommDestroy(comm), "destroy");
  return 0;
}
