// ncclGroupStart/End: calls inside a group are queued per thread and progressed together at the outermost end.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "operations.h"

namespace tsfake {
namespace {

constexpr int kSingleSegmentWaitMs = 50;  // how often a sleeping call re-checks abort/revoke
constexpr int kManySegmentWaitMs = 1;     // ops on unrelated segments cannot share one futex word

struct GroupState {
  int depth = 0;
  std::vector<std::unique_ptr<Operation>> queued;
};

GroupState& this_thread_group() {
  thread_local GroupState state;
  return state;
}

bool interrupted(const ncclComm* comm) {
  return comm->aborted.load(std::memory_order_acquire) || comm->revoked.load(std::memory_order_acquire);
}

// Counts the call as in flight on each distinct communicator so that abort can wait for it to notice and leave.
class CallScope {
 public:
  explicit CallScope(const std::vector<std::unique_ptr<Operation>>& operations) {
    for (const auto& op : operations) {
      bool seen = false;
      for (ncclComm* c : comms_) seen = seen || c == op->comm();
      if (!seen) comms_.push_back(op->comm());
    }
    for (ncclComm* c : comms_) c->calls_in_progress.fetch_add(1, std::memory_order_acq_rel);
  }
  ~CallScope() {
    for (ncclComm* c : comms_) {
      c->segment->clear_blocked(c->rank);
      if (c->calls_in_progress.fetch_sub(1, std::memory_order_acq_rel) == 1) c->calls_in_progress.notify_all();
    }
  }
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;
  const std::vector<ncclComm*>& comms() const { return comms_; }

