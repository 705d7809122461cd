// The nccl.h entry points of the CPU stand-in: argument checks like NCCL's, then hand-off to the operation engine.
#include <sys/random.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <nccl.h>

#include "api_export.h"
#include "comm.h"
#include "element_math.h"
#include "nccl_2_29.h"
#include "operations.h"
#include "shared_segment.h"

namespace tsfake {
namespace {

constexpr unsigned int kConfigMagic = 0xcafebeef;
#ifndef TSFAKE_PRETEND_NCCL_2_18
constexpr unsigned int kSimInfoMagic = 0x74685283;
#endif

char* last_error_text() {
  thread_local char text[512] = {};
  return text;
}

__attribute__((format(printf, 2, 3))) ncclResult_t report(ncclResult_t result, const char* format, ...) {
  va_list args;
  va_start(args, format);
  std::vsnprintf(last_error_text(), 512, format, args);
  va_end(args);
  return result;
}

std::string name_in(const ncclUniqueId& id) {
  return std::string(id.internal + kUniqueIdNameOffset,
                     strnlen(id.internal + kUniqueIdNameOffset, NCCL_UNIQUE_ID_BYTES - kUniqueIdNameOffset));
}

bool is_our_id(const ncclUniqueId& id) {
  std::uint64_t magic = 0;
  std::memcpy(&magic, id.internal, sizeof(magic));
  return magic == kUniqueIdMagic && id.internal[kUniqueIdNameOffset] == '/';
}

ncclResult_t check_config(const ncclConfig_t* config) {
  if (config != nullptr && config->magic != kConfigMagic) {
    return report(ncclInvalidArgument, "config was not initialised with NCCL_CONFIG_INITIALIZER");
  }
  return ncclSuccess;
}

ncclResult_t check_comm(const ncclComm* comm, const char* call) {
  if (comm == nullptr) return report(ncclInvalidArgument, "%s: comm is NULL", call);
  if (comm->revoked.load(std::memory_order_acquire)) {
    return report(ncclInvalidUsage, "%s: communicator was revoked", call);
  }
  return ncclSuccess;
}

// For the calls that move data: a suspended communicator has let its memory go until ncclCommResume.
ncclResult_t check_not_suspended(const ncclComm* comm, const char* call) {
  if (comm->suspended) {
    return report(ncclInvalidUsage, "%s: communicator is suspended (ncclCommSuspend); call ncclCommResume first", call);
  }
  return ncclSuccess;
}

ncclResult_t check_datatype(ncclDataType_t datatype, const char* call) {
  if (!is_valid_datatype(datatype)) return report(ncclInvalidArgument, "%s: invalid datatype %d", call, datatype);
  return ncclSuccess;
}

ncclResult_t check_rank(const ncclComm* comm, int rank, const char* what, const char* call) {
  if (rank < 0 || rank >= comm->nranks) {
    return report(ncclInvalidArgument, "%s: %s %d out of range for %d ranks", call, what, rank, comm->nranks);
  }
  return ncclSuccess;
}

ncclResult_t check_buffer(const void* buffer, std::size_t count, const char* what, const char* call) {
  if (buffer == nullptr && count > 0) return report(ncclInvalidArgument, "%s: %s is NULL", call, what);
  return ncclSuccess;
}

// Resolves the op into what travels between ranks; PreMulSum ops carry this rank's scalar along.
ncclResult_t resolve_op(ncclComm* comm, ncclRedOp_t op, ncclDataType_t datatype, CollectiveArgs* args,
                        const char* call) {
  if (op >= ncclSum && op < ncclNumOps) {
    args->op = static_cast<OpKind>(op);
    return ncclSuccess;
  }
  const auto index = static_cast<std::size_t>(op) - ncclNumOps;
  if (op < ncclNumOps || index >= comm->premulsum_ops.size() || !comm->premulsum_ops[index].live) {
    return report(ncclInvalidArgument, "%s: invalid reduction op %d", call, op);
  }
  const PreMulSumOp& premul = comm->premulsum_ops[index];
  if (premul.datatype != datatype) {
    return report(ncclInvalidArgument, "%s: op %d was created for another datatype", call, op);
  }
  args->op = OpKind::kPreMulSum;
  const void* scalar = premul.device_scalar != nullptr ? premul.device_scalar : premul.scalar;
  std::memcpy(args->premul_scalar, scalar, datatype_size(datatype));
  return ncclSuccess;
}

// Collectives and send/recv: deferred on a non-blocking communicator (ncclInProgress), run now otherwise.
ncclResult_t submit_deferrable(std::unique_ptr<Operation> operation) {
  operation->set_deferrable();
  return submit(std::move(operation));
}

ncclResult_t run_collective(ncclComm* comm, CollectiveArgs args, const char* call) {
  if (ncclResult_t r = check_comm(comm, call); r != ncclSuccess) return r;
  if (ncclResult_t r = check_not_suspended(comm, call); r != ncclSuccess) return r;
  if (ncclResult_t r = check_datatype(args.datatype, call); r != ncclSuccess) return r;
  if (args.root != -1) {
    if (ncclResult_t r = check_rank(comm, args.root, "root", call); r != ncclSuccess) return r;
  }
  const std::size_t count = args.count;
  const bool root = comm->rank == args.root;
  const char* send_name = "sendbuff";
  const char* recv_name = "recvbuff";
  switch (args.kind) {
    case CollectiveKind::kReduce:
      if (ncclResult_t r = check_buffer(args.sendbuff, count, send_name, call); r != ncclSuccess) return r;
      if (root) {
        if (ncclResult_t r = check_buffer(args.recvbuff, count, recv_name, call); r != ncclSuccess) return r;
      }
      break;
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kScatter:
      if (root) {
        if (ncclResult_t r = check_buffer(args.sendbuff, count, send_name, call); r != ncclSuccess) return r;
      }
      if (ncclResult_t r = check_buffer(args.recvbuff, count, recv_name, call); r != ncclSuccess) return r;
      break;
    case CollectiveKind::kGather:
      if (ncclResult_t r = check_buffer(args.sendbuff, count, send_name, call); r != ncclSuccess) return r;
      if (root) {
        if (ncclResult_t r = check_buffer(args.recvbuff, count, recv_name, call); r != ncclSuccess) return r;
      }
      break;
    default:
      if (ncclResult_t r = check_buffer(args.sendbuff, count, send_name, call); r != ncclSuccess) return r;
      if (ncclResult_t r = check_buffer(args.recvbuff, count, recv_name, call); r != ncclSuccess) return r;
      break;
  }
  return submit_deferrable(make_collective(comm, args));
}

ncclResult_t run_reducing(ncclComm* comm, CollectiveArgs args, ncclRedOp_t op, const char* call) {
  if (ncclResult_t r = check_comm(comm, call); r != ncclSuccess) return r;
  if (ncclResult_t r = check_datatype(args.datatype, call); r != ncclSuccess) return r;
  if (ncclResult_t r = resolve_op(comm, op, args.datatype, &args, call); r != ncclSuccess) return r;
  return run_collective(comm, args, call);
}

CollectiveArgs collective(CollectiveKind kind, const void* sendbuff, void* recvbuff, std::size_t count,
                          ncclDataType_t datatype, int root) {
  CollectiveArgs args{};
  args.kind = kind;
  args.sendbuff = sendbuff;
  args.recvbuff = recvbuff;
  args.count = count;
  args.datatype = datatype;
  args.op = OpKind::kNone;
  args.root = root;
  return args;
}

ncclResult_t init_rank(ncclComm_t* newcomm, int nranks, const ncclUniqueId& id, int rank, ncclConfig_t* config,
                       const char* call) {
  if (newcomm == nullptr) return report(ncclInvalidArgument, "%s: newcomm is NULL", call);
  *newcomm = nullptr;
  if (ncclResult_t r = check_config(config); r != ncclSuccess) return r;
  if (nranks < 1 || nranks > kMaxRanks) {
    return report(ncclInvalidArgument, "%s: nranks %d outside 1..%d", call, nranks, kMaxRanks);
  }
  if (rank < 0 || rank >= nranks)
    return report(ncclInvalidArgument, "%s: rank %d outside 0..%d", call, rank, nranks - 1);
  if (!is_our_id(id)) return report(ncclInvalidArgument, "%s: unique id did not come from ncclGetUniqueId", call);
  std::string error;
  ncclComm* comm = nullptr;
  if (ncclResult_t r = attach_comm(name_in(id), nranks, rank, &comm, &error); r != ncclSuccess) {
    return report(r, "%s: %s", call, error.c_str());
  }
  *newcomm = comm;
  // Non-blocking mode covers the calls that move data; creation itself still completes before returning.
  comm->nonblocking = config != nullptr && config->blocking == 0;
  const ncclResult_t r = submit(make_wait_for_members(comm, call));
  if (r != ncclSuccess && !in_group()) {
    release_comm(comm);
    *newcomm = nullptr;
  }
  return r;
}

}  // namespace
}  // namespace tsfake

