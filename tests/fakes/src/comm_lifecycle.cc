// Communicator creation and teardown: attaching to a segment, waiting for members, split and shrink.
#include <algorithm>
#include <string>
#include <vector>

#include "operations.h"

namespace tsfake {

ncclResult_t attach_comm(const std::string& name, int nranks, int rank, ncclComm** out, std::string* error) {
  SharedSegment* segment = nullptr;
  const ncclResult_t result = SharedSegment::join(name, nranks, &segment, error);
  if (result != ncclSuccess) return result;
  RankSlot& slot = segment->rank(rank);
  if (std::atomic_ref<std::uint32_t>(slot.arrived).exchange(1, std::memory_order_acq_rel) != 0) {
    segment->detach();
    delete segment;
    *error = "rank " + std::to_string(rank) + " already joined " + name;
    return ncclInvalidUsage;
  }
  segment->ring_doorbell();
  auto* comm = new ncclComm;
  comm->segment = segment;
  comm->rank = rank;
  comm->nranks = nranks;
  comm->cuda_device = rank % 8;
  comm->sends_called.assign(static_cast<std::size_t>(nranks), 0);
  comm->sends_streamed.assign(static_cast<std::size_t>(nranks), 0);
  comm->recvs_called.assign(static_cast<std::size_t>(nranks), 0);
  *out = comm;
  return ncclSuccess;
}

void release_comm(ncclComm* comm) {
  comm->segment->detach();
  delete comm->segment;
  delete comm;
}

namespace {

class WaitForMembers final : public Operation {
 public:
  WaitForMembers(ncclComm* comm, const char* call_name) : Operation(comm), call_name_(call_name) {}

  StepResult step() override {
    for (int r = 0; r < comm_->nranks; ++r) {
      if (load_acquire(comm_->segment->rank(r).arrived) == 0) {
        reason_ = call_name_ + " waiting for rank " + std::to_string(r) + " to join";
        return StepResult::kWaiting;
      }
    }
    return StepResult::kDone;
  }
  std::string waiting_reason() const override { return reason_; }

 private:
  std::string call_name_;
  std::string reason_;
};

// A child communicator: attach to its segment once its name and shape are known, then wait for its members.
class JoinChild {
 public:
  StepResult join(const std::string& name, int nranks, int rank, ncclComm** newcomm, ncclResult_t* failure) {
    if (child_ == nullptr) {
      std::string error;
      const ncclResult_t result = attach_comm(name, nranks, rank, &child_, &error);
      if (result != ncclSuccess) {
        *failure = result;
        return StepResult::kFailed;
      }
      wait_ = make_wait_for_members(child_, "child communicator");
      *newcomm = child_;
    }
    return wait_->step();
  }
  std::string waiting_reason() const { return wait_ ? wait_->waiting_reason() : std::string(); }

 private:
  ncclComm* child_ = nullptr;
  std::unique_ptr<Operation> wait_;
};

class Split final : public Operation {
 public:
  Split(ncclComm* comm, int color, int key, ncclComm** newcomm)
      : Operation(comm), newcomm_(newcomm), split_number_(++comm->splits_called) {
    mine_[0] = color;
    mine_[1] = key;
    everyone_.resize(static_cast<std::size_t>(comm->nranks) * 2);
    CollectiveArgs args{};
    args.kind = CollectiveKind::kCommSplit;
    args.sendbuff = mine_;
    args.recvbuff = everyone_.data();
    args.count = 2;
    args.datatype = ncclInt32;
    exchange_ = make_collective(comm, args);
    *newcomm = nullptr;
  }

  StepResult step() override {
    if (exchange_) {
      const StepResult exchanged = exchange_->step();
      if (exchanged != StepResult::kDone) {
        if (exchanged == StepResult::kFailed) return fail(exchange_->failure());
        return exchanged;
      }
      exchange_.reset();
      if (mine_[0] == NCCL_SPLIT_NOCOLOR) return StepResult::kDone;
      plan_child();
    }
    if (mine_[0] == NCCL_SPLIT_NOCOLOR) return StepResult::kDone;
    ncclResult_t failure = ncclSuccess;
    const StepResult joined = child_.join(child_name_, child_nranks_, child_rank_, newcomm_, &failure);
    return joined == StepResult::kFailed ? fail(failure) : joined;
  }

