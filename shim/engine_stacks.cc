// Call-site stacks (see engine_stacks.h).
#include "shim/engine_stacks.h"

#include <cxxabi.h>
#include <dlfcn.h>
#if defined(__SANITIZE_THREAD__)
// libunwind's thread-exit destructor locks a mutex after ThreadSanitizer has torn the thread down, which crashes
// TSan builds; there, glibc's unwinder walks the stack instead.
#include <execinfo.h>
#else
#define UNW_LOCAL_ONLY
#include <libunwind.h>
#endif

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

namespace trainscope::engine {

namespace {

constexpr int kMaxFrames = 48;
constexpr size_t kMaxStacks = 4096;

struct StackTable {
  std::mutex mutex;
  std::unordered_map<uint64_t, uint32_t> id_by_call_site;
  std::vector<std::vector<uint64_t>> frames;  // index = id - 1
};

// Leaked: call sites may be noted while the process exits.
StackTable* g_table = new StackTable;

std::string describe_frame(uint64_t address) {
  // A return address points after the call: look up the byte before it, so the frame names the caller's line.
  const uint64_t lookup = address > 0 ? address - 1 : address;
  Dl_info info{};
  char text[512];
  if (dladdr(reinterpret_cast<void*>(lookup), &info) == 0 || info.dli_fname == nullptr) {
    std::snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(address));
    return text;
  }
  const char* module = std::strrchr(info.dli_fname, '/');
  module = module != nullptr ? module + 1 : info.dli_fname;
  const auto module_offset = static_cast<unsigned long long>(address - reinterpret_cast<uint64_t>(info.dli_fbase));
  if (info.dli_sname == nullptr) {
    std::snprintf(text, sizeof(text), "%s+0x%llx", module, module_offset);
    return text;
  }
  int status = 0;
  char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
  const char* name = status == 0 && demangled != nullptr ? demangled : info.dli_sname;
  std::snprintf(text, sizeof(text), "%s+0x%llx (%s+0x%llx)", name,
                static_cast<unsigned long long>(address - reinterpret_cast<uint64_t>(info.dli_saddr)), module,
                module_offset);
  std::free(demangled);
  return text;
}

}  // namespace

void capture_call_site_stack(uint64_t call_site) {
  void* frames[kMaxFrames];
#if defined(__SANITIZE_THREAD__)
  const int n = backtrace(frames, kMaxFrames);
#else
  const int n = unw_backtrace(frames, kMaxFrames);
#endif
  // Our own frames (this function, the engine entry, the NCCL hook) end where the call site begins.
  int first = 0;
  while (first < n && reinterpret_cast<uint64_t>(frames[first]) != call_site) ++first;
  if (first == n) first = 0;
  StackTable& table = *g_table;
  std::lock_guard<std::mutex> lock(table.mutex);
  if (table.id_by_call_site.count(call_site) != 0 || table.frames.size() >= kMaxStacks) return;
  std::vector<uint64_t> stack;
  for (int i = first; i < n; ++i) stack.push_back(reinterpret_cast<uint64_t>(frames[i]));
  table.frames.push_back(std::move(stack));
  table.id_by_call_site[call_site] = static_cast<uint32_t>(table.frames.size());
}

uint32_t stack_id_of(uint64_t call_site) {
  StackTable& table = *g_table;
  std::lock_guard<std::mutex> lock(table.mutex);
  const auto it = table.id_by_call_site.find(call_site);
  return it == table.id_by_call_site.end() ? 0 : it->second;
}

void abandon_stacks() { g_table = new StackTable; }

std::vector<std::string> symbolised_stack(uint32_t stack_id) {
  std::vector<uint64_t> frames;
  {
    StackTable& table = *g_table;
    std::lock_guard<std::mutex> lock(table.mutex);
    if (stack_id == 0 || stack_id > table.frames.size()) return {};
    frames = table.frames[stack_id - 1];
  }
  std::vector<std::string> text;
  for (uint64_t frame : frames) text.push_back(describe_frame(frame));
  return text;
}

}  // namespace trainscope::engine
