// Native stacks of NCCL call sites: captured on the job's thread the first time a call site is seen (a cheap
// libunwind walk of return addresses, no symbols), symbolised later on the engine's thread when a report may
// need them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainscope::engine {

// Captures the calling thread's stack for `call_site` (the return address into the caller of the NCCL
// function), from that frame outwards. Only the first capture of a call site is kept.
void capture_call_site_stack(uint64_t call_site);

// The stack id of a call site (1-based), 0 if none was captured.
uint32_t stack_id_of(uint64_t call_site);

// The stack's frames as text, innermost first: "function+0x1c (libfoo.so+0x1234)", or "libfoo.so+0x1234" when
// the address has no exported symbol. Empty for an unknown id.
std::vector<std::string> symbolised_stack(uint32_t stack_id);

// Forked child: a parent thread may have held the table's lock at the fork; start a fresh table.
void abandon_stacks();

}  // namespace trainscope::engine
