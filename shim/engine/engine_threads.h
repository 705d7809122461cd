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

struct BackgroundCpu {
  uint64_t ns = 0;  // CPU time, user and system, of every live thread named ts-* or ZMQbg/* (ZeroMQ's)
  int threads = 0;
  // By kind: the thread's name, ZeroMQ's as "ZMQbg" (its I/O threads and reaper), in the order first seen.
  std::vector<std::pair<std::string, uint64_t>> by_name;
};
BackgroundCpu background_cpu();

// "trainscope's threads used 12.3 ms of CPU (4 threads), 0.41 us per recorded call (30000 calls): ts-frames 0.20,
// ts-exchange 0.05, ts-client 0.06, ZMQbg 0.10 us".
std::string describe_background_cpu(const BackgroundCpu& cpu, uint64_t calls);

}  // namespace trainscope::engine
