// ncclSend/ncclRecv and groups on forked ranks: pair and ring exchanges, big and many messages, nesting.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include <nccl.h>

#include "rank_processes.h"
#include "reference.h"
#include "src/shared_segment.h"

namespace tsfake_test {
namespace {

constexpr std::size_t kLargeFloats = 3 * tsfake::kChannelRingBytes / sizeof(float) + 5;  // several ring wraps

TEST(PointToPoint, PairExchangesInOneGroupForAnySize) {
  EXPECT_EQ(run_ranks(2,
                      [](int rank, int, const ncclUniqueId& id, RankChecks& check) {
                        ncclComm_t comm = nullptr;
                        if (!check.nccl(ncclCommInitRank(&comm, 2, id, rank), "init")) return;
                        const int peer = 1 - rank;
                        int salt = 0;
                        for (ncclDataType_t datatype : kAllDatatypes) {
                          for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{37}, kLargeFloats}) {
                            ++salt;
                            const Bytes mine = make_input(datatype, count, rank, salt);
                            const Bytes theirs = make_input(datatype, count, peer, salt);
                            Bytes got(theirs.size() + 1, 0);
                            check.nccl(ncclGroupStart(), "group start");
                            check.nccl(ncclSend(mine.data(), count, datatype, peer, comm, nullptr), "send");
                            check.nccl(ncclRecv(got.data(), count, datatype, peer, comm, nullptr), "recv");
                            if (!check.nccl(ncclGroupEnd(), "group end")) return;
                            check((theirs.empty() || std::memcmp(got.data(), theirs.data(), theirs.size()) == 0),
                                  std::string("exchange ") + type_name(datatype) + " count " + std::to_string(count));
                          }
                        }
                        check.nccl(ncclCommDestroy(comm), "destroy");
                      }),
            "");
}

TEST(PointToPoint, RingExchangeOfLargeMessagesOnFourRanks) {
  EXPECT_EQ(run_ranks(4,
                      [](int rank, int n, const ncclUniqueId& id, RankChecks& check) {
                        ncclComm_t comm = nullptr;
                        if (!check.nccl(ncclCommInitRank(&comm, n, id, rank), "init")) return;
                        const int next = (rank + 1) % n;
                        const int prev = (rank + n - 1) % n;
                        for (int round = 0; round < 3; ++round) {
                          const Bytes mine = make_input(ncclFloat32, kLargeFloats, rank, round);
                          const Bytes from_prev = make_input(ncclFloat32, kLargeFloats, prev, round);
                          Bytes got(from_prev.size(), 0);
                          check.nccl(ncclGroupStart(), "group start");
                          check.nccl(ncclSend(mine.data(), kLargeFloats, ncclFloat32, next, comm, nullptr), "send");
                          check.nccl(ncclRecv(got.data(), kLargeFloats, ncclFloat32, prev, comm, nullptr), "recv");
                          if (!check.nccl(ncclGroupEnd(), "group end")) return;
                          check(got == from_prev, "ring round " + std::to_string(round));
                        }
                        check.nccl(ncclCommDestroy(comm), "destroy");
                      }),
            "");
}

TEST(PointToPoint, ManyMessagesInFlightArriveInOrder) {
  constexpr int kMessages = static_cast<int>(tsfake::kMaxMessagesInFlight) * 2 + 3;
  EXPECT_EQ(
      run_ranks(2,
                [](int rank, int, const ncclUniqueId& id, RankChecks& check) {
                  ncclComm_t comm = nullptr;
                  if (!check.nccl(ncclCommInitRank(&comm, 2, id, rank), "init")) return;
                  std::vector<Bytes> buffers;
                  for (int m = 0; m < kMessages; ++m) {
                    const std::size_t count = static_cast<std::size_t>(m * 97 % 3001);
                    buffers.push_back(rank == 0 ? make_input(ncclInt32, count, 0, m) : Bytes(count * 4 + 1, 0));
                  }
                  check.nccl(ncclGroupStart(), "group start");
                  for (int m = 0; m < kMessages; ++m) {
                    const std::size_t count = static_cast<std::size_t>(m * 97 % 3001);
                    if (rank == 0)
                      check.nccl(ncclSend(buffers[m].data(), count, ncclInt32, 1, comm, nullptr), "send");
                    else
                      check.nccl(ncclRecv(buffers[m].data(), count, ncclInt32, 0, comm, nullptr), "recv");
                  }
                  if (!check.nccl(ncclGroupEnd(), "group end")) return;
                  for (int m = 0; m < kMessages && rank == 1; ++m) {
                    const std::size_t count = static_cast<std::size_t>(m * 97 % 3001);
                    const Bytes expected = make_input(ncclInt32, count, 0, m);
                    check((expected.empty() || std::memcmp(buffers[m].data(), expected.data(), expected.size()) == 0),
                          "message " + std::to_string(m));
                  }
                  check.nccl(ncclCommDestroy(comm), "destroy");
                }),
      "");
}

