// Deferred, non-blocking operations: every NCCL call becomes one, and groups progress many of them together.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nccl.h>

#include "comm.h"
#include "element_math.h"

namespace tsfake {

enum class StepResult { kDone, kProgressed, kWaiting, kFailed };

class Operation {
 public:
  explicit Operation(ncclComm* comm) : comm_(comm) {}
  virtual ~Operation() = default;
  Operation(const Operation&) = delete;
  Operation& operator=(const Operation&) = delete;

  // Advances as far as possible without sleeping.
  virtual StepResult step() = 0;
  // Why the last step() returned kWaiting, in words a test or a human can match on.
  virtual std::string waiting_reason() const = 0;
  ncclComm* comm() const { return comm_; }
  ncclResult_t failure() const { return failure_; }
  // A collective or send/recv: on a non-blocking communicator it is deferred rather than run by the call.
  bool deferrable() const { return deferrable_; }
  void set_deferrable() { deferrable_ = true; }

 protected:
  StepResult fail(ncclResult_t result) {
    failure_ = result;
    return StepResult::kFailed;
  }
  ncclComm* comm_;
  ncclResult_t failure_ = ncclSuccess;
  bool deferrable_ = false;
};

// The work of one non-blocking call (or of one group of them), as NCCL's background thread would enqueue it.
// Shared by every communicator it involves; whichever of them is polled first performs it.
struct DeferredWork {
  std::vector<std::unique_ptr<Operation>> operations;
  bool ran = false;
  ncclResult_t result = ncclSuccess;
};

enum class CollectiveKind : std::uint32_t {
  kAllReduce,
  kReduce,
  kBroadcast,
  kReduceScatter,
  kAllGather,
  kAlltoAll,
  kGather,
  kScatter,
  kCommSplit,  // the color/key exchange behind ncclCommSplit, an all-gather of two int32 per rank
};
const char* collective_name(CollectiveKind kind);

struct CollectiveArgs {
  CollectiveKind kind;
  const void* sendbuff;
  void* recvbuff;
  std::size_t count;  // per-rank count in the sense of each call's own count argument
  ncclDataType_t datatype;
  OpKind op = OpKind::kNone;
  int root = -1;
  unsigned char premul_scalar[8] = {};
};

std::unique_ptr<Operation> make_collective(ncclComm* comm, const CollectiveArgs& args);
std::unique_ptr<Operation> make_send(ncclComm* comm, const void* buff, std::size_t count, ncclDataType_t datatype,
                                     int peer);
std::unique_ptr<Operation> make_recv(ncclComm* comm, void* buff, std::size_t count, ncclDataType_t datatype, int peer);
// Waits until every rank of the communicator has attached to its segment.
std::unique_ptr<Operation> make_wait_for_members(ncclComm* comm, const char* call_name);
std::unique_ptr<Operation> make_split(ncclComm* comm, int color, int key, ncclComm** newcomm);
std::unique_ptr<Operation> make_shrink(ncclComm* comm, std::vector<int> excluded, ncclComm** newcomm);

// Runs the operations to completion together, sleeping on the segment doorbell when none can move.
// Returns the first failure, or ncclSystemError when a communicator involved is aborted or revoked meanwhile.
ncclResult_t run_to_completion(std::vector<std::unique_ptr<Operation>>& operations);

// Outside a group the operation runs now; inside one it is queued for the outermost ncclGroupEnd. A deferrable
// operation on a non-blocking communicator is not run: it is left for ncclCommGetAsyncError and the call returns
// ncclInProgress (another operation on such a communicator first performs what is left, so order is kept).
ncclResult_t submit(std::unique_ptr<Operation> operation);
ncclResult_t group_start();
// A group made only of deferrable operations on non-blocking communicators is deferred as one (ncclInProgress);
// mixing blocking and non-blocking communicators in one group is ncclInvalidUsage, as in NCCL.
ncclResult_t group_end();
// Discards the queued group after estimating how long it would have taken.
ncclResult_t group_simulate_end(float* estimated_seconds);
bool in_group();

// ncclCommGetAsyncError on a non-blocking communicator: performs its deferred work, oldest first, to completion
// (blocking like any call while peers are not there yet), then sets its async error to the first failure or
// ncclSuccess. Returns that result.
ncclResult_t complete_deferred(ncclComm* comm);
// The communicator is destroyed or aborted: its deferred work that did not run never will.
void abandon_deferred(ncclComm* comm);

}  // namespace tsfake
