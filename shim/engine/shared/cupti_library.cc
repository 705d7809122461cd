// Finding and loading libcupti (see cupti_library.h): the copy already in the process, else the first candidate that
// loads, searched where the job's CUDA would be (the library path, the toolkit, the job's Python wheels).
#include "shim/engine/shared/cupti_library.h"

#include <dlfcn.h>
#include <link.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace trainscope::engine {
namespace {

// The libcupti already in the process (Kineto's, Nsight's): a second copy would be a second CUPTI in one process.
int find_loaded_cupti(dl_phdr_info* info, size_t, void* data) {
  const char* name = info->dlpi_name;
  const char* base = name != nullptr ? std::strrchr(name, '/') : nullptr;
  if (base != nullptr && std::strncmp(base + 1, "libcupti.so", 11) == 0) {
    *static_cast<std::string*>(data) = name;
    return 1;
  }
  return 0;
}

// The site-packages folder of a loaded Python package's library (torch, the nvidia-* wheels), "" if none.
int find_site_packages(dl_phdr_info* info, size_t, void* data) {
  const char* name = info->dlpi_name;
  const char* found = name != nullptr ? std::strstr(name, "/site-packages/") : nullptr;
  if (found == nullptr) return 0;
  *static_cast<std::string*>(data) = std::string(name, static_cast<size_t>(found - name)) + "/site-packages";
  return 1;
}

std::vector<std::string> cupti_candidates() {
  std::vector<std::string> candidates;
  std::string loaded;
  dl_iterate_phdr(find_loaded_cupti, &loaded);
  if (!loaded.empty()) return {loaded};
  static const char* const kNames[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so"};
  for (const char* name : kNames) candidates.emplace_back(name);  // LD_LIBRARY_PATH, the ld.so cache
  std::vector<std::string> roots;
  if (const char* home = std::getenv("CUDA_HOME"); home != nullptr && home[0] != '\0') roots.emplace_back(home);
  roots.emplace_back("/usr/local/cuda");
  for (const std::string& root : roots)
    for (const char* folder : {"/lib64/", "/extras/CUPTI/lib64/"})
      for (const char* name : kNames) candidates.push_back(root + folder + name);
  std::string site_packages;
  dl_iterate_phdr(find_site_packages, &site_packages);
  if (!site_packages.empty())
    for (const char* name : kNames) candidates.push_back(site_packages + "/nvidia/cuda_cupti/lib/" + name);
  return candidates;
}

}  // namespace

std::string load_cupti(Cupti& cupti) {
  void* handle = nullptr;
  for (const std::string& candidate : cupti_candidates()) {
    handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      cupti.path = candidate;
      break;
    }
  }
  if (handle == nullptr)
    return "no CUPTI library found (libcupti.so.13/.12 on the library path, under $CUDA_HOME or /usr/local/cuda, or "
           "in the nvidia-cuda-cupti wheel)";
  std::string missing;
#define TS_CUPTI_RESOLVE(name)                                               \
  cupti.name = reinterpret_cast<decltype(cupti.name)>(dlsym(handle, #name)); \
  if (cupti.name == nullptr) missing += std::string(missing.empty() ? "" : ", ") + #name;
  TS_CUPTI_FUNCTIONS(TS_CUPTI_RESOLVE)
#undef TS_CUPTI_RESOLVE
  // The handle stays open for the life of the process: CUPTI keeps calling us.
  if (!missing.empty()) return cupti.path + " lacks " + missing;
  return {};
}

}  // namespace trainscope::engine