TEST(PointToPoint, BlockingCallsOutsideGroupsAndSelfMessages) {
  EXPECT_EQ(run_ranks(2,
                      [](int rank, int, const ncclUniqueId& id, RankChecks& check) {
                        ncclComm_t comm = nullptr;
                        if (!check.nccl(ncclCommInitRank(&comm, 2, id, rank), "init")) return;
                        const Bytes zero = make_input(ncclFloat64, kLargeFloats, 0, 1);
                        const Bytes one = make_input(ncclFloat64, kLargeFloats, 1, 1);
                        Bytes got(zero.size(), 0);
                        if (rank == 0) {
                          check.nccl(ncclSend(zero.data(), kLargeFloats, ncclFloat64, 1, comm, nullptr), "send");
                          check.nccl(ncclRecv(got.data(), kLargeFloats, ncclFloat64, 1, comm, nullptr), "recv");
                          check(got == one, "rank 0 got rank 1's data");
                        } else {
                          check.nccl(ncclRecv(got.data(), kLargeFloats, ncclFloat64, 0, comm, nullptr), "recv");
                          check.nccl(ncclSend(one.data(), kLargeFloats, ncclFloat64, 0, comm, nullptr), "send");
                          check(got == zero, "rank 1 got rank 0's data");
                        }
                        const Bytes mine = make_input(ncclUint8, 100000, rank, 2);
                        Bytes self(mine.size(), 0);
                        check.nccl(ncclGroupStart(), "group start");
                        check.nccl(ncclSend(mine.data(), mine.size(), ncclUint8, rank, comm, nullptr), "self send");
                        check.nccl(ncclRecv(self.data(), self.size(), ncclUint8, rank, comm, nullptr), "self recv");
                        check.nccl(ncclGroupEnd(), "group end");
                        check(self == mine, "self message");
                        check.nccl(ncclCommDestroy(comm), "destroy");
                      }),
            "");
}

TEST(Groups, NestedGroupsDeferEverythingToTheOutermostEnd) {
  EXPECT_EQ(
      run_ranks(
          2,
          [](int rank, int, const ncclUniqueId& id, RankChecks& check) {
            ncclComm_t comm = nullptr;
            if (!check.nccl(ncclCommInitRank(&comm, 2, id, rank), "init")) return;
            const int peer = 1 - rank;
            const Bytes mine = make_input(ncclFloat32, kLargeFloats, rank, 3);
            std::vector<float> sum_out(kLargeFloats + 1, 0.0f);
            std::vector<float> gathered(2 * 5 + 1, 0.0f);
            Bytes got(mine.size(), 0);
            check.nccl(ncclGroupStart(), "outer start");
            check.nccl(ncclSend(mine.data(), kLargeFloats, ncclFloat32, peer, comm, nullptr), "send");
            check.nccl(ncclGroupStart(), "inner start");
            check.nccl(ncclAllReduce(mine.data(), sum_out.data(), kLargeFloats, ncclFloat32, ncclSum, comm, nullptr),
                       "allreduce");
            check.nccl(ncclAllGather(mine.data(), gathered.data(), 5, ncclFloat32, comm, nullptr), "allgather");
            check.nccl(ncclGroupEnd(), "inner end");
            // Nothing may have run yet: the peer's data cannot be here before the outermost end.
            check(std::all_of(got.begin(), got.end(), [](unsigned char b) { return b == 0; }), "deferred");
            check.nccl(ncclRecv(got.data(), kLargeFloats, ncclFloat32, peer, comm, nullptr), "recv");
            if (!check.nccl(ncclGroupEnd(), "outer end")) return;
            check(got == make_input(ncclFloat32, kLargeFloats, peer, 3), "p2p data");
            const Bytes expected = reference_reduce(
                ncclFloat32, TestOp::kSum,
                {make_input(ncclFloat32, kLargeFloats, 0, 3), make_input(ncclFloat32, kLargeFloats, 1, 3)},
                kLargeFloats);
            check(std::memcmp(sum_out.data(), expected.data(), expected.size()) == 0, "allreduce in group");
            const Bytes g0 = make_input(ncclFloat32, 5, 0, 3);
            const Bytes g1 = make_input(ncclFloat32, 5, 1, 3);
            check(std::memcmp(gathered.data(), g0.data(), 20) == 0 &&
                      std::memcmp(gathered.data() + 5, g1.data(), 20) == 0,
                  "allgather in group");
            ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
            check.nccl(ncclGroupStart(), "simulated start");
            check.nccl(ncclAllReduce(mine.data(), sum_out.data(), 8, ncclFloat32, ncclSum, comm, nullptr), "queued");
            check.nccl(ncclGroupSimulateEnd(&sim), "simulate end");
            check(sim.estimatedTime > 0.0f, "positive estimate");
            check(ncclGroupEnd() == ncclInvalidUsage, "simulate end closed the group");
            check.nccl(ncclCommDestroy(comm), "destroy");
          }),
      "");
}

}  // namespace
}  // namespace tsfake_test
