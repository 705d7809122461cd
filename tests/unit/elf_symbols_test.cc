// The shim's own symbol look-ups in the loaded objects' ELF tables: they must find what the dynamic linker finds,
// default versions only, without dlsym (which the shim interposes).
#include "shim/elf_symbols.h"

#include <dlfcn.h>
#include <string.h>

#include <gtest/gtest.h>

#include <string>

namespace trainscope::shim::elf {
namespace {

TEST(ElfSymbols, NextDefinitionIsWhatRtldNextFinds) {
  // From the test program, the next definition of dlsym is libc's default version: what RTLD_NEXT gives us.
  EXPECT_EQ(next_definition("dlsym"), dlsym(RTLD_NEXT, "dlsym"));
  EXPECT_EQ(next_definition("dlvsym"), dlsym(RTLD_NEXT, "dlvsym"));
  EXPECT_EQ(next_definition("malloc"), dlsym(RTLD_NEXT, "malloc"));
  EXPECT_EQ(next_definition("no_such_symbol_anywhere_4711"), nullptr);
  EXPECT_EQ(any_other_definition("dlsym"), dlsym(RTLD_NEXT, "dlsym"));
  EXPECT_EQ(any_other_definition("no_such_symbol_anywhere_4711"), nullptr);
}

struct Found {
  const void* libc = nullptr;
  std::string path;
};

TEST(ElfSymbols, ObjectsAreVisitedAndSearchedOneByOne) {
  Found found;
  EXPECT_TRUE(for_each_object(
      [](const void* object, const char* path, void* context) {
        if (strstr(path, "libc.so") == nullptr) return false;
        auto* f = static_cast<Found*>(context);
        f->libc = object;
        f->path = path;
        return true;
      },
      &found));
  ASSERT_NE(found.libc, nullptr);
  EXPECT_TRUE(object_defines(found.libc, "dlsym"));
  EXPECT_TRUE(object_defines(found.libc, "open"));
  EXPECT_FALSE(object_defines(found.libc, "ncclAllReduce"));
  EXPECT_FALSE(object_defines(nullptr, "open"));
  int visited = 0;
  EXPECT_FALSE(for_each_object(
      [](const void*, const char*, void* context) { return ++*static_cast<int*>(context) < 0; }, &visited));
  EXPECT_GE(visited, 2);  // the program and libc at least
}

TEST(ElfSymbols, TheDefinitionInTheCallersOwnObject) {
  void* libc_open = dlsym(RTLD_DEFAULT, "open");
  ASSERT_NE(libc_open, nullptr);
  // An address inside libc (its open itself) finds libc's definitions.
  EXPECT_EQ(definition_in_object_of(libc_open, "open"), libc_open);
  EXPECT_EQ(definition_in_object_of(libc_open, "no_such_symbol_anywhere_4711"), nullptr);
  EXPECT_EQ(definition_in_object_of(nullptr, "open"), nullptr);
}

}  // namespace
}  // namespace trainscope::shim::elf
