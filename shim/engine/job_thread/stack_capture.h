// Call-site stacks, the capture half: at a call site's first sight, on the job's thread inside its NCCL call, the
// shim's Python frames are copied and the native stack is walked (return addresses only) into the table the engine's
// threads symbolise later (engine_stacks.h). Only what must happen while the call is on the stack happens here: a
// walk is cheap and symbols are not, and a site is captured once, so the job pays once per call site.
#pragma once

#include "shim/engine_api.h"

namespace trainscope::engine {

// Keeps the site's Python frames (copied) and captures the calling thread's native stack from the frame of
// `site.caller` outwards. Only the first capture of a site is kept. Called on the job's thread, once per site.
void capture_call_site(const CallSiteCapture& site);

}  // namespace trainscope::engine
