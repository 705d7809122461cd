#include "shim/wall_clock.h"

#include <fcntl.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "base/clocks.h"

namespace trainscope::shim {

constinit CounterClock<SystemTimeSource> g_wall_clock;

uint64_t SystemTimeSource::realtime() { return clocks::realtime_ns(); }

namespace {

bool counter_is_invariant() {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0x80000000u, &eax, &ebx, &ecx, &edx) == 0 || eax < 0x80000007u) return false;
  if (__get_cpuid(0x80000007u, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (edx & (1u << 8)) != 0;
#else
  return false;
#endif
}

bool kernel_clock_source_is_tsc() {
  const int fd = open("/sys/devices/system/clocksource/clocksource0/current_clocksource", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char text[16] = {};
  const ssize_t n = read(fd, text, sizeof(text) - 1);
  close(fd);
  return n >= 3 && strncmp(text, "tsc", 3) == 0 && (n == 3 || text[3] == '\n');
}

}  // namespace

void use_counter_clock_if_the_kernel_does() {
  if (!g_wall_clock.calibrated() && counter_is_invariant() && kernel_clock_source_is_tsc()) g_wall_clock.enable();
}

}  // namespace trainscope::shim
