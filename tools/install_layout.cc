// Where the installed (or built) command finds the libraries it works with, and which shared libraries it loaded.
#include "tools/install_layout.h"

#include <gnu/libc-version.h>
#include <link.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#ifndef TRAINSCOPE_LIBDIR_FROM_BINDIR
#define TRAINSCOPE_LIBDIR_FROM_BINDIR "../lib"
#endif
// Set by cmake/TrainscopeInstall.cmake for the manylinux build (cmake/ManylinuxToolchain.cmake); empty otherwise.
#ifndef TRAINSCOPE_WHEEL_POLICY
#define TRAINSCOPE_WHEEL_POLICY ""
#define TRAINSCOPE_GLIBC_FLOOR ""
#define TRAINSCOPE_PRELOAD_GLIBC_FLOOR ""
#endif
#define TRAINSCOPE_STRING_OF(x) #x
#define TRAINSCOPE_VERSION_TEXT(major, minor) TRAINSCOPE_STRING_OF(major) "." TRAINSCOPE_STRING_OF(minor)

namespace trainscope::tools {

namespace fs = std::filesystem;

std::string find_preload_library() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  // The configured library dir (lib64, lib/x86_64-linux-gnu under /usr), then the usual one, then the build tree.
  for (const char* relative :
       {TRAINSCOPE_LIBDIR_FROM_BINDIR "/libtrainscope.so", "../lib/libtrainscope.so", "../shim/libtrainscope.so"}) {
    const fs::path candidate = exe.parent_path() / relative;
    if (fs::exists(candidate, ec)) return fs::weakly_canonical(candidate, ec).string();
  }
  return "";
}

std::string engine_beside(const std::string& library) {
  if (library.empty()) return "";
  return (fs::path(library).parent_path() / "libtrainscope-engine.so").string();
}

namespace {

struct LoadedSearch {
  const std::vector<std::string>* prefixes;
  std::vector<LoadedLibrary>* found;
};

int collect_loaded(struct dl_phdr_info* info, size_t /*size*/, void* data) {
  auto* search = static_cast<LoadedSearch*>(data);
  if (info->dlpi_name == nullptr || info->dlpi_name[0] == '\0') return 0;
  const std::string path = info->dlpi_name;
  const std::string name = fs::path(path).filename().string();
  for (const std::string& prefix : *search->prefixes) {
    if (name.rfind(prefix, 0) == 0) {
      std::error_code ec;
      const fs::path canonical = fs::weakly_canonical(path, ec);
      search->found->push_back({name, ec ? path : canonical.string()});
      break;
    }
  }
  return 0;
}

}  // namespace

std::vector<LoadedLibrary> loaded_libraries(const std::vector<std::string>& prefixes) {
  std::vector<LoadedLibrary> found;
  LoadedSearch search{&prefixes, &found};
  dl_iterate_phdr(collect_loaded, &search);
  return found;
}

std::vector<std::string> bundled_libraries(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("lib", 0) != 0 || name.find(".so.") == std::string::npos) continue;
    if (name.rfind("libtrainscope", 0) == 0) continue;
    if (!it->is_regular_file(ec)) continue;
    names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

PackagePlatform package_platform() {
  PackagePlatform platform;
  platform.policy = TRAINSCOPE_WHEEL_POLICY;
  if (platform.policy.empty()) {
    // Built against the build machine's glibc: its headers' version is the least the files may need.
    platform.glibc_needed = TRAINSCOPE_VERSION_TEXT(__GLIBC__, __GLIBC_MINOR__);
    platform.preload_glibc_needed = platform.glibc_needed;
  } else {
    platform.glibc_needed = TRAINSCOPE_GLIBC_FLOOR;
    platform.preload_glibc_needed = TRAINSCOPE_PRELOAD_GLIBC_FLOOR;
  }
  platform.glibc_found = gnu_get_libc_version();
  return platform;
}

}  // namespace trainscope::tools
