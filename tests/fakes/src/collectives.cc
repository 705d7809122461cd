// Collectives over the per-rank staging slots: descriptors are matched first, then data moves chunk by chunk.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "operations.h"

namespace tsfake {

const char* collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return "ncclAllReduce";
    case CollectiveKind::kReduce:
      return "ncclReduce";
    case CollectiveKind::kBroadcast:
      return "ncclBroadcast";
    case CollectiveKind::kReduceScatter:
      return "ncclReduceScatter";
    case CollectiveKind::kAllGather:
      return "ncclAllGather";
    case CollectiveKind::kAlltoAll:
      return "ncclAlltoAll";
    case CollectiveKind::kGather:
      return "ncclGather";
    case CollectiveKind::kScatter:
      return "ncclScatter";
    case CollectiveKind::kCommSplit:
      return "ncclCommSplit";
  }
  return "unknown collective";
}

namespace {

// Collectives whose buffers hold one block per rank are moved one destination block at a time.
bool moves_per_destination(CollectiveKind kind) {
  return kind == CollectiveKind::kReduceScatter || kind == CollectiveKind::kAlltoAll ||
         kind == CollectiveKind::kScatter;
}

std::string describe(const CollectiveDescriptor& d) {
  std::string text = "count=" + std::to_string(d.count) + " " + datatype_name(static_cast<ncclDataType_t>(d.datatype));
  if (static_cast<OpKind>(d.op_kind) != OpKind::kNone)
    text += std::string(" op=") + op_kind_name(static_cast<OpKind>(d.op_kind));
  if (d.root >= 0) text += " root=" + std::to_string(d.root);
  return text;
}

class Collective final : public Operation {
 public:
  Collective(ncclComm* comm, const CollectiveArgs& args) : Operation(comm), args_(args) {
    element_bytes_ = datatype_size(args.datatype);
    chunk_elements_ = kStagingBytes / element_bytes_;
    blocks_ = moves_per_destination(args.kind) ? static_cast<std::size_t>(comm->nranks) : 1;
    chunks_per_block_ = (args.count + chunk_elements_ - 1) / chunk_elements_;
    total_chunks_ = blocks_ * chunks_per_block_;
  }

  StepResult step() override {
    bool progressed = false;
    while (true) {
      switch (phase_) {
        case Phase::kQueued:
          // Numbered on first step, not when queued, so a group discarded by ncclGroupSimulateEnd leaves no gap.
          if (sequence_ == 0) sequence_ = ++comm_->collectives_called;
          if (comm_->collectives_completed + 1 != sequence_) {
            reason_ = name() + " queued behind collective #" + std::to_string(comm_->collectives_completed + 1);
            return progressed ? StepResult::kProgressed : StepResult::kWaiting;
          }
          post_descriptor();
          snapshot_input_if_aliased();
          phase_ = Phase::kMatching;
          progressed = true;
          break;
        case Phase::kMatching:
          if (!members_agree()) return progressed ? StepResult::kProgressed : StepResult::kWaiting;
          phase_ = Phase::kPosting;
          progressed = true;
          break;
        case Phase::kPosting:
          if (chunk_ == total_chunks_) {
            comm_->collectives_completed = sequence_;
            return StepResult::kDone;
          }
          if (!staging_free()) return progressed ? StepResult::kProgressed : StepResult::kWaiting;
          post_chunk();
          phase_ = Phase::kConsuming;
          progressed = true;
          break;
        case Phase::kConsuming:
          if (!all_posted()) return progressed ? StepResult::kProgressed : StepResult::kWaiting;
          consume_chunk();
          phase_ = Phase::kPosting;
          progressed = true;
          break;
      }
    }
  }

  std::string waiting_reason() const override { return reason_; }

 private:
  enum class Phase { kQueued, kMatching, kPosting, kConsuming };

  std::string name() const { return std::string(collective_name(args_.kind)) + " #" + std::to_string(sequence_); }

  CollectiveDescriptor& descriptor_of(int rank) { return comm_->segment->rank(rank).descriptors[sequence_ & 1]; }

  void post_descriptor() {
    CollectiveDescriptor& d = descriptor_of(comm_->rank);
    std::atomic_ref<std::uint32_t>(d.kind).store(static_cast<std::uint32_t>(args_.kind), std::memory_order_relaxed);
    std::atomic_ref<std::uint32_t>(d.datatype)
        .store(static_cast<std::uint32_t>(args_.datatype), std::memory_order_relaxed);
    std::atomic_ref<std::uint32_t>(d.op_kind).store(static_cast<std::uint32_t>(args_.op), std::memory_order_relaxed);
    std::atomic_ref<std::int32_t>(d.root).store(args_.root, std::memory_order_relaxed);
    std::atomic_ref<std::uint64_t>(d.count).store(args_.count, std::memory_order_relaxed);
    store_release(d.sequence, sequence_);
    comm_->segment->ring_doorbell();
  }

