// The private seam between the CPU stand-in libcuda.so.1, libcudart.so.13 and libcupti.so: what the real driver,
// runtime and CUPTI share behind their public APIs. The driver and the runtime report every API call (enter and exit,
// with the real CUpti_CallbackData and *_params structs) and the driver every kernel it "ran" to the one tool
// installed; the stand-in CUPTI installs itself when a subscriber subscribes, and turns what it hears into callbacks
// and activity records.
#pragma once

#include <cupti.h>
#include <stdint.h>

extern "C" {

struct TsfakeCudaTool {
  // One API call of the driver or runtime domain.
  void (*api)(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const CUpti_CallbackData* data);
  // A kernel (or a graph launch's work) finished: CUPTI's kernel activity. Times from tsfake_cuda_timestamp().
  void (*kernel_completed)(uint32_t correlation, CUcontext context, uint32_t stream_id, const char* name,
                           uint64_t start, uint64_t end);
};

// Installs `tool` (nullptr: none). Exported by the stand-in libcuda.so.1.
__attribute__((visibility("default"))) void tsfake_cuda_set_tool(const TsfakeCudaTool* tool);
// Hands one API callback to the installed tool, if any (the runtime's calls go through the driver's library).
__attribute__((visibility("default"))) void tsfake_cuda_report(CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                                               const CUpti_CallbackData* data);
// The runtime call open on this thread (its correlation id; 0: none): a kernel launched inside it carries its id in
// the kernel activity, as with the real CUPTI, not the nested driver call's.
__attribute__((visibility("default"))) void tsfake_cuda_runtime_call(uint32_t correlation);
// The next correlation id (every API call gets one, runtime and driver alike) and the one context.
__attribute__((visibility("default"))) uint32_t tsfake_cuda_next_correlation(void);
__attribute__((visibility("default"))) CUcontext tsfake_cuda_context(void);
// The clock of activity records and cuptiGetTimestamp (CLOCK_MONOTONIC, as the real CUPTI's is not CLOCK_REALTIME).
__attribute__((visibility("default"))) uint64_t tsfake_cuda_timestamp(void);
}

// One API call as the tool sees it: enter on construction, exit with the result in finish().
template <typename Result>
class TsfakeApiCall {
 public:
  TsfakeApiCall(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const char* name, const void* params,
                const char* symbol)
      : domain_(domain), cbid_(cbid) {
    data_.functionName = name;
    data_.functionParams = params;
    data_.functionReturnValue = &result_;
    data_.symbolName = symbol;
    data_.context = tsfake_cuda_context();
    data_.contextUid = 1;
    data_.correlationData = &correlation_data_;
    data_.correlationId = tsfake_cuda_next_correlation();
    report(CUPTI_API_ENTER);
  }
  Result finish(Result result) {
    result_ = result;
    report(CUPTI_API_EXIT);
    return result;
  }
  uint32_t correlation() const { return data_.correlationId; }

 private:
  void report(CUpti_ApiCallbackSite site) {
    data_.callbackSite = site;
    tsfake_cuda_report(domain_, cbid_, &data_);
  }

  CUpti_CallbackDomain domain_;
  CUpti_CallbackId cbid_;
  CUpti_CallbackData data_{};
  Result result_{};
  uint64_t correlation_data_ = 0;
};
