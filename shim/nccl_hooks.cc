// The interposed NCCL entry points: each records one fixed-size record, calls the real function, returns its
// result unchanged (ncclCommGetAsyncError, at the end, records nothing: it confirms non-blocking calls' watches).
//
// Every hook has the same shape (see the recipe in nccl_functions.h):
//   TS_HOOK_ENTER(fn, op, (args))   -- pass through when disabled or nested; ncclInvalidUsage if NCCL lacks fn
//   fill hook.record()              -- plain stores, plus a lock-free table lookup for the communicator
//   return hook.call(real, args...) -- commit the record, call REAL, store the result, return it
// Nothing on this path allocates, locks, or logs. What the engine adds to it runs in shim/engine/job_thread/: a watched
// call's watch_begin / watch_end (lock-free and, once the watch board is warm, allocation-free, but a host buffer's
// statistics are taken there, on this thread), a parked call of a non-blocking communicator (a lock of its own), and
// TRAINSCOPE_ABORT_AFTER_BATCH's batch gate.
//
// Each body is a template over the NCCL library L it calls (interception.h): L = 0 is the exported hook, the one the
// process-wide look-up finds; L >= 1 are the hooks handed out by look-ups on a library handle (nccl_libraries.h).
// Bodies are always inlined into their entry points, so __builtin_return_address(0) is the job's call site.
#include <string.h>

#include "collectors/frames/buffer_layout.h"
#include "shim/call_site_capture.h"
#include "shim/comm_registry.h"
#include "shim/interception.h"
#include "shim/job_key.h"
#include "shim/nccl_libraries.h"
#include "shim/nccl_presence.h"
#include "shim/runtime.h"

#define TS_EXPORT extern "C" __attribute__((visibility("default")))

namespace trainscope::shim {
namespace {

using recorder::CommEntry;
using recorder::CommState;
using recorder::Op;
using recorder::Record;

// A communicator's rank and size, asked of its NCCL itself (left unchanged where it cannot say).
template <int L>
void query_rank_and_size(ncclComm_t comm, int* rank, int* nranks) {
  if (auto user_rank = REAL_HELPER_IN(L, ncclCommUserRank)) user_rank(comm, rank);
  if (auto count = REAL_HELPER_IN(L, ncclCommCount)) count(comm, nranks);
}

// Logs, once per function, that the loaded NCCL lacks a function we interpose.
std::atomic<bool> g_missing_logged[static_cast<int>(Op::kCount)];

template <int L>
class Hook {
 public:
  Hook(Op op, void* caller) {
    if (!g_runtime.enabled || t_thread.depth > 0) return;
    ensure_started(L);
    ++t_thread.depth;
    t_thread.library = L;
    recording_ = true;
    memset(&record_, 0, sizeof(record_));
    record_.start_ns = now_ns();
    record_.tid = current_tid();
    record_.op = static_cast<uint16_t>(op);
    record_.caller = reinterpret_cast<uint64_t>(caller);
    record_.site = call_site_of(record_.caller);
    record_.rank = record_.nranks = record_.peer = record_.redop = recorder::kUnknown;
    record_.dtype = recorder::kUnknown;
    mark_group();
  }
  ~Hook() {
    if (recording_) --t_thread.depth;
  }
  Hook(const Hook&) = delete;
  Hook& operator=(const Hook&) = delete;

  bool recording() const { return recording_; }
  Record& record() { return record_; }

  // Re-reads the thread's group state (after ncclGroupStart opened one).
  void mark_group() {
    if (t_thread.group_depth > 0) {
      record_.group = t_thread.group;
      record_.flags |= recorder::kFlagInGroup;
    }
  }

  // Fills the communicator fields; a communicator we did not see created is adopted on first sight.
  CommInfo* set_comm(ncclComm_t comm) {
    CommInfo* info = find_comm(comm);
    if (__builtin_expect(info == nullptr, 0) && comm != nullptr) info = adopt(comm);
    if (info != nullptr) {
      record_.comm_id = info->id;
      record_.rank = info->rank;
      record_.nranks = info->nranks;
      if (info->nonblocking) record_.flags |= recorder::kFlagNonBlocking;
      note_comm_use(info->id);
    }
    return info;
  }

