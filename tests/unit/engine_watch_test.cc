// The job's side of buffer watching on non-blocking communicators: calls that returned ncclInProgress are parked
// until ncclCommGetAsyncError confirms them (outputs taken then) or until they can never be (outputs skipped).
// Host buffers only: no GPU is involved.
#include "shim/engine/job_thread/engine_watch.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

namespace trainscope::engine {
namespace {

constexpr int8_t kNcclFloat32 = 7;
constexpr int32_t kSuccess = 0;
constexpr int32_t kInvalidUsage = 5;
constexpr int32_t kInProgress = 7;

// Every test uses its own record indices on the process-wide board and takes its calls back at the end.
class ParkedCalls : public ::testing::Test {
 protected:
  ~ParkedCalls() override {
    skip_all_parked();
    for (uint64_t index : indices_) {
      bool present = false;
      watch_board().take_if_complete(index, &present);
    }
  }

  WatchedCall* begin(recorder::Op op, uint64_t comm_id, std::vector<float>& send, std::vector<float>& recv,
                     uint32_t flags = 0) {
    static uint64_t next_index = 1000;
    recorder::Record r{};
    r.op = static_cast<uint16_t>(op);
    r.comm_id = comm_id;
    r.rank = 0;
    r.nranks = 2;
    r.peer = 1;
    r.seq = 1;
    r.count = send.empty() ? recv.size() : send.size();
    r.dtype = kNcclFloat32;
    r.sendbuff = reinterpret_cast<uint64_t>(send.empty() ? nullptr : send.data());
    r.recvbuff = reinterpret_cast<uint64_t>(recv.empty() ? nullptr : recv.data());
    r.flags = recorder::kFlagWatched | flags;
    const uint64_t index = next_index++;
    indices_.push_back(index);
    return watch_begin(r, index);
  }

  static bool complete(const WatchedCall* call) { return call->complete.load(std::memory_order_acquire); }
  static uint32_t parked() { return parked_call_count().load(std::memory_order_relaxed); }

