// TRAINSCOPE_WATCH=modules, the library's side: the Python hooks' way in, and each module frame's record.
//
// The hooks (python/inject/) are put into every Python interpreter this process starts, with no change to the job:
// at load the folder holding them (trainscope-python/, installed beside this library) goes first on PYTHONPATH, so
// that its sitecustomize runs at the interpreter's start (it then runs the job's own sitecustomize, and installs the
// hooks when the job imports torch, never importing torch itself). The folder holds nothing else a job could import
// by mistake. A frame comes back through trainscope_module_frame (module_frame_abi.h): one record appended, watched,
// then the engine takes the tensors' statistics on this thread.
#include <pthread.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <atomic>

#include "shim/module_frame_abi.h"
#include "shim/runtime.h"

namespace trainscope::shim {
namespace {

constexpr const char* kHooksFolder = "trainscope-python";

std::atomic<uint64_t> g_module_frames{0};

pthread_once_t g_regex_once = PTHREAD_ONCE_INIT;
regex_t g_regex;
bool g_regex_ok = false;

void compile_regex() {
  const char* pattern = g_runtime.config.watch_modules_regex;
  if (pattern[0] == '\0') return;
  g_regex_ok = regcomp(&g_regex, pattern, REG_EXTENDED | REG_NOSUB) == 0;  // checked at load: it compiles
}

// FNV-1a of the module's name and class: the frame's call site (near overflow is said once per module).
uint64_t module_site(const char* name, const char* kind) {
  uint64_t hash = 1469598103934665603ull;
  const char* const parts[] = {name, " ", kind};
  for (const char* text : parts) {
    for (const char* c = text; *c != '\0'; ++c) hash = (hash ^ static_cast<unsigned char>(*c)) * 1099511628211ull;
  }
  return hash != 0 ? hash : 1;
}

}  // namespace

uint64_t module_frames_recorded() { return g_module_frames.load(std::memory_order_relaxed); }

void inject_module_hooks() {
  char dir[kMaxPath];
  char folder[kMaxPath + 32];
  if (!own_directory(dir, sizeof(dir)) ||
      snprintf(folder, sizeof(folder), "%s/%s", dir, kHooksFolder) >= static_cast<int>(sizeof(folder)))
    return;
  char hooks[kMaxPath + 64];
  snprintf(hooks, sizeof(hooks), "%s/sitecustomize.py", folder);
  if (access(hooks, R_OK) != 0) {
    log_message(LogLevel::kWarn,
                "TRAINSCOPE_WATCH=modules: the module hooks are not installed beside this library ('%s' missing); "
                "no module frames",
                hooks);
    return;
  }
  const char* old = getenv("PYTHONPATH");
  if (old == nullptr || old[0] == '\0') {
    setenv("PYTHONPATH", folder, 1);
    return;
  }
  const size_t folder_len = strlen(folder);
  if (strncmp(old, folder, folder_len) == 0 && (old[folder_len] == ':' || old[folder_len] == '\0')) return;  // a child
  const size_t len = folder_len + 1 + strlen(old) + 1;
  char* value = static_cast<char*>(malloc(len));
  if (value == nullptr) return;
  snprintf(value, len, "%s:%s", folder, old);
  setenv("PYTHONPATH", value, 1);
  free(value);
}

}  // namespace trainscope::shim

using trainscope::shim::g_runtime;
using trainscope::shim::t_thread;

extern "C" __attribute__((visibility("default"))) int trainscope_module_watched(const char* name, const char* kind) {
  if (!g_runtime.enabled || !g_runtime.config.watch_modules || name == nullptr || kind == nullptr) return 0;
  if (g_runtime.config.watch_modules_regex[0] == '\0') return 1;
  pthread_once(&trainscope::shim::g_regex_once, trainscope::shim::compile_regex);
  if (!trainscope::shim::g_regex_ok) return 0;
  return regexec(&trainscope::shim::g_regex, name, 0, nullptr, 0) == 0 ||
                 regexec(&trainscope::shim::g_regex, kind, 0, nullptr, 0) == 0
             ? 1
             : 0;
}