using namespace tsfake;

TSFAKE_API(ncclResult_t, ncclGetVersion, int* version) {
  if (version == nullptr) return report(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = TSFAKE_VERSION_CODE;
  return ncclSuccess;
}

namespace tsfake {
namespace {
// Internal callers use this rather than ncclGetUniqueId so that a preloaded shim does not see a call the user never
// made.
ncclResult_t make_unique_id(ncclUniqueId* uniqueId) {
  std::memset(uniqueId, 0, sizeof(*uniqueId));
  std::uint64_t random_bits[2] = {0, 0};
  if (getrandom(random_bits, sizeof(random_bits), 0) != static_cast<ssize_t>(sizeof(random_bits))) {
    return report(ncclSystemError, "ncclGetUniqueId: getrandom failed");
  }
  std::memcpy(uniqueId->internal, &kUniqueIdMagic, sizeof(kUniqueIdMagic));
  std::snprintf(uniqueId->internal + kUniqueIdNameOffset, NCCL_UNIQUE_ID_BYTES - kUniqueIdNameOffset,
                "/tsfake-%d-%016llx%016llx", static_cast<int>(getpid()),
                static_cast<unsigned long long>(random_bits[0]), static_cast<unsigned long long>(random_bits[1]));
  return ncclSuccess;
}
}  // namespace
}  // namespace tsfake

TSFAKE_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId* uniqueId) {
  if (uniqueId == nullptr) return report(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  return make_unique_id(uniqueId);
}

TSFAKE_API(ncclResult_t, ncclCommInitRank, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return init_rank(comm, nranks, commId, rank, nullptr, "ncclCommInitRank");
}

TSFAKE_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
           ncclConfig_t* config) {
  return init_rank(comm, nranks, commId, rank, config, "ncclCommInitRankConfig");
}

