// Reading the calling thread's Python stack without the GIL (see python_stack.h).
#include "shim/python_stack.h"

#include <dlfcn.h>
#include <sched.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "shim/python_layouts.h"
#include "shim/safe_read.h"

namespace trainscope::shim::python {

namespace {

// The interpreter's C API, resolved once by detect().
struct Api {
  int (*is_initialized)();
  void* (*this_thread_state)();
  int (*addr2line)(const void* code, int byte_offset);
  uintptr_t code_type;
  uintptr_t unicode_type;
  uintptr_t frame_type;  // PyFrame_Type, whose objects are the frames up to 3.10
};

// How stack_key() reads: not at all, through SafeReader until one walk has been validated, then with plain loads.
enum Mode : int { kOff = 0, kValidating = 1, kPlain = 2 };

std::atomic<int> g_mode{kOff};
Api g_api;                         // written by detect() before g_mode leaves kOff (release), read after (acquire)
const Layout* g_layout = nullptr;  // likewise
Layout g_override;                 // override_layout_for_testing()
bool g_overridden = false;

// Statuses are written once, then published through g_status: a reference handed out never changes under its
// reader.
constexpr Status kUndetected = {Support::kNotPython, 0, 0, "Python not looked for yet"};
constexpr Status kAbsent = {Support::kNotPython, 0, 0, "no Python in this process"};
constexpr Status kNotNow = {Support::kNotPython, 0, 0, "Python's memory could not be checked now (no descriptor)"};
Status g_waiting;   // loaded but not initialised yet: written at the first such look
Status g_detected;  // the final answer: kReady or kUnsupported
Status g_broken;
std::atomic<const Status*> g_status{&kUndetected};
std::atomic<bool> g_detecting{false};
std::atomic<bool> g_breaking{false};

bool is_final(const Status* status) { return status != &kUndetected && status != &g_waiting && status != &kNotNow; }

__attribute__((format(printf, 4, 5))) void set_status(Status* status, Support support, const Layout* version,
                                                      const char* format, ...) {
  status->support = support;
  status->major = version ? version->major : 0;
  status->minor = version ? version->minor : 0;
  va_list args;
  va_start(args, format);
  std::vsnprintf(status->reason, sizeof(status->reason), format, args);
  va_end(args);
}

// A read failed validation or a frame is not what the layout says: stop reading Python for good.
void mark_broken(const char* what) {
  g_mode.store(kOff, std::memory_order_relaxed);
  if (g_breaking.exchange(true, std::memory_order_acq_rel)) return;  // another thread says it already
  const Layout* layout = g_layout;
  std::snprintf(g_broken.reason, sizeof(g_broken.reason), "Python %d.%d's stack could not be read (%s): disabled",
                layout ? layout->major : 0, layout ? layout->minor : 0, what);
  g_broken.support = Support::kBroken;
  g_broken.major = layout ? layout->major : 0;
  g_broken.minor = layout ? layout->minor : 0;
  g_status.store(&g_broken, std::memory_order_release);
}

// ---------------------------------------------------------------------------------------------------------------
// Readers: plain loads for the hot path once validated, SafeReader otherwise. Both have get(address, &value).

struct PlainReader {
  template <class T>
  bool get(uintptr_t from, T* value) {
    std::memcpy(value, reinterpret_cast<const void*>(from), sizeof(T));  // one load; memcpy keeps aliasing legal
    return true;
  }
};

// ---------------------------------------------------------------------------------------------------------------
// The walk: the thread's frames, innermost first, as Python's own frame.f_back sees them.

struct RawFrame {
  uintptr_t code;
  int32_t offset;      // byte offset of the instruction being executed in the code's instructions; -1: not started
  int32_t key_offset;  // the same, but a 3.11 PRECALL counts as its CALL: the key must not change with warmth
};

enum class Step { kFrame, kEnd, kBad, kSkipped };  // kSkipped: internal to Walker

// kPrecallFamily311 as a set.
constexpr struct PrecallSet {
  uint64_t bits[4] = {};
  constexpr PrecallSet() {
    for (uint8_t op : kPrecallFamily311) bits[op / 64] |= uint64_t{1} << (op % 64);
  }
  constexpr uint64_t operator[](int i) const { return bits[i]; }
} kPrecall311;

// Walker<Reader, false> walks PyFrameObjects (3.9, 3.10), Walker<Reader, true> _PyInterpreterFrames (3.11+). The
// offsets it uses are copied into the walker, so that the compiler keeps them in registers on the hot path.
template <class Reader, bool kInterpreterFrames>
class Walker {
 public:
  Walker(const Layout& l, const Api& api, Reader& reader)
      : r_(reader),
        code_type_(api.code_type),
        frame_type_(api.frame_type),
        ob_type_(l.object_ob_type),
        previous_(l.frame_previous),
        code_(l.frame_code),
        lasti_(l.frame_lasti),
        lasti_unit_(l.lasti_unit),
        instr_(l.frame_instr),
        owner_(l.frame_owner),
        by_generator_(l.frame_owned_by_generator),
        by_cstack_(l.frame_owned_by_cstack),
        code_adaptive_(l.code_code_adaptive),
        firsttraceable_(l.code_firsttraceable),
        precall_bytes_(l.precall_units * 2) {}

