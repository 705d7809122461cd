// CPU stand-in libcupti.so: the part of CUPTI the launch collector uses, over the stand-in libcuda.so.1.
//
// - One subscriber at a time, as the real CUPTI: a second cuptiSubscribe gets
//   CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED (what Nsight Systems or torch.profiler leave a later tool).
// - cuptiEnableDomain / cuptiEnableCallback choose which driver callbacks the subscriber gets; the driver reports
//   every call to us (fake_cuda_tool.h) and we forward the enabled ones.
// - Kernel activity (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL / KERNEL): finished kernels are queued as
//   CUpti_ActivityKernel10 records and handed over in the subscriber's buffers at cuptiActivityFlushAll, one buffer
//   per flush; a record that does not fit is dropped and counted (cuptiActivityGetNumDroppedRecords).
#include <cupti.h>
#include <string.h>

#include <mutex>
#include <vector>

#include "fake_cuda_tool.h"

#define TSFAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr int kMaxCallbackIds = 2048;

struct Subscriber {
  int unused = 0;
};

std::mutex g_mutex;  // guards everything below but the enabled flags, read on every API call
Subscriber g_subscriber;
bool g_subscribed = false;
CUpti_CallbackFunc g_callback = nullptr;
void* g_userdata = nullptr;
bool g_enabled[CUPTI_CB_DOMAIN_SIZE][kMaxCallbackIds];
bool g_kernel_activity = false;
CUpti_BuffersCallbackRequestFunc g_request = nullptr;
CUpti_BuffersCallbackCompleteFunc g_complete = nullptr;
std::vector<CUpti_ActivityKernel10> g_pending;
size_t g_dropped = 0;

void on_api(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const CUpti_CallbackData* data) {
  CUpti_CallbackFunc callback = nullptr;
  void* userdata = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (!g_subscribed || domain >= CUPTI_CB_DOMAIN_SIZE || cbid >= kMaxCallbackIds || !g_enabled[domain][cbid]) return;
    callback = g_callback;
    userdata = g_userdata;
  }
  callback(userdata, domain, cbid, data);
}

void on_kernel_completed(uint32_t correlation, CUcontext, uint32_t stream_id, const char* name, uint64_t start,
                         uint64_t end) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_kernel_activity) return;
  CUpti_ActivityKernel10 record;
  memset(&record, 0, sizeof(record));
  record.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  record.start = start;
  record.end = end;
  record.contextId = 1;
  record.streamId = stream_id;
  record.correlationId = correlation;
  record.name = name;  // the stand-in driver's functions live as long as the process
  g_pending.push_back(record);
}

const TsfakeCudaTool g_tool{on_api, on_kernel_completed};

}  // namespace

TSFAKE_EXPORT CUptiResult cuptiGetVersion(uint32_t* version) {
  if (version == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  *version = CUPTI_API_VERSION;
  return CUPTI_SUCCESS;
}

TSFAKE_EXPORT CUptiResult cuptiGetResultString(CUptiResult result, const char** text) {
  if (text == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  switch (result) {
    case CUPTI_SUCCESS:
      *text = "CUPTI_SUCCESS";
      return CUPTI_SUCCESS;
    case CUPTI_ERROR_INVALID_PARAMETER:
      *text = "CUPTI_ERROR_INVALID_PARAMETER";
      return CUPTI_SUCCESS;
    case CUPTI_ERROR_MAX_LIMIT_REACHED:
      *text = "CUPTI_ERROR_MAX_LIMIT_REACHED";
      return CUPTI_SUCCESS;
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
      *text = "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED";
      return CUPTI_SUCCESS;
    default:
      *text = "CUPTI_ERROR_UNKNOWN";
      return CUPTI_ERROR_INVALID_PARAMETER;
  }
}

TSFAKE_EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                                         void* userdata) {
  if (subscriber == nullptr || callback == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_subscribed) return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  g_subscribed = true;
  g_callback = callback;
  g_userdata = userdata;
  memset(g_enabled, 0, sizeof(g_enabled));
  *subscriber = reinterpret_cast<CUpti_SubscriberHandle>(&g_subscriber);
  tsfake_cuda_set_tool(&g_tool);
  return CUPTI_SUCCESS;
}

TSFAKE_EXPORT CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle subscriber) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_subscribed || subscriber != reinterpret_cast<CUpti_SubscriberHandle>(&g_subscriber))
    return CUPTI_ERROR_INVALID_PARAMETER;
  g_subscribed = false;
  return CUPTI_SUCCESS;
}