#ifndef TSFAKE_PRETEND_NCCL_2_18
TSFAKE_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t* newcomm, int nranks, int myrank, int nId,
           ncclUniqueId* commIds, ncclConfig_t* config) {
  if (nId < 1 || commIds == nullptr) {
    return report(ncclInvalidArgument, "ncclCommInitRankScalable: needs at least one unique id");
  }
  return init_rank(newcomm, nranks, commIds[0], myrank, config, "ncclCommInitRankScalable");
}
#endif

TSFAKE_API(ncclResult_t, ncclCommInitAll, ncclComm_t* comms, int ndev, const int* devlist) {
  if (comms == nullptr) return report(ncclInvalidArgument, "ncclCommInitAll: comms is NULL");
  if (ndev < 1 || ndev > kMaxRanks) return report(ncclInvalidArgument, "ncclCommInitAll: ndev %d", ndev);
  ncclUniqueId id;
  if (ncclResult_t r = make_unique_id(&id); r != ncclSuccess) return r;
  std::vector<std::unique_ptr<Operation>> waits;
  for (int i = 0; i < ndev; ++i) {
    std::string error;
    ncclResult_t r = attach_comm(name_in(id), ndev, i, &comms[i], &error);
    if (r != ncclSuccess) {
      for (int j = 0; j < i; ++j) release_comm(comms[j]);
      for (int j = 0; j < ndev; ++j) comms[j] = nullptr;
      return report(r, "ncclCommInitAll: %s", error.c_str());
    }
    if (devlist != nullptr) comms[i]->cuda_device = devlist[i];
    waits.push_back(make_wait_for_members(comms[i], "ncclCommInitAll"));
  }
  return run_to_completion(waits);
}

