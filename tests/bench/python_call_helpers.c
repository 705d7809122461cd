/* Times NCCL calls made from C on behalf of a Python caller (tests/bench/python_hook_bench.py): the calling thread's
 * Python stack is the benchmark's, and the timing leaves ctypes' own cost out. */
#include <stddef.h>
#include <stdint.h>
#include <time.h>

typedef int (*AllReduceFn)(const void* send, void* recv, size_t count, int dtype, int op, void* comm, void* stream);

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* `iterations` all-reduces of 16 floats through `fn`; returns the nanoseconds they took together. */
uint64_t ts_all_reduce_loop(void* fn, void* comm, long iterations) {
  float buffer[16] = {0};
  const AllReduceFn all_reduce = (AllReduceFn)fn;
  const uint64_t start = now_ns();
  for (long i = 0; i < iterations; ++i) all_reduce(buffer, buffer, 16, 7, 0, comm, NULL);
  return now_ns() - start;
}

/* One all-reduce; returns the nanoseconds it took. */
uint64_t ts_all_reduce_once(void* fn, void* comm) { return ts_all_reduce_loop(fn, comm, 1); }
