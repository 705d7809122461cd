// Call-site stacks (see engine_stacks.h).
#include "shim/engine/engine_stacks.h"

#include <cxxabi.h>
#include <dlfcn.h>
// The unwinder of the C++ runtime walks the stack (_Unwind_Backtrace: libgcc's, or LLVM's libunwind linked into the
// manylinux build): no library of its own to ship, and the same call with either toolchain.
#include <unwind.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace trainscope::engine {

namespace {

constexpr int kMaxFrames = 48;
constexpr size_t kMaxStacks = 65536;  // the recorder's site ids are 16 bits

struct SiteStack {
  std::vector<uint64_t> native;  // return addresses, innermost first
  std::vector<exchange::PythonFrame> python;
  std::string python_note;
};

struct StackTable {
  std::mutex mutex;
  std::unordered_map<uint32_t, SiteStack> by_site;
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

struct Walk {
  void** frames;
  int capacity;
  int count;
};

_Unwind_Reason_Code note_frame(_Unwind_Context* context, void* arg) {
  auto* walk = static_cast<Walk*>(arg);
  if (walk->count == walk->capacity) return _URC_END_OF_STACK;
  const uintptr_t ip = _Unwind_GetIP(context);
  if (ip == 0) return _URC_END_OF_STACK;
  walk->frames[walk->count++] = reinterpret_cast<void*>(ip);
  return _URC_NO_REASON;
}

// The return addresses of the calling thread's stack, innermost first (this function's own frame included).
int walk_stack(void** frames, int capacity) {
  Walk walk{frames, capacity, 0};
  _Unwind_Backtrace(note_frame, &walk);
  return walk.count;
}

// Copies at most `limit` bytes of a C string the shim filled (NUL-terminated there, but never trusted blindly).
std::string bounded(const char* text, size_t limit) {
  if (text == nullptr) return {};
  size_t n = 0;
  while (n < limit && text[n] != '\0') ++n;
  return std::string(text, n);
}

}  // namespace

void capture_call_site(const CallSiteCapture& site) {
  if (site.site == 0) return;
  void* frames[kMaxFrames];
  const int n = walk_stack(frames, kMaxFrames);
  // Our own frames (this function, the engine entry, the NCCL hook) end where the call site begins.
  int first = 0;
  while (first < n && reinterpret_cast<uint64_t>(frames[first]) != site.caller) ++first;
  if (first == n) first = 0;
  SiteStack stack;
  for (int i = first; i < n; ++i) stack.native.push_back(reinterpret_cast<uint64_t>(frames[i]));
  for (int32_t i = 0; i < site.python_count && site.python != nullptr; ++i) {
    const CallSitePythonFrame& frame = site.python[i];
    stack.python.push_back({bounded(frame.file, 4096), frame.line, bounded(frame.function, 1024)});
  }
  stack.python_note = bounded(site.python_note, 1024);
  StackTable& table = *g_table;
  std::lock_guard<std::mutex> lock(table.mutex);
  if (table.by_site.size() >= kMaxStacks) return;
  table.by_site.emplace(site.site, std::move(stack));
}

bool has_stack(uint32_t site) {
  if (site == 0) return false;
  StackTable& table = *g_table;
  std::lock_guard<std::mutex> lock(table.mutex);
  return table.by_site.count(site) != 0;
}

void abandon_stacks() { g_table = new StackTable; }

exchange::CallStack call_stack(uint32_t site) {
  exchange::CallStack out;
  std::vector<uint64_t> native;
  {
    StackTable& table = *g_table;
    std::lock_guard<std::mutex> lock(table.mutex);
    const auto it = table.by_site.find(site);
    if (it == table.by_site.end()) return out;
    native = it->second.native;
    out.python = it->second.python;
    out.python_note = it->second.python_note;
  }
  for (uint64_t frame : native) out.native.push_back(describe_frame(frame));
  return out;
}

}  // namespace trainscope::engine
