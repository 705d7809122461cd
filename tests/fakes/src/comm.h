// The process-local side of a communicator: its rank, its mapping of the shared segment and its progress counters.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nccl.h>

#include "element_math.h"
#include "shared_segment.h"

namespace tsfake {

struct DeferredWork;  // operations.h

struct PreMulSumOp {
  bool live = false;
  ncclDataType_t datatype = ncclFloat32;
  unsigned char scalar[8] = {};
  const void* device_scalar = nullptr;  // ncclScalarDevice: read each time a collective runs
};

}  // namespace tsfake

// The opaque type nccl.h hands out; only one thread at a time drives a communicator, except abort/revoke.
struct ncclComm {
  tsfake::SharedSegment* segment = nullptr;
  int rank = 0;
  int nranks = 0;
  int cuda_device = 0;

  // Collectives are numbered when called and run strictly in that order, as NCCL requires of every member.
  std::uint64_t collectives_called = 0;
  std::uint64_t collectives_completed = 0;
  std::uint64_t staging_tickets_used = 0;

  // Per peer: messages numbered when called; the channel itself orders their streaming.
  std::vector<std::uint64_t> sends_called;
  std::vector<std::uint64_t> sends_streamed;
  std::vector<std::uint64_t> recvs_called;

  std::vector<tsfake::PreMulSumOp> premulsum_ops;
  std::uint64_t splits_called = 0;
  std::uint64_t shrinks_called = 0;

  // ncclCommSuspend(NCCL_SUSPEND_MEM) until ncclCommResume: no collective or send/recv may run in between.
  bool suspended = false;

  std::atomic<bool> aborted{false};
  std::atomic<bool> revoked{false};
  std::atomic<int> calls_in_progress{0};
  std::atomic<int> async_error{ncclSuccess};

  // Non-blocking mode (config.blocking = 0): collectives, send/recv and groups of them return ncclInProgress and
  // leave their work here, oldest first; the next ncclCommGetAsyncError performs it (operations.h).
  bool nonblocking = false;
  std::vector<std::shared_ptr<tsfake::DeferredWork>> deferred;
};

namespace tsfake {

// Joins the segment named `name` as `rank` and marks this rank arrived; waiting for the others is a separate step.
ncclResult_t attach_comm(const std::string& name, int nranks, int rank, ncclComm** out, std::string* error);
void release_comm(ncclComm* comm);

}  // namespace tsfake
