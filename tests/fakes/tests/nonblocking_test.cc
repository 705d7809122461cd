// Non-blocking communicators (config.blocking = 0): calls return ncclInProgress and move no data until the
// application polls ncclCommGetAsyncError, which performs the work and then reads ncclSuccess.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nccl.h>

#include "rank_processes.h"

namespace tsfake_test {
namespace {

bool init_nonblocking(int rank, int n, const ncclUniqueId& id, ncclComm_t* comm, RankChecks& check) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return check.nccl(ncclCommInitRankConfig(comm, n, id, rank, &config), "init non-blocking");
}

// Polls once (the stand-in performs all deferred work in that call) and checks the state is ncclSuccess.
void poll_success(ncclComm_t comm, RankChecks& check, const std::string& what) {
  ncclResult_t state = ncclInternalError;
  check.nccl(ncclCommGetAsyncError(comm, &state), what + ": ncclCommGetAsyncError");
  check(state == ncclSuccess, what + ": async state " + std::to_string(static_cast<int>(state)));
}

TEST(NonBlocking, CollectiveReturnsInProgressAndRunsWhenPolled) {
  EXPECT_EQ(run_ranks(3,
                      [](int rank, int n, const ncclUniqueId& id, RankChecks& check) {
                        ncclComm_t comm = nullptr;
                        if (!init_nonblocking(rank, n, id, &comm, check)) return;
                        std::vector<float> send(5, static_cast<float>(rank + 1));
                        std::vector<float> recv(5, -1.0f);
                        check(ncclAllReduce(send.data(), recv.data(), send.size(), ncclFloat32, ncclSum, comm,
                                            nullptr) == ncclInProgress,
                              "all-reduce returns ncclInProgress");
                        check(recv[0] == -1.0f && recv[4] == -1.0f, "no data moved before the poll");
                        poll_success(comm, check, "all-reduce");
                        for (float v : recv) check(v == 6.0f, "reduced after the poll: " + std::to_string(v));
                        // A second poll finds nothing left and still reads ncclSuccess.
                        poll_success(comm, check, "second poll");
                        check.nccl(ncclCommDestroy(comm), "destroy");
                      }),
            "");
}

TEST(NonBlocking, GroupEndReturnsInProgressAndTheGroupRunsWhenPolled) {
  EXPECT_EQ(
      run_ranks(2,
                [](int rank, int n, const ncclUniqueId& id, RankChecks& check) {
                  ncclComm_t comm = nullptr;
                  if (!init_nonblocking(rank, n, id, &comm, check)) return;
                  std::vector<float> grads(4, rank == 0 ? 1.0f : 3.0f);
                  std::vector<int> params(3, rank == 0 ? 7 : 0);
                  const int peer = 1 - rank;
                  std::vector<double> out(2, rank + 0.5);
                  std::vector<double> in(2, -1.0);
                  check.nccl(ncclGroupStart(), "group start");
                  check(ncclAllReduce(grads.data(), grads.data(), grads.size(), ncclFloat32, ncclMax, comm, nullptr) ==
                            ncclSuccess,
                        "a grouped call is queued");
                  ncclBroadcast(params.data(), params.data(), params.size(), ncclInt32, 0, comm, nullptr);
                  ncclSend(out.data(), out.size(), ncclFloat64, peer, comm, nullptr);
                  ncclRecv(in.data(), in.size(), ncclFloat64, peer, comm, nullptr);
                  check(ncclGroupEnd() == ncclInProgress, "group end returns ncclInProgress");
                  check(grads[0] == (rank == 0 ? 1.0f : 3.0f) && params[0] == (rank == 0 ? 7 : 0) && in[0] == -1.0,
                        "no data moved before the poll");
                  poll_success(comm, check, "group");
                  check(grads[0] == 3.0f && grads[3] == 3.0f, "max-reduced");
                  check(params[0] == 7 && params[2] == 7, "broadcast");
                  check(in[0] == peer + 0.5 && in[1] == peer + 0.5, "received");
                  check.nccl(ncclCommDestroy(comm), "destroy");
                }),
      "");
}

TEST(NonBlocking, UngroupedSendAndRecvRunInCallOrderWhenPolled) {
  EXPECT_EQ(run_ranks(2,
                      [](int rank, int n, const ncclUniqueId& id, RankChecks& check) {
                        ncclComm_t comm = nullptr;
                        if (!init_nonblocking(rank, n, id, &comm, check)) return;
                        std::vector<int> a(3, 10 + rank);
                        std::vector<int> b(3, -1);
                        std::vector<int> c(3, -1);
                        // Two calls before one poll: both are performed by it, oldest first.
                        if (rank == 0) {
                          check(ncclSend(a.data(), a.size(), ncclInt32, 1, comm, nullptr) == ncclInProgress, "send");
                          check(ncclRecv(b.data(), b.size(), ncclInt32, 1, comm, nullptr) == ncclInProgress, "recv");
                        } else {
                          check(ncclRecv(b.data(), b.size(), ncclInt32, 0, comm, nullptr) == ncclInProgress, "recv");
                          check(ncclSend(a.data(), a.size(), ncclInt32, 0, comm, nullptr) == ncclInProgress, "send");
                        }
                        check(b[0] == -1, "nothing received before the poll");
                        poll_success(comm, check, "send/recv");
                        check(b[0] == 11 - rank && b[2] == 11 - rank, "received after the poll");
                        check(ncclAllReduce(a.data(), c.data(), a.size(), ncclInt32, ncclSum, comm, nullptr) ==
                                  ncclInProgress,
                              "all-reduce");
                        poll_success(comm, check, "all-reduce");
                        check(c[1] == 21, "all-reduce after send/recv");
                        check.nccl(ncclCommDestroy(comm), "destroy");
                      }),
            "");
}

TEST(NonBlocking, BlockingAndNonBlockingCommunicatorsInOneGroupAreInvalidUsage) {
  EXPECT_EQ(run_ranks(2,
                      [](int rank, int n, const ncclUniqueId& id, RankChecks& check) {
                        ncclComm_t nonblocking = nullptr;
                        if (!init_nonblocking(rank, n, id, &nonblocking, check)) return;
                        ncclComm_t inheriting = nullptr;
                        if (!check.nccl(ncclCommSplit(nonblocking, 0, rank, &inheriting, nullptr), "split")) return;
                        // Without a config the child is non-blocking like its parent; a blocking one needs a config.
                        float x = 1.0f;
                        check(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, inheriting, nullptr) == ncclInProgress,
                              "the child inherits non-blocking mode");
                        poll_success(inheriting, check, "child");
                        check(x == 2.0f, "child all-reduce");
                        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
                        config.blocking = 1;
                        ncclComm_t child = nullptr;
                        if (!check.nccl(ncclCommSplit(nonblocking, 0, rank, &child, &config), "blocking split")) return;
                        check(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, child, nullptr) == ncclSuccess,
                              "a blocking child runs at once");
                        check(x == 4.0f, "blocking child all-reduce");
                        check.nccl(ncclGroupStart(), "group start");
                        ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, child, nullptr);
                        ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, nonblocking, nullptr);
                        check(ncclGroupEnd() == ncclInvalidUsage, "mixed group refused");
                        check(x == 4.0f, "nothing ran");
                        check.nccl(ncclCommDestroy(child), "destroy child");
                        check.nccl(ncclCommDestroy(inheriting), "destroy inheriting child");
                        check.nccl(ncclCommDestroy(nonblocking), "destroy");
                      }),
            "");
}

TEST(NonBlocking, DestroyWithoutPollingDropsTheWorkAndReturns) {
  EXPECT_EQ(run_ranks(2,
                      [](int rank, int n, const ncclUniqueId& id, RankChecks& check) {
                        ncclComm_t comm = nullptr;
                        if (!init_nonblocking(rank, n, id, &comm, check)) return;
                        std::vector<float> v(8, 1.0f);
                        for (int i = 0; i < 3; ++i) {
                          check(ncclAllReduce(v.data(), v.data(), v.size(), ncclFloat32, ncclSum, comm, nullptr) ==
                                    ncclInProgress,
                                "all-reduce " + std::to_string(i));
                        }
                        check(v[0] == 1.0f, "never performed");
                        check.nccl(ncclCommDestroy(comm), "destroy");
                      }),
            "");
}

}  // namespace
}  // namespace tsfake_test
