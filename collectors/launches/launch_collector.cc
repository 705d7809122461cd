// The launch collector (launch_collector.h): API callbacks in, flight recorder records out.
//
// The common path (a launch of a known kernel on a known stream) reads three fixed-size open-addressing tables with
// atomic loads, appends one record and updates one stream entry: no lock, no allocation. Kernels and streams are
// added to those tables under `mutex`, once each; a slot, once published (its pointer stored with release), never
// changes key. Per-thread state (the open outermost call) lives in a thread_local, so nesting needs no lock either.
#include "collectors/launches/launch_collector.h"

#include <regex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "base/thread_fence.h"
#include "collectors/launches/kernel_buffers.h"
#include "collectors/launches/kernel_names.h"

namespace trainscope::launches {

namespace {

using recorder::Op;
using recorder::Record;
using recorder::StreamEntry;

constexpr uint32_t kKernelSlots = 16384;  // distinct kernels before the overflow list (a large job has a few thousand)
constexpr uint32_t kStreamSlots = 1024;   // distinct (stream, context) pairs
constexpr uint32_t kCorrelationSlots = 65536;  // launches whose completion can still be matched to their stream
constexpr uint32_t kApiIdsPerDomain = 2048;    // CUPTI callback ids per domain (runtime ~500, driver ~800)
constexpr uint32_t kNoNameId = UINT32_MAX;     // tried: the name table is full or closed
constexpr uint64_t kSymbolKey = 1ull << 63;    // a kernel known only by its symbol (no CUfunction)

uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t hash_text(std::string_view text) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (const char c : text) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001B3ull;
  return mix(h) | kSymbolKey;
}

// What the collector knows about one kernel; immutable once published (a better name replaces the whole entry).
struct KernelInfo {
  uint32_t name_id = 0;       // 0: no name (not given yet, or the name table is full)
  bool named = false;         // a symbol was seen (so name_id is final)
  bool watched = false;       // TRAINSCOPE_WATCH=kernels:REGEX matches the demangled name
  bool optimizer = false;     // is_optimizer_kernel_name()
  KernelSignature signature;  // filled for watched kernels only
};

struct KernelSlot {
  std::atomic<uint64_t> key{0};
  std::atomic<KernelInfo*> info{nullptr};
};

// One (stream, context) the job launched on; `stream`, `context` and `entry` are final before it is published.
struct StreamSlot {
  uint64_t stream = 0;
  uint64_t context = 0;
  StreamEntry* entry = nullptr;            // nullptr: the recorder's stream table is full
  std::atomic<uint64_t> launched{0};       // correlation id of the latest successful launch on it
  std::atomic<uint64_t> completed_seq{0};  // every launch up to this one is known finished ...
  std::atomic<uint64_t> completed_ns{0};   // ... at this time
};

// Which stream a launch's correlation id (the outer call's, or the nested driver call's) belongs to. A seqlock per
// slot: the launching thread writes, the engine's activity thread reads.
struct CorrelationSlot {
  std::atomic<uint64_t> correlation{0};
  std::atomic<uint64_t> seq{0};
  std::atomic<StreamSlot*> stream{nullptr};
};

std::atomic<uint64_t> g_generation{0};

// The open outermost call of this thread.
struct ThreadCalls {
  uint64_t generation = 0;  // the collector these belong to (a test makes many)
  uint32_t tid = 0;
  uint32_t depth = 0;
  ApiCall outer;  // its string views are cleared: they die with the enter callback
  uint64_t start_ns = 0;
  const KernelInfo* kernel = nullptr;
  bool params_from_nested = false;  // outer.params points into the nested driver call's arguments
  uint32_t nested_correlation = 0;
  bool watched = false;
  WatchedLaunch watch;
  uint64_t stream_sync_launched = 0;  // kStreamSync: the stream's latest launch when the synchronisation began
  std::vector<std::pair<StreamSlot*, uint64_t>> context_sync_launched;  // kContextSync: the same per stream
};

thread_local ThreadCalls t_calls;

uint32_t current_tid() {
  if (t_calls.tid == 0) t_calls.tid = static_cast<uint32_t>(syscall(SYS_gettid));
  return t_calls.tid;
}

void clear_views(ApiCall* call) {
  call->function = {};
  call->symbol = {};
}

}  // namespace

struct LaunchCollector::State {
  recorder::Writer* writer = nullptr;
  CudaQueries* queries = nullptr;
  LaunchWatcher* watcher = nullptr;
  uint64_t generation = 0;
  bool has_regex = false;
  regex_t regex{};
  BufferOptions buffer_options;

