// The clocks every layer stamps with, read one way. CLOCK_REALTIME nanoseconds are what records, reports and the wire
// carry (comparable across hosts); the shim's hot path reads the same clock through its counter (shim/wall_clock.h).
// libc only, for the shim as for the rest.
#pragma once

#include <time.h>

#include <cstdint>

namespace trainscope::clocks {

inline uint64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

inline uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace trainscope::clocks
