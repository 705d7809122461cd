// The call sites of NCCL functions this process has already seen: a 64-bit key per site (its native return address
// mixed with, on a Python thread, its Python stack) and the site's id in the flight recorder's site table.
//
// Freestanding and lock-free: the hot path pays one hash and a compare for a call site it knows.
#pragma once

#include <cstdint>

namespace trainscope::shim {

struct SiteLookup {
  uint32_t id;       // the site's id; 0 when not known (yet, or the table is full)
  int claimed_slot;  // >= 0: this call saw the key first and must capture the site, then publish_site(slot, id)
};

// Finds `key` (0 is taken as 1). The first caller of a new key claims it (claimed_slot >= 0, id 0); later callers
// get the published id, or 0 while the first caller is still capturing. A full table answers {0, -1} for new keys:
// their calls simply have no site.
SiteLookup look_up_site(uint64_t key);

// Makes `id` the answer for the key claimed in `slot` (0 is a valid answer: no site could be made for it).
void publish_site(int slot, uint32_t id);

// The key of a native return address and a Python stack key (0: no Python frames).
uint64_t call_site_key(uint64_t caller, uint64_t python_key);

// Forgets every call site (a forked child captures its own).
void reset_call_sites();

}  // namespace trainscope::shim
