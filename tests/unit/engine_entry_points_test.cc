// The engine's ABI is one list (TRAINSCOPE_ENGINE_ENTRY_POINTS): the engine library must export every entry point on
// it, and no other trainscope_engine_* function the shim would never look up.
#include <stdio.h>

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "shim/engine_api.h"

namespace trainscope {
namespace {

std::set<std::string> exported_engine_functions(const char* library) {
  std::set<std::string> names;
  const std::string command = std::string("nm -D --defined-only '") + library + "' 2>&1";
  FILE* nm = popen(command.c_str(), "r");
  if (nm == nullptr) return names;
  char line[1024];
  while (fgets(line, sizeof(line), nm) != nullptr) {
    std::string text(line);
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    const size_t at = text.rfind(' ');
    const std::string name = at == std::string::npos ? text : text.substr(at + 1);
    if (name.rfind("trainscope_engine_", 0) == 0) names.insert(name);
  }
  pclose(nm);
  return names;
}

TEST(EngineEntryPoints, TheEngineExportsExactlyTheListedOnes) {
  std::set<std::string> listed = {"trainscope_engine_start"};
#define TRAINSCOPE_LISTED_ENTRY_POINT(name, wanted) listed.insert("trainscope_engine_" #name);
  TRAINSCOPE_ENGINE_ENTRY_POINTS(TRAINSCOPE_LISTED_ENTRY_POINT)
#undef TRAINSCOPE_LISTED_ENTRY_POINT
  EXPECT_EQ(exported_engine_functions(TRAINSCOPE_ENGINE_PATH), listed)
      << "the engine library's exported trainscope_engine_* functions (nm -D) differ from engine_api.h's list";
}

}  // namespace
}  // namespace trainscope