  std::mutex mutex;  // adding kernels, streams and API names; the first-error handler
  KernelSlot kernels[kKernelSlots];
  std::vector<std::pair<uint64_t, KernelInfo*>> kernel_overflow;  // under mutex, once kernels[] is full
  std::vector<KernelInfo*> replaced;                              // superseded entries, freed with the collector
  std::atomic<StreamSlot*> stream_index[kStreamSlots] = {};
  StreamSlot streams[kStreamSlots];
  std::atomic<uint32_t> streams_used{0};
  CorrelationSlot correlations[kCorrelationSlots];
  std::atomic<uint32_t> api_ids[3][kApiIdsPerDomain] = {};
  std::vector<std::pair<uint64_t, uint32_t>> api_overflow;  // under mutex
  std::function<void(uint64_t)> first_error_handler;
  std::atomic<void (*)(uint64_t)> launch_handler{nullptr};

  // The job's threads (launch_collector.h: on_call).
  void on_call(const ApiCall& call);
  void maybe_watch();
  void record_launch(const ApiCall& exit);
  void record_sync(const ApiCall& exit);
  void report_error(const ApiCall& exit);

  ~State() {
    if (has_regex) regfree(&regex);
    for (KernelSlot& slot : kernels) delete slot.info.load(std::memory_order_relaxed);
    for (auto& [key, info] : kernel_overflow) delete info;
    for (KernelInfo* info : replaced) delete info;
  }

  // ---- kernels ----
  const KernelInfo* find_kernel(uint64_t key) const {
    for (uint32_t probe = 0, i = static_cast<uint32_t>(mix(key)) & (kKernelSlots - 1); probe < kKernelSlots;
         ++probe, i = (i + 1) & (kKernelSlots - 1)) {
      const KernelInfo* info = kernels[i].info.load(std::memory_order_acquire);
      if (info == nullptr) return nullptr;
      if (kernels[i].key.load(std::memory_order_relaxed) == key) return info;
    }
    return nullptr;
  }

  // The kernel with this CUfunction (or symbol key); `symbol` names it at first sight. Lock-free once known.
  const KernelInfo* kernel(uint64_t key, std::string_view symbol) {
    const KernelInfo* known = find_kernel(key);
    if (known != nullptr && (known->named || symbol.empty())) return known;
    std::lock_guard<std::mutex> lock(mutex);
    return add_kernel(key, symbol);
  }

  KernelInfo* make_kernel(uint64_t key, std::string_view symbol) {
    auto* info = new KernelInfo;
    if (symbol.empty()) return info;
    const std::string demangled = demangle(symbol);
    info->named = true;
    // The name table's key is the CUfunction; a kernel known only by its symbol gets the symbol's hash.
    const uint32_t id = writer->add_name(key & ~kSymbolKey, demangled.c_str());
    info->name_id = id;
    info->optimizer = is_optimizer_kernel_name(demangled);
    if (has_regex && regexec(&regex, demangled.c_str(), 0, nullptr, 0) == 0) {
      info->watched = true;
      info->signature = describe_kernel(demangled);
    }
    return info;
  }

  const KernelInfo* add_kernel(uint64_t key, std::string_view symbol) {
    uint32_t i = static_cast<uint32_t>(mix(key)) & (kKernelSlots - 1);
    for (uint32_t probe = 0; probe < kKernelSlots; ++probe, i = (i + 1) & (kKernelSlots - 1)) {
      KernelInfo* info = kernels[i].info.load(std::memory_order_relaxed);
      if (info == nullptr) {
        kernels[i].key.store(key, std::memory_order_relaxed);
        info = make_kernel(key, symbol);
        kernels[i].info.store(info, std::memory_order_release);
        return info;
      }
      if (kernels[i].key.load(std::memory_order_relaxed) != key) continue;
      if (info->named || symbol.empty()) return info;  // another thread named it meanwhile
      KernelInfo* named = make_kernel(key, symbol);
      replaced.push_back(info);
      kernels[i].info.store(named, std::memory_order_release);
      return named;
    }
    for (auto& [known_key, info] : kernel_overflow) {
      if (known_key != key) continue;
      if (info->named || symbol.empty()) return info;
      replaced.push_back(info);
      info = make_kernel(key, symbol);
      return info;
    }
    kernel_overflow.emplace_back(key, make_kernel(key, symbol));
    return kernel_overflow.back().second;
  }

