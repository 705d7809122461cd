// The call sites of NCCL functions this process has already seen, so that the stack of each is captured once.
//
// Freestanding and lock-free: the hot path pays one hash and a compare for a call site it knows.
#pragma once

#include <cstdint>

namespace trainscope::shim {

// True the first time `call_site` is offered (the caller should capture its stack), false afterwards, and false
// for every new site once the table is full (their stacks are simply not captured).
bool first_sight_of_call_site(uint64_t call_site);

// Forgets every call site (a forked child captures its own).
void reset_call_sites();

}  // namespace trainscope::shim