  // Finds the innermost frame of thread state `tstate` (layout l); false when a read failed.
  bool start(const Layout& l, uintptr_t tstate) {
    if (l.tstate_frame >= 0) return r_.get(tstate + l.tstate_frame, &frame_);
    if (l.tstate_current_frame >= 0) return r_.get(tstate + l.tstate_current_frame, &frame_);
    uintptr_t cframe = 0;  // 3.11, 3.12: the C-stack frame of the innermost running interpreter loop
    if (!r_.get(tstate + l.tstate_cframe, &cframe)) return false;
    frame_ = 0;
    return cframe == 0 || r_.get(cframe + l.cframe_current_frame, &frame_);
  }

  // The next complete frame, or the end of the stack, or kBad (what() says why).
  Step next(RawFrame* out) {
    // Bounded even on a cycle: skipped frames are at most one per interpreter entry, far fewer than real ones.
    while (frame_ != 0) {
      if (++steps_ > kMaxSteps) return bad("a frame chain longer than any stack");
      Step step = kInterpreterFrames ? interpreter_frame(out) : object_frame(out);
      if (step != Step::kSkipped) return step;
    }
    return Step::kEnd;
  }

  const char* what() const { return what_; }

 private:
  static constexpr long kMaxSteps = 4L * kMaxDepth;

  Step bad(const char* what) {
    what_ = what;
    return Step::kBad;
  }

  // The frame's code object, checked to be one: the layout's guard against misreading, on every frame.
  bool code_of(uintptr_t frame, uintptr_t* code) {
    uintptr_t type = 0;
    return r_.get(frame + code_, code) && *code != 0 && r_.get(*code + ob_type_, &type) && type == code_type_;
  }

  // 3.9, 3.10: PyFrameObject, f_lasti in bytes (3.9) or code units (3.10), -1 before the first instruction.
  Step object_frame(RawFrame* out) {
    uintptr_t type = 0, code = 0, back = 0;
    int32_t lasti = 0;
    if (!r_.get(frame_ + ob_type_, &type)) return bad("an unreadable frame");
    if (type != frame_type_) return bad("a frame that is not a frame object");
    if (!code_of(frame_, &code)) return bad("a frame whose code is not a code object");
    if (!r_.get(frame_ + lasti_, &lasti) || !r_.get(frame_ + previous_, &back)) return bad("an unreadable frame");
    frame_ = back;
    out->code = code;
    out->offset = out->key_offset = lasti < 0 ? -1 : lasti * lasti_unit_;
    return Step::kFrame;
  }

