// The Python stack of the thread that calls NCCL: a cheap key on every call, the frames at a call site's first sight.
//
// CPython is not linked: its C API is found at run time (dlsym(RTLD_DEFAULT, ...)) and its structures are read with
// the layouts of python_layouts.h, without the GIL (NCCL is called with it released, and another thread may hold it
// for long), without allocating, and without calling into Python beyond PyGILState_GetThisThreadState (a TSS read),
// Py_IsInitialized (a flag) and, at first sight only, PyCode_Addr2Line (reads of the code's line table).
//
// Supported: CPython 3.9 to 3.13, release builds with the GIL, on LP64 Linux. Anything else (3.8 and older, 3.14
// and newer, Python 2, debug or Py_TRACE_REFS builds, free-threaded builds) is refused with a one-line reason.
//
// Only the calling thread's own frames are read: the thread is inside our hook, so its frames and their code
// objects cannot change or go away while we read them, whoever holds the GIL.
//
// Use: detect() once at the first NCCL call (and again later, e.g. at the first sight of a native call site, for a
// process that initialises Python after its first NCCL call); stack_key() on every call; capture() the first time
// a key is seen.
//
// Limits: Python is found only where its symbols are global (the python executable, a libpython loaded with
// RTLD_GLOBAL); the thread state read is the one PyGILState binds to the thread (a subinterpreter's thread shows the
// main interpreter's); Py_IsInitialized is checked before each walk, but a finalisation that starts during one is not
// guarded against; at first sight on 3.11 under a line tracer, PyCode_Addr2Line may read the line array another
// thread is filling (a wrong line, or a read past that array).
//
// Freestanding (lives inside libtrainscope.so): libc and libdl only, no allocation.
#pragma once

#include <cstddef>
#include <cstdint>

namespace trainscope::shim::python {

inline constexpr int kMaxCapturedFrames = 64;  // frames symbolised at first sight
inline constexpr int kMaxHashedFrames = 256;   // frames mixed into the key (deeper stacks: the innermost 256)
inline constexpr int kMaxDepth = 10000;        // capture() counts the depth up to this
inline constexpr size_t kFileBytes = 256;      // a longer path keeps its tail, prefixed "..."
inline constexpr size_t kFunctionBytes = 96;   // a longer name keeps its head, followed by "..."

// One frame as Python's traceback prints it: co_filename, the line being executed, co_name. UTF-8, NUL-terminated.
struct Frame {
  int32_t line;
  char file[kFileBytes];
  char function[kFunctionBytes];
};

enum class Support : int {
  kNotPython = 0,    // no Python in this process (or not initialised yet: detect() again later)
  kReady = 1,        // keys and captures work
  kUnsupported = 2,  // a Python this trainscope cannot read (reason says which and why)
  kBroken = 3,       // a read failed validation at run time: disabled for the rest of the process
};

struct Status {
  Support support;
  int major;  // the Python found, 0 when none
  int minor;
  char reason[192];  // why not kReady, one line ("" when ready)
};

// Looks for an initialised CPython in the process and picks its layout. Not for the hot path (a few dlsym and
// system calls the first time); cheap once Python was found, refused or surely absent (no Py_IsInitialized in the
// process). While Python is loaded but not initialised it answers kNotPython and looks again at the next call.
// Thread-safe. The returned status never changes afterwards (a later change is a new status).
const Status& detect();

// The status as of the last detect() (or a later kBroken), without detecting.
const Status& status();

// HOT PATH, every hooked call: a non-zero hash of the calling thread's Python stack (each frame's code object and
// instruction offset, the innermost kMaxHashedFrames frames), or 0 when the thread runs no Python (no thread state,
// no frame), or Python is absent, not detected yet, unsupported or broken. One relaxed load when Python is absent or
// unusable. No GIL, no allocation, no system call once a validated walk has succeeded (the first walks in the
// process read through SafeReader). Thread-safe. The same call path gives the same key while its code objects live,
// warm or cold (3.11's specialised PRECALL counts as its CALL); stacks alike in their innermost kMaxHashedFrames
// frames share a key.
uint64_t stack_key();

// First sight of a call site (not hot): the calling thread's frames, innermost first, at most `max`, symbolised now
// (the code objects are certainly alive now; later they may not be), every read validated. Returns how many were
// written; *depth (when not null) gets the full depth, up to kMaxDepth. 0 when there are none, or Python is not
// ready.
int capture(Frame* out, int max, int* depth);

// True once a validated walk has succeeded and stack_key() reads with plain loads (for tests and diagnostics).
bool plain_reads_enabled();

struct Layout;
// Tests only, before the first detect(): use `layout` (copied) instead of the table's for the version found, to
// check that a wrong layout is refused or caught, never misread.
void override_layout_for_testing(const Layout& layout);

}  // namespace trainscope::shim::python
