// base/thread_class.h and base/wake_flag.h: a thread enters the idle class and, where the process may, is put back
// into the normal class by another; a raised flag wakes its sleepers and stays raised.
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "base/thread_class.h"
#include "base/wake_flag.h"

namespace trainscope {
namespace {

TEST(ThreadClass, AThreadEntersTheIdleClassAndAnotherPutsItBackWhereThePrivilegeAllows) {
  std::atomic<pid_t> tid{0};
  std::atomic<int> entered{-1};
  WakeFlag started;
  WakeFlag leave;
  std::thread idle([&] {
    entered = enter_idle_class();
    tid = this_thread_id();
    started.raise();
    leave.wait_for(std::chrono::seconds(30));
  });
  // Every way out lets the thread go first: a joinable std::thread destroyed would end the test binary.
  if (!started.wait_for(std::chrono::seconds(30)) || entered.load() != 0) {
    leave.raise();
    idle.join();
    FAIL() << (entered.load() != 0 ? "SCHED_IDLE refused" : "the thread did not start within 30 s");
  }
  EXPECT_EQ(sched_getscheduler(tid.load()), SCHED_IDLE);
  const int refused = leave_idle_class(tid.load());
  if (refused == 0) {
    EXPECT_EQ(sched_getscheduler(tid.load()), SCHED_OTHER);
  } else {
    EXPECT_EQ(refused, EPERM) << "only the privilege may be missing";
    EXPECT_EQ(sched_getscheduler(tid.load()), SCHED_IDLE);
  }
  leave.raise();
  idle.join();
  // The calling thread's own class is untouched by all this.
  EXPECT_EQ(sched_getscheduler(0), SCHED_OTHER);
}

TEST(WakeFlag, ARaisedFlagWakesItsSleepersAndStaysRaised) {
  WakeFlag flag;
  EXPECT_FALSE(flag.raised());
  EXPECT_FALSE(flag.wait_for(std::chrono::milliseconds(1)));  // not raised: the timeout ends the wait
  std::atomic<int> woken{0};
  std::thread a([&] { woken += flag.wait_for(std::chrono::seconds(30)); });
  std::thread b([&] { woken += flag.wait_for(std::chrono::seconds(30)); });
  flag.raise();
  a.join();
  b.join();
  EXPECT_EQ(woken.load(), 2);
  EXPECT_TRUE(flag.raised());
  EXPECT_TRUE(flag.wait_for(std::chrono::seconds(30)));  // raised: returns at once
}

}  // namespace
}  // namespace trainscope
