// Call-site stacks, the symbolisation half (see engine_stacks.h); the capture half is job_thread/stack_capture.cc.
#include "shim/engine/engine_stacks.h"

#include <cxxabi.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "shim/engine/shared/engine_stacks_detail.h"

namespace trainscope::engine {

StackTable* g_table = new StackTable;

namespace {

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
