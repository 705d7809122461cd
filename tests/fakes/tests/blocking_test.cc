// Mismatched or missing members block forever like real NCCL; the stuck state says why; abort/revoke unblock.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <future>
#include <string>
#include <vector>

#include <nccl.h>

#include "fake_nccl_debug.h"
#include "rank_processes.h"

namespace tsfake_test {
namespace {

enum class Disagreement { kCount, kDatatype, kOp, kRoot, kCollective, kMissingMember, kSendRecvCount, kSendRecvType };

struct BlockingCase {
  const char* name;
  Disagreement disagreement;
  int nranks;
  const char* expected_text;  // must appear in the stuck state of the rank that detects the problem
  int detecting_rank;
};

const BlockingCase kCases[] = {
    {"Count", Disagreement::kCount, 2, "mismatch in count", 0},
    {"Datatype", Disagreement::kDatatype, 2, "mismatch in datatype", 1},
    {"ReductionOp", Disagreement::kOp, 2, "mismatch in reduction op", 0},
    {"Root", Disagreement::kRoot, 2, "mismatch in root", 1},
    {"Collective", Disagreement::kCollective, 2, "called ncclBroadcast instead", 0},
    {"MissingMember", Disagreement::kMissingMember, 3, "waiting for rank 2 to join", 1},
    {"SendRecvCount", Disagreement::kSendRecvCount, 2, "ncclRecv #0 from rank 0 mismatch", 1},
    {"SendRecvType", Disagreement::kSendRecvType, 2, "ncclRecv #0 from rank 0 mismatch", 1},
};

// Each rank first runs one good collective (so blocking is not just a slow start), then the disagreeing call.
void disagree(const BlockingCase& c, int rank, int n, const ncclUniqueId& id, RankChecks& check) {
  ncclComm_t comm = nullptr;
  if (!check.nccl(ncclCommInitRank(&comm, n, id, rank), "init")) return;
  std::vector<float> in(64, 1.0f);
  std::vector<float> out(64, 0.0f);
  check.nccl(ncclAllReduce(in.data(), out.data(), 64, ncclFloat32, ncclSum, comm, nullptr), "good allreduce");
  const bool odd = rank % 2 == 1;
  ncclResult_t r = ncclSuccess;
  switch (c.disagreement) {
    case Disagreement::kCount:
      r = ncclAllReduce(in.data(), out.data(), odd ? 9 : 8, ncclFloat32, ncclSum, comm, nullptr);
      break;
    case Disagreement::kDatatype:
      r = ncclAllReduce(in.data(), out.data(), 8, odd ? ncclInt32 : ncclFloat32, ncclSum, comm, nullptr);
      break;
    case Disagreement::kOp:
      r = ncclAllReduce(in.data(), out.data(), 8, ncclFloat32, odd ? ncclMax : ncclSum, comm, nullptr);
      break;
    case Disagreement::kRoot:
      r = ncclBroadcast(in.data(), out.data(), 8, ncclFloat32, odd ? 1 : 0, comm, nullptr);
      break;
    case Disagreement::kCollective:
      r = odd ? ncclBroadcast(in.data(), out.data(), 8, ncclFloat32, 0, comm, nullptr)
              : ncclAllReduce(in.data(), out.data(), 8, ncclFloat32, ncclSum, comm, nullptr);
      break;
    case Disagreement::kMissingMember:
      if (rank == 2) {
        r = ncclRecv(out.data(), 1, ncclFloat32, 0, comm, nullptr);  // stays alive, blocked elsewhere
      } else {
        r = ncclAllReduce(in.data(), out.data(), 8, ncclFloat32, ncclSum, comm, nullptr);
      }
      break;
    case Disagreement::kSendRecvCount:
      r = rank == 0 ? ncclSend(in.data(), 10, ncclFloat32, 1, comm, nullptr)
                    : ncclRecv(out.data(), 11, ncclFloat32, 0, comm, nullptr);
      break;
    case Disagreement::kSendRecvType:
      r = rank == 0 ? ncclSend(in.data(), 10, ncclFloat32, 1, comm, nullptr)
                    : ncclRecv(out.data(), 10, ncclInt32, 0, comm, nullptr);
      break;
  }
  check(false, "the disagreeing call returned " + std::to_string(static_cast<int>(r)) + " instead of blocking");
}

class BlockingTest : public ::testing::TestWithParam<BlockingCase> {};

TEST_P(BlockingTest, BlocksForeverAndReportsWhy) {
  const BlockingCase c = GetParam();
  RankProcesses ranks;
  ranks.start(c.nranks,
              [c](int rank, int n, const ncclUniqueId& id, RankChecks& check) { disagree(c, rank, n, id, check); });
  const std::string needle = "rank " + std::to_string(c.detecting_rank) + ": ";
  bool seen = false;
  const std::string state = poll_stuck_state(
      ranks.id(),
      [&](int blocked, const std::string& text) {
        const auto line = text.find(needle);
        return blocked >= 2 && line != std::string::npos && text.find(c.expected_text, line) != std::string::npos;
      },
      &seen);
  EXPECT_TRUE(seen) << "last stuck state:\n" << state;
  ranks.kill_all();
}

INSTANTIATE_TEST_SUITE_P(Disagreements, BlockingTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<BlockingCase>& case_info) {
                           return std::string(case_info.param.name);
                         });

// One process, two ranks created in one group; rank 1 never joins the collective, so rank 0 blocks in a thread.
void interrupt_blocked_call(bool revoke, RankChecks& check) {
  ncclUniqueId id;
  check.nccl(ncclGetUniqueId(&id), "unique id");
  ncclComm_t comms[2] = {};
  check.nccl(ncclGroupStart(), "group start");
  for (int r = 0; r < 2; ++r) check.nccl(ncclCommInitRank(&comms[r], 2, id, r), "init");
  if (!check.nccl(ncclGroupEnd(), "group end")) return;
  std::vector<int> buffer(16, 1);
  auto blocked = std::async(std::launch::async, [&] {
    return ncclAllReduce(buffer.data(), buffer.data(), 16, ncclInt32, ncclSum, comms[0], nullptr);
  });
  bool seen = false;
  const std::string state = poll_stuck_state(
      id,
      [](int n, const std::string& text) {
        return n == 1 && text.find("waiting for rank 1 to join") != std::string::npos;
      },
      &seen);
  check(seen, "rank 0 reported as blocked: " + state);
  if (revoke) {
    check.nccl(ncclCommRevoke(comms[0], NCCL_REVOKE_DEFAULT), "revoke");
  } else {
    check.nccl(ncclCommAbort(comms[0]), "abort");
  }
  if (!check(blocked.wait_for(std::chrono::seconds(kRankDeadlineSeconds)) == std::future_status::ready,
             "blocked call returned")) {
    std::fflush(nullptr);
    _exit(1);  // the thread is still stuck; leaving is the only bounded option
  }
  check(blocked.get() == ncclSystemError, "the interrupted call reports a system error");
  if (revoke) {
    check(ncclAllReduce(buffer.data(), buffer.data(), 16, ncclInt32, ncclSum, comms[0], nullptr) == ncclInvalidUsage,
          "a revoked communicator refuses new work");
    ncclResult_t async = ncclSuccess;
    check.nccl(ncclCommGetAsyncError(comms[0], &async), "async error");
    check(async == ncclSystemError, "async error after revoke");
    check.nccl(ncclCommDestroy(comms[0]), "destroy revoked");
  }
  check.nccl(ncclCommDestroy(comms[1]), "destroy");
}

TEST(Interrupts, AbortFromAnotherThreadUnblocksTheCall) {
  EXPECT_EQ(
      run_ranks(1, [](int, int, const ncclUniqueId&, RankChecks& check) { interrupt_blocked_call(false, check); }), "");
}

TEST(Interrupts, RevokeFromAnotherThreadUnblocksTheCall) {
  EXPECT_EQ(run_ranks(1, [](int, int, const ncclUniqueId&, RankChecks& check) { interrupt_blocked_call(true, check); }),
            "");
}

TEST(Rendezvous, JoiningASegmentWhoseCreatorVanishedFailsInsteadOfHanging) {
  EXPECT_EQ(run_ranks(1,
                      [](int, int, const ncclUniqueId& id, RankChecks& check) {
                        // A name whose creator died before sizing it, so it is never initialised.
                        const char* name = id.internal + TSFAKE_UNIQUE_ID_NAME_OFFSET;
                        const int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
                        if (!check(fd >= 0, "create stale segment")) return;
                        close(fd);
                        ncclComm_t comm = nullptr;
                        check(ncclCommInitRank(&comm, 2, id, 1) == ncclSystemError, "join fails with a system error");
                        check(comm == nullptr, "no communicator");
                        shm_unlink(name);
                      }),
            "");
}

TEST(DebugHook, UnknownIdReportsMinusOne) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  char text[64] = "x";
  EXPECT_EQ(tsfake_stuck_state(&id, text, sizeof(text)), -1);
  EXPECT_STREQ(text, "");
}

}  // namespace
}  // namespace tsfake_test