  // A call on a communicator whose non-blocking calls still wait for ncclCommGetAsyncError's ncclSuccess: the job
  // broke NCCL's rule, so their outputs are skipped rather than guessed. One relaxed load when nothing is parked.
  void note_comm_use(uint64_t comm_id) {
    const std::atomic<uint32_t>* parked = g_runtime.engine_parked_calls;
    if (parked != nullptr && __builtin_expect(parked->load(std::memory_order_relaxed) != 0, 0))
      g_runtime.engine.comm_next_call(comm_id, record_.op);
  }

  void set_buffers(const void* send, void* recv, size_t count, ncclDataType_t type, cudaStream_t stream) {
    record_.sendbuff = reinterpret_cast<uint64_t>(send);
    record_.recvbuff = reinterpret_cast<uint64_t>(recv);
    record_.count = count;
    record_.dtype = static_cast<int8_t>(type);
    record_.stream = reinterpret_cast<uint64_t>(stream);
  }

  // For collectives: buffers, sequence number, and the in-place flag by the op's own layout (for all-gather and
  // gather this rank's part of recvbuff is the send buffer; for reduce-scatter and scatter the reverse).
  void collective(ncclComm_t comm, const void* send, void* recv, size_t count, ncclDataType_t type,
                  cudaStream_t stream) {
    set_buffers(send, recv, count, type, stream);
    if (CommInfo* info = set_comm(comm)) record_.seq = next_collective_seq(info);
    const auto s = reinterpret_cast<uintptr_t>(send);
    const auto r = reinterpret_cast<uintptr_t>(recv);
    const uintptr_t part = static_cast<uintptr_t>(count) * recorder::nccl_dtype_bytes(type) *
                           static_cast<uintptr_t>(record_.rank > 0 ? record_.rank : 0);
    bool in_place = s == r;
    switch (static_cast<Op>(record_.op)) {
      case Op::kAllGather:
      case Op::kGather:
        in_place = s == r + part;
        break;
      case Op::kReduceScatter:
      case Op::kScatter:
        in_place = s + part == r;
        break;
      default:
        break;
    }
    if (in_place) record_.flags |= recorder::kFlagInPlace;
    decide_watch();
  }

  // TRAINSCOPE_WATCH: every K-th call of the communicator (or of the peer and direction, for send/recv) moving at
  // least TRAINSCOPE_WATCH_MIN_BYTES. Needs the communicator fields and the sequence number already set.
  void decide_watch() {
    const Config& config = g_runtime.config;
    if (g_runtime.engine.watch_begin == nullptr || record_.seq == 0) return;
    if (config.watch_every > 1 && (record_.seq - 1) % config.watch_every != 0) return;
    const frames::BufferLayout layout =
        frames::buffer_layout(static_cast<Op>(record_.op), record_.count, record_.nranks, record_.rank, record_.peer);
    if (frames::watched_bytes(layout, record_.dtype) < config.watch_min_bytes) return;
    record_.flags |= recorder::kFlagWatched;
  }

  void begin() { pending_ = g_runtime.writer.append(record_); }
  // TRAINSCOPE_ABORT_AFTER_BATCH: the engine counts batches here, on the job's thread, and stops the rank at the
  // first call after the last batch, before the real call (the call stays in the recorder, never returned). Without
  // the variable the pointer is null: one load.
  void check_batch() {
    if (auto gate = g_runtime.engine.batch_call; __builtin_expect(gate != nullptr, 0)) gate(&record_);
  }
  ncclResult_t finish(ncclResult_t result) {
    recorder::Writer::complete(pending_, static_cast<int32_t>(result), now_ns());
    return result;
  }
  // A watched call's statistics are taken around the real call: the send buffer before, the receive buffer after.
  template <typename Fn, typename... Args>
  ncclResult_t call(Fn fn, Args... args) {
    begin();
    check_batch();
    if (!(record_.flags & recorder::kFlagWatched) || pending_.slot == nullptr) return finish(fn(args...));
    void* const token = g_runtime.engine.watch_begin(&record_, pending_.commit - 1);
    const ncclResult_t result = fn(args...);
    g_runtime.engine.watch_end(token, static_cast<int32_t>(result));
    return finish(result);
  }

