// The table of seen call sites (see call_sites.h).
#include "shim/call_sites.h"

#include <atomic>

namespace trainscope::shim {

namespace {

constexpr uint64_t kSlots = 8192;  // a training job has a handful of NCCL call sites; a power of two
constexpr int kMaxProbes = 32;
std::atomic<uint64_t> g_sites[kSlots];

uint64_t slot_of(uint64_t call_site) { return (call_site * 0x9E3779B97F4A7C15ull) >> 51; }  // top 13 bits

}  // namespace

bool first_sight_of_call_site(uint64_t call_site) {
  if (call_site == 0) return false;
  uint64_t slot = slot_of(call_site);
  for (int probe = 0; probe < kMaxProbes; ++probe, slot = (slot + 1) & (kSlots - 1)) {
    uint64_t seen = g_sites[slot].load(std::memory_order_relaxed);
    if (seen == call_site) return false;
    if (seen == 0) {
      if (g_sites[slot].compare_exchange_strong(seen, call_site, std::memory_order_relaxed)) return true;
      if (seen == call_site) return false;  // another thread claimed it for the same site
    }
  }
  return false;
}

void reset_call_sites() {
  for (auto& site : g_sites) site.store(0, std::memory_order_relaxed);
}

}  // namespace trainscope::shim
