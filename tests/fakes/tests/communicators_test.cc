// Communicator lifecycle: split, shrink, InitAll (threads and one thread in a group), queries, argument checks.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <nccl.h>

#include "rank_processes.h"
#include "reference.h"

namespace tsfake_test {
namespace {

// Sum of make_input(int32, count, r, salt) over `members`, as an expected all-reduce.
Bytes expected_sum(const std::vector<int>& members, std::size_t count, int salt) {
  std::vector<Bytes> inputs;
  for (int r : members) inputs.push_back(make_input(ncclInt32, count, r, salt));
  return reference_reduce(ncclInt32, TestOp::kSum, inputs, count);
}

void allreduce_and_check(ncclComm_t comm, int input_rank, const std::vector<int>& members, int salt, RankChecks& check,
                         const std::string& what) {
  constexpr std::size_t kCount = 5000;
  const Bytes mine = make_input(ncclInt32, kCount, input_rank, salt);
  Bytes out(mine.size(), 0);
  if (!check.nccl(ncclAllReduce(mine.data(), out.data(), kCount, ncclInt32, ncclSum, comm, nullptr), what)) return;
  check(out == expected_sum(members, kCount, salt), what + " result");
}

TEST(Communicators, SplitOrdersByKeyThenRankAndNoColorGetsNull) {
  EXPECT_EQ(run_ranks(4,
                      [](int rank, int n, const ncclUniqueId& id, RankChecks& check) {
                        ncclComm_t parent = nullptr;
                        if (!check.nccl(ncclCommInitRank(&parent, n, id, rank), "init")) return;
                        // Colors: {0, 2} get 0, {1} gets 1, rank 3 opts out; keys reverse the order within color 0.
                        const int color = rank == 3 ? NCCL_SPLIT_NOCOLOR : rank % 2;
                        ncclComm_t child = reinterpret_cast<ncclComm_t>(&check);
                        if (!check.nccl(ncclCommSplit(parent, color, -rank, &child, nullptr), "split")) return;
                        if (rank == 3) {
                          check(child == nullptr, "NOCOLOR gives a NULL communicator");
                        } else {
                          int count = 0;
                          int child_rank = -1;
                          check.nccl(ncclCommCount(child, &count), "count");
                          check.nccl(ncclCommUserRank(child, &child_rank), "user rank");
                          const int expected_count = color == 0 ? 2 : 1;
                          const int expected_rank = rank == 0 ? 1 : 0;  // key -2 (rank 2) sorts before key 0 (rank 0)
                          check(count == expected_count, "child size " + std::to_string(count));
                          check(child_rank == expected_rank, "child rank " + std::to_string(child_rank));
                          allreduce_and_check(child, rank, color == 0 ? std::vector<int>{0, 2} : std::vector<int>{1}, 7,
                                              check, "allreduce on split child");
                          check.nccl(ncclCommDestroy(child), "destroy child");
                        }
                        allreduce_and_check(parent, rank, {0, 1, 2, 3}, 8, check, "parent still works after split");
                        check.nccl(ncclCommDestroy(parent), "destroy parent");
                      }),
            "");
}

TEST(Communicators, ShrinkDropsExcludedRanksAndTheChildWorks) {
  EXPECT_EQ(run_ranks(4,
                      [](int rank, int n, const ncclUniqueId& id, RankChecks& check) {
                        ncclComm_t parent = nullptr;
                        if (!check.nccl(ncclCommInitRank(&parent, n, id, rank), "init")) return;
                        if (rank != 1) {  // rank 1 "failed": only the survivors shrink
                          int excluded[] = {1};
                          ncclComm_t child = nullptr;
                          if (!check.nccl(ncclCommShrink(parent, excluded, 1, &child, nullptr, NCCL_SHRINK_DEFAULT),
                                          "shrink")) {
                            return;
                          }
                          int count = 0;
                          int child_rank = -1;
                          check.nccl(ncclCommCount(child, &count), "count");
                          check.nccl(ncclCommUserRank(child, &child_rank), "user rank");
                          check(count == 3, "shrunk size");
                          check(child_rank == (rank == 0 ? 0 : rank - 1), "shrunk rank");
                          allreduce_and_check(child, rank, {0, 2, 3}, 9, check, "allreduce on shrunk child");
                          check.nccl(ncclCommDestroy(child), "destroy child");
                        }
                        check.nccl(ncclCommDestroy(parent), "destroy parent");
                      }),
            "");
}

TEST(Communicators, InitAllWithOneThreadPerCommunicator) {
  EXPECT_EQ(run_ranks(1,
                      [](int, int, const ncclUniqueId&, RankChecks& check) {
                        constexpr int kDevices = 3;
                        ncclComm_t comms[kDevices] = {};
                        if (!check.nccl(ncclCommInitAll(comms, kDevices, nullptr), "InitAll")) return;
                        std::vector<RankChecks> checks;
                        for (int d = 0; d < kDevices; ++d) checks.emplace_back(d);
                        std::vector<std::thread> threads;
                        for (int d = 0; d < kDevices; ++d) {
                          threads.emplace_back([&, d] {
                            int rank = -1;
                            int device = -1;
                            checks[d].nccl(ncclCommUserRank(comms[d], &rank), "rank");
                            checks[d].nccl(ncclCommCuDevice(comms[d], &device), "device");
                            checks[d](rank == d && device == d, "InitAll numbering");
                            for (int round = 0; round < 3; ++round) {
                              allreduce_and_check(comms[d], d, {0, 1, 2}, round, checks[d], "threaded allreduce");
                            }
                          });
                        }
                        for (std::thread& t : threads) t.join();
                        for (int d = 0; d < kDevices; ++d) {
                          check(checks[d].failures() == 0, "thread " + std::to_string(d));
                          check.nccl(ncclCommDestroy(comms[d]), "destroy");
                        }
                      }),
            "");
}

TEST(Communicators, OneThreadDrivesSeveralCommunicatorsInAGroup) {
  EXPECT_EQ(run_ranks(1,
                      [](int, int, const ncclUniqueId& id, RankChecks& check) {
                        constexpr int kDevices = 4;
                        ncclComm_t comms[kDevices] = {};
                        if (!check.nccl(ncclCommInitAll(comms, kDevices, nullptr), "InitAll")) return;
                        constexpr std::size_t kCount = 20000;
                        std::vector<Bytes> in;
                        std::vector<Bytes> out(kDevices, Bytes(kCount * 4, 0));
                        for (int d = 0; d < kDevices; ++d) in.push_back(make_input(ncclInt32, kCount, d, 11));
                        check.nccl(ncclGroupStart(), "group start");
                        for (int d = 0; d < kDevices; ++d) {
                          check.nccl(
                              ncclAllReduce(in[d].data(), out[d].data(), kCount, ncclInt32, ncclSum, comms[d], nullptr),
                              "queued allreduce");
                        }
                        if (!check.nccl(ncclGroupEnd(), "group end")) return;
                        for (int d = 0; d < kDevices; ++d)
                          check(out[d] == expected_sum({0, 1, 2, 3}, kCount, 11), "result");
                        for (int d = 0; d < kDevices; ++d) check.nccl(ncclCommDestroy(comms[d]), "destroy");

                        // The same for ncclCommInitRank: one thread creates two ranks of one id inside a group.
                        ncclComm_t pair[2] = {};
                        check.nccl(ncclGroupStart(), "group start");
                        for (int r = 0; r < 2; ++r) check.nccl(ncclCommInitRank(&pair[r], 2, id, r), "init in group");
                        if (!check.nccl(ncclGroupEnd(), "group end")) return;
                        Bytes a(8, 1);
                        Bytes b(8, 0);
                        check.nccl(ncclGroupStart(), "group start");
                        check.nccl(ncclSend(a.data(), 8, ncclUint8, 1, pair[0], nullptr), "send");
                        check.nccl(ncclRecv(b.data(), 8, ncclUint8, 0, pair[1], nullptr), "recv");
                        check.nccl(ncclGroupEnd(), "group end");
                        check(a == b, "in-process send/recv");
                        for (ncclComm_t c : pair) check.nccl(ncclCommDestroy(c), "destroy");
                      }),
            "");
}

TEST(Communicators, QueriesAndArgumentChecks) {
  EXPECT_EQ(
      run_ranks(
          2,
          [](int rank, int n, const ncclUniqueId& id, RankChecks& check) {
            int version = 0;
            check.nccl(ncclGetVersion(&version), "version");
            check(version == NCCL_VERSION_CODE, "version code");
            check(std::strcmp(ncclGetErrorString(ncclSuccess), "no error") == 0, "error string");
            check(ncclGetErrorString(ncclInvalidArgument) != nullptr, "error string");
            ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
            ncclComm_t comm = nullptr;
            ncclConfig_t bad_config{};
            check(ncclCommInitRankConfig(&comm, n, id, rank, &bad_config) == ncclInvalidArgument, "bad config");
            check(ncclCommInitRank(&comm, n, id, n) == ncclInvalidArgument, "rank out of range");
            ncclUniqueId ids[1] = {id};
            if (rank == 0) {
              if (!check.nccl(ncclCommInitRankConfig(&comm, n, id, rank, &config), "init config")) return;
            } else if (!check.nccl(ncclCommInitRankScalable(&comm, n, rank, 1, ids, &config), "init scalable")) {
              return;
            }
            int count = 0;
            int device = -1;
            int user_rank = -1;
            check.nccl(ncclCommCount(comm, &count), "count");
            check.nccl(ncclCommCuDevice(comm, &device), "device");
            check.nccl(ncclCommUserRank(comm, &user_rank), "rank");
            check(count == n && device == rank % 8 && user_rank == rank, "queries");
            ncclResult_t async = ncclInternalError;
            check.nccl(ncclCommGetAsyncError(comm, &async), "async error");
            check(async == ncclSuccess, "no async error");

            float x = 1.0f;
            float y = 0.0f;
            check(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, nullptr, nullptr) == ncclInvalidArgument, "NULL comm");
            check(std::strlen(ncclGetLastError(nullptr)) > 0, "last error is set");
            check(ncclAllReduce(&x, &y, 1, static_cast<ncclDataType_t>(ncclNumTypes), ncclSum, comm, nullptr) ==
                      ncclInvalidArgument,
                  "bad datatype");
            check(ncclAllReduce(&x, &y, 1, ncclFloat32, static_cast<ncclRedOp_t>(ncclNumOps + 9), comm, nullptr) ==
                      ncclInvalidArgument,
                  "bad op");
            check(ncclReduce(&x, &y, 1, ncclFloat32, ncclSum, n, comm, nullptr) == ncclInvalidArgument, "bad root");
            check(ncclSend(&x, 1, ncclFloat32, -1, comm, nullptr) == ncclInvalidArgument, "bad peer");
            check(ncclAllReduce(nullptr, &y, 1, ncclFloat32, ncclSum, comm, nullptr) == ncclInvalidArgument,
                  "NULL buffer");
            check(ncclRedOpDestroy(ncclSum, comm) == ncclInvalidArgument, "destroy builtin op");
            ncclRedOp_t premul;
            double scalar = 2.0;
            check.nccl(ncclRedOpCreatePreMulSum(&premul, &scalar, ncclFloat64, ncclScalarHostImmediate, comm), "op");
            check(ncclAllReduce(&x, &y, 1, ncclFloat32, premul, comm, nullptr) == ncclInvalidArgument,
                  "premul op of another type");
            check.nccl(ncclRedOpDestroy(premul, comm), "destroy op");
            check(ncclRedOpDestroy(premul, comm) == ncclInvalidArgument, "double destroy");

            void* memory = nullptr;
            check.nccl(ncclMemAlloc(&memory, 1000), "mem alloc");
            check(memory != nullptr, "memory");
            void* handle = nullptr;
            check.nccl(ncclCommRegister(comm, memory, 1000, &handle), "register");
            check.nccl(ncclCommDeregister(comm, handle), "deregister");
            ncclWindow_t window = nullptr;
            check.nccl(ncclCommWindowRegister(comm, memory, 1000, &window, NCCL_WIN_DEFAULT), "window");
            check.nccl(ncclCommWindowDeregister(comm, window), "window deregister");
            check.nccl(ncclMemFree(memory), "mem free");
            check.nccl(ncclCommFinalize(comm), "finalize");
            check.nccl(ncclCommDestroy(comm), "destroy");
          }),
      "");
}

// The pretend-2.18 and no-op variants are loaded beside the full one; dlopen by path keeps them apart.
TEST(Variants, OldVariantHidesNewerEntryPointsAndReports2_18) {
  void* old = dlopen(TSFAKE_OLD_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(old, nullptr) << dlerror();
  auto get_version = reinterpret_cast<ncclResult_t (*)(int*)>(dlsym(old, "ncclGetVersion"));
  ASSERT_NE(get_version, nullptr);
  int version = 0;
  EXPECT_EQ(get_version(&version), ncclSuccess);
  EXPECT_EQ(version, 21800);
  for (const char* name : {"ncclCommShrink", "ncclCommRevoke", "ncclCommInitRankScalable", "ncclGroupSimulateEnd",
                           "ncclCommWindowRegister", "ncclCommWindowDeregister"}) {
    EXPECT_EQ(dlsym(old, name), nullptr) << name;
    EXPECT_EQ(dlsym(old, (std::string("p") + name).c_str()), nullptr) << name;
  }
  EXPECT_NE(dlsym(old, "ncclAllReduce"), nullptr);
  EXPECT_NE(dlsym(old, "pncclCommSplit"), nullptr);
  dlclose(old);
}

TEST(Variants, NoopVariantSucceedsWithoutDoingAnything) {
  void* noop = dlopen(TSFAKE_NOOP_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(noop, nullptr) << dlerror();
  auto init = reinterpret_cast<ncclResult_t (*)(ncclComm_t*, int, ncclUniqueId, int)>(dlsym(noop, "ncclCommInitRank"));
  auto all_reduce = reinterpret_cast<ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
                                                      ncclComm_t, cudaStream_t)>(dlsym(noop, "pncclAllReduce"));
  auto destroy = reinterpret_cast<ncclResult_t (*)(ncclComm_t)>(dlsym(noop, "ncclCommDestroy"));
  ASSERT_TRUE(init && all_reduce && destroy);
  ncclComm_t comm = nullptr;
  ncclUniqueId id{};
  EXPECT_EQ(init(&comm, 8, id, 3), ncclSuccess);  // 8 ranks, none of which exist: nothing waits
  EXPECT_NE(comm, nullptr);
  float in = 1.0f;
  float out = 5.0f;
  EXPECT_EQ(all_reduce(&in, &out, 1, ncclFloat32, ncclSum, comm, nullptr), ncclSuccess);
  EXPECT_EQ(out, 5.0f);
  EXPECT_EQ(destroy(comm), ncclSuccess);
  EXPECT_EQ(dlsym(noop, "tsfake_stuck_state"), nullptr);
  dlclose(noop);
}

}  // namespace
}  // namespace tsfake_test
