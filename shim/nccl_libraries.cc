// Slots for the NCCL libraries looked up on a handle (see nccl_libraries.h).
#include "shim/nccl_libraries.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "shim/runtime.h"

namespace trainscope::shim {
namespace {

struct LibrarySlot {
  std::atomic<uintptr_t> base;  // load address of the library; 0 while the slot is free
  void* handle;                 // our own reference, so it is never unloaded under its hooks
  char path[512];
};

LibrarySlot g_slots[kMaxLibraries];  // [0] unused: library 0 is the process-wide NCCL
std::atomic<int> g_used{0};
std::atomic<bool> g_full_warned{false};
pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

int find_slot(uintptr_t base) {
  const int used = g_used.load(std::memory_order_acquire);
  for (int i = 1; i <= used && i < kMaxLibraries; ++i)
    if (g_slots[i].base.load(std::memory_order_acquire) == base) return i;
  return 0;
}

// Takes a slot for the library loaded at `base` from `path`; 0 when all are taken.
int take_slot(uintptr_t base, const char* path, DlsymFunction real_dlsym) {
  pthread_mutex_lock(&g_lock);
  int slot = find_slot(base);
  const int used = g_used.load(std::memory_order_relaxed);
  if (slot == 0 && used + 1 < kMaxLibraries) {
    slot = used + 1;
    LibrarySlot& s = g_slots[slot];
    snprintf(s.path, sizeof(s.path), "%s", path);
    s.handle = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
    for (int id = 0; id < kRealCount; ++id) {
      void* function = s.handle != nullptr ? real_dlsym(s.handle, real_name(static_cast<RealId>(id))) : nullptr;
      g_library_functions[slot][id].store(function, std::memory_order_relaxed);
    }
    s.base.store(base, std::memory_order_release);
    g_used.store(slot, std::memory_order_release);
  }
  pthread_mutex_unlock(&g_lock);
  return slot;
}

}  // namespace

void* hook_for_handle_lookup(RealId id, void* real, DlsymFunction real_dlsym) {
  if (real == exported_hook(id)) return real;
  // Library 0's own function: a handle that reaches the process-wide NCCL (the same libnccl.so.2 the job links).
  if (real == resolve_real(id, real_name(id), exported_hook(id), nullptr, /*anywhere=*/false)) return exported_hook(id);
  Dl_info info;
  if (dladdr(real, &info) == 0 || info.dli_fbase == nullptr || info.dli_fname == nullptr) return real;
  const auto base = reinterpret_cast<uintptr_t>(info.dli_fbase);
  int slot = find_slot(base);
  if (slot == 0) {
    slot = take_slot(base, info.dli_fname, real_dlsym);
    // Before the start the log is not open yet: the start logs every slot taken so far.
    if (slot != 0 && g_runtime.start_state.load(std::memory_order_acquire) == static_cast<int>(StartState::kReady))
      log_message(LogLevel::kInfo, "NCCL looked up on a library handle: %s (recorded like a linked NCCL)",
                  info.dli_fname);
  }
  if (slot == 0) {
    if (!g_full_warned.exchange(true))
      log_message(LogLevel::kWarn, "more than %d NCCL libraries in one process: calls into %s are not recorded",
                  kMaxLibraries - 1, info.dli_fname);
    return real;
  }
  return library_hook(slot, id);
}

int handle_libraries() { return g_used.load(std::memory_order_acquire); }

const char* library_path(int library) {
  return library > 0 && library <= handle_libraries() ? g_slots[library].path : "";
}

}  // namespace trainscope::shim