  CollectiveDescriptor read_descriptor(int rank, bool* posted) {
    CollectiveDescriptor& d = descriptor_of(rank);
    CollectiveDescriptor copy{};
    copy.sequence = load_acquire(d.sequence);
    *posted = copy.sequence == sequence_;
    if (!*posted) return copy;
    copy.kind = std::atomic_ref<std::uint32_t>(d.kind).load(std::memory_order_relaxed);
    copy.datatype = std::atomic_ref<std::uint32_t>(d.datatype).load(std::memory_order_relaxed);
    copy.op_kind = std::atomic_ref<std::uint32_t>(d.op_kind).load(std::memory_order_relaxed);
    copy.root = std::atomic_ref<std::int32_t>(d.root).load(std::memory_order_relaxed);
    copy.count = std::atomic_ref<std::uint64_t>(d.count).load(std::memory_order_relaxed);
    return copy;
  }

  // A disagreement never resolves: like real NCCL the call stays blocked, with the reason on record.
  bool members_agree() {
    bool posted = false;
    const CollectiveDescriptor mine = read_descriptor(comm_->rank, &posted);
    for (int r = 0; r < comm_->nranks; ++r) {
      const CollectiveDescriptor theirs = read_descriptor(r, &posted);
      if (!posted) {
        reason_ = name() + " waiting for rank " + std::to_string(r) + " to join (it is at collective #" +
                  std::to_string(theirs.sequence) + ")";
        return false;
      }
      if (theirs.kind != mine.kind) {
        reason_ = name() + " mismatch: rank " + std::to_string(r) + " called " +
                  collective_name(static_cast<CollectiveKind>(theirs.kind)) + " instead";
        return false;
      }
      const char* field = nullptr;
      if (theirs.count != mine.count)
        field = "count";
      else if (theirs.datatype != mine.datatype)
        field = "datatype";
      else if (theirs.op_kind != mine.op_kind)
        field = "reduction op";
      else if (theirs.root != mine.root)
        field = "root";
      if (field != nullptr) {
        reason_ = name() + " mismatch in " + field + ": rank " + std::to_string(comm_->rank) + " has " +
                  describe(mine) + ", rank " + std::to_string(r) + " has " + describe(theirs);
        return false;
      }
    }
    return true;
  }

  // Only in-place all-to-all would overwrite input still to be sent; NCCL leaves it undefined, we keep it right.
  void snapshot_input_if_aliased() {
    if (args_.kind != CollectiveKind::kAlltoAll || args_.count == 0) return;
    const std::size_t bytes = args_.count * element_bytes_ * static_cast<std::size_t>(comm_->nranks);
    const auto* send = static_cast<const char*>(args_.sendbuff);
    const auto* recv = static_cast<const char*>(args_.recvbuff);
    if (send < recv + bytes && recv < send + bytes) {
      input_copy_.assign(send, send + bytes);
      args_.sendbuff = input_copy_.data();
    }
  }

  std::uint64_t ticket() const { return comm_->staging_tickets_used + 1; }

  bool staging_free() {
    for (int r = 0; r < comm_->nranks; ++r) {
      if (load_acquire(comm_->segment->rank(r).consumed_ticket) + 1 < ticket()) {
        reason_ = name() + " waiting for rank " + std::to_string(r) + " to read chunk " + std::to_string(chunk_);
        return false;
      }
    }
    return true;
  }

  bool all_posted() {
    for (int r = 0; r < comm_->nranks; ++r) {
      if (load_acquire(comm_->segment->rank(r).posted_ticket) < ticket()) {
        reason_ = name() + " waiting for rank " + std::to_string(r) + " to post chunk " + std::to_string(chunk_);
        return false;
      }
    }
    return true;
  }

  std::size_t block() const { return chunk_ / chunks_per_block_; }
  std::size_t chunk_offset() const { return (chunk_ % chunks_per_block_) * chunk_elements_; }
  std::size_t chunk_length() const { return std::min(chunk_elements_, args_.count - chunk_offset()); }
  const char* send_at(std::size_t element) const {
    return static_cast<const char*>(args_.sendbuff) + element * element_bytes_;
  }
  char* recv_at(std::size_t element) const { return static_cast<char*>(args_.recvbuff) + element * element_bytes_; }
  const unsigned char* staging_of(int rank) const { return comm_->segment->rank(rank).staging; }

