// Lazy lookup of the real NCCL functions behind our hooks (see interception.h for the rules).
#include "shim/interception.h"

#include <dlfcn.h>
#include <string.h>

#include "shim/elf_symbols.h"
#include "shim/runtime.h"

namespace trainscope::shim {

std::atomic<void*> g_real_functions[kRealCount];
std::atomic<void*> g_library_functions[kMaxLibraries][kRealCount];

namespace {

constexpr const char* kNames[kRealCount] = {
#define TS_REAL_NAME(name, op, params, args) #name,
    TRAINSCOPE_NCCL_FUNCTIONS(TS_REAL_NAME)
#undef TS_REAL_NAME
#define TS_HELPER_NAME(name, params) #name,
        TRAINSCOPE_NCCL_HELPER_FUNCTIONS(TS_HELPER_NAME)
#undef TS_HELPER_NAME
            "ncclCommGetAsyncError",
};

void* lookup(void* handle, const char* name, void* self) {
  void* address = dlsym(handle, name);
  return address == self ? nullptr : address;
}

// Library 0 lacks the function: a call from inside an NCCL loaded on a handle (its own call to its own exported
// function, bound to our hook by the process-wide look-up) goes to that NCCL's definition; nothing is cached, since
// another thread may be in another library.
void* fallback(RealId id, const char* name, void* self, void* caller) {
  const int library = t_thread.library;
  if (t_thread.depth > 0 && library > 0 && library < kMaxLibraries)
    return g_library_functions[library][static_cast<int>(id)].load(std::memory_order_relaxed);
  if (caller == nullptr) return nullptr;
  void* address = elf::definition_in_object_of(caller, name);
  return address == self ? nullptr : address;
}

}  // namespace

const char* real_name(RealId id) {
  const int index = static_cast<int>(id);
  return index >= 0 && index < kRealCount ? kNames[index] : "unknown";
}

bool interposed_function(const char* name, RealId* id) {
  if (name == nullptr) return false;
#define TS_MATCH(fn, op, params, args) \
  if (strcmp(name, #fn) == 0) {        \
    *id = RealId::fn;                  \
    return true;                       \
  }
  TRAINSCOPE_NCCL_FUNCTIONS(TS_MATCH)
#undef TS_MATCH
  if (strcmp(name, "ncclCommGetAsyncError") == 0) {
    *id = RealId::ncclCommGetAsyncError;
    return true;
  }
  return false;
}

void* resolve_real(RealId id, const char* name, void* self, void* caller) {
  void* address = lookup(RTLD_NEXT, name, self);
  char profiling_name[64];
  if (address == nullptr && strlen(name) + 2 < sizeof(profiling_name)) {
    profiling_name[0] = 'p';
    memcpy(profiling_name + 1, name, strlen(name) + 1);
    address = lookup(RTLD_NEXT, profiling_name, self);
  }
  if (address == nullptr) address = lookup(RTLD_DEFAULT, name, self);
  if (address == nullptr) return fallback(id, name, self, caller);
  g_real_functions[static_cast<int>(id)].store(address, std::memory_order_relaxed);
  return address;
}

void reset_real_functions() {
  for (auto& slot : g_real_functions) slot.store(nullptr, std::memory_order_relaxed);
}

}  // namespace trainscope::shim
