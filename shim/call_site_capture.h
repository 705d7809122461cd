// The call site of each hooked call: its id in the flight recorder's site table (Record::site), made on the site's
// first call — the Python frames read then, the innermost two written to the recorder (crash-safe), the native stack
// and the frames handed to the engine for the reports.
//
// A call site is the native return address AND, when the calling thread runs CPython, its Python stack: in a
// framework every collective leaves from the same native address, and only the Python frames tell `backward()`
// from `forward()`. A process that runs no Python pays one relaxed load for the Python part.
#pragma once

#include <cstdint>

namespace trainscope::shim {

// Looks for CPython in the process (python_stack.h) and notes in the recorder what was found. At the start, and
// again at a new site's first call while no Python was found (a process may initialise Python later).
void detect_python();

// The site id of a call from `caller` on this thread; 0 when none could be made (the site table is full, the
// recorder is closed). Called on the job's thread inside a hook.
uint16_t call_site_of(uint64_t caller);

}  // namespace trainscope::shim
