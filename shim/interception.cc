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

// Whether an NCCL is in the process-wide scope (linked, or dlopen()ed RTLD_GLOBAL): ncclGetErrorString, which every
// NCCL exports and we do not, is found there.
bool global_nccl_loaded() {
  return dlsym(RTLD_NEXT, "ncclGetErrorString") != nullptr || dlsym(RTLD_DEFAULT, "ncclGetErrorString") != nullptr;
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

void* resolve_real(RealId id, const char* name, void* self, void* caller, bool anywhere) {
  void* address = lookup(RTLD_NEXT, name, self);
  char profiling_name[64];
  const bool has_profiling_name = strlen(name) + 2 < sizeof(profiling_name);
  if (has_profiling_name) {
    profiling_name[0] = 'p';
    memcpy(profiling_name + 1, name, strlen(name) + 1);
  }
  if (address == nullptr && has_profiling_name) address = lookup(RTLD_NEXT, profiling_name, self);
  if (address == nullptr) address = lookup(RTLD_DEFAULT, name, self);
  if (address == nullptr) {
    if (void* own = fallback(id, name, self, caller)) return own;
    // A process-wide NCCL that lacks the function (an older version): the call is refused, never sent to another.
    if (!anywhere || global_nccl_loaded()) return nullptr;
    // No NCCL in the global scope: it is loaded RTLD_LOCAL (ctypes' default), and the job found our exported hook
    // through the global scope first (nccl4py, and any code that tries RTLD_DEFAULT before the handle). The hook must
    // call the NCCL the process did load, wherever it is: the first loaded object that defines the function.
    address = elf::any_other_definition(name);
    if (address == nullptr && has_profiling_name) address = elf::any_other_definition(profiling_name);
    if (address == self) address = nullptr;
    if (address == nullptr) return nullptr;
  }
  g_real_functions[static_cast<int>(id)].store(address, std::memory_order_relaxed);
  return address;
}

void reset_real_functions() {
  for (auto& slot : g_real_functions) slot.store(nullptr, std::memory_order_relaxed);
}

}  // namespace trainscope::shim