  // 3.11+: _PyInterpreterFrame. Skipped as PyFrame_GetBack and dump_traceback skip them: the interpreter's entry
  // (shim) frames, owned by the C stack (3.12+), and incomplete frames, which have not reached their first
  // traceable instruction (_PyFrame_IsIncomplete). Generator frames are always complete.
  Step interpreter_frame(RawFrame* out) {
    uintptr_t here = frame_, code = 0, instr = 0;
    int8_t owner = 0;
    if (!r_.get(here + owner_, &owner) || !r_.get(here + previous_, &frame_)) return bad("an unreadable frame");
    if (owner == by_cstack_) return Step::kSkipped;  // never matches before 3.12 (-1)
    if (!code_of(here, &code)) return bad("a frame whose code is not a code object");
    if (!r_.get(here + instr_, &instr)) return bad("an unreadable frame");
    intptr_t offset = static_cast<intptr_t>(instr - (code + code_adaptive_));
    if (owner != by_generator_) {
      int32_t first_traceable = 0;
      if (!r_.get(code + firsttraceable_, &first_traceable)) return bad("an unreadable code object");
      // Signed: 3.11 and 3.12 start a frame at the instruction before the first one.
      if (offset < static_cast<intptr_t>(first_traceable) * 2) return Step::kSkipped;
    }
    out->code = code;
    out->offset = out->key_offset = offset < 0 || offset > INT32_MAX ? -1 : static_cast<int32_t>(offset);
    if (precall_bytes_ > 0 && out->offset >= 0) {  // 3.11: a PRECALL counts as its CALL in the key
      uint8_t opcode = 0;                          // the low byte of the code unit: little-endian only
      if (!r_.get(instr, &opcode)) return bad("an unreadable instruction");
      if (kPrecall311[opcode / 64] >> (opcode % 64) & 1) out->key_offset += precall_bytes_;
    }
    return Step::kFrame;
  }

