// python_embed_program LIBPYTHON: loads and starts Python itself, as an embedding application does, and prints what
// the stack reader says before Py_Initialize, after it, from embedded Python code, and after Py_FinalizeEx.
#include <dlfcn.h>

#include <cstdio>

#include "shim/python_stack.h"

namespace python = trainscope::shim::python;

// Called by the embedded Python code through ctypes (the program is linked with its symbols exported).
extern "C" __attribute__((visibility("default"))) int ts_embed_report() {
  python::Frame frames[4];
  int depth = 0;
  int n = python::capture(frames, 4, &depth);
  std::printf("from embedded Python: key %s, %d frame(s) in %s\n", python::stack_key() != 0 ? "set" : "0", depth,
              n > 0 ? frames[0].file : "-");
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: python_embed_program LIBPYTHON\n");
    return 2;
  }
  void* library = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  if (library == nullptr) {
    std::fprintf(stderr, "%s\n", dlerror());
    return 2;
  }
  auto initialize = reinterpret_cast<void (*)()>(dlsym(library, "Py_Initialize"));
  auto run = reinterpret_cast<int (*)(const char*)>(dlsym(library, "PyRun_SimpleString"));
  auto finalize = reinterpret_cast<int (*)()>(dlsym(library, "Py_FinalizeEx"));
  if (!initialize || !run || !finalize) return 2;

  const python::Status* status = &python::detect();
  std::printf("before Py_Initialize: %d %s\n", static_cast<int>(status->support), status->reason);
  initialize();
  status = &python::detect();
  std::printf("after Py_Initialize: %d %s\n", static_cast<int>(status->support), status->reason);
  python::Frame frames[2];
  int depth = -1;
  int n = python::capture(frames, 2, &depth);
  // The main thread has a thread state but runs no Python code here.
  std::printf("no Python frame: key %llu frames %d\n", static_cast<unsigned long long>(python::stack_key()), n + depth);
  std::fflush(stdout);
  if (run("import ctypes\nctypes.CDLL(None).ts_embed_report()\n") != 0) return 1;
  std::fflush(stdout);
  if (finalize() != 0) return 1;
  std::printf("after Py_FinalizeEx: key %llu\n", static_cast<unsigned long long>(python::stack_key()));
  return 0;
}
