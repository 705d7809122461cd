// shim/python_stack.cc in real interpreters: python_stack_check.py under every installed 3.9-3.13, refusals of the
// others, and detection in a program that embeds Python.
#include "shim/python_stack.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "python/python_interpreters.h"
#include "shim/python_layouts.h"
#include "support/subprocess.h"

namespace trainscope::testing {
namespace {

namespace python = shim::python;

// This test binary holds no Python: nothing is found, nothing is read.
TEST(PythonStack, NothingWithoutPython) {
  const python::Status& status = python::detect();
  EXPECT_EQ(status.support, python::Support::kNotPython);
  EXPECT_STREQ(status.reason, "no Python in this process");
  EXPECT_EQ(&python::detect(), &status) << "absent is final: the same answer, without looking again";
  EXPECT_EQ(python::stack_key(), 0u);
  python::Frame frames[2];
  int depth = -1;
  EXPECT_EQ(python::capture(frames, 2, &depth), 0);
  EXPECT_EQ(depth, 0);
}

std::string skip_reason(const PythonInterpreter& interpreter) {
  return std::string("Python ") + interpreter.version + " not found on this machine";
}

class PythonStackIn : public ::testing::TestWithParam<PythonInterpreter> {};

TEST_P(PythonStackIn, MatchesTheInterpretersOwnView) {
  const PythonInterpreter& interpreter = GetParam();
  if (*interpreter.executable == '\0') GTEST_SKIP() << skip_reason(interpreter);
  ProcessResult result = run_process({interpreter.executable, TS_PYSTACK_CHECK, TS_PYSTACK_PROBE}, within(180));
  std::printf("%s", result.out.c_str());  // every check, and the ns per stack_key()
  EXPECT_FALSE(result.timed_out);
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
  EXPECT_NE(result.out.find("all checks passed"), std::string::npos) << result.err;
}

// Python loaded by the program itself (an embedding application): not ready before Py_Initialize, ready after,
// nothing after Py_FinalizeEx.
TEST_P(PythonStackIn, WaitsForTheInterpreterToBeInitialised) {
  const PythonInterpreter& interpreter = GetParam();
  if (*interpreter.executable == '\0') GTEST_SKIP() << skip_reason(interpreter);
  if (*interpreter.library == '\0') GTEST_SKIP() << "Python " << interpreter.version << " has no shared libpython";
  ProcessResult result = run_process({TS_EMBED_PROGRAM, interpreter.library}, within(60));
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  std::string version = interpreter.version;
  EXPECT_NE(result.out.find("before Py_Initialize: 0 Python " + version + " is loaded but not initialised yet\n"),
            std::string::npos)
      << result.out;
  EXPECT_NE(result.out.find("after Py_Initialize: 1 \n"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("no Python frame: key 0 frames 0\n"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("from embedded Python: key set, 1 frame(s) in <string>\n"), std::string::npos)
      << result.out;
  EXPECT_NE(result.out.find("after Py_FinalizeEx: key 0\n"), std::string::npos) << result.out;
}

INSTANTIATE_TEST_SUITE_P(Installed, PythonStackIn, ::testing::ValuesIn(kSupportedPythons),
                         [](const auto& param_info) { return python_test_name(param_info.param); });

// Loads the probe into `interpreter` (Python 2.7 and 3.x alike), optionally with another layout (minor version,
// shift of the innermost-frame offset), and prints "<detect()>|key K|frames N|<detect() after the walks>".
ProcessResult run_probe(const PythonInterpreter& interpreter, int layout_minor = 0, int shift = 0) {
  const char* script =
      "import ctypes, sys\n"
      "lib = ctypes.CDLL(sys.argv[1])\n"
      "lib.ts_probe_key.restype = ctypes.c_uint64\n"
      "if int(sys.argv[2]): lib.ts_probe_override_layout(int(sys.argv[2]), int(sys.argv[3]))\n"
      "buf = ctypes.create_string_buffer(65536)\n"
      "lib.ts_probe_detect(buf, 512)\n"
      "status = buf.value.decode('utf-8')\n"
      "key = lib.ts_probe_key()\n"
      "n = lib.ts_probe_capture(buf, 65536)\n"
      "lib.ts_probe_detect(buf, 512)\n"
      "sys.stdout.write('%s|key %d|frames %d|%s\\n' % (status, key, n, buf.value.decode('utf-8')))\n";
  return run_process(
      {interpreter.executable, "-c", script, TS_PYSTACK_PROBE, std::to_string(layout_minor), std::to_string(shift)},
      within(60));
}

// Versions outside 3.9-3.13 are refused with their version in the reason, never read.
class PythonStackRefuses : public ::testing::TestWithParam<PythonInterpreter> {};

TEST_P(PythonStackRefuses, WithAClearReason) {
  const PythonInterpreter& interpreter = GetParam();
  if (*interpreter.executable == '\0') GTEST_SKIP() << skip_reason(interpreter);
  ProcessResult result = run_probe(interpreter);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  int major = 0, minor = 0;
  ASSERT_EQ(std::sscanf(interpreter.version, "%d.%d", &major, &minor), 2);
  char status[128];
  std::snprintf(status, sizeof(status), "2 %d %d Python %d.%d is not supported by this trainscope (3.9 to 3.13)", major,
                minor, major, minor);
  EXPECT_EQ(result.out, std::string(status) + "|key 0|frames 0|" + status + "\n");
}

INSTANTIATE_TEST_SUITE_P(Installed, PythonStackRefuses, ::testing::ValuesIn(kRefusedPythons),
                         [](const auto& param_info) { return python_test_name(param_info.param); });

// The layout is chosen by version; were it wrong (an unknown patch release), the validated first walk turns the
// reader off (kBroken) or finds nothing, and nothing faults. (A field at a plausible wrong place, such as 3.10's
// f_lasti read in 3.9, can give wrong line numbers: only the generated tables guard against that.)
TEST_P(PythonStackIn, SurvivesEveryOtherVersionsLayout) {
  const PythonInterpreter& interpreter = GetParam();
  if (*interpreter.executable == '\0') GTEST_SKIP() << skip_reason(interpreter);
  for (int minor = python::kFirstMinor; minor <= python::kLastMinor; ++minor) {
    ProcessResult result = run_probe(interpreter, minor);
    EXPECT_EQ(result.exit_code, 0) << "with 3." << minor << "'s layout: " << result.err;
    EXPECT_EQ(result.out.rfind("1 3 " + std::to_string(minor) + " |", 0), 0u) << result.out;
  }
}

// 3.13 describes its own layouts (_Py_DebugOffsets): a table that disagrees is refused before any read.
TEST(PythonStack, RefusesALayoutThePythonsDebugOffsetsContradict) {
  const PythonInterpreter& interpreter = kSupportedPythons[13 - python::kFirstMinor];
  if (*interpreter.executable == '\0') GTEST_SKIP() << skip_reason(interpreter);
  ProcessResult result = run_probe(interpreter, 13, 8);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const std::string status =
      "2 3 13 Python 3.13: _Py_DebugOffsets says thread_state.current_frame is at 72, this trainscope expects 80";
  EXPECT_EQ(result.out, status + "|key 0|frames 0|" + status + "\n");
}

}  // namespace
}  // namespace trainscope::testing
