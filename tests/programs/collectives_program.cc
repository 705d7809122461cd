// An unmodified NCCL program (links -lnccl, includes only nccl.h) that makes every kind of call once per
// iteration: all collectives, send/recv in a group, split, shrink-free teardown. It prints a digest of every
// result, and with --calls PREFIX writes the calls it made to PREFIX.rankN (one line each) so tests can compare
// them with what the flight recorder holds.
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bootstrap.h"

namespace {

FILE* g_calls = nullptr;

// "op count dtype peer" — the fields a recorder record must match.
void note(const char* op, size_t count, int dtype, int peer) {
  if (g_calls != nullptr) std::fprintf(g_calls, "%s %zu %d %d\n", op, count, dtype, peer);
}

}  // namespace

int main(int argc, char** argv) {
  int iterations = 1;
  size_t count = 1024;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--calls") == 0 && i + 1 < argc) {
      const std::string path = std::string(argv[++i]) + ".rank" + std::to_string(tsprog::job().rank);
      g_calls = std::fopen(path.c_str(), "w");
    } else if (std::strcmp(argv[i], "--iterations") == 0 && i + 1 < argc) {
      iterations = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
      count = static_cast<size_t>(std::atoll(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: collectives_program [--calls FILE] [--iterations N] [--count N]\n");
      return 2;
    }
  }
  const tsprog::Job job = tsprog::job();
  const int n = job.world;
  const int me = job.rank;
  if (me == 0) note("ncclGetUniqueId", 0, -1, -1);
  const ncclUniqueId id = tsprog::shared_unique_id(job);
  ncclComm_t comm = nullptr;
  note("ncclCommInitRank", 0, -1, -1);
  tsprog::check(ncclCommInitRank(&comm, n, id, me), "ncclCommInitRank");

  std::vector<float> send(count * static_cast<size_t>(n));
  std::vector<float> recv(count * static_cast<size_t>(n));
  std::vector<double> dsend(count), drecv(count);
  std::vector<int> isend(count), irecv(count);
  unsigned long long h = tsprog::digest(nullptr, 0);
  for (int it = 0; it < iterations; ++it) {
    for (size_t i = 0; i < send.size(); ++i)
      send[i] = static_cast<float>((me + 1) * 0.5 + static_cast<double>(i % 97) + it);
    for (size_t i = 0; i < count; ++i) {
      dsend[i] = me * 1.25 + static_cast<double>(i);
      isend[i] = me * 3 + static_cast<int>(i % 11) + it;
    }
    note("ncclAllReduce", count, ncclFloat32, -1);
    tsprog::check(ncclAllReduce(send.data(), recv.data(), count, ncclFloat32, ncclSum, comm, nullptr), "allreduce");
    h = tsprog::digest(recv.data(), count * sizeof(float), h);
    note("ncclAllReduce", count, ncclFloat64, -1);
    tsprog::check(ncclAllReduce(dsend.data(), drecv.data(), count, ncclFloat64, ncclMax, comm, nullptr),
                  "allreduce max");
    h = tsprog::digest(drecv.data(), count * sizeof(double), h);
    note("ncclReduce", count, ncclInt32, 0);
    tsprog::check(ncclReduce(isend.data(), irecv.data(), count, ncclInt32, ncclSum, 0, comm, nullptr), "reduce");
    if (me == 0) h = tsprog::digest(irecv.data(), count * sizeof(int), h);
    note("ncclBroadcast", count, ncclFloat32, n - 1);
    tsprog::check(ncclBroadcast(send.data(), recv.data(), count, ncclFloat32, n - 1, comm, nullptr), "broadcast");
    h = tsprog::digest(recv.data(), count * sizeof(float), h);
    note("ncclBcast", count, ncclInt32, 0);
    tsprog::check(ncclBcast(isend.data(), count, ncclInt32, 0, comm, nullptr), "bcast");
    h = tsprog::digest(isend.data(), count * sizeof(int), h);
    note("ncclAllGather", count, ncclFloat32, -1);
    tsprog::check(ncclAllGather(send.data(), recv.data(), count, ncclFloat32, comm, nullptr), "allgather");
    h = tsprog::digest(recv.data(), recv.size() * sizeof(float), h);
    note("ncclReduceScatter", count, ncclFloat32, -1);
    tsprog::check(ncclReduceScatter(send.data(), recv.data(), count, ncclFloat32, ncclSum, comm, nullptr),
                  "reducescatter");
    h = tsprog::digest(recv.data(), count * sizeof(float), h);
    note("ncclAlltoAll", count, ncclFloat32, -1);
    tsprog::check(ncclAlltoAll(send.data(), recv.data(), count, ncclFloat32, comm, nullptr), "alltoall");
    h = tsprog::digest(recv.data(), recv.size() * sizeof(float), h);
    note("ncclGather", count, ncclFloat32, 0);
    tsprog::check(ncclGather(send.data(), recv.data(), count, ncclFloat32, 0, comm, nullptr), "gather");
    if (me == 0) h = tsprog::digest(recv.data(), recv.size() * sizeof(float), h);
    note("ncclScatter", count, ncclFloat32, 0);
    tsprog::check(ncclScatter(send.data(), recv.data(), count, ncclFloat32, 0, comm, nullptr), "scatter");
    h = tsprog::digest(recv.data(), count * sizeof(float), h);
    // A ring exchange: send to the right, receive from the left, in one group.
    const int right = (me + 1) % n;
    const int left = (me + n - 1) % n;
    note("ncclGroupStart", 0, -1, -1);
    tsprog::check(ncclGroupStart(), "group start");
    note("ncclSend", count, ncclFloat32, right);
    tsprog::check(ncclSend(send.data(), count, ncclFloat32, right, comm, nullptr), "send");
    note("ncclRecv", count, ncclFloat32, left);
    tsprog::check(ncclRecv(recv.data(), count, ncclFloat32, left, comm, nullptr), "recv");
    note("ncclGroupEnd", 0, -1, -1);
    tsprog::check(ncclGroupEnd(), "group end");
    h = tsprog::digest(recv.data(), count * sizeof(float), h);
  }
  // Split into even and odd ranks and reduce within each half.
  ncclComm_t half_comm = nullptr;
  note("ncclCommSplit", static_cast<size_t>(me), -1, me % 2);
  tsprog::check(ncclCommSplit(comm, me % 2, me, &half_comm, nullptr), "split");
  note("ncclAllReduce", count, ncclFloat32, -1);
  tsprog::check(ncclAllReduce(send.data(), recv.data(), count, ncclFloat32, ncclSum, half_comm, nullptr),
                "child allreduce");
  h = tsprog::digest(recv.data(), count * sizeof(float), h);
  note("ncclCommDestroy", 0, -1, -1);
  tsprog::check(ncclCommDestroy(half_comm), "destroy child");
  note("ncclCommFinalize", 0, -1, -1);
  tsprog::check(ncclCommFinalize(comm), "finalize");
  note("ncclCommDestroy", 0, -1, -1);
  tsprog::check(ncclCommDestroy(comm), "destroy");
  if (g_calls != nullptr) std::fclose(g_calls);
  std::printf("rank %d digest %016llx\n", me, h);
  return 0;
}
