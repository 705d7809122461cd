// The layout table of shim/python_layouts.cc against gen_python_layouts.c built with each installed version's headers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "python/python_interpreters.h"
#include "shim/python_layouts.h"
#include "support/subprocess.h"

namespace trainscope::testing {
namespace {

namespace python = shim::python;

class PythonLayout : public ::testing::TestWithParam<PythonInterpreter> {};

TEST_P(PythonLayout, TableMatchesTheVersionsHeaders) {
  const PythonInterpreter& interpreter = GetParam();
  const std::string include = interpreter.include_dir;
  if (include.empty() || !std::filesystem::exists(include + "/Python.h")) {
    GTEST_SKIP() << "Python " << interpreter.version << "'s headers not found on this machine";
  }
  int major = 0, minor = 0;
  ASSERT_EQ(std::sscanf(interpreter.version, "%d.%d", &major, &minor), 2);
  const python::Layout* layout = python::layout_for(major, minor);
  ASSERT_NE(layout, nullptr) << interpreter.version;

  TempDir dir;
  const std::string generator = dir.path() + "/gen_python_layouts";
  ProcessResult built = run_process({TS_C_COMPILER, "-O0", "-DPy_BUILD_CORE", "-I" + include,
                                     "-I" + include + "/internal", TS_GEN_LAYOUTS, "-o", generator},
                                    within(120));
  ASSERT_EQ(built.exit_code, 0) << built.err;
  ProcessResult generated = run_process({generator}, within(30));
  ASSERT_EQ(generated.exit_code, 0) << generated.err;

  char table[4096];
  size_t length = python::format_layout(*layout, table, sizeof(table));
  ASSERT_LT(length, sizeof(table));
  EXPECT_EQ(std::string(table), generated.out) << "shim/python_layouts.cc disagrees with Python " << interpreter.version
                                               << "'s headers: paste the generator's output (above) into its table";
}

INSTANTIATE_TEST_SUITE_P(Installed, PythonLayout, ::testing::ValuesIn(kSupportedPythons),
                         [](const auto& param_info) { return python_test_name(param_info.param); });

TEST(PythonLayout, KnowsExactlyTheSupportedVersions) {
  EXPECT_EQ(python::layout_for(3, 8), nullptr);
  EXPECT_EQ(python::layout_for(3, 14), nullptr);
  EXPECT_EQ(python::layout_for(2, 7), nullptr);
  for (int minor = python::kFirstMinor; minor <= python::kLastMinor; ++minor) {
    ASSERT_NE(python::layout_for(3, minor), nullptr);
    EXPECT_EQ(python::layout_for(3, minor)->minor, minor);
  }
}

}  // namespace
}  // namespace trainscope::testing
