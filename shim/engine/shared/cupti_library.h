// libcupti, loaded at run time: the CUPTI functions the launch adapter calls, resolved with dlopen and dlsym rather
// than linked, so that the engine loads in a job whose machine has no CUPTI (launches are then not recorded, and the
// recorder says why), and so that a process which already holds a libcupti (Kineto's, Nsight's) gets that very copy
// back: a second copy would be a second CUPTI in one process. Where it looks, in order, is engine_launches.h's.
#pragma once

#include <cupti.h>

#include <string>

namespace trainscope::engine {

#define TS_CUPTI_FUNCTIONS(X)       \
  X(cuptiSubscribe)                 \
  X(cuptiUnsubscribe)               \
  X(cuptiEnableDomain)              \
  X(cuptiGetResultString)           \
  X(cuptiGetTimestamp)              \
  X(cuptiActivityRegisterCallbacks) \
  X(cuptiActivityEnable)            \
  X(cuptiActivityFlushAll)          \
  X(cuptiActivityGetNextRecord)

struct Cupti {
#define TS_CUPTI_MEMBER(name) decltype(&::name) name = nullptr;
  TS_CUPTI_FUNCTIONS(TS_CUPTI_MEMBER)
#undef TS_CUPTI_MEMBER
  std::string path;

  std::string error_text(CUptiResult result) const {
    const char* text = nullptr;
    if (cuptiGetResultString != nullptr && cuptiGetResultString(result, &text) == CUPTI_SUCCESS && text != nullptr)
      return text;
    return "CUPTI error " + std::to_string(static_cast<int>(result));
  }
};

// Loads libcupti and resolves what we use; the reason when it cannot.
std::string load_cupti(Cupti& cupti);

}  // namespace trainscope::engine