  // ---- streams ----
  StreamSlot* find_stream(uint64_t stream, uint64_t context) const {
    const uint64_t key = mix(stream * 0x9E3779B97F4A7C15ull ^ context);
    for (uint32_t probe = 0, i = static_cast<uint32_t>(key) & (kStreamSlots - 1); probe < kStreamSlots;
         ++probe, i = (i + 1) & (kStreamSlots - 1)) {
      StreamSlot* slot = stream_index[i].load(std::memory_order_acquire);
      if (slot == nullptr) return nullptr;
      if (slot->stream == stream && slot->context == context) return slot;
    }
    return nullptr;
  }

  // The stream's slot, claimed (with its recorder entry) at its first launch. nullptr past kStreamSlots streams.
  StreamSlot* stream(uint64_t stream, uint64_t context) {
    StreamSlot* known = find_stream(stream, context);
    if (known != nullptr) return known;
    std::lock_guard<std::mutex> lock(mutex);
    known = find_stream(stream, context);
    if (known != nullptr) return known;
    const uint32_t used = streams_used.load(std::memory_order_relaxed);
    if (used == kStreamSlots) return nullptr;
    const uint64_t key = mix(stream * 0x9E3779B97F4A7C15ull ^ context);
    uint32_t i = static_cast<uint32_t>(key) & (kStreamSlots - 1);
    while (stream_index[i].load(std::memory_order_relaxed) != nullptr) i = (i + 1) & (kStreamSlots - 1);
    StreamSlot* slot = &streams[used];
    slot->stream = stream;
    slot->context = context;
    slot->entry = writer->add_stream(stream, context);
    stream_index[i].store(slot, std::memory_order_release);
    streams_used.store(used + 1, std::memory_order_release);
    return slot;
  }

  void mark_completed(StreamSlot* slot, uint64_t seq, uint64_t completed_ns, uint64_t checked_ns) {
    if (slot == nullptr || seq == 0) return;
    uint64_t known = slot->completed_seq.load(std::memory_order_relaxed);
    do {
      if (known >= seq) return;
    } while (!slot->completed_seq.compare_exchange_weak(known, seq, std::memory_order_relaxed));
    slot->completed_ns.store(completed_ns, std::memory_order_relaxed);
    if (slot->entry != nullptr) recorder::Writer::set_stream_completed(slot->entry, seq, completed_ns, checked_ns);
  }

  // ---- correlation ids ----
  void remember_correlation(uint64_t correlation, uint64_t seq, StreamSlot* slot) {
    if (correlation == 0) return;
    CorrelationSlot& entry = correlations[correlation & (kCorrelationSlots - 1)];
    entry.correlation.store(0, std::memory_order_relaxed);
    TS_THREAD_FENCE(__ATOMIC_RELEASE);
    entry.seq.store(seq, std::memory_order_relaxed);
    entry.stream.store(slot, std::memory_order_relaxed);
    entry.correlation.store(correlation, std::memory_order_release);
  }

  bool find_correlation(uint64_t correlation, uint64_t* seq, StreamSlot** slot) const {
    const CorrelationSlot& entry = correlations[correlation & (kCorrelationSlots - 1)];
    if (entry.correlation.load(std::memory_order_acquire) != correlation) return false;
    *seq = entry.seq.load(std::memory_order_relaxed);
    *slot = entry.stream.load(std::memory_order_relaxed);
    TS_THREAD_FENCE(__ATOMIC_ACQUIRE);
    return entry.correlation.load(std::memory_order_relaxed) == correlation;
  }

  // ---- API names ----
  uint32_t api_name(CudaDomain domain, uint32_t cbid, std::string_view function) {
    const auto d = static_cast<uint32_t>(domain) % 3;
    uint32_t id = cbid < kApiIdsPerDomain ? api_ids[d][cbid].load(std::memory_order_acquire) : 0;
    if (id != 0) return id == kNoNameId ? 0 : id;
    const uint64_t key = recorder::kNameKeyApi | (uint64_t{d} << 32) | cbid;
    std::lock_guard<std::mutex> lock(mutex);
    if (cbid < kApiIdsPerDomain) {
      id = api_ids[d][cbid].load(std::memory_order_relaxed);
      if (id != 0) return id == kNoNameId ? 0 : id;
    } else {
      for (const auto& [known, known_id] : api_overflow) {
        if (known == key) return known_id;
      }
    }
    const std::string text(function.empty() ? std::string("cbid ") + std::to_string(cbid) : std::string(function));
    id = writer->add_name(key, text.c_str());
    if (cbid < kApiIdsPerDomain) {
      api_ids[d][cbid].store(id == 0 ? kNoNameId : id, std::memory_order_release);
    } else {
      api_overflow.emplace_back(key, id);
    }
    return id;
  }
};

