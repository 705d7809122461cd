// A one-way flag that threads sleep on with a timeout and that is raised once, on a futex.
//
// Why not a condition variable: glibc's pthread_cond_broadcast and _signal may wait for an earlier woken waiter to run
// before they return (the switch of waiter groups, glibc 2.25 and later). A thread in the idle scheduling class
// (base/thread_class.h) may not run for seconds on a node whose cores are all busy, and a condition variable it
// sleeps on would then hold up the thread that wakes it: the job's own, at exit. FUTEX_WAKE never waits for the
// threads it wakes, and a waiter sleeps in the kernel with nothing shared held.
// libc only.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>

namespace trainscope {

class WakeFlag {
 public:
  // Raises the flag and wakes every thread waiting on it; never blocks.
  void raise() {
    word_.store(1, std::memory_order_release);
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word_), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
  }

  bool raised() const { return word_.load(std::memory_order_acquire) != 0; }

  // Sleeps until the flag is raised or `timeout` has passed; returns whether it is raised.
  bool wait_for(std::chrono::nanoseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!raised()) {
      const auto left = deadline - std::chrono::steady_clock::now();
      if (left <= std::chrono::nanoseconds::zero()) break;
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
      timespec relative{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
      // Returns at once when the word is no longer 0 (raised between the check and the call), on a wake, a signal or
      // the timeout; the loop tells them apart.
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word_), FUTEX_WAIT_PRIVATE, 0, &relative, nullptr, 0);
    }
    return raised();
  }

 private:
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) && std::atomic<uint32_t>::is_always_lock_free,
                "the futex is the atomic's own word");
  std::atomic<uint32_t> word_{0};
};

}  // namespace trainscope