TSFAKE_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm) {
  if (comm == nullptr) return report(ncclInvalidArgument, "ncclCommFinalize: comm is NULL");
  return ncclSuccess;
}

TSFAKE_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  abandon_deferred(comm);
  release_comm(comm);
  return ncclSuccess;
}

TSFAKE_API(ncclResult_t, ncclCommAbort, ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  comm->aborted.store(true, std::memory_order_release);
  comm->segment->ring_doorbell();
  // A call blocked in another thread notices within one doorbell timeout and leaves before we free its state.
  for (int busy = comm->calls_in_progress.load(std::memory_order_acquire); busy != 0;
       busy = comm->calls_in_progress.load(std::memory_order_acquire)) {
    comm->calls_in_progress.wait(busy, std::memory_order_acquire);
  }
  abandon_deferred(comm);
  release_comm(comm);
  return ncclSuccess;
}

#ifndef TSFAKE_PRETEND_NCCL_2_18
TSFAKE_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags) {
  if (comm == nullptr) return report(ncclInvalidArgument, "ncclCommRevoke: comm is NULL");
  if (revokeFlags != NCCL_REVOKE_DEFAULT) return report(ncclInvalidArgument, "ncclCommRevoke: flags must be 0");
  comm->revoked.store(true, std::memory_order_release);
  comm->segment->ring_doorbell();
  return ncclSuccess;
}
#endif

TSFAKE_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
           ncclConfig_t* config) {
  if (ncclResult_t r = check_comm(comm, "ncclCommSplit"); r != ncclSuccess) return r;
  if (newcomm == nullptr) return report(ncclInvalidArgument, "ncclCommSplit: newcomm is NULL");
  if (ncclResult_t r = check_config(config); r != ncclSuccess) return r;
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR) return report(ncclInvalidArgument, "ncclCommSplit: color %d", color);
  const ncclResult_t r = submit(make_split(comm, color, key, newcomm));
  // The child is non-blocking by its own config, or like its parent without one.
  if (r == ncclSuccess && *newcomm != nullptr)
    (*newcomm)->nonblocking = config != nullptr ? config->blocking == 0 : comm->nonblocking;
  return r;
}

#ifndef TSFAKE_PRETEND_NCCL_2_18
TSFAKE_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
           ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  if (ncclResult_t r = check_comm(comm, "ncclCommShrink"); r != ncclSuccess) return r;
  if (newcomm == nullptr) return report(ncclInvalidArgument, "ncclCommShrink: newcomm is NULL");
  if (ncclResult_t r = check_config(config); r != ncclSuccess) return r;
  if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT) {
    return report(ncclInvalidArgument, "ncclCommShrink: unknown flags %d", shrinkFlags);
  }
  if (excludeRanksCount < 0 || (excludeRanksCount > 0 && excludeRanksList == nullptr)) {
    return report(ncclInvalidArgument, "ncclCommShrink: bad exclude list");
  }
  std::vector<int> excluded(excludeRanksList, excludeRanksList + excludeRanksCount);
  for (int r : excluded) {
    if (ncclResult_t bad = check_rank(comm, r, "excluded rank", "ncclCommShrink"); bad != ncclSuccess) return bad;
    if (r == comm->rank) return report(ncclInvalidArgument, "ncclCommShrink: caller excludes itself");
  }
  return submit(make_shrink(comm, std::move(excluded), newcomm));
}
#endif