LaunchCollector::LaunchCollector(recorder::Writer* writer, CudaQueries* queries, LaunchWatcher* watcher,
                                 const CollectorOptions& options)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.writer = writer;
  s.queries = queries;
  s.watcher = watcher;
  s.generation = g_generation.fetch_add(1, std::memory_order_relaxed) + 1;
  // The configuration checked the regex already (shim/config.cc compiles it the same way); one that fails here
  // watches nothing rather than everything.
  if (options.watch_kernels != nullptr && options.watch_kernels[0] != '\0' && watcher != nullptr &&
      queries != nullptr) {
    s.has_regex = regcomp(&s.regex, options.watch_kernels, REG_EXTENDED | REG_NOSUB) == 0;
  }
  if (options.kernel_dtype != nullptr && options.kernel_dtype[0] != '\0') {
    if (const auto type = stats::parse_dtype(options.kernel_dtype)) {
      s.buffer_options.has_default_type = true;
      s.buffer_options.default_type = *type;
    }
  }
}

LaunchCollector::~LaunchCollector() = default;

namespace {

Record cuda_record(Op op, const ThreadCalls& t, uint64_t stream) {
  Record r{};
  r.start_ns = t.start_ns;
  r.seq = t.outer.correlation;
  r.stream = stream;
  r.aux = t.outer.context;
  r.rank = recorder::kUnknown;
  r.nranks = recorder::kUnknown;
  r.dtype = static_cast<int8_t>(recorder::kUnknown);
  r.op = static_cast<uint16_t>(op);
  r.tid = current_tid();
  return r;
}

// Appends `r` with its result, in one commit: a reader (the frame thread deciding whether an optimizer kernel ran and
// ended a batch) never sees a launch without its result. The record's index, or UINT64_MAX when the recorder is
// closed.
uint64_t append_complete(recorder::Writer* writer, const Record& r, int32_t result, uint64_t end_ns) {
  const recorder::Pending pending = writer->append(r, result, end_ns);
  if (pending.slot == nullptr) return UINT64_MAX;
  return pending.commit - 1;
}

}  // namespace

void LaunchCollector::on_call(const ApiCall& call) { state_->on_call(call); }

