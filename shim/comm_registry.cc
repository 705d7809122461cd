// The table of live communicators (see comm_registry.h).
#include "shim/comm_registry.h"

#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

namespace trainscope::shim {

namespace {

CommInfo g_comms[kMaxLiveComms];
pthread_mutex_t g_register_lock = PTHREAD_MUTEX_INITIALIZER;
std::atomic<uint64_t> g_registered{0};  // every registration since start (or the fork), for the exit check
constexpr uintptr_t kTombstone = 1;     // a removed slot: keeps probe chains intact

uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

size_t home_slot(uintptr_t handle) { return mix64(handle) % kMaxLiveComms; }

}  // namespace

CommInfo* find_comm(const void* handle) {
  const auto key = reinterpret_cast<uintptr_t>(handle);
  if (key <= kTombstone) return nullptr;
  size_t slot = home_slot(key);
  for (int probe = 0; probe < kMaxLiveComms; ++probe) {
    const uintptr_t current = g_comms[slot].handle.load(std::memory_order_acquire);
    if (current == key) return &g_comms[slot];
    if (current == 0) return nullptr;
    slot = (slot + 1) % kMaxLiveComms;
  }
  return nullptr;
}

CommInfo* register_comm(const void* handle, uint64_t id, uint64_t parent_id, int32_t rank, int32_t nranks,
                        bool nonblocking) {
  const auto key = reinterpret_cast<uintptr_t>(handle);
  if (key <= kTombstone) return nullptr;
  pthread_mutex_lock(&g_register_lock);
  CommInfo* target = find_comm(handle);
  if (target == nullptr) {
    size_t slot = home_slot(key);
    for (int probe = 0; probe < kMaxLiveComms && target == nullptr; ++probe) {
      const uintptr_t current = g_comms[slot].handle.load(std::memory_order_relaxed);
      if (current == 0 || current == kTombstone) target = &g_comms[slot];
      slot = (slot + 1) % kMaxLiveComms;
    }
  }
  if (target != nullptr) {
    // Publish the fields before the key so a lock-free reader that finds the key sees them.
    target->handle.store(kTombstone, std::memory_order_relaxed);
    target->id = id;
    target->parent_id = parent_id;
    target->rank = rank;
    target->nranks = nranks;
    target->collective_seq.store(0, std::memory_order_relaxed);
    target->split_count.store(0, std::memory_order_relaxed);
    target->entry = nullptr;
    target->nonblocking = nonblocking;
    target->adopted = false;
    std::atomic<uint64_t>* counters = nullptr;
    if (nranks > 0 && nranks <= (1 << 24)) {
      void* mem = mmap(nullptr, sizeof(std::atomic<uint64_t>) * 2 * static_cast<size_t>(nranks), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (mem != MAP_FAILED) counters = static_cast<std::atomic<uint64_t>*>(mem);  // zero-filled by the kernel
    }
    target->peer_seq = counters;
    target->handle.store(key, std::memory_order_release);
    g_registered.fetch_add(1, std::memory_order_relaxed);
  }
  pthread_mutex_unlock(&g_register_lock);
  return target;
}

uint64_t next_collective_seq(CommInfo* comm) {
  return comm->collective_seq.fetch_add(1, std::memory_order_relaxed) + 1;
}

uint64_t next_peer_seq(CommInfo* comm, int32_t peer, bool receive) {
  if (comm->peer_seq == nullptr || peer < 0 || peer >= comm->nranks) return 0;
  const size_t index = static_cast<size_t>(peer) + (receive ? static_cast<size_t>(comm->nranks) : 0);
  return comm->peer_seq[index].fetch_add(1, std::memory_order_relaxed) + 1;
}

void unregister_comm(const void* handle) {
  pthread_mutex_lock(&g_register_lock);
  CommInfo* comm = find_comm(handle);
  if (comm != nullptr) {
    comm->handle.store(kTombstone, std::memory_order_release);
    // The counters stay mapped: a racing reader on another thread may still hold the pointer. They are small
    // and communicators are few.
  }
  pthread_mutex_unlock(&g_register_lock);
}

uint64_t comms_registered() { return g_registered.load(std::memory_order_relaxed); }

void reset_comm_registry() {
  g_registered.store(0, std::memory_order_relaxed);
  for (auto& comm : g_comms) comm.handle.store(0, std::memory_order_relaxed);
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  memcpy(&g_register_lock, &fresh, sizeof(fresh));
}

uint64_t comm_id_from_unique_ids(const void* bytes, uint64_t length) {
  // FNV-1a over the bytes, then a final mix: identical on every member, cheap, and spreads similar ids apart.
  const auto* p = static_cast<const unsigned char*>(bytes);
  uint64_t h = 0xCBF29CE484222325ull;
  for (uint64_t i = 0; i < length; ++i) {
    h ^= p[i];
    h *= 0x100000001B3ull;
  }
  const uint64_t id = mix64(h);
  return id == 0 ? 1 : id;
}

uint64_t comm_id_for_child(uint64_t parent_id, uint64_t split_count, int64_t color) {
  const uint64_t id = mix64(parent_id ^ mix64(split_count + 0x9E3779B97F4A7C15ull) ^
                            mix64(static_cast<uint64_t>(color) * 0xD6E8FEB86659FD93ull));
  return id == 0 ? 1 : id;
}

}  // namespace trainscope::shim
