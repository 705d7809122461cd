// Lazy lookup of the real NCCL functions behind our hooks (see interception.h for the rules).
#include "shim/interception.h"

#include <dlfcn.h>
#include <string.h>

namespace trainscope::shim {

std::atomic<void*> g_real_functions[static_cast<int>(RealId::kCount)];

namespace {

void* lookup(void* handle, const char* name, void* self) {
  void* address = dlsym(handle, name);
  return address == self ? nullptr : address;
}

}  // namespace

void* resolve_real(RealId id, const char* name, void* self) {
  void* address = lookup(RTLD_NEXT, name, self);
  char profiling_name[64];
  if (address == nullptr && strlen(name) + 2 < sizeof(profiling_name)) {
    profiling_name[0] = 'p';
    memcpy(profiling_name + 1, name, strlen(name) + 1);
    address = lookup(RTLD_NEXT, profiling_name, self);
  }
  if (address == nullptr) address = lookup(RTLD_DEFAULT, name, self);
  if (address != nullptr) g_real_functions[static_cast<int>(id)].store(address, std::memory_order_relaxed);
  return address;
}

void reset_real_functions() {
  for (auto& slot : g_real_functions) slot.store(nullptr, std::memory_order_relaxed);
}

}  // namespace trainscope::shim