void LaunchCollector::State::on_call(const ApiCall& call) {
  // trainscope's own calls (the statistics kernel, the queries below) are no part of the job.
  if (own_cuda_call_active()) return;
  State& s = *this;
  ThreadCalls& t = t_calls;
  if (t.generation != s.generation) {
    t.generation = s.generation;
    t.depth = 0;
    t.watched = false;
  }

  if (call.phase == Phase::kEnter) {
    if (t.depth++ > 0) {
      // A driver launch inside the runtime launch: the same launch, which may say what the runtime call did not.
      if (t.outer.klass == CallClass::kLaunch && call.klass == CallClass::kLaunch) {
        if (t.nested_correlation == 0) t.nested_correlation = call.correlation;
        if (t.outer.function_handle == 0 && call.function_handle != 0) {
          t.outer.function_handle = call.function_handle;
          t.kernel = s.kernel(call.function_handle, call.symbol);
        } else if (t.kernel != nullptr && !t.kernel->named && !call.symbol.empty()) {
          t.kernel = s.kernel(t.outer.function_handle, call.symbol);
        }
        if (t.outer.params == nullptr && call.params != nullptr) {
          t.outer.params = call.params;
          t.params_from_nested = true;
        }
        if (t.outer.grid[0] == 0) {
          std::memcpy(t.outer.grid, call.grid, sizeof(call.grid));
          std::memcpy(t.outer.block, call.block, sizeof(call.block));
          t.outer.shared_bytes = call.shared_bytes;
        }
        maybe_watch();
      }
      return;
    }
    t.outer = call;
    clear_views(&t.outer);
    t.start_ns = call.time_ns;
    t.kernel = nullptr;
    t.params_from_nested = false;
    t.nested_correlation = 0;
    t.watched = false;
    switch (call.klass) {
      case CallClass::kLaunch:
        // Without a CUfunction (the runtime callback), the nested driver launch names the kernel by its handle;
        // naming it here by its symbol as well would intern it twice. The exit falls back on the symbol.
        if (call.kind != LaunchKind::kGraph && call.function_handle != 0) {
          t.kernel = s.kernel(call.function_handle, call.symbol);
          maybe_watch();
        }
        break;
      case CallClass::kStreamSync: {
        const StreamSlot* slot = s.find_stream(call.stream, call.context);
        t.stream_sync_launched = slot != nullptr ? slot->launched.load(std::memory_order_relaxed) : 0;
        break;
      }
      case CallClass::kContextSync: {
        t.context_sync_launched.clear();
        const uint32_t used = s.streams_used.load(std::memory_order_acquire);
        for (uint32_t i = 0; i < used; ++i) {
          StreamSlot* slot = &s.streams[i];
          if (call.context != 0 && slot->context != call.context) continue;
          const uint64_t launched = slot->launched.load(std::memory_order_relaxed);
          if (launched != 0) t.context_sync_launched.emplace_back(slot, launched);
        }
        break;
      }
      default:
        break;
    }
    return;
  }

  // kExit.
  if (t.depth == 0) {
    // The collector started inside this call: only its result can still be told.
    if (call.result != 0) {
      t.outer = call;
      clear_views(&t.outer);
      t.start_ns = call.time_ns;
      report_error(call);
    }
    return;
  }
  if (--t.depth > 0) {
    // A nested call's error is the outer call's to report (its own result says whether the job saw one).
    if (t.params_from_nested && call.klass == CallClass::kLaunch) {
      t.outer.params = nullptr;
      t.params_from_nested = false;
    }
    return;
  }
  switch (t.outer.klass) {
    case CallClass::kLaunch:
      if (t.kernel == nullptr && t.outer.kind != LaunchKind::kGraph) {
        // No driver launch inside said which kernel it was: the exit's own handle, else its symbol.
        if (call.function_handle != 0) {
          t.outer.function_handle = call.function_handle;
          t.kernel = s.kernel(call.function_handle, call.symbol);
        } else if (!call.symbol.empty()) {
          t.kernel = s.kernel(hash_text(call.symbol), call.symbol);
        }
      }
      record_launch(call);
      break;
    case CallClass::kStreamSync:
    case CallClass::kContextSync:
    case CallClass::kEventSync:
      record_sync(call);
      break;
    default:
      break;
  }
  if (call.result != 0) report_error(call);
  t.watched = false;
}

void LaunchCollector::State::maybe_watch() {
  State& s = *this;
  ThreadCalls& t = t_calls;
  if (t.watched || s.watcher == nullptr || t.kernel == nullptr || !t.kernel->watched || t.outer.capturing ||
      t.outer.params == nullptr || t.outer.function_handle == 0)
    return;
  const OwnCudaCalls own;  // the driver questions and the watcher's own CUDA use are not the job's
  t.watch = watched_launch(t.outer, t.kernel->signature, *s.queries, s.buffer_options);
  t.watched = true;
  s.watcher->before_launch(t.watch, 0);
}

void LaunchCollector::State::record_launch(const ApiCall& exit) {
  State& s = *this;
  ThreadCalls& t = t_calls;
  const ApiCall& call = t.outer;
  const bool graph = call.kind == LaunchKind::kGraph;
  Record r = cuda_record(graph ? Op::kGraphLaunch : Op::kKernelLaunch, t, call.stream);
  r.count = recorder::pack_grid(call.grid[0], call.grid[1], call.grid[2]);
  r.sendbuff = recorder::pack_block(call.block[0], call.block[1], call.block[2]);
  r.recvbuff = call.shared_bytes;
  r.caller = graph ? 0 : call.function_handle;
  r.group = graph ? call.graph_exec : 0;
  r.peer = t.kernel != nullptr ? static_cast<int32_t>(t.kernel->name_id) : 0;
  r.redop = recorder::launch_api(call.domain, call.kind);
  if (call.capturing) r.flags |= recorder::kFlagCapturing;
  if (t.watched) r.flags |= recorder::kFlagWatched;
  const uint64_t index = append_complete(s.writer, r, exit.result, exit.time_ns);
  if (index == UINT64_MAX) s.writer->count_dropped_launch();
  // A launch into a capturing stream runs later, as part of a graph: it is no progress of this stream.
  if (exit.result == 0 && !call.capturing) {
    StreamSlot* slot = s.stream(call.stream, call.context);
    if (slot != nullptr) {
      slot->launched.store(call.correlation, std::memory_order_relaxed);
      if (slot->entry != nullptr) recorder::Writer::set_stream_launched(slot->entry, call.correlation);
      s.remember_correlation(call.correlation, call.correlation, slot);
      if (t.nested_correlation != 0) s.remember_correlation(t.nested_correlation, call.correlation, slot);
    }
  }
  // A launch the recorder could not take has no record for its frame to stand on: it is not handed over.
  if (t.watched && index != UINT64_MAX) {
    const OwnCudaCalls own;
    s.watcher->after_launch(t.watch, index, exit.result);
  }
  void (*handler)(uint64_t) = s.launch_handler.load(std::memory_order_acquire);
  if (handler != nullptr && exit.result == 0 && !call.capturing) handler(r.caller);
}