  std::string waiting_reason() const override {
    return exchange_ ? exchange_->waiting_reason() : "ncclCommSplit: " + child_.waiting_reason();
  }

 private:
  // Members of a color are ordered by key, ties broken by parent rank, exactly as NCCL documents.
  void plan_child() {
    std::vector<std::pair<std::pair<int, int>, int>> members;  // ((key, parent rank), parent rank)
    for (int r = 0; r < comm_->nranks; ++r) {
      if (everyone_[2 * static_cast<std::size_t>(r)] == mine_[0]) {
        members.push_back({{everyone_[2 * static_cast<std::size_t>(r) + 1], r}, r});
      }
    }
    std::sort(members.begin(), members.end());
    child_nranks_ = static_cast<int>(members.size());
    for (int i = 0; i < child_nranks_; ++i) {
      if (members[static_cast<std::size_t>(i)].second == comm_->rank) child_rank_ = i;
    }
    child_name_ = comm_->segment->name() + ".s" + std::to_string(split_number_) + "c" + std::to_string(mine_[0]);
  }

  ncclComm** newcomm_;
  std::uint64_t split_number_;
  int mine_[2] = {0, 0};
  std::vector<int> everyone_;
  std::unique_ptr<Operation> exchange_;
  std::string child_name_;
  int child_nranks_ = 0;
  int child_rank_ = 0;
  JoinChild child_;
};

class Shrink final : public Operation {
 public:
  Shrink(ncclComm* comm, std::vector<int> excluded, ncclComm** newcomm) : Operation(comm), newcomm_(newcomm) {
    std::sort(excluded.begin(), excluded.end());
    excluded.erase(std::unique(excluded.begin(), excluded.end()), excluded.end());
    child_nranks_ = comm->nranks - static_cast<int>(excluded.size());
    child_rank_ = comm->rank -
                  static_cast<int>(std::lower_bound(excluded.begin(), excluded.end(), comm->rank) - excluded.begin());
    // Only survivors call shrink, so the name comes from what they share: the shrink count and the excluded set.
    child_name_ = comm->segment->name() + ".k" + std::to_string(++comm->shrinks_called) + "x";
    std::uint64_t hash = 1469598103934665603ull;
    for (int r : excluded) hash = (hash ^ static_cast<std::uint64_t>(r)) * 1099511628211ull;
    child_name_ += std::to_string(hash % 1000000007ull);
    *newcomm = nullptr;
  }

  StepResult step() override {
    ncclResult_t failure = ncclSuccess;
    const StepResult joined = child_.join(child_name_, child_nranks_, child_rank_, newcomm_, &failure);
    return joined == StepResult::kFailed ? fail(failure) : joined;
  }
  std::string waiting_reason() const override { return "ncclCommShrink: " + child_.waiting_reason(); }

 private:
  ncclComm** newcomm_;
  std::string child_name_;
  int child_nranks_ = 0;
  int child_rank_ = 0;
  JoinChild child_;
};

}  // namespace

std::unique_ptr<Operation> make_wait_for_members(ncclComm* comm, const char* call_name) {
  return std::make_unique<WaitForMembers>(comm, call_name);
}

std::unique_ptr<Operation> make_split(ncclComm* comm, int color, int key, ncclComm** newcomm) {
  return std::make_unique<Split>(comm, color, key, newcomm);
}

std::unique_ptr<Operation> make_shrink(ncclComm* comm, std::vector<int> excluded, ncclComm** newcomm) {
  return std::make_unique<Shrink>(comm, std::move(excluded), newcomm);
}

}  // namespace tsfake
