// The NCCL entry points the shim interposes, as one X-macro list: name, Op, parameters, argument names.
//
// Adding a hook for an NCCL function ncclFoo (the recipe, as in compiler-rt's interception.h):
//   1. Add X(ncclFoo, kFoo, (parameter list), (argument names)) here and kFoo to recorder::Op
//      (flight_record_format.h).
//   2. Define its body in nccl_hooks.cc: TS_HOOK_BODY(ncclFoo)(parameters) { TS_HOOK_ENTER(ncclFoo, kFoo, (argument
//      names)); fill the record; `return hook.call(real, args...)` } (or begin()/finish() around `real` when the
//      result must be inspected). The exported hook and one hook per NCCL library looked up on a handle are made
//      from the body by the list.
//   3. Export it in libtrainscope.map.
// A function interposed without a record of its own (ncclCommGetAsyncError, which jobs poll in tight loops) is not
// listed here: it gets a RealId in interception.h, a hook at the end of nccl_hooks.cc and its line in the map.
#pragma once

#include <nccl.h>

#define TRAINSCOPE_NCCL_FUNCTIONS(X)                                                                                   \
  X(ncclGetUniqueId, kGetUniqueId, (ncclUniqueId * uniqueId), (uniqueId))                                              \
  X(ncclCommInitRank, kCommInitRank, (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank),                   \
    (comm, nranks, commId, rank))                                                                                      \
  X(ncclCommInitRankConfig, kCommInitRankConfig,                                                                       \
    (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config),                              \
    (comm, nranks, commId, rank, config))                                                                              \
  X(ncclCommInitAll, kCommInitAll, (ncclComm_t * comm, int ndev, const int* devlist), (comm, ndev, devlist))           \
  X(ncclCommInitRankScalable, kCommInitRankScalable,                                                                   \
    (ncclComm_t * newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds, ncclConfig_t* config),              \
    (newcomm, nranks, myrank, nId, commIds, config))                                                                   \
  X(ncclCommSplit, kCommSplit, (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config),       \
    (comm, color, key, newcomm, config))                                                                               \
  X(ncclCommShrink, kCommShrink,                                                                                       \
    (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm, ncclConfig_t* config,         \
     int shrinkFlags),                                                                                                 \
    (comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags))                                         \
  X(ncclCommFinalize, kCommFinalize, (ncclComm_t comm), (comm))                                                        \
  X(ncclCommDestroy, kCommDestroy, (ncclComm_t comm), (comm))                                                          \
  X(ncclCommAbort, kCommAbort, (ncclComm_t comm), (comm))                                                              \
  X(ncclCommRevoke, kCommRevoke, (ncclComm_t comm, int revokeFlags), (comm, revokeFlags))                              \
  X(ncclAllReduce, kAllReduce,                                                                                         \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,     \
     cudaStream_t stream),                                                                                             \
    (sendbuff, recvbuff, count, datatype, op, comm, stream))                                                           \
  X(ncclReduce, kReduce,                                                                                               \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root,            \
     ncclComm_t comm, cudaStream_t stream),                                                                            \
    (sendbuff, recvbuff, count, datatype, op, root, comm, stream))                                                     \
  X(ncclBroadcast, kBroadcast,                                                                                         \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,           \
     cudaStream_t stream),                                                                                             \
    (sendbuff, recvbuff, count, datatype, root, comm, stream))                                                         \
  X(ncclBcast, kBcast,                                                                                                 \
    (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream),               \
    (buff, count, datatype, root, comm, stream))                                                                       \
  X(ncclReduceScatter, kReduceScatter,                                                                                 \
    (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, \
     cudaStream_t stream),                                                                                             \
    (sendbuff, recvbuff, recvcount, datatype, op, comm, stream))                                                       \
  X(ncclAllGather, kAllGather,                                                                                         \
    (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,                 \
     cudaStream_t stream),                                                                                             \
    (sendbuff, recvbuff, sendcount, datatype, comm, stream))                                                           \
  X(ncclAlltoAll, kAlltoAll,                                                                                           \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,                     \
     cudaStream_t stream),                                                                                             \
    (sendbuff, recvbuff, count, datatype, comm, stream))                                                               \
  X(ncclGather, kGather,                                                                                               \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,           \
     cudaStream_t stream),                                                                                             \
    (sendbuff, recvbuff, count, datatype, root, comm, stream))                                                         \
  X(ncclScatter, kScatter,                                                                                             \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,           \
     cudaStream_t stream),                                                                                             \
    (sendbuff, recvbuff, count, datatype, root, comm, stream))                                                         \
  X(ncclSend, kSend,                                                                                                   \
    (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream),     \
    (sendbuff, count, datatype, peer, comm, stream))                                                                   \
  X(ncclRecv, kRecv,                                                                                                   \
    (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream),           \
    (recvbuff, count, datatype, peer, comm, stream))                                                                   \
  X(ncclGroupStart, kGroupStart, (), ())                                                                               \
  X(ncclGroupEnd, kGroupEnd, (), ())                                                                                   \
  X(ncclGroupSimulateEnd, kGroupSimulateEnd, (ncclSimInfo_t * simInfo), (simInfo))

// Functions the shim calls but does not interpose.
#define TRAINSCOPE_NCCL_HELPER_FUNCTIONS(X)               \
  X(ncclGetVersion, (int* version))                       \
  X(ncclCommUserRank, (const ncclComm_t comm, int* rank)) \
  X(ncclCommCount, (const ncclComm_t comm, int* count))
