// Finds the CPython interpreters the Python job tests run under (see python_interpreters.h).
#include "support/python_interpreters.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string_view>

namespace trainscope::testing {

namespace {

namespace fs = std::filesystem;

bool executable(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec) && access(path.c_str(), X_OK) == 0;
}

// The patch number of a pyenv directory named "3.<minor>.<patch>[suffix]", or -1 for another version or name.
long patch_of(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size()) return -1;
  const std::string_view rest = std::string_view(name).substr(prefix.size());
  long patch = 0;
  size_t digits = 0;
  for (; digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9'; ++digits)
    patch = patch * 10 + (rest[digits] - '0');
  return digits == 0 ? -1 : patch;
}

// The newest <root>/versions/3.<minor>.<patch>/bin/python3.<minor>, or "".
std::string in_pyenv(const fs::path& root, const std::string& version) {
  const std::string prefix = version + ".";
  std::string best;
  long best_patch = -1;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root / "versions", ec)) {
    const long patch = patch_of(entry.path().filename().string(), prefix);
    const fs::path candidate = entry.path() / "bin" / ("python" + version);
    if (patch > best_patch && executable(candidate)) {
      best = candidate.string();
      best_patch = patch;
    }
  }
  return best;
}

std::string on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  std::string_view rest = path;
  while (true) {
    const size_t colon = rest.find(':');
    const std::string dir(rest.substr(0, colon));
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / name;
    if (executable(candidate)) return candidate.string();
    if (colon == std::string_view::npos) return "";
    rest.remove_prefix(colon + 1);
  }
}

}  // namespace

FoundPython find_python(int minor) {
  FoundPython python;
  python.minor = minor;
  python.version = "3." + std::to_string(minor);
  std::vector<fs::path> roots;
  if (const char* root = std::getenv("PYENV_ROOT"); root != nullptr && *root != '\0') roots.emplace_back(root);
  roots.emplace_back("/root/.pyenv");
  for (const fs::path& root : roots) {
    python.path = in_pyenv(root, python.version);
    if (!python.path.empty()) break;
  }
  if (python.path.empty()) python.path = on_path("python" + python.version);
  python.found = !python.path.empty();
  return python;
}

std::vector<FoundPython> found_pythons() {
  std::vector<FoundPython> all;
  for (int minor = kFirstPythonMinor; minor <= kLastPythonMinor; ++minor) all.push_back(find_python(minor));
  return all;
}

}  // namespace trainscope::testing
