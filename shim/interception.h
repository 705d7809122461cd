// REAL(fn): the next definition of an interposed NCCL function in the process (the real NCCL), found lazily.
//
// The original is looked up with dlsym(RTLD_NEXT, "ncclX"), then dlsym(RTLD_NEXT, "pncclX") (NCCL's profiling
// alias), then RTLD_DEFAULT; an address equal to our own hook is rejected so a hook can never call itself.
// A function the loaded NCCL lacks resolves to nullptr: the hook then returns ncclInvalidUsage and logs once.
// The lookup runs on the first call of each function and is cached; a failed lookup is retried on later calls
// (NCCL may be dlopen()ed after the first attempt).
#pragma once

#include <atomic>

#include "shim/nccl_functions.h"

namespace trainscope::shim {

enum class RealId : int {
#define TS_REAL_ID(name, op, params) name,
  TRAINSCOPE_NCCL_FUNCTIONS(TS_REAL_ID)
#undef TS_REAL_ID
#define TS_HELPER_ID(name, params) name,
      TRAINSCOPE_NCCL_HELPER_FUNCTIONS(TS_HELPER_ID)
#undef TS_HELPER_ID
  // Interposed without a record of its own (a query jobs call in tight loops): see its hook in nccl_hooks.cc.
  ncclCommGetAsyncError,
  kCount
};

// Resolves (or returns the cached) address of the real function; nullptr if the loaded NCCL lacks it.
// `self` is our own hook's address (nullptr for helpers we do not interpose).
void* resolve_real(RealId id, const char* name, void* self);

// The cache; a relaxed load is all the hot path pays once a function is resolved.
extern std::atomic<void*> g_real_functions[static_cast<int>(RealId::kCount)];

template <typename Fn>
inline Fn real_function(RealId id, const char* name, Fn self) {
  void* cached = g_real_functions[static_cast<int>(id)].load(std::memory_order_relaxed);
  if (__builtin_expect(cached != nullptr, 1)) return reinterpret_cast<Fn>(cached);
  return reinterpret_cast<Fn>(resolve_real(id, name, reinterpret_cast<void*>(self)));
}

// Forgets every cached address (tests that swap NCCL libraries; never on a hot path).
void reset_real_functions();

}  // namespace trainscope::shim

#define REAL(fn) ::trainscope::shim::real_function(::trainscope::shim::RealId::fn, #fn, &::fn)
#define REAL_HELPER(fn) \
  ::trainscope::shim::real_function(::trainscope::shim::RealId::fn, #fn, static_cast<decltype(&::fn)>(nullptr))
