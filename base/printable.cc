// Control characters escaped in strings from outside this process (printable.h; the escaping itself is
// printable_escape.h, shared with the preloaded shim).
#include "base/printable.h"

#include "base/printable_escape.h"

namespace trainscope::reports {

namespace {

std::string escape(std::string_view text, PrintableForm form) {
  std::string out;
  out.reserve(text.size());
  escape_printable(text.data(), text.size(), form, [&](const char* piece, size_t n) { out.append(piece, n); });
  return out;
}

}  // namespace

std::string printable(std::string_view text) { return escape(text, PrintableForm::kLine); }

std::string printable_text(std::string_view text) { return escape(text, PrintableForm::kText); }

std::string printable_json(std::string_view json) { return escape(json, PrintableForm::kJson); }

}  // namespace trainscope::reports
