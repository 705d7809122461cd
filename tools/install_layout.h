// Where the installed (or built) command finds the libraries it works with, and which shared libraries it loaded.
#pragma once

#include <string>
#include <vector>

namespace trainscope::tools {

// The library `trainscope run` preloads: in the install's library dir beside bin/, or in the build tree's shim/.
// Empty when neither exists.
std::string find_preload_library();

// The engine the preloaded library `library` loads on first NCCL use: the file beside it (empty `library`: empty).
std::string engine_beside(const std::string& library);

struct LoadedLibrary {
  std::string name;  // the file name, e.g. libzmq.so.5
  std::string path;  // the file the loader mapped
};

// The shared objects of this process whose file name starts with one of `prefixes`, in load order.
std::vector<LoadedLibrary> loaded_libraries(const std::vector<std::string>& prefixes);

// The shared libraries bundled in `dir` (lib*.so.* files), sorted by name, leaving out trainscope's own.
std::vector<std::string> bundled_libraries(const std::string& dir);

// What this package was built for, and the glibc it runs on.
struct PackagePlatform {
  std::string policy;        // the wheel's platform tag (manylinux_2_28_x86_64); empty: built for its build machine
  std::string glibc_needed;  // the oldest glibc the command and the engine load on (the build machine's, if no policy)
  std::string preload_glibc_needed;  // the same for the preloaded library
  std::string glibc_found;           // gnu_get_libc_version() of this process
};
PackagePlatform package_platform();

}  // namespace trainscope::tools
