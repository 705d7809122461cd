// The decision behind our dlsym and dlvsym (the trampolines in dl_trampolines.S): which look-ups we answer with a
// hook, and which go to the real function untouched.
//
// A look-up on a library handle of a function we interpose (ctypes' `lib.ncclAllReduce`, JAX's stub) is answered
// with the hook of that library (nccl_libraries.h). Everything else — every other name, every RTLD_DEFAULT and
// RTLD_NEXT look-up, every look-up while trainscope is disabled — is forwarded by a tail jump, so the real dlsym
// sees its caller's own return address: RTLD_NEXT stays relative to the caller (a second preloaded library that
// wraps open() finds libc's open, not itself), and RTLD_DEFAULT searches the caller's own scope. A process that
// never touches NCCL pays the trampoline and a four-byte compare per dlsym.
#include <dlfcn.h>

#include <atomic>

#include "shim/elf_symbols.h"
#include "shim/interception.h"
#include "shim/nccl_libraries.h"
#include "shim/runtime.h"

using DlvsymFunction = void* (*)(void* handle, const char* name, const char* version);

// Read by the trampolines (hidden: never visible outside this library).
extern "C" {
__attribute__((visibility("hidden"))) void* trainscope_real_dlsym = nullptr;
__attribute__((visibility("hidden"))) void* trainscope_real_dlvsym = nullptr;
}

namespace trainscope::shim {
namespace {

// The next dlsym and dlvsym after this library (libc's, or another preloaded interposer's). Resolved from the ELF
// tables, since our own dlsym cannot ask itself; a race resolves the same address twice.
bool resolve_real_lookups() {
  if (__atomic_load_n(&trainscope_real_dlsym, __ATOMIC_ACQUIRE) != nullptr &&
      __atomic_load_n(&trainscope_real_dlvsym, __ATOMIC_ACQUIRE) != nullptr)
    return true;
  void* next_dlsym = elf::next_definition("dlsym");
  void* next_dlvsym = elf::next_definition("dlvsym");
  if (next_dlsym == nullptr || next_dlvsym == nullptr) {  // dlopen()ed, not preloaded: libc comes before us
    next_dlsym = elf::any_other_definition("dlsym");
    next_dlvsym = elf::any_other_definition("dlvsym");
  }
  if (next_dlsym == nullptr || next_dlvsym == nullptr) return false;
  __atomic_store_n(&trainscope_real_dlvsym, next_dlvsym, __ATOMIC_RELEASE);
  __atomic_store_n(&trainscope_real_dlsym, next_dlsym, __ATOMIC_RELEASE);
  return true;
}

void* real_dlsym(void* handle, const char* name) {
  return reinterpret_cast<DlsymFunction>(__atomic_load_n(&trainscope_real_dlsym, __ATOMIC_ACQUIRE))(handle, name);
}

bool maybe_nccl(const char* name) {
  return name != nullptr && name[0] == 'n' && name[1] == 'c' && name[2] == 'c' && name[3] == 'l';
}

}  // namespace
}  // namespace trainscope::shim

// Returns 1 with *result set when we answer the look-up, 0 when the trampoline must jump to the real function.
extern "C" __attribute__((visibility("hidden"))) int trainscope_dl_decide(void* handle, const char* name,
                                                                          const char* version, void** result) {
  using namespace trainscope::shim;
  if (!resolve_real_lookups()) {
    // No dlsym after ours anywhere: nothing can answer but us, and we know no symbol.
    *result = nullptr;
    return 1;
  }
  if (!maybe_nccl(name) || handle == RTLD_DEFAULT || handle == RTLD_NEXT || !g_runtime.enabled) return 0;
  RealId id;
  if (!interposed_function(name, &id)) return 0;
  void* real = nullptr;
  if (version == nullptr) {
    real = real_dlsym(handle, name);
  } else {
    real = reinterpret_cast<DlvsymFunction>(__atomic_load_n(&trainscope_real_dlvsym, __ATOMIC_ACQUIRE))(handle, name,
                                                                                                        version);
  }
  if (real == nullptr) return 0;  // the real look-up answers again, and sets dlerror() as the job expects
  *result = hook_for_handle_lookup(id, real, real_dlsym);
  return 1;
}
