// Call stacks in report text and JSON (see stack_text.h).
#include "reports/stack_text.h"

#include <cinttypes>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "base/printable.h"

namespace trainscope::reports {

std::string format_stack_block(const exchange::CallStack& stack, uint64_t caller, std::string_view indent) {
  std::string out;
  const auto line = [&](const std::string& text) {
    out += indent;
    out += text;
    out += '\n';
  };
  if (stack.empty()) {
    if (caller == 0) {
      line("(no stack captured)");
    } else {
      char address[24];
      std::snprintf(address, sizeof(address), "0x%" PRIx64, caller);
      line(std::string("(no stack captured; call site ") + address + ")");
    }
    return out;
  }
  for (const exchange::PythonFrame& frame : stack.python) {
    line("File \"" + printable(frame.file) + "\", line " + std::to_string(frame.line) + ", in " +
         printable(frame.function));
  }
  if (stack.python.empty() && !stack.python_note.empty())
    line("(Python stack not captured: " + printable(stack.python_note) + ")");
  for (size_t i = 0; i < stack.native.size(); ++i) line("#" + std::to_string(i) + " " + printable(stack.native[i]));
  return out;
}

void add_stack_json(nlohmann::json& entry, const exchange::CallStack& stack) {
  nlohmann::json python = nlohmann::json::array();
  for (const exchange::PythonFrame& frame : stack.python) {
    python.push_back({{"file", frame.file}, {"line", frame.line}, {"function", frame.function}});
  }
  entry["stack"] = stack.native;
  entry["python_stack"] = std::move(python);
  entry["python_stack_note"] = stack.python_note;
}

}  // namespace trainscope::reports
