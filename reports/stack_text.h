// A call stack in report text and JSON, one form for every report that shows one (mismatch, desync, vanished rank,
// inf/nan origin, inf/nan detection).
//
// Text, each line starting with the caller's indent and ending in '\n':
//   File "<file>", line <n>, in <function>      one per Python frame, innermost first (Python's traceback form)
//   (Python stack not captured: <note>)         instead of those, when there is none but a note says why
//   #<i> <frame>                                one per native frame, innermost first
//   (no stack captured; call site 0x401234)     the only line when the stack is empty ("(no stack captured)" when
//                                               the call site is not known either)
// Every name in the text has its control characters escaped (reports::printable): a stack may come from another rank.
// JSON, next to each other wherever a stack is shown: "stack" (the native frames, as strings), "python_stack"
// ([{"file", "line", "function"}], innermost first) and "python_stack_note" ("" when none).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "base/call_stack.h"

namespace trainscope::reports {

std::string format_stack_block(const exchange::CallStack& stack, uint64_t caller, std::string_view indent);

// Sets "stack", "python_stack" and "python_stack_note" on `entry` (an object).
void add_stack_json(nlohmann::json& entry, const exchange::CallStack& stack);

}  // namespace trainscope::reports