TSFAKE_API(const char*, ncclGetErrorString, ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

TSFAKE_API(const char*, ncclGetLastError, ncclComm_t comm) {
  (void)comm;  // like NCCL, the last error is per thread, not per communicator
  return last_error_text();
}

TSFAKE_API(void, ncclResetDebugInit) {}

TSFAKE_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t* asyncError) {
  if (comm == nullptr || asyncError == nullptr) return report(ncclInvalidArgument, "ncclCommGetAsyncError: NULL");
  // Non-blocking mode: this is where the work the calls left is performed (as NCCL's background thread would).
  if (comm->nonblocking) complete_deferred(comm);
  *asyncError = static_cast<ncclResult_t>(comm->async_error.load(std::memory_order_acquire));
  return ncclSuccess;
}

TSFAKE_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int* count) {
  if (comm == nullptr || count == nullptr) return report(ncclInvalidArgument, "ncclCommCount: NULL");
  *count = comm->nranks;
  return ncclSuccess;
}

TSFAKE_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int* device) {
  if (comm == nullptr || device == nullptr) return report(ncclInvalidArgument, "ncclCommCuDevice: NULL");
  *device = comm->cuda_device;
  return ncclSuccess;
}

TSFAKE_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int* rank) {
  if (comm == nullptr || rank == nullptr) return report(ncclInvalidArgument, "ncclCommUserRank: NULL");
  *rank = comm->rank;
  return ncclSuccess;
}

TSFAKE_API(ncclResult_t, ncclMemAlloc, void** ptr, size_t size) {
  if (ptr == nullptr) return report(ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
  *ptr = nullptr;
  if (size == 0) return ncclSuccess;
  constexpr std::size_t kGranularity = 4096;  // matches NCCL_WIN_REQUIRED_ALIGNMENT so windows can use it
  *ptr = std::aligned_alloc(kGranularity, (size + kGranularity - 1) / kGranularity * kGranularity);
  return *ptr != nullptr ? ncclSuccess : report(ncclSystemError, "ncclMemAlloc: out of memory");
}

TSFAKE_API(ncclResult_t, ncclMemFree, void* ptr) {
  std::free(ptr);
  return ncclSuccess;
}

TSFAKE_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void* buff, size_t size, void** handle) {
  if (comm == nullptr || handle == nullptr) return report(ncclInvalidArgument, "ncclCommRegister: NULL");
  (void)size;
  *handle = buff;
  return ncclSuccess;
}

TSFAKE_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void* handle) {
  (void)handle;
  if (comm == nullptr) return report(ncclInvalidArgument, "ncclCommDeregister: comm is NULL");
  return ncclSuccess;
}

#ifndef TSFAKE_PRETEND_NCCL_2_18
TSFAKE_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
           int winFlags) {
  (void)size;
  (void)winFlags;
  if (comm == nullptr || win == nullptr) return report(ncclInvalidArgument, "ncclCommWindowRegister: NULL");
  *win = reinterpret_cast<ncclWindow_t>(buff);
  return ncclSuccess;
}

TSFAKE_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win) {
  (void)win;
  if (comm == nullptr) return report(ncclInvalidArgument, "ncclCommWindowDeregister: comm is NULL");
  return ncclSuccess;
}
#endif

// NCCL 2.29.7 (nccl_2_29.h). Real NCCL's suspend and resume are collective (a barrier on every member); here each
// rank's communicator keeps its own state, which is all a host-memory stand-in has to release.
#ifndef TSFAKE_PRETEND_NCCL_2_18
TSFAKE_API(ncclResult_t, ncclCommSuspend, ncclComm_t comm, int flags) {
  if (ncclResult_t r = check_comm(comm, "ncclCommSuspend"); r != ncclSuccess) return r;
  if ((flags & ~NCCL_SUSPEND_MEM) != 0) {
    return report(ncclInvalidArgument, "ncclCommSuspend: flags 0x%x: only NCCL_SUSPEND_MEM (0x%x) is known", flags,
                  NCCL_SUSPEND_MEM);
  }
  if ((flags & NCCL_SUSPEND_MEM) == 0) return ncclSuccess;  // nothing asked to be released
  if (comm->suspended) return report(ncclInvalidUsage, "ncclCommSuspend: communicator is already suspended");
  comm->suspended = true;
  return ncclSuccess;
}

