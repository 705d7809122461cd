// ncclCommSuspend / ncclCommResume / ncclCommMemStats (NCCL 2.29.7): the state they keep per communicator, the calls
// they refuse while suspended, and their argument checks.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include <nccl.h>

#include "rank_processes.h"
#include "src/nccl_2_29.h"

namespace tsfake_test {
namespace {

std::uint64_t stat_of(ncclComm_t comm, ncclCommMemStat_t stat, RankChecks& check) {
  std::uint64_t value = ~0ull;
  check.nccl(ncclCommMemStats(comm, stat, &value), "mem stats " + std::to_string(stat));
  return value;
}

bool last_error_says(const char* text) { return std::strstr(ncclGetLastError(nullptr), text) != nullptr; }

TEST(SuspendResume, ASuspendedCommunicatorRefusesDataUntilResumedAndThenWorks) {
  EXPECT_EQ(run_ranks(2,
                      [](int rank, int n, const ncclUniqueId& id, RankChecks& check) {
                        ncclComm_t comm = nullptr;
                        if (!check.nccl(ncclCommInitRank(&comm, n, id, rank), "init")) return;
                        check(stat_of(comm, ncclStatGpuMemSuspended, check) == 0, "active after init");
                        check.nccl(ncclCommSuspend(comm, 0), "suspend without NCCL_SUSPEND_MEM");
                        check(stat_of(comm, ncclStatGpuMemSuspended, check) == 0, "flags 0 release nothing");

                        check.nccl(ncclCommSuspend(comm, NCCL_SUSPEND_MEM), "suspend");
                        check(stat_of(comm, ncclStatGpuMemSuspended, check) == 1, "suspended");
                        float x = static_cast<float>(rank + 1);
                        float y = 0.0f;
                        check(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, nullptr) == ncclInvalidUsage,
                              "all-reduce while suspended is invalid usage");
                        check(last_error_says("ncclAllReduce: communicator is suspended"), ncclGetLastError(nullptr));
                        check(ncclSend(&x, 1, ncclFloat32, 1 - rank, comm, nullptr) == ncclInvalidUsage,
                              "send while suspended is invalid usage");
                        check(ncclRecv(&y, 1, ncclFloat32, 1 - rank, comm, nullptr) == ncclInvalidUsage,
                              "recv while suspended is invalid usage");
                        check(ncclCommSuspend(comm, NCCL_SUSPEND_MEM) == ncclInvalidUsage, "second suspend");
                        check(last_error_says("already suspended"), ncclGetLastError(nullptr));

                        check.nccl(ncclCommResume(comm), "resume");
                        check(stat_of(comm, ncclStatGpuMemSuspended, check) == 0, "active after resume");
                        check(ncclCommResume(comm) == ncclInvalidUsage, "resume of an active communicator");
                        check(last_error_says("not suspended"), ncclGetLastError(nullptr));
                        // Nothing was lost: the ranks still meet in the same collective.
                        check.nccl(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, nullptr), "all-reduce");
                        check(y == 3.0f, "all-reduce after resume " + std::to_string(y));
                        check.nccl(ncclCommDestroy(comm), "destroy");
                      }),
            "");
}

TEST(SuspendResume, DestroyingASuspendedCommunicatorWorks) {
  EXPECT_EQ(run_ranks(2,
                      [](int rank, int n, const ncclUniqueId& id, RankChecks& check) {
                        ncclComm_t comm = nullptr;
                        if (!check.nccl(ncclCommInitRank(&comm, n, id, rank), "init")) return;
                        check.nccl(ncclCommSuspend(comm, NCCL_SUSPEND_MEM), "suspend");
                        check.nccl(ncclCommDestroy(comm), "destroy while suspended");
                      }),
            "");
}

TEST(SuspendResume, ArgumentChecks) {
  EXPECT_EQ(
      run_ranks(
          1,
          [](int rank, int n, const ncclUniqueId& id, RankChecks& check) {
            std::uint64_t value = 7;
            check(ncclCommSuspend(nullptr, NCCL_SUSPEND_MEM) == ncclInvalidArgument, "suspend NULL");
            check(last_error_says("ncclCommSuspend: comm is NULL"), ncclGetLastError(nullptr));
            check(ncclCommResume(nullptr) == ncclInvalidArgument, "resume NULL");
            check(ncclCommMemStats(nullptr, ncclStatGpuMemTotal, &value) == ncclInvalidArgument, "mem stats NULL comm");
            check(value == 7, "value untouched");
            ncclComm_t comm = nullptr;
            if (!check.nccl(ncclCommInitRank(&comm, n, id, rank), "init")) return;
            check(ncclCommSuspend(comm, 0x6) == ncclInvalidArgument, "unknown suspend flags");
            check(last_error_says("only NCCL_SUSPEND_MEM"), ncclGetLastError(nullptr));
            check(stat_of(comm, ncclStatGpuMemSuspended, check) == 0, "unknown flags suspend nothing");
            check(ncclCommMemStats(comm, ncclStatGpuMemTotal, nullptr) == ncclInvalidArgument, "mem stats NULL value");
            check(ncclCommMemStats(comm, static_cast<ncclCommMemStat_t>(4), &value) == ncclInvalidArgument,
                  "unknown stat");
            check(last_error_says("stat 4 is not an ncclCommMemStat_t"), ncclGetLastError(nullptr));
            // Host memory is the caller's: the stand-in holds no device memory to count.
            for (ncclCommMemStat_t stat : {ncclStatGpuMemSuspend, ncclStatGpuMemPersist, ncclStatGpuMemTotal})
              check(stat_of(comm, stat, check) == 0, "bytes of stat " + std::to_string(stat));
            check.nccl(ncclCommDestroy(comm), "destroy");
          }),
      "");
}

}  // namespace
}  // namespace tsfake_test
