// NVTX injection: with TRAINSCOPE_STEP_MARKER=nvtx:REGEX the shim is the job's NVTX tool, so a batch can start at a
// range the framework already opens (PyTorch's emit_nvtx / torch.cuda.nvtx.range_push, Megatron's and NeMo's
// step ranges) without any change to the job.
//
// NVTX's header-only implementation, on the first NVTX call of the process, dlopen()s NVTX_INJECTION64_PATH and
// calls its InitializeInjectionNvtx2: that path is this library (`trainscope run` sets it, and the load-time
// constructor sets it when the job has not chosen a tool of its own). dlopen of an already loaded library returns
// it, so the callbacks run in the preloaded copy. We fill in the range callbacks only: every other NVTX call stays
// the no-op it is without a tool.
//
// A range name is matched against the pattern by the engine (cached per distinct name); a match appends a
// kStepMarker record to the flight recorder, in order with the NCCL calls, where the frame thread counts it.
// Freestanding like the rest of the shim (libc only).
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>

#include "shim/runtime.h"

namespace trainscope::shim {
namespace {

// Ranges pushed and not popped on this thread (NVTX's push and pop return the level).
__thread int t_nvtx_depth __attribute__((tls_model("initial-exec")));
uint64_t g_range_ids;  // start/end ranges get ids of their own

// Copies a wide-character name as ASCII ('?' for anything else): the patterns are matched as bytes.
const char* narrow(const wchar_t* wide, char* out, size_t out_len) {
  if (wide == nullptr) return nullptr;
  size_t i = 0;
  for (; wide[i] != L'\0' && i + 1 < out_len; ++i)
    out[i] = (wide[i] > 0 && wide[i] < 0x80) ? static_cast<char>(wide[i]) : '?';
  out[i] = '\0';
  return out;
}

void on_range(const char* name) {
  Runtime& rt = g_runtime;
  if (name == nullptr || !rt.enabled || t_thread.depth > 0) return;
  ensure_started();
  auto matches = rt.engine.step_marker_matches;
  if (matches == nullptr || matches(name) == 0) return;
  recorder::Record record;
  memset(&record, 0, sizeof(record));
  record.start_ns = now_ns();
  record.tid = current_tid();
  record.op = static_cast<uint16_t>(recorder::Op::kStepMarker);
  record.rank = record.nranks = record.peer = record.redop = recorder::kUnknown;
  record.dtype = recorder::kUnknown;
  record.caller = reinterpret_cast<uint64_t>(__builtin_return_address(0));
  const recorder::Pending pending = rt.writer.append(record);
  recorder::Writer::complete(pending, 0, record.start_ns);
  // TRAINSCOPE_ABORT_AFTER_BATCH: this range may start the batch after the last one.
  if (auto gate = rt.engine.batch_marker; gate != nullptr) {
    ++t_thread.depth;  // the stop's own work is ours, not the job's
    gate();
    --t_thread.depth;
  }
}

const char* message_of(const nvtxEventAttributes_t* attributes, char* wide_buffer, size_t wide_len) {
  if (attributes == nullptr) return nullptr;
  switch (attributes->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII:
      return attributes->message.ascii;
    case NVTX_MESSAGE_TYPE_UNICODE:
      return narrow(attributes->message.unicode, wide_buffer, wide_len);
    case NVTX_MESSAGE_TYPE_REGISTERED:
      // Our own handles: register_string_* below hand out copies of the strings.
      return reinterpret_cast<const char*>(attributes->message.registered);
    default:
      return nullptr;
  }
}

constexpr size_t kWideName = 256;

int push_level() { return t_nvtx_depth++; }
int pop_level() { return t_nvtx_depth > 0 ? --t_nvtx_depth : -1; }

int NVTX_API range_push_a(const char* message) {
  on_range(message);
  return push_level();
}
int NVTX_API range_push_w(const wchar_t* message) {
  char name[kWideName];
  on_range(narrow(message, name, sizeof(name)));
  return push_level();
}
int NVTX_API range_push_ex(const nvtxEventAttributes_t* attributes) {
  char name[kWideName];
  on_range(message_of(attributes, name, sizeof(name)));
  return push_level();
}
int NVTX_API range_pop() { return pop_level(); }
int NVTX_API domain_range_push_ex(nvtxDomainHandle_t, const nvtxEventAttributes_t* attributes) {
  return range_push_ex(attributes);
}
int NVTX_API domain_range_pop(nvtxDomainHandle_t) { return pop_level(); }

nvtxRangeId_t next_range_id() { return __atomic_add_fetch(&g_range_ids, 1, __ATOMIC_RELAXED); }
nvtxRangeId_t NVTX_API range_start_a(const char* message) {
  on_range(message);
  return next_range_id();
}
nvtxRangeId_t NVTX_API range_start_w(const wchar_t* message) {
  char name[kWideName];
  on_range(narrow(message, name, sizeof(name)));
  return next_range_id();
}
nvtxRangeId_t NVTX_API range_start_ex(const nvtxEventAttributes_t* attributes) {
  char name[kWideName];
  on_range(message_of(attributes, name, sizeof(name)));
  return next_range_id();
}
nvtxRangeId_t NVTX_API domain_range_start_ex(nvtxDomainHandle_t, const nvtxEventAttributes_t* attributes) {
  return range_start_ex(attributes);
}

// Registered strings live as long as the process (NVTX has no unregister): a copy is the handle.
nvtxStringHandle_t NVTX_API register_string_a(nvtxDomainHandle_t, const char* text) {
  return reinterpret_cast<nvtxStringHandle_t>(text != nullptr ? strdup(text) : nullptr);
}
nvtxStringHandle_t NVTX_API register_string_w(nvtxDomainHandle_t, const wchar_t* text) {
  char name[kWideName];
  const char* narrowed = narrow(text, name, sizeof(name));
  return reinterpret_cast<nvtxStringHandle_t>(narrowed != nullptr ? strdup(narrowed) : nullptr);
}

template <typename Fn>
void install(NvtxFunctionTable table, unsigned int size, unsigned int id, Fn fn) {
  if (table != nullptr && id < size && table[id] != nullptr) *table[id] = reinterpret_cast<NvtxFunctionPointer>(fn);
}

}  // namespace
}  // namespace trainscope::shim

