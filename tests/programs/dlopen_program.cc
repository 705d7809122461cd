// A JAX-like job: it does not link NCCL but dlopen()s it by path (RTLD_LOCAL) and looks up every function it calls
// with dlsym(handle, name) — or, with --dlvsym, dlvsym(handle, name, VERSION) — then runs scenario_program's loop
// (scenario.h): the same options, NCCL calls and output.
//
//   dlopen_program [--nccl PATH] [--dlvsym VERSION] [scenario_program's options]
//     --nccl    the library to load (default: $TS_NCCL_PATH, else "libnccl.so.2", found as dlopen finds it)
//     --dlvsym  look every function up in that symbol version (the library must define it)
// A library that cannot be loaded, or lacks a function, ends the program with status 3 and one line saying which.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "scenario.h"

namespace {

struct Loader {
  void* handle = nullptr;
  std::string path;
  std::string version;  // empty: dlsym

  template <typename FnPtr>
  void find(FnPtr* out, const char* name) const {
    void* symbol = version.empty() ? dlsym(handle, name) : dlvsym(handle, name, version.c_str());
    if (symbol == nullptr) {
      const char* why = dlerror();
      std::fprintf(stderr, "dlopen_program: %s not found in %s%s%s: %s\n", name, path.c_str(),
                   version.empty() ? "" : " at version ", version.c_str(), why != nullptr ? why : "(no dlerror)");
      std::exit(3);
    }
    *out = reinterpret_cast<FnPtr>(symbol);
  }
};

}  // namespace

int main(int argc, char** argv) {
  Loader loader;
  const char* env_path = std::getenv("TS_NCCL_PATH");
  loader.path = env_path != nullptr && *env_path != '\0' ? env_path : "libnccl.so.2";
  tsprog::ScenarioOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--nccl" && i + 1 < argc) {
      loader.path = argv[++i];
    } else if (arg == "--dlvsym" && i + 1 < argc) {
      loader.version = argv[++i];
    } else if (!tsprog::parse_scenario_option(argc, argv, &i, &options)) {
      std::fprintf(stderr, "usage: dlopen_program [--nccl PATH] [--dlvsym VERSION] %s", tsprog::kScenarioUsage);
      return 2;
    }
  }
  loader.handle = dlopen(loader.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (loader.handle == nullptr) {
    std::fprintf(stderr, "dlopen_program: cannot load %s: %s\n", loader.path.c_str(), dlerror());
    return 3;
  }
  tsprog::ScenarioNccl nccl{};
  loader.find(&nccl.get_unique_id, "ncclGetUniqueId");
  loader.find(&nccl.comm_init_rank, "ncclCommInitRank");
  loader.find(&nccl.comm_destroy, "ncclCommDestroy");
  loader.find(&nccl.all_reduce, "ncclAllReduce");
  loader.find(&nccl.broadcast, "ncclBroadcast");
  loader.find(&nccl.group_start, "ncclGroupStart");
  loader.find(&nccl.group_end, "ncclGroupEnd");
  loader.find(&nccl.send, "ncclSend");
  loader.find(&nccl.recv, "ncclRecv");
  return tsprog::run_scenario(nccl, options);
}