  std::vector<uint64_t> indices_;
};

TEST_F(ParkedCalls, InProgressCallWaitsForItsCommunicatorsConfirmationAndReadsTheOutputThen) {
  std::vector<float> send(4, 1.0f);
  std::vector<float> recv(4, 0.0f);
  WatchedCall* call = begin(recorder::Op::kAllReduce, 42, send, recv);
  watch_end(call, kInProgress);
  EXPECT_FALSE(complete(call)) << "nothing may be read before NCCL enqueued its work";
  EXPECT_EQ(parked(), 1u);

  recv.assign(4, 2.0f);  // what NCCL's work writes, once the background thread enqueued it
  recv[2] = std::numeric_limits<float>::infinity();
  comm_async_state(43, kSuccess);
  EXPECT_FALSE(complete(call)) << "another communicator's confirmation";
  comm_async_state(42, kInProgress);
  EXPECT_FALSE(complete(call)) << "still in progress";
  comm_async_state(42, kSuccess);
  ASSERT_TRUE(complete(call));
  EXPECT_EQ(parked(), 0u);
  ASSERT_EQ(call->output.state, WatchedBuffer::State::kReady);
  EXPECT_EQ(call->output.stats.pos_inf_count, 1u);
  EXPECT_EQ(call->output.stats.abs_min, 2.0);
  ASSERT_EQ(call->input.state, WatchedBuffer::State::kReady) << "the input was taken before the call";
  EXPECT_EQ(call->input.stats.abs_max, 1.0);
}

TEST_F(ParkedCalls, GroupEndInProgressParksEachCallUnderItsCommunicatorAndAFailureSkipsThem) {
  std::vector<float> send(3, 1.0f);
  std::vector<float> recv_a(3, 0.0f);
  std::vector<float> recv_b(3, 0.0f);
  WatchedCall* a = begin(recorder::Op::kAllReduce, 1, send, recv_a, recorder::kFlagInGroup);
  WatchedCall* b = begin(recorder::Op::kAllReduce, 2, send, recv_b, recorder::kFlagInGroup);
  watch_end(a, kSuccess);
  watch_end(b, kSuccess);
  group_end(true, kInProgress);
  EXPECT_FALSE(complete(a));
  EXPECT_FALSE(complete(b));
  EXPECT_EQ(parked(), 2u);
  recv_a.assign(3, 3.0f);
  comm_async_state(1, kSuccess);
  ASSERT_TRUE(complete(a));
  EXPECT_EQ(a->output.stats.abs_max, 3.0);
  EXPECT_FALSE(complete(b));
  comm_async_state(2, kInvalidUsage);
  ASSERT_TRUE(complete(b));
  EXPECT_EQ(b->output.state, WatchedBuffer::State::kSkipped);
  EXPECT_EQ(b->output.skipped_why, "the non-blocking call failed: 5");
  EXPECT_EQ(parked(), 0u);
}

TEST_F(ParkedCalls, GroupEndThatSucceedsAtOnceTakesTheOutputsAsBefore) {
  std::vector<float> send(2, 1.0f);
  std::vector<float> recv(2, 4.0f);
  WatchedCall* call = begin(recorder::Op::kAllReduce, 1, send, recv, recorder::kFlagInGroup);
  watch_end(call, kSuccess);
  EXPECT_FALSE(complete(call));
  group_end(true, kSuccess);
  ASSERT_TRUE(complete(call));
  EXPECT_EQ(call->output.stats.abs_max, 4.0);
  EXPECT_EQ(parked(), 0u);
}

TEST_F(ParkedCalls, TheCommunicatorsNextCallOrItsEndSkipsUnconfirmedOutputs) {
  std::vector<float> send(2, 1.0f);
  std::vector<float> recv(2, 0.0f);
  WatchedCall* first = begin(recorder::Op::kAllReduce, 7, send, recv);
  watch_end(first, kInProgress);
  comm_next_call(8, static_cast<uint16_t>(recorder::Op::kAllReduce));
  EXPECT_FALSE(complete(first)) << "a call on another communicator";
  comm_next_call(7, static_cast<uint16_t>(recorder::Op::kBroadcast));
  ASSERT_TRUE(complete(first));
  EXPECT_EQ(first->output.state, WatchedBuffer::State::kSkipped);
  EXPECT_EQ(first->output.skipped_why,
            "non-blocking call never confirmed enqueued (ncclCommGetAsyncError not polled before the communicator's "
            "next call, ncclBroadcast)");

  std::vector<float> none;
  WatchedCall* second = begin(recorder::Op::kRecv, 7, none, recv);
  watch_end(second, kInProgress);
  EXPECT_FALSE(complete(second));
  comm_next_call(7, static_cast<uint16_t>(recorder::Op::kCommDestroy));
  ASSERT_TRUE(complete(second));
  EXPECT_EQ(second->output.skipped_why,
            "non-blocking call never confirmed enqueued (ncclCommGetAsyncError not polled before ncclCommDestroy)");
  EXPECT_EQ(parked(), 0u);
}

TEST_F(ParkedCalls, ExitSkipsEveryParkedCall) {
  std::vector<float> send(2, 1.0f);
  std::vector<float> recv(2, 0.0f);
  WatchedCall* a = begin(recorder::Op::kAllReduce, 11, send, recv);
  WatchedCall* b = begin(recorder::Op::kAllReduce, 12, send, recv);
  watch_end(a, kInProgress);
  watch_end(b, kInProgress);
  skip_all_parked();
  ASSERT_TRUE(complete(a));
  ASSERT_TRUE(complete(b));
  EXPECT_EQ(b->output.skipped_why,
            "non-blocking call never confirmed enqueued (ncclCommGetAsyncError not polled before the process exited)");
  EXPECT_EQ(parked(), 0u);
}

TEST_F(ParkedCalls, CallsWithNoOutputOrNoCommunicatorNeverWait) {
  std::vector<float> send(2, 1.0f);
  std::vector<float> none;
  WatchedCall* sent = begin(recorder::Op::kSend, 5, send, none);
  watch_end(sent, kInProgress);
  EXPECT_TRUE(complete(sent)) << "a send's input was taken before the call; it has no output";
  EXPECT_EQ(sent->output.state, WatchedBuffer::State::kAbsent);

  std::vector<float> recv(2, 0.0f);
  WatchedCall* untracked = begin(recorder::Op::kAllReduce, 0, send, recv);
  watch_end(untracked, kInProgress);
  ASSERT_TRUE(complete(untracked)) << "no communicator id: nothing could ever confirm it";
  EXPECT_EQ(untracked->output.state, WatchedBuffer::State::kSkipped);
  EXPECT_EQ(parked(), 0u);
}

TEST_F(ParkedCalls, BeyondTheCapAnOutputIsSkippedAtOnce) {
  std::vector<float> send(1, 1.0f);
  std::vector<float> recv(1, 0.0f);
  std::vector<WatchedCall*> calls;
  for (size_t i = 0; i < WatchBoard::kMaxParked; ++i) {
    calls.push_back(begin(recorder::Op::kAllReduce, 21, send, recv));
    watch_end(calls.back(), kInProgress);
  }
  EXPECT_EQ(parked(), WatchBoard::kMaxParked);
  WatchedCall* over = begin(recorder::Op::kAllReduce, 21, send, recv);
  watch_end(over, kInProgress);
  ASSERT_TRUE(complete(over));
  EXPECT_EQ(over->output.skipped_why, "too many non-blocking calls wait for ncclCommGetAsyncError (4096)");
  comm_async_state(21, kSuccess);
  EXPECT_EQ(parked(), 0u);
  for (const WatchedCall* call : calls) EXPECT_EQ(call->output.state, WatchedBuffer::State::kReady);
}

}  // namespace
}  // namespace trainscope::engine
