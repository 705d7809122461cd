// What the two halves of call-site stacks share, and no other file: the table of captured stacks by site id,
// written by the capture on the job's thread (job_thread/stack_capture.h) at a site's first sight and read by the
// symbolisation on the engine's threads (engine_stacks.h). A table behind one lock: a capture happens once per call
// site, so the job's threads rarely meet there, and the table is the only thing the two worlds touch.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/call_stack.h"

namespace trainscope::engine {

struct SiteStack {
  std::vector<uint64_t> native;  // return addresses, innermost first
  std::vector<exchange::PythonFrame> python;
  std::string python_note;
};

struct StackTable {
  std::mutex mutex;
  std::unordered_map<uint32_t, SiteStack> by_site;
};

// Leaked: call sites may be noted while the process exits.
extern StackTable* g_table;

}  // namespace trainscope::engine