void LaunchCollector::State::record_sync(const ApiCall& exit) {
  State& s = *this;
  ThreadCalls& t = t_calls;
  const ApiCall& call = t.outer;
  Record r = cuda_record(Op::kStreamSync, t, call.klass == CallClass::kStreamSync ? call.stream : 0);
  r.peer = static_cast<int32_t>(s.api_name(call.domain, exit.cbid != 0 ? exit.cbid : call.cbid, exit.function));
  r.redop = static_cast<int16_t>(call.domain);
  append_complete(s.writer, r, exit.result, exit.time_ns);
  if (exit.result != 0) return;
  if (call.klass == CallClass::kStreamSync) {
    s.mark_completed(s.find_stream(call.stream, call.context), t.stream_sync_launched, exit.time_ns, exit.time_ns);
  } else if (call.klass == CallClass::kContextSync) {
    for (const auto& [slot, launched] : t.context_sync_launched)
      s.mark_completed(slot, launched, exit.time_ns, exit.time_ns);
  }
}

void LaunchCollector::State::report_error(const ApiCall& exit) {
  State& s = *this;
  ThreadCalls& t = t_calls;
  if (!s.writer->count_cuda_error()) return;  // not the first: counted only
  const ApiCall& call = t.outer;
  Record r = cuda_record(Op::kCudaError, t, call.stream);
  if (r.start_ns == 0) r.start_ns = exit.time_ns;  // an untimed call (no launch or sync): its failing exit was timed
  r.count = exit.cbid != 0 ? exit.cbid : call.cbid;
  r.peer = static_cast<int32_t>(s.api_name(call.domain, static_cast<uint32_t>(r.count), exit.function));
  r.redop = static_cast<int16_t>(call.domain);
  const uint64_t index = append_complete(s.writer, r, exit.result, exit.time_ns);
  if (index == UINT64_MAX) return;
  s.writer->set_first_error(index + 1);  // the header holds ring index + 1 (0: none)
  std::function<void(uint64_t)> handler;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    handler = s.first_error_handler;
  }
  if (handler) {
    const OwnCudaCalls own;
    handler(index);
  }
}

void LaunchCollector::on_kernel_completed(uint32_t correlation, uint64_t end_ns) {
  State& s = *state_;
  uint64_t seq = 0;
  StreamSlot* slot = nullptr;
  if (!s.find_correlation(correlation, &seq, &slot) || slot == nullptr) return;
  s.mark_completed(slot, seq, end_ns, end_ns);
}

void LaunchCollector::on_completions_checked(uint64_t ns) {
  State& s = *state_;
  const uint32_t used = s.streams_used.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < used; ++i) {
    StreamSlot& slot = s.streams[i];
    if (slot.entry == nullptr) continue;
    recorder::Writer::set_stream_completed(slot.entry, slot.completed_seq.load(std::memory_order_relaxed),
                                           slot.completed_ns.load(std::memory_order_relaxed), ns);
  }
  s.writer->set_completions_checked(ns);
}

void LaunchCollector::set_first_error_handler(std::function<void(uint64_t record_index)> handler) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->first_error_handler = std::move(handler);
}

void LaunchCollector::set_launch_handler(void (*handler)(uint64_t function_handle)) {
  state_->launch_handler.store(handler, std::memory_order_release);
}

bool LaunchCollector::is_optimizer_kernel(uint64_t function_handle) const {
  const KernelInfo* info = state_->find_kernel(function_handle);
  return info != nullptr && info->optimizer;
}

}  // namespace trainscope::launches