TSFAKE_EXPORT CUptiResult cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                            CUpti_CallbackDomain domain) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_subscribed || subscriber != reinterpret_cast<CUpti_SubscriberHandle>(&g_subscriber) ||
      domain <= CUPTI_CB_DOMAIN_INVALID || domain >= CUPTI_CB_DOMAIN_SIZE)
    return CUPTI_ERROR_INVALID_PARAMETER;
  for (bool& enabled : g_enabled[domain]) enabled = enable != 0;
  return CUPTI_SUCCESS;
}

TSFAKE_EXPORT CUptiResult cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                              CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_subscribed || subscriber != reinterpret_cast<CUpti_SubscriberHandle>(&g_subscriber) ||
      domain <= CUPTI_CB_DOMAIN_INVALID || domain >= CUPTI_CB_DOMAIN_SIZE || cbid >= kMaxCallbackIds)
    return CUPTI_ERROR_INVALID_PARAMETER;
  g_enabled[domain][cbid] = enable != 0;
  return CUPTI_SUCCESS;
}

TSFAKE_EXPORT CUptiResult cuptiGetTimestamp(uint64_t* timestamp) {
  if (timestamp == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  *timestamp = tsfake_cuda_timestamp();
  return CUPTI_SUCCESS;
}

TSFAKE_EXPORT CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                                         CUpti_BuffersCallbackCompleteFunc complete) {
  if (request == nullptr || complete == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_request = request;
  g_complete = complete;
  return CUPTI_SUCCESS;
}

TSFAKE_EXPORT CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
  if (kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && kind != CUPTI_ACTIVITY_KIND_KERNEL)
    return CUPTI_ERROR_NOT_COMPATIBLE;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_request == nullptr) return CUPTI_ERROR_INVALID_OPERATION;
  g_kernel_activity = true;
  tsfake_cuda_set_tool(&g_tool);
  return CUPTI_SUCCESS;
}

TSFAKE_EXPORT CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) {
  if (kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && kind != CUPTI_ACTIVITY_KIND_KERNEL)
    return CUPTI_ERROR_NOT_COMPATIBLE;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_kernel_activity = false;
  return CUPTI_SUCCESS;
}

TSFAKE_EXPORT CUptiResult cuptiActivityFlushAll(uint32_t) {
  std::vector<CUpti_ActivityKernel10> records;
  CUpti_BuffersCallbackRequestFunc request = nullptr;
  CUpti_BuffersCallbackCompleteFunc complete = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    records.swap(g_pending);
    request = g_request;
    complete = g_complete;
  }
  if (records.empty() || request == nullptr) return CUPTI_SUCCESS;
  uint8_t* buffer = nullptr;
  size_t size = 0;
  size_t max_records = 0;
  request(&buffer, &size, &max_records);
  size_t valid = 0;
  size_t dropped = 0;
  for (const CUpti_ActivityKernel10& record : records) {
    if (buffer == nullptr || valid + sizeof(record) > size) {
      ++dropped;
      continue;
    }
    memcpy(buffer + valid, &record, sizeof(record));
    valid += sizeof(record);
  }
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_dropped += dropped;
  }
  if (buffer != nullptr) complete(nullptr, 0, buffer, size, valid);
  return CUPTI_SUCCESS;
}

TSFAKE_EXPORT CUptiResult cuptiActivityGetNextRecord(uint8_t* buffer, size_t valid, CUpti_Activity** record) {
  if (buffer == nullptr || record == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  uint8_t* next = *record == nullptr ? buffer : reinterpret_cast<uint8_t*>(*record) + sizeof(CUpti_ActivityKernel10);
  if (next + sizeof(CUpti_ActivityKernel10) > buffer + valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *record = reinterpret_cast<CUpti_Activity*>(next);
  return CUPTI_SUCCESS;
}

TSFAKE_EXPORT CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext, uint32_t, size_t* dropped) {
  if (dropped == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  std::lock_guard<std::mutex> lock(g_mutex);
  *dropped = g_dropped;
  return CUPTI_SUCCESS;
}
