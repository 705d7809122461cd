// The wall clock the shim stamps records with: CLOCK_REALTIME nanoseconds, from the time-stamp counter where the
// kernel keeps time with it (counter_clock.h), from clock_gettime elsewhere.
#pragma once

#include <cstdint>

#include "shim/counter_clock.h"

namespace trainscope::shim {

struct SystemTimeSource {
  static uint64_t ticks() {
#if defined(__x86_64__)
    return __builtin_ia32_rdtsc();
#else
    return 0;
#endif
  }
  static uint64_t realtime();
};

extern CounterClock<SystemTimeSource> g_wall_clock;

inline uint64_t now_ns() { return g_wall_clock.now(); }

// At the runtime's start (a file read and a CPUID, off the hot path): uses the counter when it is invariant and the
// kernel's current clock source is "tsc" (so the kernel found it synchronised across CPUs and trusts it).
void use_counter_clock_if_the_kernel_does();

inline void wall_clock_after_fork_in_child() { g_wall_clock.after_fork_in_child(); }

}  // namespace trainscope::shim