  Reader& r_;
  const uintptr_t code_type_, frame_type_;
  const int ob_type_, previous_, code_, lasti_, lasti_unit_, instr_, owner_, by_generator_, by_cstack_, code_adaptive_,
      firsttraceable_, precall_bytes_;
  uintptr_t frame_ = 0;
  long steps_ = 0;
  const char* what_ = "";
};

// The calling thread's Python thread state, or 0. Py_IsInitialized first: before initialisation (and after
// finalisation) the thread-state key is not Python's, and PyGILState_GetThisThreadState would read another's.
uintptr_t this_thread_state(const Api& api) {
  if (!api.is_initialized()) return 0;
  return reinterpret_cast<uintptr_t>(api.this_thread_state());
}

// The per-frame step of the key: one dependent multiply; the code and offset are combined off the chain.
uint64_t mix(uint64_t hash, uintptr_t code, int32_t offset) {
  uint64_t value = code ^ (static_cast<uint64_t>(static_cast<uint32_t>(offset)) * 0xFF51AFD7ED558CCDull);
  hash = (hash ^ value) * 0x9E3779B97F4A7C15ull;
  return (hash << 31) | (hash >> 33);
}

// Hashes the innermost kMaxHashedFrames frames. Returns 0 for no frame; sets *bad when the walk failed.
template <class Reader, bool kInterpreterFrames>
uint64_t hash_frames(Reader& reader, uintptr_t tstate, const char** bad) {
  Walker<Reader, kInterpreterFrames> walker(*g_layout, g_api, reader);
  if (!walker.start(*g_layout, tstate)) {
    *bad = "an unreadable thread state";
    return 0;
  }
  uint64_t hash = 0x5851F42D4C957F2Dull;
  int frames = 0;
  RawFrame frame;
  for (; frames < kMaxHashedFrames; ++frames) {
    Step step = walker.next(&frame);
    if (step == Step::kEnd) break;
    if (step == Step::kBad) {
      *bad = walker.what();
      return 0;
    }
    hash = mix(hash, frame.code, frame.key_offset);
  }
  if (frames == 0) return 0;
  // Final avalanche (MurmurHash3's fmix64) over the hash and the depth.
  hash ^= static_cast<uint64_t>(frames);
  hash = (hash ^ (hash >> 33)) * 0xFF51AFD7ED558CCDull;
  hash = (hash ^ (hash >> 33)) * 0xC4CEB9FE1A85EC53ull;
  hash ^= hash >> 33;
  return hash != 0 ? hash : 1;
}

template <class Reader>
uint64_t hash_stack(Reader& reader, uintptr_t tstate, const char** bad) {
  if (g_layout->frame_lasti >= 0) return hash_frames<Reader, false>(reader, tstate, bad);
  return hash_frames<Reader, true>(reader, tstate, bad);
}

// A validated walk from stack_key() before plain loads are trusted.
uint64_t validating_key(uintptr_t tstate) {
  SafeReader reader;
  const char* bad = nullptr;
  uint64_t key = hash_stack(reader, tstate, &bad);
  if (bad != nullptr) {
    if (!reader.unavailable()) mark_broken(bad);  // else: no verdict this time (out of descriptors), try again
    return 0;
  }
  if (key != 0) {
    int expected = kValidating;
    g_mode.compare_exchange_strong(expected, kPlain, std::memory_order_relaxed);
  }
  return key;
}

// ---------------------------------------------------------------------------------------------------------------
// Strings: co_filename and co_name, read raw from their PEP 393 form (PyUnicode_AsUTF8 may allocate).

// Appends code point c as UTF-8 if it fits in [*at, end); false when it does not.
bool put_utf8(uint32_t c, char** at, const char* end) {
  if (c >= 0xD800 && c <= 0xDFFF) c = 0xFFFD;  // a lone surrogate (surrogateescape): U+FFFD, as errors="replace"
  char bytes[4];
  int n;
  if (c < 0x80) {
    bytes[0] = static_cast<char>(c);
    n = 1;
  } else if (c < 0x800) {
    bytes[0] = static_cast<char>(0xC0 | (c >> 6));
    bytes[1] = static_cast<char>(0x80 | (c & 0x3F));
    n = 2;
  } else if (c < 0x10000) {
    bytes[0] = static_cast<char>(0xE0 | (c >> 12));
    bytes[1] = static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    bytes[2] = static_cast<char>(0x80 | (c & 0x3F));
    n = 3;
  } else {
    if (c > 0x10FFFF) c = 0xFFFD;
    bytes[0] = static_cast<char>(0xF0 | (c >> 18));
    bytes[1] = static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    bytes[2] = static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    bytes[3] = static_cast<char>(0x80 | (c & 0x3F));
    n = 4;
  }
  if (end - *at < n) return false;
  std::memcpy(*at, bytes, static_cast<size_t>(n));
  *at += n;
  return true;
}

uint32_t utf8_size(uint32_t c) {
  if (c >= 0xD800 && c <= 0xDFFF) return 3;
  return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : c <= 0x10FFFF ? 4 : 3;
}

// Writes str object `object` into out[cap] as UTF-8. Too long: keep_tail keeps "..." and the end (paths), else the
// start and "..." (names). False when the object is not a str laid out as expected (the caller marks kBroken).
bool read_str(SafeReader& reader, uintptr_t object, bool keep_tail, char* out, size_t cap) {
  const Layout& l = *g_layout;
  out[0] = '\0';
  uintptr_t type = 0;
  uint32_t state = 0;
  int64_t length = 0;
  if (object == 0 || !reader.get(object + l.object_ob_type, &type) || type != g_api.unicode_type ||
      !reader.get(object + l.unicode_state, &state) || !reader.get(object + l.unicode_length, &length) || length < 0) {
    return false;
  }
  uint32_t kind = (state & static_cast<uint32_t>(l.unicode_mask_kind)) / (l.unicode_mask_kind & -l.unicode_mask_kind);
  bool ascii = state & static_cast<uint32_t>(l.unicode_mask_ascii);
  bool ready = l.unicode_mask_ready < 0 || (state & static_cast<uint32_t>(l.unicode_mask_ready));
  if (!(state & static_cast<uint32_t>(l.unicode_mask_compact)) || !ready) {
    std::snprintf(out, cap, "?");  // a legacy string: code objects never hold one, but it is not a misread
    return true;
  }
  if ((kind != 1 && kind != 2 && kind != 4) || (ascii && kind != 1)) return false;
  // Each character takes at least one byte, so the first or last cap - 1 characters are all that can show.
  constexpr size_t kMaxChars = kFileBytes > kFunctionBytes ? kFileBytes : kFunctionBytes;
  size_t take = static_cast<size_t>(length) < cap - 1 ? static_cast<size_t>(length) : cap - 1;
  if (take > kMaxChars) take = kMaxChars;
  size_t skip = keep_tail ? static_cast<size_t>(length) - take : 0;
  uint8_t chars[kMaxChars * 4];
  uintptr_t data = object + static_cast<uintptr_t>(ascii ? l.unicode_ascii_size : l.unicode_compact_size);
  if (!reader.read(data + skip * kind, chars, take * kind)) return false;
  auto char_at = [&](size_t i) -> uint32_t {
    if (kind == 1) return chars[i];
    if (kind == 2) {
      uint16_t c;
      std::memcpy(&c, chars + 2 * i, 2);
      return c;
    }
    uint32_t c;
    std::memcpy(&c, chars + 4 * i, 4);
    return c;
  };
  size_t need = 0;
  for (size_t i = 0; i < take; ++i) need += utf8_size(char_at(i));
  bool fits = take == static_cast<size_t>(length) && need < cap;
  char* at = out;
  const char* end = out + cap - 1;
  if (fits) {
    for (size_t i = 0; i < take; ++i) put_utf8(char_at(i), &at, end);
  } else if (keep_tail) {
    size_t first = take, bytes = 0, room = cap - 1 - 3;  // the characters from `first` on fit after "..."
    while (first > 0 && bytes + utf8_size(char_at(first - 1)) <= room) bytes += utf8_size(char_at(--first));
    std::memcpy(at, "...", 3);
    at += 3;
    for (size_t i = first; i < take; ++i) put_utf8(char_at(i), &at, end);
  } else {
    const char* stop = end - 3;
    for (size_t i = 0; i < take && put_utf8(char_at(i), &at, stop); ++i) {
    }
    std::memcpy(at, "...", 3);
    at += 3;
  }
  *at = '\0';
  return true;
}

// ---------------------------------------------------------------------------------------------------------------
// Detection.

// The version of the Python in the process: Py_Version (3.11+), else parsed from Py_GetVersion() ("3.9.18 (...").
bool python_version(SafeReader& reader, int* major, int* minor) {
  if (const void* version = dlsym(RTLD_DEFAULT, "Py_Version")) {
    unsigned long hex = 0;
    if (!reader.get(reinterpret_cast<uintptr_t>(version), &hex)) return false;
    *major = static_cast<int>((hex >> 24) & 0xFF);
    *minor = static_cast<int>((hex >> 16) & 0xFF);
    return true;
  }
  auto get_version = reinterpret_cast<const char* (*)()>(dlsym(RTLD_DEFAULT, "Py_GetVersion"));
  if (get_version == nullptr) return false;
  const char* text = get_version();  // formats constants into a static buffer: no allocation
  return text != nullptr && std::sscanf(text, "%d.%d", major, minor) == 2;
}

// A type object's tp_name, checked against `name`: the object header and PyTypeObject are laid out as we think.
bool type_named(SafeReader& reader, const Layout& l, uintptr_t type, uintptr_t type_type, const char* name) {
  uintptr_t meta = 0, tp_name = 0;
  char text[16] = {};
  size_t n = std::strlen(name) + 1;
  return type != 0 && reader.get(type + l.object_ob_type, &meta) && meta == type_type &&
         reader.get(type + l.type_tp_name, &tp_name) && reader.read(tp_name, text, n) &&
         std::memcmp(text, name, n) == 0;
}

// 3.13 describes its own layouts at the start of _PyRuntime (_Py_DebugOffsets, cookie "xdebugpy"); where it does,
// every offset we use must agree with it. Returns nullptr when they agree (or there is no such description), else
// the first that disagrees.
const char* debug_offsets_disagree(SafeReader& reader, const Layout& l, char* buffer, size_t cap) {
  if (l.debug_version < 0) return nullptr;
  auto runtime = reinterpret_cast<uintptr_t>(dlsym(RTLD_DEFAULT, "_PyRuntime"));
  char cookie[8];
  if (runtime == 0 || !reader.read(runtime, cookie, sizeof(cookie)) || std::memcmp(cookie, "xdebugpy", 8) != 0) {
    return nullptr;
  }
  struct Check {
    const char* name;
    int debug_offset;
    int ours;
  };
  const Check checks[] = {
      {"thread_state.current_frame", l.debug_tstate_current_frame, l.tstate_current_frame},
      {"interpreter_frame.previous", l.debug_frame_previous, l.frame_previous},
      {"interpreter_frame.executable", l.debug_frame_executable, l.frame_code},
      {"interpreter_frame.instr_ptr", l.debug_frame_instr_ptr, l.frame_instr},
      {"interpreter_frame.owner", l.debug_frame_owner, l.frame_owner},
      {"code_object.filename", l.debug_code_filename, l.code_filename},
      {"code_object.name", l.debug_code_name, l.code_name},
      {"code_object.co_code_adaptive", l.debug_code_co_code_adaptive, l.code_code_adaptive},
      {"pyobject.ob_type", l.debug_object_ob_type, l.object_ob_type},
      {"unicode_object.state", l.debug_unicode_state, l.unicode_state},
      {"unicode_object.length", l.debug_unicode_length, l.unicode_length},
      {"unicode_object.asciiobject_size", l.debug_unicode_asciiobject_size, l.unicode_ascii_size},
  };
  for (const Check& check : checks) {
    uint64_t theirs = 0;
    if (!reader.get(runtime + check.debug_offset, &theirs)) return "_Py_DebugOffsets is unreadable";
    if (theirs != static_cast<uint64_t>(check.ours)) {
      std::snprintf(buffer, cap, "_Py_DebugOffsets says %s is at %llu, this trainscope expects %d", check.name,
                    static_cast<unsigned long long>(theirs), check.ours);
      return buffer;
    }
  }
  return nullptr;
}

// One look for Python. Returns the status to publish (g_detected written only for a final answer); sets g_api and
// g_layout when it is kReady.
const Status* look_for_python(SafeReader& reader) {
  auto is_initialized = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "Py_IsInitialized"));
  if (is_initialized == nullptr) return &kAbsent;