  // The loaded NCCL lacks this function: record the call, say so once, and refuse it as NCCL would refuse an
  // unsupported use.
  ncclResult_t unavailable(const char* name) {
    record_.flags |= recorder::kFlagUnavailable;
    begin();
    const Op op = static_cast<Op>(record_.op);
    if (!g_missing_logged[static_cast<int>(op)].exchange(true)) {
      const int v = g_runtime.nccl_version;
      char nccl[512];
      if (!find_loaded_nccl(nccl, sizeof(nccl))) {
        log_message(LogLevel::kError,
                    "%s was called but no NCCL is loaded in this process: the call returns ncclInvalidUsage", name);
      } else {
        log_message(LogLevel::kError,
                    "%s is not in the loaded NCCL %s (version %d.%d.%d, code %d): the call returns ncclInvalidUsage; "
                    "it needs NCCL 2.28 or newer",
                    name, nccl, v >= 10000 ? v / 10000 : v / 1000, v >= 10000 ? (v / 100) % 100 : (v / 100) % 10,
                    v % 100, v);
      }
    }
    return finish(ncclInvalidUsage);
  }

 private:
  static CommInfo* adopt(ncclComm_t comm) {
    int rank = recorder::kUnknown;
    int nranks = recorder::kUnknown;
    query_rank_and_size<L>(comm, &rank, &nranks);
    const uint64_t key[2] = {reinterpret_cast<uint64_t>(comm), static_cast<uint64_t>(g_runtime.owner_pid)};
    CommInfo* info = register_comm(comm, comm_id_from_unique_ids(key, sizeof(key)), 0, rank, nranks, false);
    if (info != nullptr) info->adopted = true;
    return info;
  }

  bool recording_ = false;
  Record record_;
  recorder::Pending pending_{nullptr, 0};
};

// Registers a communicator that a call created and writes its row in the recorder's communicator table.
void created(ncclComm_t comm, uint64_t id, uint64_t parent_id, int32_t rank, int32_t nranks, int32_t color, Op origin,
             bool nonblocking) {
  if (comm == nullptr) return;
  CommInfo* info = register_comm(comm, id, parent_id, rank, nranks, nonblocking);
  CommEntry entry{};
  entry.id = id;
  entry.parent_id = parent_id;
  entry.handle = reinterpret_cast<uint64_t>(comm);
  entry.created_ns = now_ns();
  entry.rank = rank;
  entry.nranks = nranks;
  entry.color = color;
  entry.state = static_cast<uint16_t>(CommState::kLive);
  entry.origin = static_cast<uint16_t>(origin);
  CommEntry* row = g_runtime.writer.add_comm(entry);
  if (info != nullptr) info->entry = row;
  if (parent_id == 0) learn_global_rank(rank);
}

bool created_ok(ncclResult_t result) { return result == ncclSuccess || result == ncclInProgress; }
bool is_nonblocking(const ncclConfig_t* config) { return config != nullptr && config->blocking == 0; }

// After a split or shrink: the child's rank and size come from NCCL itself.
template <int L>
void created_child(ncclComm_t child, uint64_t child_id, uint64_t parent_id, int32_t color, Op origin,
                   bool nonblocking) {
  if (child == nullptr) return;
  int rank = recorder::kUnknown;
  int nranks = recorder::kUnknown;
  query_rank_and_size<L>(child, &rank, &nranks);
  created(child, child_id, parent_id, rank, nranks, color, origin, nonblocking);
}

void ended(CommInfo* info, ncclComm_t comm, ncclResult_t result, CommState state) {
  if (result != ncclSuccess && result != ncclInProgress) return;
  if (info != nullptr && info->entry != nullptr) recorder::Writer::set_comm_state(info->entry, state, now_ns());
  if (state == CommState::kDestroyed || state == CommState::kAborted) unregister_comm(comm);
}

}  // namespace
}  // namespace trainscope::shim

