// The CPython interpreters cmake/TrainscopePythons.cmake found, by version, and helpers for the tests that run them.
#pragma once

#include <ostream>
#include <string>

#include "support/subprocess.h"

namespace trainscope::testing {

struct PythonInterpreter {
  const char* version;      // "3.12"
  const char* executable;   // "" when not found on this machine
  const char* include_dir;  // its headers
  const char* library;      // its shared libpython, "" when built static
};

#define TS_PYTHON(major, minor)                                                                          \
  PythonInterpreter {                                                                                    \
#major "." #minor, TRAINSCOPE_PYTHON_##major##_##minor##_EXECUTABLE,                                 \
        TRAINSCOPE_PYTHON_##major##_##minor##_INCLUDE_DIR, TRAINSCOPE_PYTHON_##major##_##minor##_LIBRARY \
  }

// The versions the stack reader supports, and older and newer ones it must refuse.
inline const PythonInterpreter kSupportedPythons[] = {TS_PYTHON(3, 9), TS_PYTHON(3, 10), TS_PYTHON(3, 11),
                                                      TS_PYTHON(3, 12), TS_PYTHON(3, 13)};
inline const PythonInterpreter kRefusedPythons[] = {TS_PYTHON(2, 7), TS_PYTHON(3, 6), TS_PYTHON(3, 7), TS_PYTHON(3, 8),
                                                    TS_PYTHON(3, 14)};

#undef TS_PYTHON

// For gtest's messages: "Python 3.12".
inline void PrintTo(const PythonInterpreter& python, std::ostream* out) { *out << "Python " << python.version; }

// "py3_12", for test names.
inline std::string python_test_name(const PythonInterpreter& python) {
  std::string name = std::string("py") + python.version;
  for (char& c : name) c = c == '.' ? '_' : c;
  return name;
}

// Options for run_process: the default environment, at most `seconds`.
inline ProcessOptions within(int seconds) {
  ProcessOptions options;
  options.timeout_seconds = seconds;
  return options;
}

}  // namespace trainscope::testing