  int major = 0, minor = 0;
  if (!python_version(reader, &major, &minor)) {
    set_status(&g_detected, Support::kUnsupported, nullptr, "a Python whose version cannot be read");
    return &g_detected;
  }
  const Layout* layout = g_overridden ? &g_override : layout_for(major, minor);
  Layout named = {};  // major and minor only, for the messages
  named.major = major;
  named.minor = minor;
  if (layout == nullptr) {
    set_status(&g_detected, Support::kUnsupported, &named,
               "Python %d.%d is not supported by this trainscope (3.%d to 3.%d)", major, minor, kFirstMinor,
               kLastMinor);
    return &g_detected;
  }
  // Builds whose objects are laid out differently, by the symbols only they export.
  const char* build = nullptr;
  if (dlsym(RTLD_DEFAULT, "_Py_DecRefShared")) build = "a free-threaded build (Py_GIL_DISABLED)";
  if (dlsym(RTLD_DEFAULT, "_Py_ForgetReference") || dlsym(RTLD_DEFAULT, "_Py_PrintReferences")) {
    build = "a debug build with Py_TRACE_REFS";
  } else if (dlsym(RTLD_DEFAULT, "_Py_NegativeRefcount")) {
    build = "a debug build (Py_REF_DEBUG)";
  }
  if (build != nullptr) {
    set_status(&g_detected, Support::kUnsupported, layout, "Python %d.%d is %s: not supported by this trainscope",
               major, minor, build);
    return &g_detected;
  }

