// The stack of one call site as data: its Python frames (when the calling thread ran CPython) above its native ones.
//
// The engine captures it once per call site, the wire protocol carries it (StackDefinition), the coordinator keeps it
// per rank, and every report prints it the same way (reports/stack_text.h): the Python frames in traceback form, then
// the native frames. Plain data, no logic: the reports and the exchange both use it without depending on each other.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainscope::exchange {

// One Python frame: `File "train.py", line 88, in backward`.
struct PythonFrame {
  std::string file{};
  int32_t line = 0;  // 1-based; 0 when CPython did not know it
  std::string function{};
  bool operator==(const PythonFrame&) const = default;
};

struct CallStack {
  std::vector<PythonFrame>
      python{};  // innermost first; empty when the call was not made from Python, or could not be read
  // Why the Python stack is missing although the caller runs Python (e.g. "Python 3.14 is not supported by this
  // trainscope (3.9 to 3.13)"); empty otherwise.
  std::string python_note{};
  std::vector<std::string> native{};  // symbolised native frames, innermost first, one line each
  bool empty() const { return python.empty() && python_note.empty() && native.empty(); }
  bool operator==(const CallStack&) const = default;
};

}  // namespace trainscope::exchange
