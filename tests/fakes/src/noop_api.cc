// The no-op NCCL: every entry point succeeds at once, filling outputs just enough, to measure the shim's own cost.
#include <cstdlib>
#include <cstring>

#include <nccl.h>

#include "api_export.h"
#include "nccl_2_29.h"

// Just enough state for the queries a caller makes after creating a communicator.
struct ncclComm {
  int nranks;
  int rank;
};

namespace {
ncclComm* new_comm(int nranks, int rank) { return new ncclComm{nranks > 0 ? nranks : 1, rank >= 0 ? rank : 0}; }
}  // namespace

TSFAKE_API(ncclResult_t, ncclGetVersion, int* version) {
  if (version != nullptr) *version = TSFAKE_VERSION_CODE;
  return ncclSuccess;
}
TSFAKE_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId* uniqueId) {
  if (uniqueId != nullptr) std::memset(uniqueId, 0, sizeof(*uniqueId));
  return ncclSuccess;
}
TSFAKE_API(ncclResult_t, ncclCommInitRank, ncclComm_t* comm, int nranks, ncclUniqueId, int rank) {
  if (comm != nullptr) *comm = new_comm(nranks, rank);
  return ncclSuccess;
}
TSFAKE_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t* comm, int nranks, ncclUniqueId, int rank, ncclConfig_t*) {
  if (comm != nullptr) *comm = new_comm(nranks, rank);
  return ncclSuccess;
}
#ifndef TSFAKE_PRETEND_NCCL_2_18
TSFAKE_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t* comm, int nranks, int rank, int, ncclUniqueId*,
           ncclConfig_t*) {
  if (comm != nullptr) *comm = new_comm(nranks, rank);
  return ncclSuccess;
}
#endif
TSFAKE_API(ncclResult_t, ncclCommInitAll, ncclComm_t* comms, int ndev, const int*) {
  for (int i = 0; comms != nullptr && i < ndev; ++i) comms[i] = new_comm(ndev, i);
  return ncclSuccess;
}
TSFAKE_API(ncclResult_t, ncclCommFinalize, ncclComm_t) { return ncclSuccess; }
TSFAKE_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}
TSFAKE_API(ncclResult_t, ncclCommAbort, ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}
#ifndef TSFAKE_PRETEND_NCCL_2_18
TSFAKE_API(ncclResult_t, ncclCommRevoke, ncclComm_t, int) { return ncclSuccess; }
#endif
TSFAKE_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int, ncclComm_t* newcomm, ncclConfig_t*) {
  if (newcomm != nullptr) {
    *newcomm = color == NCCL_SPLIT_NOCOLOR || comm == nullptr ? nullptr : new_comm(comm->nranks, comm->rank);
  }
  return ncclSuccess;
}
#ifndef TSFAKE_PRETEND_NCCL_2_18
TSFAKE_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int*, int excludeRanksCount, ncclComm_t* newcomm,
           ncclConfig_t*, int) {
  if (newcomm != nullptr && comm != nullptr) *newcomm = new_comm(comm->nranks - excludeRanksCount, 0);
  return ncclSuccess;
}
#endif
TSFAKE_API(const char*, ncclGetErrorString, ncclResult_t) { return "no error"; }
TSFAKE_API(const char*, ncclGetLastError, ncclComm_t) { return ""; }
TSFAKE_API(void, ncclResetDebugInit) {}
TSFAKE_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t, ncclResult_t* asyncError) {
  if (asyncError != nullptr) *asyncError = ncclSuccess;
  return ncclSuccess;
}
TSFAKE_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int* count) {
  if (count != nullptr) *count = comm != nullptr ? comm->nranks : 1;
  return ncclSuccess;
}
TSFAKE_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t, int* device) {
  if (device != nullptr) *device = 0;
  return ncclSuccess;
}
TSFAKE_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int* rank) {
  if (rank != nullptr) *rank = comm != nullptr ? comm->rank : 0;
  return ncclSuccess;
}
// Callers write into what they allocate, so this one really allocates.
TSFAKE_API(ncclResult_t, ncclMemAlloc, void** ptr, size_t size) {
  if (ptr != nullptr) *ptr = size == 0 ? nullptr : std::malloc(size);
  return ncclSuccess;
}
TSFAKE_API(ncclResult_t, ncclMemFree, void* ptr) {
  std::free(ptr);
  return ncclSuccess;
}
TSFAKE_API(ncclResult_t, ncclCommRegister, const ncclComm_t, void* buff, size_t, void** handle) {
  if (handle != nullptr) *handle = buff;
  return ncclSuccess;
}
TSFAKE_API(ncclResult_t, ncclCommDeregister, const ncclComm_t, void*) { return ncclSuccess; }
#ifndef TSFAKE_PRETEND_NCCL_2_18
TSFAKE_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t, void* buff, size_t, ncclWindow_t* win, int) {
  if (win != nullptr) *win = reinterpret_cast<ncclWindow_t>(buff);
  return ncclSuccess;
}
TSFAKE_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t, ncclWindow_t) { return ncclSuccess; }
#endif
TSFAKE_API(ncclResult_t, ncclCommSuspend, ncclComm_t, int) { return ncclSuccess; }
TSFAKE_API(ncclResult_t, ncclCommResume, ncclComm_t) { return ncclSuccess; }
TSFAKE_API(ncclResult_t, ncclCommMemStats, ncclComm_t, ncclCommMemStat_t, uint64_t* value) {
  if (value != nullptr) *value = 0;
  return ncclSuccess;
}
TSFAKE_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t* op, void*, ncclDataType_t, ncclScalarResidence_t,
           ncclComm_t) {
  if (op != nullptr) *op = ncclNumOps;
  return ncclSuccess;
}
TSFAKE_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t, ncclComm_t) { return ncclSuccess; }
TSFAKE_API(ncclResult_t, ncclReduce, const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
           cudaStream_t) {
  return ncclSuccess;
}
TSFAKE_API(ncclResult_t, ncclBcast, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) {
  return ncclSuccess;
}
TSFAKE_API(ncclResult_t, ncclBroadcast, const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) {
  return ncclSuccess;
}
TSFAKE_API(ncclResult_t, ncclAllReduce, const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
           cudaStream_t) {
  return ncclSuccess;
}
TSFAKE_API(ncclResult_t, ncclReduceScatter, const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
           cudaStream_t) {
  return ncclSuccess;
}
TSFAKE_API(ncclResult_t, ncclAllGather, const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) {
  return ncclSuccess;
}
TSFAKE_API(ncclResult_t, ncclAlltoAll, const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) {
  return ncclSuccess;
}
TSFAKE_API(ncclResult_t, ncclGather, const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) {
  return ncclSuccess;
}
TSFAKE_API(ncclResult_t, ncclScatter, const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) {
  return ncclSuccess;
}
TSFAKE_API(ncclResult_t, ncclSend, const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) {
  return ncclSuccess;
}
TSFAKE_API(ncclResult_t, ncclRecv, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return ncclSuccess; }
TSFAKE_API(ncclResult_t, ncclGroupStart) { return ncclSuccess; }
TSFAKE_API(ncclResult_t, ncclGroupEnd) { return ncclSuccess; }
#ifndef TSFAKE_PRETEND_NCCL_2_18
TSFAKE_API(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t* simInfo) {
  if (simInfo != nullptr) simInfo->estimatedTime = 1e-6f;
  return ncclSuccess;
}
#endif
