// The per-version layouts of CPython's thread states, frames, code objects and strings (see python_layouts.h).
#include "shim/python_layouts.h"

#include <cstdio>

namespace trainscope::shim::python {

namespace {

constexpr int kVersions = kLastMinor - kFirstMinor + 1;

struct Row {
  const char* name;  // as gen_python_layouts.c prints it
  int Layout::*member;
  int value[kVersions];
};

// The output of tests/python/gen_python_layouts.c, one row per field, one column per version (x86_64, GCC 12).
constexpr Row kRows[] = {
    //                                                                    3.9   3.10  3.11  3.12  3.13
    {"object.ob_type", &Layout::object_ob_type, /*                     */ {8, 8, 8, 8, 8}},
    {"type.tp_name", &Layout::type_tp_name, /*                         */ {24, 24, 24, 24, 24}},
    {"tstate.frame", &Layout::tstate_frame, /*                         */ {24, 24, -1, -1, -1}},
    {"tstate.cframe", &Layout::tstate_cframe, /*                       */ {-1, -1, 56, 56, -1}},
    {"cframe.current_frame", &Layout::cframe_current_frame, /*         */ {-1, -1, 8, 0, -1}},
    {"tstate.current_frame", &Layout::tstate_current_frame, /*         */ {-1, -1, -1, -1, 72}},
    {"frame.previous", &Layout::frame_previous, /*                     */ {24, 24, 48, 8, 8}},
    {"frame.code", &Layout::frame_code, /*                             */ {32, 32, 32, 0, 0}},
    {"frame.lasti", &Layout::frame_lasti, /*                           */ {104, 96, -1, -1, -1}},
    {"frame.instr", &Layout::frame_instr, /*                           */ {-1, -1, 56, 56, 56}},
    {"frame.owner", &Layout::frame_owner, /*                           */ {-1, -1, 69, 70, 70}},
    {"frame.owned_by_generator", &Layout::frame_owned_by_generator, /* */ {-1, -1, 1, 1, 1}},
    {"frame.owned_by_cstack", &Layout::frame_owned_by_cstack, /*       */ {-1, -1, -1, 3, 3}},
    {"code.filename", &Layout::code_filename, /*                       */ {104, 104, 112, 112, 112}},
    {"code.name", &Layout::code_name, /*                               */ {112, 112, 120, 120, 120}},
    {"code.code_adaptive", &Layout::code_code_adaptive, /*             */ {-1, -1, 184, 192, 200}},
    {"code.firsttraceable", &Layout::code_firsttraceable, /*           */ {-1, -1, 168, 176, 184}},
    {"unicode.length", &Layout::unicode_length, /*                     */ {16, 16, 16, 16, 16}},
    {"unicode.state", &Layout::unicode_state, /*                       */ {32, 32, 32, 32, 32}},
    {"unicode.ascii_size", &Layout::unicode_ascii_size, /*             */ {48, 48, 48, 40, 40}},
    {"unicode.compact_size", &Layout::unicode_compact_size, /*         */ {72, 72, 72, 56, 56}},
    {"unicode.mask.kind", &Layout::unicode_mask_kind, /*               */ {28, 28, 28, 28, 28}},
    {"unicode.mask.compact", &Layout::unicode_mask_compact, /*         */ {32, 32, 32, 32, 32}},
    {"unicode.mask.ascii", &Layout::unicode_mask_ascii, /*             */ {64, 64, 64, 64, 64}},
    {"unicode.mask.ready", &Layout::unicode_mask_ready, /*             */ {128, 128, 128, -1, -1}},
    {"debug.version", &Layout::debug_version, /*                       */ {-1, -1, -1, -1, 8}},
    {"debug.free_threaded", &Layout::debug_free_threaded, /*           */ {-1, -1, -1, -1, 16}},
    {"debug.tstate.current_frame", &Layout::debug_tstate_current_frame, {-1, -1, -1, -1, 184}},
    {"debug.frame.previous", &Layout::debug_frame_previous, /*         */ {-1, -1, -1, -1, 232}},
    {"debug.frame.executable", &Layout::debug_frame_executable, /*     */ {-1, -1, -1, -1, 240}},
    {"debug.frame.instr_ptr", &Layout::debug_frame_instr_ptr, /*       */ {-1, -1, -1, -1, 248}},
    {"debug.frame.owner", &Layout::debug_frame_owner, /*               */ {-1, -1, -1, -1, 264}},
    {"debug.code.filename", &Layout::debug_code_filename, /*           */ {-1, -1, -1, -1, 280}},
    {"debug.code.name", &Layout::debug_code_name, /*                   */ {-1, -1, -1, -1, 288}},
    {"debug.code.co_code_adaptive", &Layout::debug_code_co_code_adaptive, {-1, -1, -1, -1, 344}},
    {"debug.object.ob_type", &Layout::debug_object_ob_type, /*         */ {-1, -1, -1, -1, 360}},
    {"debug.unicode.state", &Layout::debug_unicode_state, /*           */ {-1, -1, -1, -1, 544}},
    {"debug.unicode.length", &Layout::debug_unicode_length, /*         */ {-1, -1, -1, -1, 552}},
    {"debug.unicode.asciiobject_size", &Layout::debug_unicode_asciiobject_size, {-1, -1, -1, -1, 560}},
    {"opcode.precall_units", &Layout::precall_units, /*                */ {-1, -1, 2, -1, -1}},
};

constexpr Layout make_layout(int minor) {
  Layout layout{};
  layout.major = 3;
  layout.minor = minor;
  for (const Row& row : kRows) layout.*row.member = row.value[minor - kFirstMinor];
  layout.lasti_unit = minor == 9 ? 1 : 2;
  return layout;
}

constexpr Layout kLayouts[kVersions] = {make_layout(9), make_layout(10), make_layout(11), make_layout(12),
                                        make_layout(13)};

// Every field of Layout but major, minor and lasti_unit has its row (Layout is all ints).
static_assert(sizeof(Layout) == (sizeof(kRows) / sizeof(kRows[0]) + 3) * sizeof(int), "a Layout field has no row");

}  // namespace

const Layout* layout_for(int major, int minor) {
  if (major != 3 || minor < kFirstMinor || minor > kLastMinor) return nullptr;
  return &kLayouts[minor - kFirstMinor];
}

size_t format_layout(const Layout& layout, char* out, size_t cap) {
  size_t used = 0;
  auto add = [&](int written) {
    if (written > 0) used += static_cast<size_t>(written);
  };
  auto rest = [&]() { return used < cap ? cap - used : 0; };
  auto at = [&]() { return used < cap ? out + used : nullptr; };
  add(std::snprintf(at(), rest(), "version %d.%d\n", layout.major, layout.minor));
  for (const Row& row : kRows) add(std::snprintf(at(), rest(), "%s %d\n", row.name, layout.*row.member));
  add(std::snprintf(at(), rest(), "opcode.precall_family"));
  if (layout.precall_units < 0) add(std::snprintf(at(), rest(), " -1"));
  for (uint8_t op : kPrecallFamily311) {
    if (layout.precall_units >= 0) add(std::snprintf(at(), rest(), " %d", op));
  }
  add(std::snprintf(at(), rest(), "\n"));
  return used;
}

}  // namespace trainscope::shim::python
