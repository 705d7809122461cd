// REAL(fn): the next definition of an interposed NCCL function in the process (the real NCCL), found lazily; and
// REAL_IN(L, fn): the same function in NCCL library L, for the hooks handed out by look-ups on a library handle.
//
// Library 0 is the NCCL of the process-wide look-up (linked, or dlopen()ed RTLD_GLOBAL): its functions are looked up
// with dlsym(RTLD_NEXT, "ncclX"), then dlsym(RTLD_NEXT, "pncclX") (NCCL's profiling alias), then RTLD_DEFAULT; an
// address equal to our own hook is rejected so a hook can never call itself. A function library 0 lacks resolves to
// nullptr (the hook then returns ncclInvalidUsage and logs once) — except when the caller is an NCCL loaded on a
// handle calling its own exported function (ncclBcast calls ncclBroadcast; the process-wide look-up binds that call
// to our hook): then that NCCL's own definition is used. When no NCCL is in the process-wide scope at all (it was
// loaded RTLD_LOCAL, and the job found our exported hook in the global scope first: nccl4py), library 0 is the first
// loaded object that defines the function. The lookup runs on the first call of each function and is cached; a
// failed lookup is retried on later calls (NCCL may be dlopen()ed after the first attempt).
//
// Libraries 1 to kMaxLibraries - 1 are NCCLs found by a job's dlsym(handle, "ncclX") (ctypes, JAX's stub, a renamed
// copy): their every function is resolved once, when the library gets its slot (nccl_libraries.h).
#pragma once

#include <atomic>

#include "shim/nccl_functions.h"

namespace trainscope::shim {

enum class RealId : int {
#define TS_REAL_ID(name, op, params, args) name,
  TRAINSCOPE_NCCL_FUNCTIONS(TS_REAL_ID)
#undef TS_REAL_ID
#define TS_HELPER_ID(name, params) name,
      TRAINSCOPE_NCCL_HELPER_FUNCTIONS(TS_HELPER_ID)
#undef TS_HELPER_ID
  // Interposed without a record of its own (a query jobs call in tight loops): see its hook in nccl_hooks.cc.
  ncclCommGetAsyncError,
  kCount
};
inline constexpr int kRealCount = static_cast<int>(RealId::kCount);
inline constexpr int kMaxLibraries = 8;

// "ncclAllReduce" for RealId::ncclAllReduce.
const char* real_name(RealId id);
// Whether the shim interposes `name` (a hook exists for it); sets *id.
bool interposed_function(const char* name, RealId* id);

// Resolves (or returns the cached) address of library 0's function; nullptr if the loaded NCCL lacks it.
// `self` is our own hook's address (nullptr for helpers we do not interpose); `caller` the hook's return address.
// With no NCCL in the process-wide scope at all, the first loaded object that defines the function is library 0's
// (an NCCL loaded RTLD_LOCAL whose functions the job looks up in the global scope first, as nccl4py does); `anywhere`
// false leaves that out (the handle look-ups: such a library gets a slot of its own, as before).
void* resolve_real(RealId id, const char* name, void* self, void* caller, bool anywhere = true);

// The caches; a relaxed load is all the hot path pays once a function is resolved.
extern std::atomic<void*> g_real_functions[kRealCount];
extern std::atomic<void*> g_library_functions[kMaxLibraries][kRealCount];  // [0] unused

template <int L, typename Fn>
inline Fn real_function(RealId id, const char* name, Fn self, void* caller) {
  static_assert(L >= 0 && L < kMaxLibraries);
  if constexpr (L != 0) {
    (void)name;
    (void)self;
    (void)caller;
    return reinterpret_cast<Fn>(g_library_functions[L][static_cast<int>(id)].load(std::memory_order_relaxed));
  } else {
    void* cached = g_real_functions[static_cast<int>(id)].load(std::memory_order_relaxed);
    if (__builtin_expect(cached != nullptr, 1)) return reinterpret_cast<Fn>(cached);
    return reinterpret_cast<Fn>(resolve_real(id, name, reinterpret_cast<void*>(self), caller));
  }
}

// Forgets every cached address of library 0 (tests that swap NCCL libraries; never on a hot path).
void reset_real_functions();

}  // namespace trainscope::shim

#define REAL_IN(L, fn) \
  ::trainscope::shim::real_function<L>(::trainscope::shim::RealId::fn, #fn, &::fn, __builtin_return_address(0))
#define REAL(fn) REAL_IN(0, fn)
#define REAL_HELPER_IN(L, fn)                                                                                      \
  ::trainscope::shim::real_function<L>(::trainscope::shim::RealId::fn, #fn, static_cast<decltype(&::fn)>(nullptr), \
                                       nullptr)
#define REAL_HELPER(fn) REAL_HELPER_IN(0, fn)