TSFAKE_API(ncclResult_t, ncclCommResume, ncclComm_t comm) {
  if (ncclResult_t r = check_comm(comm, "ncclCommResume"); r != ncclSuccess) return r;
  if (!comm->suspended) return report(ncclInvalidUsage, "ncclCommResume: communicator is not suspended");
  comm->suspended = false;
  return ncclSuccess;
}

// The stand-in's buffers are the caller's host memory: it holds no device memory of its own to count.
TSFAKE_API(ncclResult_t, ncclCommMemStats, ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value) {
  if (ncclResult_t r = check_comm(comm, "ncclCommMemStats"); r != ncclSuccess) return r;
  if (value == nullptr) return report(ncclInvalidArgument, "ncclCommMemStats: value is NULL");
  switch (stat) {
    case ncclStatGpuMemSuspended:
      *value = comm->suspended ? 1 : 0;
      return ncclSuccess;
    case ncclStatGpuMemSuspend:
    case ncclStatGpuMemPersist:
    case ncclStatGpuMemTotal:
      *value = 0;
      return ncclSuccess;
  }
  return report(ncclInvalidArgument, "ncclCommMemStats: stat %d is not an ncclCommMemStat_t (0..3)", stat);
}
#endif

TSFAKE_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
           ncclScalarResidence_t residence, ncclComm_t comm) {
  if (ncclResult_t r = check_comm(comm, "ncclRedOpCreatePreMulSum"); r != ncclSuccess) return r;
  if (ncclResult_t r = check_datatype(datatype, "ncclRedOpCreatePreMulSum"); r != ncclSuccess) return r;
  if (op == nullptr || scalar == nullptr) return report(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: NULL");
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate) {
    return report(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: residence %d", residence);
  }
  PreMulSumOp premul;
  premul.live = true;
  premul.datatype = datatype;
  // "Device" scalars are host memory here; like NCCL they are read when the collective runs, not now.
  if (residence == ncclScalarDevice)
    premul.device_scalar = scalar;
  else
    std::memcpy(premul.scalar, scalar, datatype_size(datatype));
  std::size_t slot = 0;
  while (slot < comm->premulsum_ops.size() && comm->premulsum_ops[slot].live) ++slot;
  if (slot == comm->premulsum_ops.size())
    comm->premulsum_ops.push_back(premul);
  else
    comm->premulsum_ops[slot] = premul;
  *op = static_cast<ncclRedOp_t>(static_cast<int>(ncclNumOps) + static_cast<int>(slot));
  return ncclSuccess;
}

TSFAKE_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm) {
  if (comm == nullptr) return report(ncclInvalidArgument, "ncclRedOpDestroy: comm is NULL");
  const auto index = static_cast<std::size_t>(op) - ncclNumOps;
  if (op < ncclNumOps || index >= comm->premulsum_ops.size() || !comm->premulsum_ops[index].live) {
    return report(ncclInvalidArgument, "ncclRedOpDestroy: op %d was not created by ncclRedOpCreate*", op);
  }
  comm->premulsum_ops[index].live = false;
  return ncclSuccess;
}

TSFAKE_API(ncclResult_t, ncclReduce, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
           ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  (void)stream;
  return run_reducing(comm, collective(CollectiveKind::kReduce, sendbuff, recvbuff, count, datatype, root), op,
                      "ncclReduce");
}

TSFAKE_API(ncclResult_t, ncclBcast, void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
           cudaStream_t stream) {
  (void)stream;
  return run_collective(comm, collective(CollectiveKind::kBroadcast, buff, buff, count, datatype, root), "ncclBcast");
}

TSFAKE_API(ncclResult_t, ncclBroadcast, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
           int root, ncclComm_t comm, cudaStream_t stream) {
  (void)stream;
  return run_collective(comm, collective(CollectiveKind::kBroadcast, sendbuff, recvbuff, count, datatype, root),
                        "ncclBroadcast");
}