 private:
  std::vector<ncclComm*> comms_;
};

// Leaves the operations for ncclCommGetAsyncError on each communicator involved: the call is "in progress".
ncclResult_t defer_work(std::vector<std::unique_ptr<Operation>> operations) {
  auto work = std::make_shared<DeferredWork>();
  work->operations = std::move(operations);
  std::vector<ncclComm*> comms;
  for (const auto& op : work->operations) {
    bool seen = false;
    for (ncclComm* c : comms) seen = seen || c == op->comm();
    if (!seen) comms.push_back(op->comm());
  }
  for (ncclComm* c : comms) {
    c->deferred.push_back(work);
    int expected = ncclSuccess;  // an error already there stays
    c->async_error.compare_exchange_strong(expected, ncclInProgress, std::memory_order_acq_rel);
  }
  return ncclInProgress;
}

}  // namespace

ncclResult_t run_to_completion(std::vector<std::unique_ptr<Operation>>& operations) {
  if (operations.empty()) return ncclSuccess;
  CallScope scope(operations);
  std::vector<bool> done(operations.size(), false);
  std::vector<std::string> recorded_reason(scope.comms().size());
  std::size_t remaining = operations.size();
  while (true) {
    for (ncclComm* c : scope.comms()) {
      if (interrupted(c)) {
        c->async_error.store(ncclSystemError, std::memory_order_release);
        return ncclSystemError;
      }
    }
    // Sample the doorbell before looking, so a change made while we look cuts the sleep short.
    SharedSegment* sleep_on = nullptr;
    bool many_segments = false;
    for (std::size_t i = 0; i < operations.size(); ++i) {
      if (done[i]) continue;
      SharedSegment* s = operations[i]->comm()->segment;
      if (sleep_on == nullptr)
        sleep_on = s;
      else if (s->name() != sleep_on->name())
        many_segments = true;
    }
    const std::uint32_t seen = sleep_on->doorbell_value();

    bool progressed = false;
    for (std::size_t i = 0; i < operations.size(); ++i) {
      if (done[i]) continue;
      const StepResult result = operations[i]->step();
      if (result == StepResult::kFailed) return operations[i]->failure();
      if (result == StepResult::kDone) {
        done[i] = true;
        --remaining;
      }
      progressed = progressed || result != StepResult::kWaiting;
    }
    if (remaining == 0) return ncclSuccess;
    if (progressed) continue;

    // Record, per communicator, what its first unfinished operation is waiting for.
    for (std::size_t c = 0; c < scope.comms().size(); ++c) {
      ncclComm* comm = scope.comms()[c];
      for (std::size_t i = 0; i < operations.size(); ++i) {
        if (done[i] || operations[i]->comm() != comm) continue;
        std::string reason = operations[i]->waiting_reason();
        if (reason != recorded_reason[c]) {
          comm->segment->set_blocked(comm->rank, reason.c_str());
          recorded_reason[c] = std::move(reason);
        }
        break;
      }
    }
    sleep_on->wait_doorbell(seen, many_segments ? kManySegmentWaitMs : kSingleSegmentWaitMs);
  }
}

bool in_group() { return this_thread_group().depth > 0; }

ncclResult_t submit(std::unique_ptr<Operation> operation) {
  GroupState& group = this_thread_group();
  if (group.depth > 0) {
    group.queued.push_back(std::move(operation));
    return ncclSuccess;
  }
  std::vector<std::unique_ptr<Operation>> single;
  ncclComm* comm = operation->comm();
  const bool defer = operation->deferrable() && comm->nonblocking;
  single.push_back(std::move(operation));
  if (defer) return defer_work(std::move(single));
  if (comm->nonblocking) {
    // Not deferrable (a split, a shrink): what the communicator left for later runs first, in call order.
    if (ncclResult_t r = complete_deferred(comm); r != ncclSuccess) return r;
  }
  return run_to_completion(single);
}

ncclResult_t group_start() {
  ++this_thread_group().depth;
  return ncclSuccess;
}

ncclResult_t group_end() {
  GroupState& group = this_thread_group();
  if (group.depth == 0) return ncclInvalidUsage;
  if (--group.depth > 0) return ncclSuccess;
  std::vector<std::unique_ptr<Operation>> operations = std::move(group.queued);
  group.queued.clear();
  bool any_blocking = false;
  bool any_nonblocking = false;
  bool all_deferrable = true;
  for (const auto& op : operations) {
    (op->comm()->nonblocking ? any_nonblocking : any_blocking) = true;
    all_deferrable = all_deferrable && op->deferrable();
  }
  if (any_blocking && any_nonblocking) return ncclInvalidUsage;
  if (any_nonblocking && all_deferrable) return defer_work(std::move(operations));
  if (any_nonblocking) {
    for (const auto& op : operations) {
      if (ncclResult_t r = complete_deferred(op->comm()); r != ncclSuccess) return r;
    }
  }
  return run_to_completion(operations);
}

ncclResult_t group_simulate_end(float* estimated_seconds) {
  GroupState& group = this_thread_group();
  if (group.depth == 0) return ncclInvalidUsage;
  // A flat per-operation latency: positive and growing with the group, which is all callers may rely on.
  *estimated_seconds = 1e-5f * static_cast<float>(group.queued.size() + 1);
  if (--group.depth == 0) group.queued.clear();
  return ncclSuccess;
}

ncclResult_t complete_deferred(ncclComm* comm) {
  std::vector<std::shared_ptr<DeferredWork>> works = std::move(comm->deferred);
  comm->deferred.clear();
  ncclResult_t first = ncclSuccess;
  for (const auto& work : works) {
    if (!work->ran) {
      work->ran = true;
      work->result = run_to_completion(work->operations);
      work->operations.clear();
    }
    if (first == ncclSuccess) first = work->result;
  }
  int expected = ncclInProgress;  // an error recorded meanwhile (abort, revoke) stays
  comm->async_error.compare_exchange_strong(expected, first, std::memory_order_acq_rel);
  if (first == ncclSuccess) {
    const int now = comm->async_error.load(std::memory_order_acquire);
    if (now != ncclSuccess) first = static_cast<ncclResult_t>(now);
  }
  return first;
}

void abandon_deferred(ncclComm* comm) {
  for (const auto& work : comm->deferred) {
    if (work->ran) continue;
    // Its operations may name this communicator: another member polled later must not run them.
    work->ran = true;
    work->result = ncclInvalidUsage;
    work->operations.clear();
  }
  comm->deferred.clear();
}

}  // namespace tsfake
