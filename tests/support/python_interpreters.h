// Finds the CPython interpreters, 3.9 to 3.13, that the Python job tests run under, at run time, so that a test can
// loop over the versions and skip the ones this machine lacks. (tests/python/python_interpreters.h is another thing:
// the interpreters CMake found at configure time, with their headers, for the stack reader's tests.)
#pragma once

#include <string>
#include <vector>

namespace trainscope::testing {

inline constexpr int kFirstPythonMinor = 9;
inline constexpr int kLastPythonMinor = 13;

struct FoundPython {
  int minor = 0;        // 3.<minor>
  std::string version;  // "3.9"
  bool found = false;
  std::string path;  // the executable, when found
};

// Python 3.<minor>: the newest $PYENV_ROOT/versions/3.<minor>.<patch>/bin/python3.<minor> (PYENV_ROOT when set, then
// /root/.pyenv), else python3.<minor> on PATH. Only executables count.
FoundPython find_python(int minor);

// find_python for every minor version from kFirstPythonMinor to kLastPythonMinor, found or not.
std::vector<FoundPython> found_pythons();

}  // namespace trainscope::testing
