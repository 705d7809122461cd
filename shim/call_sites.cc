// The table of seen call sites (see call_sites.h).
#include "shim/call_sites.h"

#include <atomic>

namespace trainscope::shim {

namespace {

constexpr uint64_t kSlots = 8192;  // a job has a handful of NCCL call sites per Python call path; a power of two
constexpr int kMaxProbes = 32;
std::atomic<uint64_t> g_keys[kSlots];
std::atomic<uint32_t> g_ids[kSlots];  // id + 1 once published; 0 while the claiming call captures the site

uint64_t slot_of(uint64_t key) { return (key * 0x9E3779B97F4A7C15ull) >> 51; }  // top 13 bits

}  // namespace

SiteLookup look_up_site(uint64_t key) {
  if (key == 0) key = 1;
  uint64_t slot = slot_of(key);
  for (int probe = 0; probe < kMaxProbes; ++probe, slot = (slot + 1) & (kSlots - 1)) {
    uint64_t seen = g_keys[slot].load(std::memory_order_acquire);
    if (seen == 0 && g_keys[slot].compare_exchange_strong(seen, key, std::memory_order_acq_rel))
      return {0, static_cast<int>(slot)};
    if (seen == key) {
      const uint32_t published = g_ids[slot].load(std::memory_order_acquire);
      return {published == 0 ? 0 : published - 1, -1};
    }
  }
  return {0, -1};
}

void publish_site(int slot, uint32_t id) {
  if (slot >= 0 && static_cast<uint64_t>(slot) < kSlots) g_ids[slot].store(id + 1, std::memory_order_release);
}

uint64_t call_site_key(uint64_t caller, uint64_t python_key) {
  uint64_t h = caller * 0xBF58476D1CE4E5B9ull ^ (python_key + 0x9E3779B97F4A7C15ull + (caller << 6) + (caller >> 2));
  h ^= h >> 31;
  return h;
}

void reset_call_sites() {
  for (auto& key : g_keys) key.store(0, std::memory_order_relaxed);
  for (auto& id : g_ids) id.store(0, std::memory_order_relaxed);
}

}  // namespace trainscope::shim