  Api api = {};
  api.is_initialized = is_initialized;
  api.this_thread_state = reinterpret_cast<void* (*)()>(dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState"));
  api.addr2line = reinterpret_cast<int (*)(const void*, int)>(dlsym(RTLD_DEFAULT, "PyCode_Addr2Line"));
  api.code_type = reinterpret_cast<uintptr_t>(dlsym(RTLD_DEFAULT, "PyCode_Type"));
  api.unicode_type = reinterpret_cast<uintptr_t>(dlsym(RTLD_DEFAULT, "PyUnicode_Type"));
  api.frame_type = reinterpret_cast<uintptr_t>(dlsym(RTLD_DEFAULT, "PyFrame_Type"));
  auto type_type = reinterpret_cast<uintptr_t>(dlsym(RTLD_DEFAULT, "PyType_Type"));
  if (!api.this_thread_state || !api.addr2line || !api.code_type || !api.unicode_type || !type_type ||
      (layout->frame_lasti >= 0 && !api.frame_type)) {
    set_status(&g_detected, Support::kUnsupported, layout, "Python %d.%d lacks part of its C API (%s)", major, minor,
               "PyGILState_GetThisThreadState, PyCode_Addr2Line, PyCode_Type, PyUnicode_Type, PyType_Type");
    return &g_detected;
  }
  // The object header as the table has it: type objects are of type `type` and carry their names.
  if (!type_named(reader, *layout, api.code_type, type_type, "code") ||
      !type_named(reader, *layout, api.unicode_type, type_type, "str") ||
      (layout->frame_lasti >= 0 && !type_named(reader, *layout, api.frame_type, type_type, "frame"))) {
    set_status(&g_detected, Support::kUnsupported, layout,
               "Python %d.%d's objects are not laid out as in its release builds (an unusual build)", major, minor);
    return &g_detected;
  }
  if (layout->debug_free_threaded >= 0) {
    auto runtime = reinterpret_cast<uintptr_t>(dlsym(RTLD_DEFAULT, "_PyRuntime"));
    char cookie[8];
    uint64_t free_threaded = 0;
    if (runtime != 0 && reader.read(runtime, cookie, 8) && std::memcmp(cookie, "xdebugpy", 8) == 0 &&
        reader.get(runtime + layout->debug_free_threaded, &free_threaded) && free_threaded != 0) {
      set_status(&g_detected, Support::kUnsupported, layout,
                 "Python %d.%d is a free-threaded build (Py_GIL_DISABLED): not supported by this trainscope", major,
                 minor);
      return &g_detected;
    }
  }
  char disagreement[160];
  if (const char* why = debug_offsets_disagree(reader, *layout, disagreement, sizeof(disagreement))) {
    set_status(&g_detected, Support::kUnsupported, layout, "Python %d.%d: %s", major, minor, why);
    return &g_detected;
  }
  if (!is_initialized()) {
    if (g_waiting.major == 0) {  // written once, under g_detecting
      set_status(&g_waiting, Support::kNotPython, layout, "Python %d.%d is loaded but not initialised yet", major,
                 minor);
    }
    return &g_waiting;
  }
  g_api = api;
  g_layout = layout;
  set_status(&g_detected, Support::kReady, layout, "%s", "");
  return &g_detected;
}

// capture()'s walk, every read validated: symbolises the first `max` frames and counts them all (to kMaxDepth).
template <bool kInterpreterFrames>
int capture_frames(SafeReader& reader, uintptr_t tstate, Frame* out, int max, int* depth, const char** bad) {
  Walker<SafeReader, kInterpreterFrames> walker(*g_layout, g_api, reader);
  if (!walker.start(*g_layout, tstate)) {
    *bad = "an unreadable thread state";
    return 0;
  }
  int written = 0, frames = 0;
  RawFrame frame;
  for (; frames < kMaxDepth; ++frames) {
    Step step = walker.next(&frame);
    if (step == Step::kEnd) break;
    if (step == Step::kBad) {
      *bad = walker.what();
      return 0;
    }
    if (written >= max) continue;  // only counting now
    Frame& f = out[written++];
    // The code object was checked (type and readable) and is held by the frame: the interpreter may read it.
    f.line = g_api.addr2line(reinterpret_cast<const void*>(frame.code), frame.offset);
    uintptr_t filename = 0, name = 0;
    if (!reader.get(frame.code + g_layout->code_filename, &filename) ||
        !reader.get(frame.code + g_layout->code_name, &name) ||
        !read_str(reader, filename, true, f.file, sizeof(f.file)) ||
        !read_str(reader, name, false, f.function, sizeof(f.function))) {
      *bad = "a code object whose names are not strings";
      return 0;
    }
  }
  *depth = frames;
  return written;
}

}  // namespace

