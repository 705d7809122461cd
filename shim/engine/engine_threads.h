// trainscope's own threads in the job's process: named "ts-..." so that top -H, py-spy and a debugger tell them from
// the job's, and their CPU time summed at the end (what trainscope cost the process beside its hooks).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace trainscope::engine {

// Names the calling thread (at most 15 characters shown).
void name_this_thread(const char* name);

struct ThreadKindCpu {
  std::string name;  // the thread's name, ZeroMQ's as "ZMQbg" (its I/O threads and reaper)
  uint64_t ns = 0;
  uint64_t wakeups = 0;
};
struct BackgroundCpu {
  uint64_t ns = 0;  // CPU time, user and system, of every live thread named ts-* or ZMQbg/* (ZeroMQ's)
  int threads = 0;
  // Times those threads went to sleep and were woken (the kernel's voluntary context switches). On a node whose
  // cores are all busy with the job, each one takes a core from a rank for a moment: a cost beside the CPU time.
  uint64_t wakeups = 0;
  std::vector<ThreadKindCpu> by_name;  // by kind, in the order first seen
};
BackgroundCpu background_cpu();

// "trainscope's threads used 12.3 ms of CPU (3 threads), 0.36 us per recorded call (30000 calls): ts-frames 0.20,
// ts-client 0.06, ZMQbg 0.10 us; 312 wakeups: ts-frames 100, ts-client 112, ZMQbg 100".
std::string describe_background_cpu(const BackgroundCpu& cpu, uint64_t calls);

}  // namespace trainscope::engine
