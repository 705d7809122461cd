// The stacks of NCCL call sites: the Python frames the shim read at a site's first sight and the native stack,
// captured on the job's thread then (the C++ runtime's unwinder walks the return addresses, no symbols:
// job_thread/stack_capture.h), symbolised later on the engine's threads when a report may need them (here).
//
// A call site is the shim's: its id is the site's index + 1 in the flight recorder's site table (one per native
// return address and Python stack), and the same id is the stack id the exchange sends with each fingerprint.
#pragma once

#include <cstdint>

#include "base/call_stack.h"

namespace trainscope::engine {

// Whether a stack was captured for the site (a site the shim saw before the engine started has none).
bool has_stack(uint32_t site);

// The site's stack, symbolised: Python frames innermost first, then native frames as "function+0x1c
// (libfoo.so+0x1234)" or "libfoo.so+0x1234" when the address has no exported symbol. Empty for an unknown site.
exchange::CallStack call_stack(uint32_t site);

// Forked child: a parent thread may have held the table's lock at the fork; start a fresh table.
void abandon_stacks();

}  // namespace trainscope::engine
