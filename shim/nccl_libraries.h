// The NCCL libraries a job looks up on a handle (dlsym(handle, "ncclAllReduce"): ctypes in vLLM and SGLang, JAX's
// NCCL stub, a renamed copy named by VLLM_NCCL_SO_PATH), each with hooks of its own.
//
// A process may hold more than one NCCL (PyTorch's linked libnccl.so.2 and a ctypes copy of another version), and
// a hook must call the function of the library its address came from. So each such library gets a slot (1 to
// kMaxLibraries - 1) and the look-up hands back that slot's hook, an instance of the same hook body bound to that
// library's functions. A look-up that finds library 0's function (the process-wide NCCL, which our exported hooks
// already call) hands back the exported hook. Slots are taken under a lock (look-ups are rare), found without one,
// and never given back: a library that got a slot stays loaded (we hold a reference), so its hooks stay valid.
// Freestanding: libc only.
#pragma once

#include "shim/interception.h"

namespace trainscope::shim {

using DlsymFunction = void* (*)(void* handle, const char* name);

// What a job's dlsym(handle, name) or dlvsym should return for the interposed function `id`, whose definition in
// the handle's scope is `real`: the exported hook when `real` is library 0's, the hook of `real`'s library
// otherwise, and `real` itself (unobserved, with one warning) when every slot is taken. `real_dlsym` resolves the
// library's other functions when it gets its slot.
void* hook_for_handle_lookup(RealId id, void* real, DlsymFunction real_dlsym);

// How many NCCL libraries looked up on a handle have a slot; the path each was loaded from ("" for none).
int handle_libraries();
const char* library_path(int library);

// Hook addresses, defined with the hooks in nccl_hooks.cc: the exported one (library 0) and library L's.
void* exported_hook(RealId id);
void* library_hook(int library, RealId id);

}  // namespace trainscope::shim