extern "C" __attribute__((visibility("default"))) int trainscope_module_backward(void) {
  return g_runtime.enabled && g_runtime.config.watch_modules && g_runtime.config.watch_module_backward ? 1 : 0;
}

extern "C" __attribute__((visibility("default"))) int trainscope_module_frame(const char* name, const char* kind,
                                                                              const char* labels, uint64_t labels_len,
                                                                              const int64_t* words,
                                                                              uint64_t word_count) {
  using namespace trainscope;
  using namespace trainscope::shim;
  if (!g_runtime.enabled || !g_runtime.config.watch_modules) return -1;
  if (t_thread.depth > 0) return 1;  // inside one of our own calls on this thread: this frame only is not taken
  if (name == nullptr || kind == nullptr || words == nullptr || word_count < 3) return -1;
  ensure_started(0);
  if (g_runtime.engine.module_frame == nullptr) return -2;
  ++t_thread.depth;  // what the statistics touch is ours, not the job's
  recorder::Record record;
  memset(&record, 0, sizeof(record));
  record.start_ns = now_ns();
  record.tid = current_tid();
  record.op = static_cast<uint16_t>(recorder::Op::kModuleForward);
  record.seq = g_module_frames.fetch_add(1, std::memory_order_relaxed) + 1;
  // aux: kModuleRecordRoot, kModuleRecordBackward, kModuleRecordStepSkipped, kModuleRecordLossScaler or
  // kModuleRecordBeside (flight_record_format.h).
  const int64_t flags = words[1];
  // count: the frame's rows; for a loss scaler's step, how many batches ago it was.
  const bool step = (flags & (kModuleFrameStepSkipped | kModuleFrameStepApplied)) != 0;
  const int64_t count = step ? (word_count > 3 ? words[3] : 0) : words[2];
  record.count = static_cast<uint64_t>(count > 0 ? count : 0);
  record.aux = (flags & kModuleFrameStepSkipped) != 0   ? recorder::kModuleRecordStepSkipped
               : (flags & kModuleFrameStepApplied) != 0 ? recorder::kModuleRecordStepApplied
               : (flags & kModuleFrameLossScaler) != 0  ? recorder::kModuleRecordLossScaler
               : (flags & kModuleFrameBackward) != 0    ? recorder::kModuleRecordBackward
               : (flags & kModuleFrameRoot) != 0        ? recorder::kModuleRecordRoot
               : (flags & kModuleFrameBeside) != 0      ? recorder::kModuleRecordBeside
                                                        : recorder::kModuleRecordForward;
  // A module's gradients are a call site of their own (near overflow is said once per site).
  record.caller = module_site(name, kind) ^ (record.aux == recorder::kModuleRecordBackward ? 0x9e3779b97f4a7c15ull : 0);
  record.rank = record.nranks = record.peer = record.redop = recorder::kUnknown;
  record.dtype = recorder::kUnknown;
  // A loss scaler and its steps are events for the frame feed: no statistics, nothing on the watch board.
  const bool event = record.aux == recorder::kModuleRecordStepSkipped ||
                     record.aux == recorder::kModuleRecordStepApplied ||
                     record.aux == recorder::kModuleRecordLossScaler;
  record.flags = event ? 0 : recorder::kFlagWatched;
  const recorder::Pending pending = g_runtime.writer.append(record, 0, record.start_ns);
  // TRAINSCOPE_ABORT_AFTER_BATCH: the first module forward of batch N+1 stops the rank here (never returns).
  if (auto gate = g_runtime.engine.batch_call; __builtin_expect(gate != nullptr, 0)) gate(&record);
  int result = -3;
  if (event) {
    result = 0;
  } else if (pending.slot != nullptr) {
    result =
        g_runtime.engine.module_frame(&record, pending.commit - 1, name, kind, labels, labels_len, words, word_count);
  }
  --t_thread.depth;
  return result;
}
