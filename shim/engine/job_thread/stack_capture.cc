// Call-site stacks, the capture half (see stack_capture.h): the walk, through the C++ runtime's unwinder, and the
// copy of the shim's Python frames, each string bounded, into the shared table (engine_stacks_detail.h).
#include "shim/engine/job_thread/stack_capture.h"

// The unwinder of the C++ runtime walks the stack (_Unwind_Backtrace: libgcc's, or LLVM's libunwind linked into the
// manylinux build): no library of its own to ship, and the same call with either toolchain.
#include <unwind.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>

#include "shim/engine/shared/engine_stacks_detail.h"

namespace trainscope::engine {

namespace {

constexpr int kMaxFrames = 48;
constexpr size_t kMaxStacks = 65536;  // the recorder's site ids are 16 bits

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

}  // namespace trainscope::engine