TSFAKE_API(ncclResult_t, ncclAllReduce, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  (void)stream;
  return run_reducing(comm, collective(CollectiveKind::kAllReduce, sendbuff, recvbuff, count, datatype, -1), op,
                      "ncclAllReduce");
}

TSFAKE_API(ncclResult_t, ncclReduceScatter, const void* sendbuff, void* recvbuff, size_t recvcount,
           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  (void)stream;
  return run_reducing(comm, collective(CollectiveKind::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, -1), op,
                      "ncclReduceScatter");
}

TSFAKE_API(ncclResult_t, ncclAllGather, const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
           ncclComm_t comm, cudaStream_t stream) {
  (void)stream;
  return run_collective(comm, collective(CollectiveKind::kAllGather, sendbuff, recvbuff, sendcount, datatype, -1),
                        "ncclAllGather");
}

TSFAKE_API(ncclResult_t, ncclAlltoAll, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
           ncclComm_t comm, cudaStream_t stream) {
  (void)stream;
  return run_collective(comm, collective(CollectiveKind::kAlltoAll, sendbuff, recvbuff, count, datatype, -1),
                        "ncclAlltoAll");
}

TSFAKE_API(ncclResult_t, ncclGather, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
           int root, ncclComm_t comm, cudaStream_t stream) {
  (void)stream;
  return run_collective(comm, collective(CollectiveKind::kGather, sendbuff, recvbuff, count, datatype, root),
                        "ncclGather");
}

TSFAKE_API(ncclResult_t, ncclScatter, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
           int root, ncclComm_t comm, cudaStream_t stream) {
  (void)stream;
  return run_collective(comm, collective(CollectiveKind::kScatter, sendbuff, recvbuff, count, datatype, root),
                        "ncclScatter");
}

TSFAKE_API(ncclResult_t, ncclSend, const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
           ncclComm_t comm, cudaStream_t stream) {
  (void)stream;
  if (ncclResult_t r = check_comm(comm, "ncclSend"); r != ncclSuccess) return r;
  if (ncclResult_t r = check_not_suspended(comm, "ncclSend"); r != ncclSuccess) return r;
  if (ncclResult_t r = check_datatype(datatype, "ncclSend"); r != ncclSuccess) return r;
  if (ncclResult_t r = check_rank(comm, peer, "peer", "ncclSend"); r != ncclSuccess) return r;
  if (ncclResult_t r = check_buffer(sendbuff, count, "sendbuff", "ncclSend"); r != ncclSuccess) return r;
  return submit_deferrable(make_send(comm, sendbuff, count, datatype, peer));
}

TSFAKE_API(ncclResult_t, ncclRecv, void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
           cudaStream_t stream) {
  (void)stream;
  if (ncclResult_t r = check_comm(comm, "ncclRecv"); r != ncclSuccess) return r;
  if (ncclResult_t r = check_not_suspended(comm, "ncclRecv"); r != ncclSuccess) return r;
  if (ncclResult_t r = check_datatype(datatype, "ncclRecv"); r != ncclSuccess) return r;
  if (ncclResult_t r = check_rank(comm, peer, "peer", "ncclRecv"); r != ncclSuccess) return r;
  if (ncclResult_t r = check_buffer(recvbuff, count, "recvbuff", "ncclRecv"); r != ncclSuccess) return r;
  return submit_deferrable(make_recv(comm, recvbuff, count, datatype, peer));
}

TSFAKE_API(ncclResult_t, ncclGroupStart) { return group_start(); }

TSFAKE_API(ncclResult_t, ncclGroupEnd) { return group_end(); }

#ifndef TSFAKE_PRETEND_NCCL_2_18
TSFAKE_API(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t* simInfo) {
  if (simInfo == nullptr || simInfo->magic != kSimInfoMagic) {
    return report(ncclInvalidArgument, "ncclGroupSimulateEnd: simInfo not initialised with NCCL_SIM_INFO_INITIALIZER");
  }
  return group_simulate_end(&simInfo->estimatedTime);
}
#endif
