/* Prints the offsets the Python stack reader uses, from one CPython version's own headers (shim/python_layouts.cc).
 *
 * Build against each version (the internal headers need Py_BUILD_CORE), e.g.
 *   cc -DPy_BUILD_CORE -I$PREFIX/include/python3.12 -I$PREFIX/include/python3.12/internal gen_python_layouts.c
 * and paste the output into the table; python_layout_test.cc checks, for every installed version, that the table
 * and this program agree. The output is "name value" lines, -1 for a field the version does not have; it must stay
 * in the order and with the names of python_layouts.cc's field list. */
#include <Python.h>
#include <frameobject.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if PY_VERSION_HEX >= 0x030B0000
#include "internal/pycore_frame.h"
#endif
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#define NEED_OPCODE_TABLES /* _PyOpcode_Deopt */
#include "internal/pycore_code.h"
#include "internal/pycore_opcode.h"
#endif
#if PY_VERSION_HEX >= 0x030D0000
#include "internal/pycore_runtime.h"
#endif

static void field(const char* name, long value) { printf("%s %ld\n", name, value); }

/* A bit field of the unicode object's state: set it in a zeroed object and see which bits of the word moved. */
#define STATE_MASK(member)                                            \
  do {                                                                \
    PyASCIIObject probe;                                              \
    uint32_t word;                                                    \
    memset(&probe, 0, sizeof probe);                                  \
    probe.state.member--; /* 0 - 1: every bit of the field */         \
    memcpy(&word, (char*)&probe + offsetof(PyASCIIObject, state), 4); \
    field("unicode.mask." #member, (long)word);                       \
  } while (0)

int main(void) {
  printf("version %d.%d\n", PY_MAJOR_VERSION, PY_MINOR_VERSION);
  field("object.ob_type", offsetof(PyObject, ob_type));
  field("type.tp_name", offsetof(PyTypeObject, tp_name));

  /* Thread state to its innermost frame. */
#if PY_VERSION_HEX < 0x030B0000
  field("tstate.frame", offsetof(PyThreadState, frame));
#else
  field("tstate.frame", -1);
#endif
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030D0000
  field("tstate.cframe", offsetof(PyThreadState, cframe));
  field("cframe.current_frame", offsetof(_PyCFrame, current_frame));
#else
  field("tstate.cframe", -1);
  field("cframe.current_frame", -1);
#endif
#if PY_VERSION_HEX >= 0x030D0000
  field("tstate.current_frame", offsetof(PyThreadState, current_frame));
#else
  field("tstate.current_frame", -1);
#endif

  /* One frame: PyFrameObject up to 3.10, _PyInterpreterFrame from 3.11. */
#if PY_VERSION_HEX < 0x030B0000
  field("frame.previous", offsetof(PyFrameObject, f_back));
  field("frame.code", offsetof(PyFrameObject, f_code));
  field("frame.lasti", offsetof(PyFrameObject, f_lasti));
  field("frame.instr", -1);
  field("frame.owner", -1);
  field("frame.owned_by_generator", -1);
  field("frame.owned_by_cstack", -1);
#else
  field("frame.previous", offsetof(_PyInterpreterFrame, previous));
#if PY_VERSION_HEX >= 0x030D0000
  field("frame.code", offsetof(_PyInterpreterFrame, f_executable));
#else
  field("frame.code", offsetof(_PyInterpreterFrame, f_code));
#endif
  field("frame.lasti", -1);
#if PY_VERSION_HEX >= 0x030D0000
  field("frame.instr", offsetof(_PyInterpreterFrame, instr_ptr));
#else
  field("frame.instr", offsetof(_PyInterpreterFrame, prev_instr));
#endif
  field("frame.owner", offsetof(_PyInterpreterFrame, owner));
  field("frame.owned_by_generator", FRAME_OWNED_BY_GENERATOR);
#if PY_VERSION_HEX >= 0x030C0000
  field("frame.owned_by_cstack", FRAME_OWNED_BY_CSTACK);
#else
  field("frame.owned_by_cstack", -1);
#endif
#endif

  /* Code objects. */
  field("code.filename", offsetof(PyCodeObject, co_filename));
  field("code.name", offsetof(PyCodeObject, co_name));
#if PY_VERSION_HEX >= 0x030B0000
  field("code.code_adaptive", offsetof(PyCodeObject, co_code_adaptive));
  field("code.firsttraceable", offsetof(PyCodeObject, _co_firsttraceable));
#else
  field("code.code_adaptive", -1);
  field("code.firsttraceable", -1);
#endif

  /* Strings (PEP 393): the compact forms keep their characters right after the header. */
  field("unicode.length", offsetof(PyASCIIObject, length));
  field("unicode.state", offsetof(PyASCIIObject, state));
  field("unicode.ascii_size", sizeof(PyASCIIObject));
  field("unicode.compact_size", sizeof(PyCompactUnicodeObject));
  STATE_MASK(kind);
  STATE_MASK(compact);
  STATE_MASK(ascii);
#if PY_VERSION_HEX < 0x030C0000
  STATE_MASK(ready);
#else
  field("unicode.mask.ready", -1);
#endif

  /* 3.13's own description of these layouts, at the start of _PyRuntime, checked against ours at run time. */
#if PY_VERSION_HEX >= 0x030D0000
#define DEBUG_OFFSET(name, member) field("debug." name, offsetof(_Py_DebugOffsets, member))
#else
#define DEBUG_OFFSET(name, member) field("debug." name, -1)
#endif
  DEBUG_OFFSET("version", version);
  DEBUG_OFFSET("free_threaded", free_threaded);
  DEBUG_OFFSET("tstate.current_frame", thread_state.current_frame);
  DEBUG_OFFSET("frame.previous", interpreter_frame.previous);
  DEBUG_OFFSET("frame.executable", interpreter_frame.executable);
  DEBUG_OFFSET("frame.instr_ptr", interpreter_frame.instr_ptr);
  DEBUG_OFFSET("frame.owner", interpreter_frame.owner);
  DEBUG_OFFSET("code.filename", code_object.filename);
  DEBUG_OFFSET("code.name", code_object.name);
  DEBUG_OFFSET("code.co_code_adaptive", code_object.co_code_adaptive);
  DEBUG_OFFSET("object.ob_type", pyobject.ob_type);
  DEBUG_OFFSET("unicode.state", unicode_object.state);
  DEBUG_OFFSET("unicode.length", unicode_object.length);
  DEBUG_OFFSET("unicode.asciiobject_size", unicode_object.asciiobject_size);

  /* 3.11 only: a call is PRECALL (and its caches) then CALL, and a specialised PRECALL makes the call itself. */
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
  field("opcode.precall_units", 1 + INLINE_CACHE_ENTRIES_PRECALL);
  printf("opcode.precall_family");
  for (int op = 0; op < 256; ++op) {
    if (_PyOpcode_Deopt[op] == PRECALL) printf(" %d", op);
  }
  printf("\n");
#else
  field("opcode.precall_units", -1);
  field("opcode.precall_family", -1);
#endif
  return 0;
}