const Status& detect() {
  const Status* now = g_status.load(std::memory_order_acquire);
  if (is_final(now)) return *now;
  // One thread looks; the others wait for it (a look is a few dlsym and system calls, no lock of anyone else's).
  // Bounded, so that a child forked while its parent was looking does not spin forever.
  for (long spins = 0; g_detecting.exchange(true, std::memory_order_acquire); ++spins) {
    if (spins > 100000) return *g_status.load(std::memory_order_acquire);
    sched_yield();
  }
  now = g_status.load(std::memory_order_acquire);
  if (!is_final(now)) {
    SafeReader reader;
    now = look_for_python(reader);
    // A check that failed for want of a descriptor is no verdict: look again next time.
    if (reader.unavailable() && now->support != Support::kReady) now = &kNotNow;
    // The status first: a walk that fails once g_mode is on publishes kBroken, which must stay.
    g_status.store(now, std::memory_order_release);
    if (now->support == Support::kReady) g_mode.store(kValidating, std::memory_order_release);
  }
  g_detecting.store(false, std::memory_order_release);
  return *now;
}

const Status& status() { return *g_status.load(std::memory_order_acquire); }

void override_layout_for_testing(const Layout& layout) {
  g_override = layout;
  g_overridden = true;
}

bool plain_reads_enabled() { return g_mode.load(std::memory_order_acquire) == kPlain; }

