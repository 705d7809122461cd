// Every function that the installed nccl.h declares, and what nccl.h 2.29.7 adds that clients require (vLLM 0.33's
// wrapper will not load a library without ncclCommSuspend/ncclCommResume), is exported by the stand-ins with its
// pncclX profiling alias; the pretend-2.18 variant lacks the 2.29 ones, as a 2.18 NCCL does.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cctype>
#include <fstream>
#include <set>
#include <string>
#include <vector>

namespace tsfake_test {
namespace {

const std::vector<std::string> kNccl229Additions = {"ncclCommSuspend", "ncclCommResume", "ncclCommMemStats"};

// The functions a header declares at the start of a line, as nccl.h writes them: "ncclResult_t  ncclX(",
// "const char*  ncclX(", "void  ncclX(" (their pncclX twins included).
std::set<std::string> declared_functions(const std::string& header) {
  std::set<std::string> names;
  std::ifstream in(header);
  std::string line;
  while (std::getline(in, line)) {
    std::size_t at = line.find_first_not_of(" \t");
    if (at == std::string::npos) continue;
    bool typed = false;
    for (const char* type : {"ncclResult_t", "const char*", "const char *", "void"}) {
      const std::string prefix(type);
      if (line.compare(at, prefix.size(), prefix) == 0) {
        at += prefix.size();
        typed = true;
        break;
      }
    }
    if (!typed || at >= line.size() || (line[at] != ' ' && line[at] != '\t')) continue;
    at = line.find_first_not_of(" \t", at);
    std::size_t end = at;
    while (end < line.size() && (std::isalnum(static_cast<unsigned char>(line[end])) || line[end] == '_')) ++end;
    const std::string name = line.substr(at, end - at);
    if (end < line.size() && line[end] == '(' && (name.rfind("nccl", 0) == 0 || name.rfind("pnccl", 0) == 0))
      names.insert(name);
  }
  return names;
}

void expect_exported(const char* library, const std::vector<std::string>& names) {
  void* handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  for (const std::string& name : names) {
    EXPECT_NE(dlsym(handle, name.c_str()), nullptr) << library << " lacks " << name;
    if (name.rfind("nccl", 0) == 0) {
      EXPECT_NE(dlsym(handle, ("p" + name).c_str()), nullptr) << library << " lacks p" << name;
    }
  }
  dlclose(handle);
}

TEST(EntryPoints, EveryFunctionOfTheInstalledNcclHeaderIsExportedWithItsProfilingAlias) {
  const std::set<std::string> declared = declared_functions(TSFAKE_NCCL_HEADER);
  // nccl.h 2.28 declares 41 functions and their aliases; far fewer means the header's layout changed under the scan.
  ASSERT_GE(declared.size(), 80u) << TSFAKE_NCCL_HEADER;
  const std::vector<std::string> names(declared.begin(), declared.end());
  expect_exported(TSFAKE_FULL_LIBRARY, names);
  expect_exported(TSFAKE_NOOP_LIBRARY, names);
}

TEST(EntryPoints, SuspendResumeAndMemStatsOfNccl2_29AreExported) {
  expect_exported(TSFAKE_FULL_LIBRARY, kNccl229Additions);
  expect_exported(TSFAKE_NOOP_LIBRARY, kNccl229Additions);
  void* old = dlopen(TSFAKE_OLD_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(old, nullptr) << dlerror();
  for (const std::string& name : kNccl229Additions) {
    EXPECT_EQ(dlsym(old, name.c_str()), nullptr) << "the pretend-2.18 NCCL has " << name;
    EXPECT_EQ(dlsym(old, ("p" + name).c_str()), nullptr) << "the pretend-2.18 NCCL has p" << name;
  }
  dlclose(old);
}

}  // namespace
}  // namespace tsfake_test