// Called by NVTX once per process; 1 accepts the injection, 0 declines it (NVTX then stays a no-op).
extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  using namespace trainscope::shim;
  const trainscope::Config& config = g_runtime.config;
  if (!g_runtime.enabled || config.step_marker_form != trainscope::StepMarkerForm::kNvtx || get_table == nullptr)
    return 0;
  const auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_table(NVTX_ETID_CALLBACKS));
  if (callbacks == nullptr || callbacks->GetModuleFunctionTable == nullptr) return 0;
  NvtxFunctionTable core = nullptr;
  unsigned int core_size = 0;
  if (callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &core_size) == 0) return 0;
  install(core, core_size, NVTX_CBID_CORE_RangePushA, range_push_a);
  install(core, core_size, NVTX_CBID_CORE_RangePushW, range_push_w);
  install(core, core_size, NVTX_CBID_CORE_RangePushEx, range_push_ex);
  install(core, core_size, NVTX_CBID_CORE_RangePop, range_pop);
  install(core, core_size, NVTX_CBID_CORE_RangeStartA, range_start_a);
  install(core, core_size, NVTX_CBID_CORE_RangeStartW, range_start_w);
  install(core, core_size, NVTX_CBID_CORE_RangeStartEx, range_start_ex);
  NvtxFunctionTable core2 = nullptr;
  unsigned int core2_size = 0;
  if (callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &core2, &core2_size) != 0) {
    install(core2, core2_size, NVTX_CBID_CORE2_DomainRangePushEx, domain_range_push_ex);
    install(core2, core2_size, NVTX_CBID_CORE2_DomainRangePop, domain_range_pop);
    install(core2, core2_size, NVTX_CBID_CORE2_DomainRangeStartEx, domain_range_start_ex);
    install(core2, core2_size, NVTX_CBID_CORE2_DomainRegisterStringA, register_string_a);
    install(core2, core2_size, NVTX_CBID_CORE2_DomainRegisterStringW, register_string_w);
  }
  return 1;
}