uint64_t stack_key() {
  // Acquire: g_api and g_layout were written before g_mode left kOff (a plain load on x86).
  const int mode = g_mode.load(std::memory_order_acquire);
  if (mode == kOff) return 0;
  uintptr_t tstate = this_thread_state(g_api);
  if (tstate == 0) return 0;
  if (mode == kValidating) return validating_key(tstate);
  PlainReader reader;
  const char* bad = nullptr;
  uint64_t key = hash_stack(reader, tstate, &bad);
  if (bad != nullptr) mark_broken(bad);
  return key;
}

int capture(Frame* out, int max, int* depth) {
  if (depth) *depth = 0;
  if (g_mode.load(std::memory_order_acquire) == kOff) return 0;
  uintptr_t tstate = this_thread_state(g_api);
  if (tstate == 0) return 0;
  SafeReader reader;
  const char* bad = nullptr;
  int frames = 0;
  int written = g_layout->frame_lasti >= 0 ? capture_frames<false>(reader, tstate, out, max, &frames, &bad)
                                           : capture_frames<true>(reader, tstate, out, max, &frames, &bad);
  if (bad != nullptr) {
    if (!reader.unavailable()) mark_broken(bad);  // else: no verdict this time (out of descriptors)
    return 0;
  }
  if (depth) *depth = frames;
  if (frames > 0) {
    int expected = kValidating;  // a validated walk: plain loads are safe from now on
    g_mode.compare_exchange_strong(expected, kPlain, std::memory_order_relaxed);
  }
  return written;
}

}  // namespace trainscope::shim::python