using trainscope::recorder::Op;
using trainscope::shim::CommInfo;

namespace {

#define TS_HOOK_BODY(fn) \
  template <int L>       \
  inline __attribute__((always_inline)) ncclResult_t body_##fn

#define TS_HOOK_ENTER(fn, op, args)                                             \
  auto* const real = REAL_IN(L, fn);                                            \
  trainscope::shim::Hook<L> hook(Op::op, __builtin_return_address(0));          \
  if (!hook.recording()) return real != nullptr ? real args : ncclInvalidUsage; \
  if (real == nullptr) return hook.unavailable(#fn)

// ---- communicator creation ----

TS_HOOK_BODY(ncclGetUniqueId)(ncclUniqueId* uniqueId) {
  TS_HOOK_ENTER(ncclGetUniqueId, kGetUniqueId, (uniqueId));
  const ncclResult_t result = hook.call(real, uniqueId);
  if (result == ncclSuccess && uniqueId != nullptr) trainscope::shim::note_unique_id_made(uniqueId, sizeof(*uniqueId));
  return result;
}

TS_HOOK_BODY(ncclCommInitRank)(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  TS_HOOK_ENTER(ncclCommInitRank, kCommInitRank, (comm, nranks, commId, rank));
  trainscope::shim::note_job_key(&commId, sizeof(commId), nranks);
  auto& r = hook.record();
  r.comm_id = trainscope::shim::comm_id_from_unique_ids(&commId, sizeof(commId));
  r.rank = rank;
  r.nranks = nranks;
  hook.begin();
  const ncclResult_t result = real(comm, nranks, commId, rank);
  if (trainscope::shim::created_ok(result) && comm != nullptr)
    trainscope::shim::created(*comm, r.comm_id, 0, rank, nranks, -1, Op::kCommInitRank, false);
  return hook.finish(result);
}

TS_HOOK_BODY(ncclCommInitRankConfig)
(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config) {
  TS_HOOK_ENTER(ncclCommInitRankConfig, kCommInitRankConfig, (comm, nranks, commId, rank, config));
  trainscope::shim::note_job_key(&commId, sizeof(commId), nranks);
  auto& r = hook.record();
  r.comm_id = trainscope::shim::comm_id_from_unique_ids(&commId, sizeof(commId));
  r.rank = rank;
  r.nranks = nranks;
  const bool nonblocking = trainscope::shim::is_nonblocking(config);
  if (nonblocking) r.flags |= trainscope::recorder::kFlagNonBlocking;
  hook.begin();
  const ncclResult_t result = real(comm, nranks, commId, rank, config);
  if (trainscope::shim::created_ok(result) && comm != nullptr)
    trainscope::shim::created(*comm, r.comm_id, 0, rank, nranks, -1, Op::kCommInitRankConfig, nonblocking);
  return hook.finish(result);
}

TS_HOOK_BODY(ncclCommInitRankScalable)
(ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds, ncclConfig_t* config) {
  TS_HOOK_ENTER(ncclCommInitRankScalable, kCommInitRankScalable, (newcomm, nranks, myrank, nId, commIds, config));
  if (commIds != nullptr && nId > 0) trainscope::shim::note_job_key(commIds, sizeof(ncclUniqueId), nranks);
  auto& r = hook.record();
  if (commIds != nullptr && nId > 0)
    r.comm_id = trainscope::shim::comm_id_from_unique_ids(commIds, sizeof(ncclUniqueId) * static_cast<size_t>(nId));
  r.rank = myrank;
  r.nranks = nranks;
  r.count = static_cast<uint64_t>(nId > 0 ? nId : 0);
  const bool nonblocking = trainscope::shim::is_nonblocking(config);
  if (nonblocking) r.flags |= trainscope::recorder::kFlagNonBlocking;
  hook.begin();
  const ncclResult_t result = real(newcomm, nranks, myrank, nId, commIds, config);
  if (trainscope::shim::created_ok(result) && newcomm != nullptr && r.comm_id != 0)
    trainscope::shim::created(*newcomm, r.comm_id, 0, myrank, nranks, -1, Op::kCommInitRankScalable, nonblocking);
  return hook.finish(result);
}

TS_HOOK_BODY(ncclCommInitAll)(ncclComm_t* comm, int ndev, const int* devlist) {
  TS_HOOK_ENTER(ncclCommInitAll, kCommInitAll, (comm, ndev, devlist));
  auto& r = hook.record();
  using trainscope::shim::g_runtime;
  // All members live in this process, so any id unique to this call will do.
  const uint64_t key[3] = {static_cast<uint64_t>(g_runtime.owner_pid),
                           g_runtime.initall_counter.fetch_add(1, std::memory_order_relaxed), r.start_ns};
  r.comm_id = trainscope::shim::comm_id_from_unique_ids(key, sizeof(key));
  r.nranks = ndev;
  r.count = static_cast<uint64_t>(ndev > 0 ? ndev : 0);
  hook.begin();
  const ncclResult_t result = real(comm, ndev, devlist);
  if (result == ncclSuccess && comm != nullptr) {
    for (int i = 0; i < ndev; ++i)
      trainscope::shim::created(comm[i], r.comm_id, 0, i, ndev, -1, Op::kCommInitAll, false);
  }
  return hook.finish(result);
}

TS_HOOK_BODY(ncclCommSplit)(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  TS_HOOK_ENTER(ncclCommSplit, kCommSplit, (comm, color, key, newcomm, config));
  auto& r = hook.record();
  CommInfo* parent = hook.set_comm(comm);
  uint64_t split_number = 0;
  if (parent != nullptr) {
    split_number = parent->split_count.fetch_add(1, std::memory_order_relaxed) + 1;
    r.aux = color == NCCL_SPLIT_NOCOLOR ? 0 : trainscope::shim::comm_id_for_child(parent->id, split_number, color);
  }
  r.seq = split_number;
  r.peer = color;
  r.count = static_cast<uint64_t>(static_cast<int64_t>(key));
  const bool nonblocking = trainscope::shim::is_nonblocking(config);
  hook.begin();
  const ncclResult_t result = real(comm, color, key, newcomm, config);
  if (trainscope::shim::created_ok(result) && newcomm != nullptr && r.aux != 0)
    trainscope::shim::created_child<L>(*newcomm, r.aux, r.comm_id, color, Op::kCommSplit, nonblocking);
  return hook.finish(result);
}

TS_HOOK_BODY(ncclCommShrink)
(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm, ncclConfig_t* config,
 int shrinkFlags) {
  TS_HOOK_ENTER(ncclCommShrink, kCommShrink, (comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags));
  auto& r = hook.record();
  CommInfo* parent = hook.set_comm(comm);
  uint64_t split_number = 0;
  if (parent != nullptr) {
    split_number = parent->split_count.fetch_add(1, std::memory_order_relaxed) + 1;
    r.aux = trainscope::shim::comm_id_for_child(parent->id, split_number, trainscope::shim::kShrinkColor);
  }
  r.seq = split_number;
  r.count = static_cast<uint64_t>(excludeRanksCount > 0 ? excludeRanksCount : 0);
  r.peer = shrinkFlags;
  const bool nonblocking = trainscope::shim::is_nonblocking(config);
  hook.begin();
  const ncclResult_t result = real(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags);
  if (trainscope::shim::created_ok(result) && newcomm != nullptr && r.aux != 0)
    trainscope::shim::created_child<L>(*newcomm, r.aux, r.comm_id, -1, Op::kCommShrink, nonblocking);
  return hook.finish(result);
}

// ---- communicator end ----

#define TS_COMM_END_HOOK(fn, op, state)                                                  \
  TS_HOOK_BODY(fn)(ncclComm_t comm) {                                                    \
    TS_HOOK_ENTER(fn, op, (comm));                                                       \
    CommInfo* info = hook.set_comm(comm);                                                \
    hook.begin();                                                                        \
    const ncclResult_t result = real(comm);                                              \
    trainscope::shim::ended(info, comm, result, trainscope::recorder::CommState::state); \
    return hook.finish(result);                                                          \
  }
TS_COMM_END_HOOK(ncclCommFinalize, kCommFinalize, kFinalized)
TS_COMM_END_HOOK(ncclCommDestroy, kCommDestroy, kDestroyed)
TS_COMM_END_HOOK(ncclCommAbort, kCommAbort, kAborted)

TS_HOOK_BODY(ncclCommRevoke)(ncclComm_t comm, int revokeFlags) {
  TS_HOOK_ENTER(ncclCommRevoke, kCommRevoke, (comm, revokeFlags));
  CommInfo* info = hook.set_comm(comm);
  hook.record().aux = static_cast<uint64_t>(static_cast<uint32_t>(revokeFlags));
  hook.begin();
  const ncclResult_t result = real(comm, revokeFlags);
  trainscope::shim::ended(info, comm, result, trainscope::recorder::CommState::kRevoked);
  return hook.finish(result);
}

// ---- collectives ----

TS_HOOK_BODY(ncclAllReduce)
(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
 cudaStream_t stream) {
  TS_HOOK_ENTER(ncclAllReduce, kAllReduce, (sendbuff, recvbuff, count, datatype, op, comm, stream));
  hook.record().redop = op;
  hook.collective(comm, sendbuff, recvbuff, count, datatype, stream);
  return hook.call(real, sendbuff, recvbuff, count, datatype, op, comm, stream);
}

TS_HOOK_BODY(ncclReduce)
(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
 cudaStream_t stream) {
  TS_HOOK_ENTER(ncclReduce, kReduce, (sendbuff, recvbuff, count, datatype, op, root, comm, stream));
  hook.record().redop = op;
  hook.record().peer = root;
  hook.collective(comm, sendbuff, recvbuff, count, datatype, stream);
  return hook.call(real, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}

TS_HOOK_BODY(ncclBroadcast)
(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
 cudaStream_t stream) {
  TS_HOOK_ENTER(ncclBroadcast, kBroadcast, (sendbuff, recvbuff, count, datatype, root, comm, stream));
  hook.record().peer = root;
  hook.collective(comm, sendbuff, recvbuff, count, datatype, stream);
  return hook.call(real, sendbuff, recvbuff, count, datatype, root, comm, stream);
}

TS_HOOK_BODY(ncclBcast)
(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  TS_HOOK_ENTER(ncclBcast, kBcast, (buff, count, datatype, root, comm, stream));
  hook.record().peer = root;
  hook.collective(comm, buff, buff, count, datatype, stream);
  return hook.call(real, buff, count, datatype, root, comm, stream);
}

TS_HOOK_BODY(ncclReduceScatter)
(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
 cudaStream_t stream) {
  TS_HOOK_ENTER(ncclReduceScatter, kReduceScatter, (sendbuff, recvbuff, recvcount, datatype, op, comm, stream));
  hook.record().redop = op;
  hook.collective(comm, sendbuff, recvbuff, recvcount, datatype, stream);
  return hook.call(real, sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
}

TS_HOOK_BODY(ncclAllGather)
(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
 cudaStream_t stream) {
  TS_HOOK_ENTER(ncclAllGather, kAllGather, (sendbuff, recvbuff, sendcount, datatype, comm, stream));
  hook.collective(comm, sendbuff, recvbuff, sendcount, datatype, stream);
  return hook.call(real, sendbuff, recvbuff, sendcount, datatype, comm, stream);
}

TS_HOOK_BODY(ncclAlltoAll)
(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  TS_HOOK_ENTER(ncclAlltoAll, kAlltoAll, (sendbuff, recvbuff, count, datatype, comm, stream));
  hook.collective(comm, sendbuff, recvbuff, count, datatype, stream);
  return hook.call(real, sendbuff, recvbuff, count, datatype, comm, stream);
}

TS_HOOK_BODY(ncclGather)
(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
 cudaStream_t stream) {
  TS_HOOK_ENTER(ncclGather, kGather, (sendbuff, recvbuff, count, datatype, root, comm, stream));
  hook.record().peer = root;
  hook.collective(comm, sendbuff, recvbuff, count, datatype, stream);
  return hook.call(real, sendbuff, recvbuff, count, datatype, root, comm, stream);
}

TS_HOOK_BODY(ncclScatter)
(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
 cudaStream_t stream) {
  TS_HOOK_ENTER(ncclScatter, kScatter, (sendbuff, recvbuff, count, datatype, root, comm, stream));
  hook.record().peer = root;
  hook.collective(comm, sendbuff, recvbuff, count, datatype, stream);
  return hook.call(real, sendbuff, recvbuff, count, datatype, root, comm, stream);
}

// ---- point to point ----

TS_HOOK_BODY(ncclSend)
(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream) {
  TS_HOOK_ENTER(ncclSend, kSend, (sendbuff, count, datatype, peer, comm, stream));
  hook.set_buffers(sendbuff, nullptr, count, datatype, stream);
  hook.record().peer = peer;
  if (CommInfo* info = hook.set_comm(comm)) hook.record().seq = trainscope::shim::next_peer_seq(info, peer, false);
  hook.decide_watch();
  return hook.call(real, sendbuff, count, datatype, peer, comm, stream);
}

TS_HOOK_BODY(ncclRecv)
(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream) {
  TS_HOOK_ENTER(ncclRecv, kRecv, (recvbuff, count, datatype, peer, comm, stream));
  hook.set_buffers(nullptr, recvbuff, count, datatype, stream);
  hook.record().peer = peer;
  if (CommInfo* info = hook.set_comm(comm)) hook.record().seq = trainscope::shim::next_peer_seq(info, peer, true);
  hook.decide_watch();
  return hook.call(real, recvbuff, count, datatype, peer, comm, stream);
}

// ---- groups ----
// Groups are per thread in NCCL; so is our depth. Calls inside carry the number of the outermost group.

TS_HOOK_BODY(ncclGroupStart)() {
  TS_HOOK_ENTER(ncclGroupStart, kGroupStart, ());
  using trainscope::shim::t_thread;
  if (t_thread.group_depth++ == 0)
    t_thread.group = trainscope::shim::g_runtime.group_counter.fetch_add(1, std::memory_order_relaxed) + 1;
  hook.mark_group();
  return hook.call(real);
}

// Returns true when this closed the outermost group.
bool close_group_level() {
  using trainscope::shim::t_thread;
  if (t_thread.group_depth > 0 && --t_thread.group_depth == 0) {
    t_thread.group = 0;
    return true;
  }
  return false;
}

// The grouped calls ran (or, simulated, never will; or, ncclInProgress, will once the job's ncclCommGetAsyncError
// says so): their receive buffers can be watched now (or then).
void group_ended(bool outermost, bool executed, ncclResult_t result) {
  auto group_end = trainscope::shim::g_runtime.engine.group_end;
  if (outermost && group_end != nullptr) group_end(executed ? 1 : 0, static_cast<int32_t>(result));
}

TS_HOOK_BODY(ncclGroupEnd)() {
  TS_HOOK_ENTER(ncclGroupEnd, kGroupEnd, ());
  hook.begin();
  // Before the call: NCCL has left the group even when ncclGroupEnd reports an error.
  const bool outermost = close_group_level();
  const ncclResult_t result = real();
  group_ended(outermost, true, result);
  return hook.finish(result);
}

TS_HOOK_BODY(ncclGroupSimulateEnd)(ncclSimInfo_t* simInfo) {
  TS_HOOK_ENTER(ncclGroupSimulateEnd, kGroupSimulateEnd, (simInfo));
  hook.begin();
  const bool outermost = close_group_level();
  const ncclResult_t result = real(simInfo);
  group_ended(outermost, false, result);
  return hook.finish(result);
}

// ---- non-blocking communicators ----
// Not recorded (jobs poll it in tight loops): forwarded, and when it reads ncclSuccess (or an error) for a
// communicator whose watched calls returned ncclInProgress, their receive buffers are taken now (NCCL's work is on
// the stream) or skipped. While nothing is parked this costs one acquire and one relaxed load.

TS_HOOK_BODY(ncclCommGetAsyncError)(ncclComm_t comm, ncclResult_t* asyncError) {
  auto* const real = REAL_IN(L, ncclCommGetAsyncError);
  if (real == nullptr) return ncclInvalidUsage;
  const ncclResult_t result = real(comm, asyncError);
  using trainscope::shim::g_runtime;
  using trainscope::shim::t_thread;
  if (!g_runtime.enabled || t_thread.depth > 0 ||
      g_runtime.start_state.load(std::memory_order_acquire) != static_cast<int>(trainscope::shim::StartState::kReady))
    return result;
  const std::atomic<uint32_t>* parked = g_runtime.engine_parked_calls;
  if (parked == nullptr || __builtin_expect(parked->load(std::memory_order_relaxed) == 0, 1)) return result;
  if (result != ncclSuccess || asyncError == nullptr || *asyncError == ncclInProgress) return result;
  if (const CommInfo* info = trainscope::shim::find_comm(comm)) {
    ++t_thread.depth;  // a kernel enqueued for the statistics is ours, not the job's
    g_runtime.engine.comm_async_state(info->id, static_cast<int32_t>(*asyncError));
    --t_thread.depth;
  }
  return result;
}

}  // namespace

// ---- entry points ----
// The exported hooks (library 0), and one instance of every body per NCCL library looked up on a handle.

#define TS_ENTRY_POINTS(fn, op, params, args)                    \
  TS_EXPORT ncclResult_t fn params { return body_##fn<0> args; } \
  namespace {                                                    \
  template <int L>                                               \
  ncclResult_t library_##fn params {                             \
    return body_##fn<L> args;                                    \
  }                                                              \
  }
TRAINSCOPE_NCCL_FUNCTIONS(TS_ENTRY_POINTS)
TS_ENTRY_POINTS(ncclCommGetAsyncError, kNone, (ncclComm_t comm, ncclResult_t* asyncError), (comm, asyncError))
#undef TS_ENTRY_POINTS

namespace {

template <int L>
void* hooks_of(trainscope::shim::RealId id) {
  using trainscope::shim::RealId;
  switch (id) {
#define TS_HOOK_CASE(fn, op, params, args) \
  case RealId::fn:                         \
    return reinterpret_cast<void*>(&library_##fn<L>);
    TRAINSCOPE_NCCL_FUNCTIONS(TS_HOOK_CASE)
#undef TS_HOOK_CASE
    case RealId::ncclCommGetAsyncError:
      return reinterpret_cast<void*>(&library_ncclCommGetAsyncError<L>);
    default:
      return nullptr;  // a helper we call but do not interpose
  }
}

}  // namespace

namespace trainscope::shim {

void* exported_hook(RealId id) {
  switch (id) {
#define TS_HOOK_CASE(fn, op, params, args) \
  case RealId::fn:                         \
    return reinterpret_cast<void*>(&::fn);
    TRAINSCOPE_NCCL_FUNCTIONS(TS_HOOK_CASE)
#undef TS_HOOK_CASE
    case RealId::ncclCommGetAsyncError:
      return reinterpret_cast<void*>(&::ncclCommGetAsyncError);
    default:
      return nullptr;
  }
}

void* library_hook(int library, RealId id) {
  static_assert(kMaxLibraries == 8, "one case per library slot");
  switch (library) {
    case 1:
      return hooks_of<1>(id);
    case 2:
      return hooks_of<2>(id);
    case 3:
      return hooks_of<3>(id);
    case 4:
      return hooks_of<4>(id);
    case 5:
      return hooks_of<5>(id);
    case 6:
      return hooks_of<6>(id);
    case 7:
      return hooks_of<7>(id);
    default:
      return nullptr;
  }
}

}  // namespace trainscope::shim
