// Where CPython 3.9 to 3.13 keep what the Python stack reader needs: thread state, frames, code objects, strings.
//
// The offsets are generated from each version's own headers by tests/python/gen_python_layouts.c and pasted here;
// tests/python/python_layout_test.cc checks the table against the generator for every version installed. They
// hold for release builds (no Py_TRACE_REFS, GIL) on LP64 Linux: x86_64 and aarch64 lay these structures out alike.
//
// Freestanding (it lives inside libtrainscope.so).
#pragma once

#include <cstddef>
#include <cstdint>

namespace trainscope::shim::python {

// Offsets in bytes from the start of each structure; -1 where the version has no such field.
struct Layout {
  int major;
  int minor;
  int object_ob_type;  // PyObject.ob_type
  int type_tp_name;    // PyTypeObject.tp_name
  // Thread state to its innermost frame: tstate->frame (3.9, 3.10), tstate->cframe->current_frame (3.11, 3.12),
  // tstate->current_frame (3.13).
  int tstate_frame;
  int tstate_cframe;
  int cframe_current_frame;
  int tstate_current_frame;
  // A frame: PyFrameObject (3.9, 3.10) or _PyInterpreterFrame (3.11+).
  int frame_previous;            // f_back / previous
  int frame_code;                // f_code / f_executable (3.13)
  int frame_lasti;               // f_lasti, an int (3.9, 3.10)
  int frame_instr;               // prev_instr (3.11, 3.12) / instr_ptr (3.13), a pointer into co_code_adaptive
  int frame_owner;               // a char
  int frame_owned_by_generator;  // owner values
  int frame_owned_by_cstack;     // the interpreter's entry (shim) frames, 3.12+
  // Code objects.
  int code_filename;
  int code_name;
  int code_code_adaptive;   // the instructions (3.11+)
  int code_firsttraceable;  // an int: instructions before it belong to an incomplete frame (3.11+)
  // Strings (PEP 393): PyASCIIObject and PyCompactUnicodeObject, and the bits of their state word.
  int unicode_length;
  int unicode_state;
  int unicode_ascii_size;
  int unicode_compact_size;
  int unicode_mask_kind;
  int unicode_mask_compact;
  int unicode_mask_ascii;
  int unicode_mask_ready;  // up to 3.11
  // 3.13: where _Py_DebugOffsets (at the start of _PyRuntime) keeps its copies of the offsets above.
  int debug_version;
  int debug_free_threaded;
  int debug_tstate_current_frame;
  int debug_frame_previous;
  int debug_frame_executable;
  int debug_frame_instr_ptr;
  int debug_frame_owner;
  int debug_code_filename;
  int debug_code_name;
  int debug_code_co_code_adaptive;
  int debug_object_ob_type;
  int debug_unicode_state;
  int debug_unicode_length;
  int debug_unicode_asciiobject_size;
  // 3.11 only: a call is PRECALL, its caches, then CALL, and a specialised PRECALL makes the call itself, so a frame
  // in a call stands at either, depending on how warm the site is. This is the distance between them in code
  // units (PRECALL and its caches); kPrecallFamily311 lists the PRECALL opcodes, specialised ones included.
  int precall_units;
  // Not from the headers: the unit of f_lasti in bytes (3.9: bytes; 3.10 counts 2-byte code units, bpo-27129).
  int lasti_unit;
};

// The opcodes whose unspecialised form is PRECALL in 3.11 (its _PyOpcode_Deopt), in the generator's order.
inline constexpr uint8_t kPrecallFamily311[] = {64, 65, 66, 67,  72,  73,  76,  77,  78,
                                                79, 80, 81, 113, 121, 127, 141, 143, 166};

// The layout of CPython major.minor, or nullptr for a version this trainscope does not know.
const Layout* layout_for(int major, int minor);

// The oldest and newest minor versions of Python 3 in the table.
inline constexpr int kFirstMinor = 9;
inline constexpr int kLastMinor = 13;

// Writes `layout` as the generator prints it ("version 3.12" then "name value" lines) into out (NUL-terminated,
// truncated to cap). Returns the length it needed, as snprintf does.
size_t format_layout(const Layout& layout, char* out, size_t cap);

}  // namespace trainscope::shim::python