  void post_chunk() {
    const std::size_t offset = chunk_offset();
    const std::size_t length = chunk_length();
    const std::size_t bytes = length * element_bytes_;
    unsigned char* staging = comm_->segment->rank(comm_->rank).staging;
    const bool is_root = comm_->rank == args_.root;
    const char* source = nullptr;
    switch (args_.kind) {
      case CollectiveKind::kAllReduce:
      case CollectiveKind::kReduce:
      case CollectiveKind::kAllGather:
      case CollectiveKind::kGather:
      case CollectiveKind::kCommSplit:
        source = send_at(offset);
        break;
      case CollectiveKind::kBroadcast:
        source = is_root ? send_at(offset) : nullptr;
        break;
      case CollectiveKind::kReduceScatter:
      case CollectiveKind::kAlltoAll:
        source = send_at(block() * args_.count + offset);
        break;
      case CollectiveKind::kScatter:
        source = is_root ? send_at(block() * args_.count + offset) : nullptr;
        break;
    }
    if (source != nullptr) {
      // Each rank scales its own input, so peers never need each other's PreMulSum scalar.
      if (args_.op == OpKind::kPreMulSum) {
        premultiply(staging, source, length, args_.datatype, args_.premul_scalar);
      } else {
        std::memcpy(staging, source, bytes);
      }
    }
    store_release(comm_->segment->rank(comm_->rank).posted_ticket, ticket());
    comm_->segment->ring_doorbell();
  }

  // Every reducing rank folds the staged inputs in rank order itself, so all copies of a result are identical.
  void reduce_staged(char* out, std::size_t length) {
    std::memcpy(out, staging_of(0), length * element_bytes_);
    for (int r = 1; r < comm_->nranks; ++r) reduce_into(out, staging_of(r), length, args_.datatype, args_.op);
    if (args_.op == OpKind::kAvg) divide_by(out, length, args_.datatype, comm_->nranks);
  }

  void consume_chunk() {
    const std::size_t offset = chunk_offset();
    const std::size_t length = chunk_length();
    const std::size_t bytes = length * element_bytes_;
    const int me = comm_->rank;
    const int nranks = comm_->nranks;
    const auto own_block = static_cast<std::size_t>(me);
    switch (args_.kind) {
      case CollectiveKind::kAllReduce:
        reduce_staged(recv_at(offset), length);
        break;
      case CollectiveKind::kReduce:
        if (me == args_.root) reduce_staged(recv_at(offset), length);
        break;
      case CollectiveKind::kBroadcast:
        std::memcpy(recv_at(offset), staging_of(args_.root), bytes);
        break;
      case CollectiveKind::kReduceScatter:
        if (block() == own_block) reduce_staged(recv_at(offset), length);
        break;
      case CollectiveKind::kAllGather:
      case CollectiveKind::kCommSplit:
        for (int r = 0; r < nranks; ++r) std::memcpy(recv_at(r * args_.count + offset), staging_of(r), bytes);
        break;
      case CollectiveKind::kGather:
        if (me == args_.root) {
          for (int r = 0; r < nranks; ++r) std::memcpy(recv_at(r * args_.count + offset), staging_of(r), bytes);
        }
        break;
      case CollectiveKind::kAlltoAll:
        if (block() == own_block) {
          for (int r = 0; r < nranks; ++r) std::memcpy(recv_at(r * args_.count + offset), staging_of(r), bytes);
        }
        break;
      case CollectiveKind::kScatter:
        if (block() == own_block) std::memcpy(recv_at(offset), staging_of(args_.root), bytes);
        break;
    }
    store_release(comm_->segment->rank(me).consumed_ticket, ticket());
    comm_->staging_tickets_used = ticket();
    comm_->segment->ring_doorbell();
    ++chunk_;
  }

  CollectiveArgs args_;
  std::uint64_t sequence_ = 0;
  std::size_t element_bytes_ = 1;
  std::size_t chunk_elements_ = 1;
  std::size_t blocks_ = 1;
  std::size_t chunks_per_block_ = 0;
  std::size_t total_chunks_ = 0;
  std::size_t chunk_ = 0;
  Phase phase_ = Phase::kQueued;
  std::vector<char> input_copy_;
  std::string reason_;
};

}  // namespace

std::unique_ptr<Operation> make_collective(ncclComm* comm, const CollectiveArgs& args) {
  return std::make_unique<Collective>(comm, args);
}

}  // namespace tsfake
