// The board between the job's threads and the frame thread: a slot per record index claimed without a lock, calls
// reused once the board is warm, a call whose slot is still held refused (and said so to the frame thread), and
// many job threads against one frame thread losing nothing (run under ThreadSanitizer in CI).
#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "shim/engine/job_thread/engine_watch.h"
#include "shim/engine/shared/bounded_queue.h"

namespace trainscope::engine {
namespace {

using State = WatchedBuffer::State;

recorder::Record collective() {
  recorder::Record r{};
  r.op = static_cast<uint16_t>(recorder::Op::kAllReduce);
  r.comm_id = 7;
  r.flags = recorder::kFlagWatched;
  return r;
}

void complete(WatchedCall* call) { call->complete.store(true, std::memory_order_release); }

TEST(WatchBoard, ACompleteCallIsTakenOnceAndItsSlotAndCallServeTheNextOne) {
  WatchBoard board;
  WatchedCall* first = board.add(collective(), 5);
  ASSERT_FALSE(first->complete.load());
  EXPECT_EQ(first->index, 5u);
  bool present = false;
  EXPECT_EQ(board.take_if_complete(5, &present), nullptr) << "not complete yet";
  EXPECT_TRUE(present);
  first->output.state = State::kReady;
  complete(first);
  {
    WatchBoard::Taken taken = board.take_if_complete(5, &present);
    ASSERT_EQ(taken.get(), first);
    EXPECT_EQ(board.size(), 1u) << "the slot is held until the frame thread lets go of the call";
  }
  EXPECT_EQ(board.size(), 0u);
  EXPECT_EQ(board.take_if_complete(5, &present), nullptr);
  EXPECT_FALSE(present);

  WatchedCall* next = board.add(collective(), 5 + WatchBoard::kSlots);
  EXPECT_EQ(next, first) << "a warm board hands the job's thread a call it already has: no allocation";
  EXPECT_FALSE(next->complete.load()) << "made as new";
  EXPECT_EQ(next->output.state, State::kAbsent);
  EXPECT_EQ(next->index, 5 + WatchBoard::kSlots);
  complete(next);
  board.take_if_complete(5 + WatchBoard::kSlots, &present);
}

TEST(WatchBoard, ACallWhoseSlotIsStillHeldIsRefusedCountedAndToldToTheFrameThread) {
  WatchBoard board;
  WatchedCall* old = board.add(collective(), 3);
  WatchedCall* late = board.add(collective(), 3 + WatchBoard::kSlots);
  ASSERT_NE(late, old);
  EXPECT_TRUE(late->complete.load()) << "refused calls come back complete: nothing for the job's thread to take";
  EXPECT_EQ(late->input.state, State::kSkipped);
  EXPECT_EQ(board.counters().dropped_backlog.load(), 1u);
  EXPECT_TRUE(board.refused(3 + WatchBoard::kSlots));
  EXPECT_FALSE(board.refused(3)) << "the holder itself is on the board";
  EXPECT_FALSE(board.refused(4));
  EXPECT_FALSE(old->complete.load()) << "the call in the slot is untouched";

  WatchedCall* again = board.add(collective(), 3);
  EXPECT_NE(again, old) << "a record watched twice is refused, not given the first watch's call";
  EXPECT_TRUE(again->complete.load());
  EXPECT_FALSE(board.refused(3));
  complete(old);
  bool present = false;
  EXPECT_EQ(board.take_if_complete(3, &present).get(), old);
}

TEST(WatchBoard, CallsOfLappedRecordsAreForgottenOnceCompleteAndTheOthersKept) {
  WatchBoard board;
  WatchedCall* done = board.add(collective(), 10);
  WatchedCall* running = board.add(collective(), 11);
  WatchedCall* newer = board.add(collective(), 30);
  complete(done);
  complete(newer);
  board.discard_complete_before(20);
  EXPECT_EQ(board.size(), 2u);
  bool present = false;
  EXPECT_EQ(board.take_if_complete(10, &present), nullptr);
  EXPECT_FALSE(present) << "complete and below the bound: forgotten";
  EXPECT_EQ(board.take_if_complete(11, &present), nullptr);
  EXPECT_TRUE(present) << "still in use by its thread";
  complete(running);
  EXPECT_EQ(board.take_if_complete(11, &present).get(), running);
  EXPECT_EQ(board.take_if_complete(30, &present).get(), newer);
}

// Job threads add and complete calls of interleaved indices while one frame thread takes them in index order, as
// the frame feed does: every call is taken exactly once or refused, never lost or taken twice.
TEST(WatchBoard, ManyJobThreadsAndOneFrameThreadLoseNothing) {
  WatchBoard board;
  constexpr int kThreads = 4;
  constexpr uint64_t kPerThread = 20000;
  constexpr uint64_t kCalls = kThreads * kPerThread;
  std::vector<std::atomic<int>> outcome(kCalls);  // 0: not yet, 1: added, 2: refused
  std::vector<std::thread> jobs;
  for (int t = 0; t < kThreads; ++t) {
    jobs.emplace_back([&, t] {
      for (uint64_t i = static_cast<uint64_t>(t); i < kCalls; i += kThreads) {
        WatchedCall* call = board.add(collective(), i);
        if (call->complete.load(std::memory_order_relaxed)) {
          outcome[i].store(2, std::memory_order_release);
          continue;
        }
        call->output.stats.count = i;  // written by the job's thread, read by the frame thread after complete
        outcome[i].store(1, std::memory_order_release);
        complete(call);
      }
    });
  }
  uint64_t taken = 0;
  uint64_t refused = 0;
  for (uint64_t i = 0; i < kCalls; ++i) {
    for (;;) {
      const int seen = outcome[i].load(std::memory_order_acquire);
      if (seen == 2) {
        ASSERT_TRUE(board.refused(i)) << "call " << i;
        ++refused;
        break;
      }
      if (seen == 0) {
        std::this_thread::yield();
        continue;
      }
      bool present = false;
      WatchBoard::Taken call = board.take_if_complete(i, &present);
      ASSERT_TRUE(present) << "call " << i;
      if (call == nullptr) continue;  // added, not complete yet
      ASSERT_EQ(call->index, i);
      ASSERT_EQ(call->output.stats.count, i);
      ++taken;
      break;
    }
  }
  for (std::thread& job : jobs) job.join();
  EXPECT_EQ(taken + refused, kCalls);
  EXPECT_EQ(refused, board.counters().dropped_backlog.load());
  EXPECT_EQ(board.size(), 0u);
}

TEST(BoundedQueue, KeepsOrderAndSaysWhenFullOrEmpty) {
  BoundedQueue<int> queue(3);
  EXPECT_EQ(queue.capacity(), 4u) << "rounded up to a power of two";
  int value = 0;
  EXPECT_FALSE(queue.pop(&value));
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(queue.push(i));
  EXPECT_FALSE(queue.push(4)) << "full";
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(queue.pop(&value));
    EXPECT_EQ(value, i);
  }
  EXPECT_FALSE(queue.pop(&value));
  EXPECT_TRUE(queue.push(9)) << "the cells are reused";
  ASSERT_TRUE(queue.pop(&value));
  EXPECT_EQ(value, 9);
}

TEST(BoundedQueue, EveryValuePushedByOneThreadIsPoppedOnceByMany) {
  BoundedQueue<uint32_t> queue(64);
  constexpr uint32_t kValues = 100000;
  constexpr int kConsumers = 3;
  std::atomic<uint32_t> popped{0};
  std::vector<std::vector<uint32_t>> got(kConsumers);
  std::vector<std::thread> consumers;
  for (int c = 0; c < kConsumers; ++c) {
    consumers.emplace_back([&, c] {
      uint32_t value = 0;
      while (popped.load(std::memory_order_relaxed) < kValues) {
        if (queue.pop(&value)) {
          got[c].push_back(value);
          popped.fetch_add(1, std::memory_order_relaxed);
        } else {
          std::this_thread::yield();
        }
      }
    });
  }
  for (uint32_t v = 0; v < kValues;) {
    if (queue.push(v)) {
      ++v;
    } else {
      std::this_thread::yield();
    }
  }
  for (std::thread& consumer : consumers) consumer.join();
  std::set<uint32_t> all;
  for (int c = 0; c < kConsumers; ++c) {
    for (size_t i = 1; i < got[c].size(); ++i) ASSERT_LT(got[c][i - 1], got[c][i]) << "one consumer sees FIFO order";
    all.insert(got[c].begin(), got[c].end());
  }
  EXPECT_EQ(all.size(), kValues);
}

}  // namespace
}  // namespace trainscope::engine
