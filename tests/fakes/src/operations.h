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

 protected:
  StepResult fail(ncclResult_t result) {
    failure_ = result;
    return StepResult::kFailed;
  }
  ncclComm* comm_;
  ncclResult_t failure_ = ncclSuccess;
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

// Outside a group the operation runs now; inside one it is queued for the outermost ncclGroupEnd.
ncclResult_t submit(std::unique_ptr<Operation> operation);
ncclResult_t group_start();
ncclResult_t group_end();
// Discards the queued group after estimating how long it would have taken.
ncclResult_t group_simulate_end(float* estimated_seconds);
bool in_group();

}  // namespace tsfake
