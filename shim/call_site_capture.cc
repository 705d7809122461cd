// Call sites of hooked calls (see call_site_capture.h).
#include "shim/call_site_capture.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include <atomic>

#include "shim/call_sites.h"
#include "shim/python_stack.h"
#include "shim/runtime.h"

namespace trainscope::shim {
namespace {

// Set once detect_python() found a CPython whose stacks we can read: stack_key() is worth calling.
std::atomic<bool> g_python_ready{false};
// Set when CPython runs here but its stacks cannot be read (unsupported version, broken read): sites made on a
// Python thread then carry the reason instead of frames.
std::atomic<bool> g_python_unreadable{false};

// First sights are rare: one buffer for all of them, under a lock (a Python stack can be 64 frames of 350 bytes,
// too much for the stack of a job's thread).
pthread_mutex_t g_capture_lock = PTHREAD_MUTEX_INITIALIZER;
python::Frame g_frames[python::kMaxCapturedFrames];
CallSitePythonFrame g_views[python::kMaxCapturedFrames];

// Whether this thread has a CPython thread state, asked of the interpreter itself (a public function in every
// version): for an interpreter whose frames we cannot read, whether the call came from Python at all.
bool thread_runs_python() {
  using IsInitialized = int (*)();
  using GetThreadState = void* (*)();
  static std::atomic<void*> is_initialized{nullptr};
  static std::atomic<void*> get_thread_state{nullptr};
  if (is_initialized.load(std::memory_order_relaxed) == nullptr) {
    is_initialized.store(dlsym(RTLD_DEFAULT, "Py_IsInitialized"), std::memory_order_relaxed);
    get_thread_state.store(dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState"), std::memory_order_relaxed);
  }
  void* initialized = is_initialized.load(std::memory_order_relaxed);
  void* thread_state = get_thread_state.load(std::memory_order_relaxed);
  if (initialized == nullptr || thread_state == nullptr) return false;
  if (reinterpret_cast<IsInitialized>(initialized)() == 0) return false;
  return reinterpret_cast<GetThreadState>(thread_state)() != nullptr;
}

// Copies `text` into a fixed field; a path too long keeps its tail (the file name is what tells), a name its head.
void copy_tail(char* out, size_t out_len, const char* text) {
  const size_t len = strlen(text);
  if (len < out_len) {
    memcpy(out, text, len + 1);
    return;
  }
  const size_t keep = out_len - 4;
  memcpy(out, "...", 3);
  memcpy(out + 3, text + len - keep, keep + 1);
}

void copy_head(char* out, size_t out_len, const char* text) {
  const size_t len = strlen(text);
  const size_t n = len < out_len ? len : out_len - 1;
  memcpy(out, text, n);
  out[n] = '\0';
}

// The site's first call: read it, write its entry, hand it to the engine. Returns its id (0: none could be made).
uint32_t capture_site(uint64_t caller, bool python_frames) {
  Runtime& rt = g_runtime;
  pthread_mutex_lock(&g_capture_lock);
  int depth = 0;
  const int count = python_frames ? python::capture(g_frames, python::kMaxCapturedFrames, &depth) : 0;
  const char* note = "";
  if (count == 0 && g_python_unreadable.load(std::memory_order_relaxed) && thread_runs_python())
    note = python::status().reason;
  recorder::SiteEntry entry;
  memset(&entry, 0, sizeof(entry));
  entry.caller = caller;
  entry.python_depth = static_cast<uint32_t>(count > 0 ? depth : 0);
  entry.python_frames = static_cast<uint32_t>(count < 2 ? count : 2);
  // The second frame kept is the job's own line when the innermost one is a library's (dist.all_reduce's frames are
  // torch's), else the innermost's caller.
  int second = 1;
  if (count > 1 && recorder::is_library_python_file(g_frames[0].file)) {
    for (int i = 1; i < count; ++i) {
      if (!recorder::is_library_python_file(g_frames[i].file)) {
        second = i;
        break;
      }
    }
  }
  const int kept[2] = {0, second};
  for (uint32_t i = 0; i < entry.python_frames; ++i) {
    const python::Frame& frame = g_frames[kept[i]];
    entry.frames[i].line = frame.line;
    copy_head(entry.frames[i].function, sizeof(entry.frames[i].function), frame.function);
    copy_tail(entry.frames[i].file, sizeof(entry.frames[i].file), frame.file);
  }
  const uint32_t id = rt.writer.add_site(entry);
  auto note_call_site = rt.engine.note_call_site;
  if (id != 0 && note_call_site != nullptr) {
    for (int i = 0; i < count; ++i) g_views[i] = {g_frames[i].line, g_frames[i].file, g_frames[i].function};
    CallSiteCapture capture{};
    capture.site = id;
    capture.caller = caller;
    capture.python = count > 0 ? g_views : nullptr;
    capture.python_count = count;
    capture.python_depth = count > 0 ? depth : 0;
    capture.python_note = note;
    note_call_site(&capture);
  }
  pthread_mutex_unlock(&g_capture_lock);
  return id;
}

}  // namespace

void detect_python() {
  const python::Status& status = python::detect();
  g_python_ready.store(status.support == python::Support::kReady, std::memory_order_release);
  const bool unreadable = status.support == python::Support::kUnsupported || status.support == python::Support::kBroken;
  g_python_unreadable.store(unreadable, std::memory_order_relaxed);
  if (status.support == python::Support::kNotPython) return;
  g_runtime.writer.set_python(status.major, status.minor, unreadable ? status.reason : "");
  if (unreadable) log_message(LogLevel::kWarn, "Python stacks are off: %s", status.reason);
}

uint16_t call_site_of(uint64_t caller) {
  uint64_t python_key = 0;
  if (g_python_ready.load(std::memory_order_relaxed)) python_key = python::stack_key();
  const SiteLookup found = look_up_site(call_site_key(caller, python_key));
  if (found.claimed_slot < 0) return static_cast<uint16_t>(found.id);
  // A process that had no Python at its first NCCL call may have initialised one since.
  if (!g_python_ready.load(std::memory_order_relaxed) && python::status().support == python::Support::kNotPython) {
    detect_python();
    if (g_python_ready.load(std::memory_order_relaxed)) python_key = python::stack_key();
  }
  const uint32_t id = capture_site(caller, python_key != 0);
  publish_site(found.claimed_slot, id);
  return static_cast<uint16_t>(id <= 0xffff ? id : 0);
}

}  // namespace trainscope::shim
