// libts_pystack_probe.so: C functions over shim/python_stack.h for python_stack_check.py to call through ctypes.
//
// Results come back as text (one frame a line: "line\x1ffile\x1ffunction"). Freestanding like the shim it tests, so
// linking it also proves that the stack reader needs nothing but libc and libdl.
#include <poll.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>

#include "shim/python_layouts.h"
#include "shim/python_stack.h"

namespace python = trainscope::shim::python;

namespace {

// Waits (at most 30 s: a broken test must fail, not hang) for one byte on fd.
bool wait_byte(int fd) {
  pollfd p{fd, POLLIN, 0};
  char byte;
  return poll(&p, 1, 30000) == 1 && read(fd, &byte, 1) == 1;
}

bool put_byte(int fd) { return write(fd, "x", 1) == 1; }

// The capture as text: "depth N" then one line per frame. Returns the number of frames.
int capture_text(char* out, int cap) {
  python::Frame frames[python::kMaxCapturedFrames];
  int depth = 0;
  int n = python::capture(frames, python::kMaxCapturedFrames, &depth);
  int used = std::snprintf(out, static_cast<size_t>(cap), "depth %d\n", depth);
  for (int i = 0; i < n && used >= 0 && used < cap; ++i) {
    used += std::snprintf(out + used, static_cast<size_t>(cap - used), "%d\x1f%s\x1f%s\n", frames[i].line,
                          frames[i].file, frames[i].function);
  }
  return n;
}

struct NativeResult {
  uint64_t key;
  int frames;
};

void* native_thread(void* arg) {
  auto* result = static_cast<NativeResult*>(arg);
  python::Frame frames[4];
  int depth = -1;
  result->key = python::stack_key();
  result->frames = python::capture(frames, 4, &depth) + depth;
  return nullptr;
}

}  // namespace

extern "C" {

// "support major minor reason"; returns the support (python::Support).
__attribute__((visibility("default"))) int ts_probe_detect(char* out, int cap) {
  const python::Status& status = python::detect();
  std::snprintf(out, static_cast<size_t>(cap), "%d %d %d %s", static_cast<int>(status.support), status.major,
                status.minor, status.reason);
  return static_cast<int>(status.support);
}

// Tests only: Python 3.<minor>'s layout in place of the right one, its innermost-frame offset moved by `shift`.
__attribute__((visibility("default"))) void ts_probe_override_layout(int minor, int shift) {
  python::Layout layout = *python::layout_for(3, minor);
  if (layout.tstate_current_frame >= 0) layout.tstate_current_frame += shift;
  if (layout.tstate_frame >= 0) layout.tstate_frame += shift;
  if (layout.tstate_cframe >= 0) layout.tstate_cframe += shift;
  python::override_layout_for_testing(layout);
}

__attribute__((visibility("default"))) uint64_t ts_probe_key() { return python::stack_key(); }

__attribute__((visibility("default"))) int ts_probe_capture(char* out, int cap) { return capture_text(out, cap); }

__attribute__((visibility("default"))) int ts_probe_plain_reads() { return python::plain_reads_enabled() ? 1 : 0; }

// stack_key() n times; 1 when every key equals the first and is not 0, else 0. *first gets the first key.
__attribute__((visibility("default"))) int ts_probe_keys_stable(int n, uint64_t* first) {
  *first = python::stack_key();
  for (int i = 1; i < n; ++i) {
    if (python::stack_key() != *first) return 0;
  }
  return *first != 0 ? 1 : 0;
}

// The mean time of one stack_key() over n calls, in nanoseconds.
__attribute__((visibility("default"))) double ts_probe_ns_per_key(int n) {
  timespec start, end;
  uint64_t sink = 0;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (int i = 0; i < n; ++i) sink += python::stack_key();
  clock_gettime(CLOCK_MONOTONIC, &end);
  asm volatile("" : : "r"(sink));
  double ns = static_cast<double>(end.tv_sec - start.tv_sec) * 1e9 + static_cast<double>(end.tv_nsec - start.tv_nsec);
  return n > 0 ? ns / n : 0.0;
}

// Waits (bounded) for one byte on fd; through ctypes.CDLL, without the GIL. Returns 1, or 0 when none came.
__attribute__((visibility("default"))) int ts_probe_wait_byte(int fd) { return wait_byte(fd) ? 1 : 0; }

// Called through ctypes.PyDLL, so with the GIL held: says so on signal_fd, then keeps the GIL until a byte arrives
// on wait_fd. Returns 1, or 0 when the byte did not come in time.
__attribute__((visibility("default"))) int ts_probe_hold_gil(int signal_fd, int wait_fd) {
  return put_byte(signal_fd) && wait_byte(wait_fd) ? 1 : 0;
}

// Called through ctypes.CDLL (GIL released): tells the holder (waiting in ts_probe_wait_byte) to go and take the
// GIL, waits until it has it, takes the key and the frames while it keeps it, then lets it go. Returns the number
// of frames, or -1 when the holder never said it held the GIL.
__attribute__((visibility("default"))) int ts_probe_capture_while_held(int go_fd, int signal_fd, int release_fd,
                                                                       char* out, int cap, uint64_t* key) {
  if (!put_byte(go_fd) || !wait_byte(signal_fd)) return -1;
  *key = python::stack_key();
  int n = capture_text(out, cap);
  put_byte(release_fd);
  return n;
}

// A thread created here, which Python never saw: its key and frames (frames + depth), "key K frames F".
__attribute__((visibility("default"))) int ts_probe_native_thread(char* out, int cap) {
  NativeResult result{~0ull, -1};
  pthread_t thread;
  if (pthread_create(&thread, nullptr, native_thread, &result) != 0) return -1;
  pthread_join(thread, nullptr);
  std::snprintf(out, static_cast<size_t>(cap), "key %llu frames %d", static_cast<unsigned long long>(result.key),
                result.frames);
  return 0;
}

}  // extern "C"
