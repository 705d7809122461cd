// ncclSend/ncclRecv: the n-th send from a to b meets the n-th recv on b from a, streaming through their channel.
#include <algorithm>
#include <cstring>
#include <string>

#include "operations.h"

namespace tsfake {
namespace {

std::string describe_message(std::uint64_t count, std::uint64_t datatype) {
  return std::to_string(count) + " x " + datatype_name(static_cast<ncclDataType_t>(datatype));
}

class Send final : public Operation {
 public:
  Send(ncclComm* comm, const void* buff, std::size_t count, ncclDataType_t datatype, int peer)
      : Operation(comm),
        buff_(static_cast<const unsigned char*>(buff)),
        count_(count),
        datatype_(datatype),
        peer_(peer),
        bytes_(count * datatype_size(datatype)) {}

  StepResult step() override {
    Channel& channel = comm_->segment->channel(comm_->rank, peer_);
    // Numbered on first step (groups step in call order) so a discarded simulated group leaves no gap.
    if (!numbered_) {
      message_ = comm_->sends_called[static_cast<std::size_t>(peer_)]++;
      numbered_ = true;
    }
    bool progressed = false;
    if (!posted_) {
      // Descriptor slots are reused round-robin, so stay within kMaxMessagesInFlight of what the peer finished.
      if (load_acquire(channel.sends_posted) != message_ ||
          message_ >= load_acquire(channel.recvs_done) + kMaxMessagesInFlight) {
        reason_ = "ncclSend #" + std::to_string(message_) + " to rank " + std::to_string(peer_) +
                  " waiting for earlier sends to drain";
        return StepResult::kWaiting;
      }
      MessageDescriptor& d = channel.send_descriptors[message_ % kMaxMessagesInFlight];
      std::atomic_ref<std::uint64_t>(d.count).store(count_, std::memory_order_relaxed);
      std::atomic_ref<std::uint64_t>(d.datatype).store(datatype_, std::memory_order_relaxed);
      store_release(channel.sends_posted, message_ + 1);
      comm_->segment->ring_doorbell();
      posted_ = true;
      progressed = true;
    }
    std::uint64_t& streamed = comm_->sends_streamed[static_cast<std::size_t>(peer_)];
    if (sent_ < bytes_ || !turn_taken_) {
      if (streamed != message_) {
        reason_ = "ncclSend #" + std::to_string(message_) + " to rank " + std::to_string(peer_) +
                  " queued behind an earlier send";
        return progressed ? StepResult::kProgressed : StepResult::kWaiting;
      }
      turn_taken_ = true;
      const std::uint64_t written = load_acquire(channel.bytes_written);
      const std::uint64_t free_bytes = kChannelRingBytes - (written - load_acquire(channel.bytes_read));
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(free_bytes, bytes_ - sent_));
      if (n > 0) {
        const std::size_t start = static_cast<std::size_t>(written % kChannelRingBytes);
        const std::size_t first = std::min(n, kChannelRingBytes - start);
        std::memcpy(channel.ring + start, buff_ + sent_, first);
        std::memcpy(channel.ring, buff_ + sent_ + first, n - first);
        sent_ += n;
        store_release(channel.bytes_written, written + n);
        comm_->segment->ring_doorbell();
        progressed = true;
      }
      if (sent_ < bytes_) {
        reason_ = "ncclSend #" + std::to_string(message_) + " to rank " + std::to_string(peer_) + " (" +
                  describe_message(count_, datatype_) + ") waiting for the peer to receive";
        return progressed ? StepResult::kProgressed : StepResult::kWaiting;
      }
      ++streamed;
    }
    if (load_acquire(channel.recvs_done) <= message_) {
      reason_ = "ncclSend #" + std::to_string(message_) + " to rank " + std::to_string(peer_) + " (" +
                describe_message(count_, datatype_) + ") waiting for the matching ncclRecv";
      return progressed ? StepResult::kProgressed : StepResult::kWaiting;
    }
    return StepResult::kDone;
  }

  std::string waiting_reason() const override { return reason_; }

 private:
  const unsigned char* buff_;
  std::size_t count_;
  ncclDataType_t datatype_;
  int peer_;
  std::size_t bytes_;
  std::uint64_t message_ = 0;
  bool numbered_ = false;
  std::size_t sent_ = 0;
  bool posted_ = false;
  bool turn_taken_ = false;
  std::string reason_;
};

class Recv final : public Operation {
 public:
  Recv(ncclComm* comm, void* buff, std::size_t count, ncclDataType_t datatype, int peer)
      : Operation(comm),
        buff_(static_cast<unsigned char*>(buff)),
        count_(count),
        datatype_(datatype),
        peer_(peer),
        bytes_(count * datatype_size(datatype)) {}

  StepResult step() override {
    Channel& channel = comm_->segment->channel(peer_, comm_->rank);
    if (!numbered_) {
      message_ = comm_->recvs_called[static_cast<std::size_t>(peer_)]++;
      numbered_ = true;
    }
    const std::string name = "ncclRecv #" + std::to_string(message_) + " from rank " + std::to_string(peer_);
    if (load_acquire(channel.recvs_done) != message_) {
      reason_ = name + " queued behind an earlier recv";
      return StepResult::kWaiting;
    }
    if (!matched_) {
      if (load_acquire(channel.sends_posted) <= message_) {
        reason_ = name + " (" + describe_message(count_, datatype_) + ") waiting for the matching ncclSend";
        return StepResult::kWaiting;
      }
      const MessageDescriptor& d = channel.send_descriptors[message_ % kMaxMessagesInFlight];
      const std::uint64_t count =
          std::atomic_ref<std::uint64_t>(const_cast<std::uint64_t&>(d.count)).load(std::memory_order_relaxed);
      const std::uint64_t datatype =
          std::atomic_ref<std::uint64_t>(const_cast<std::uint64_t&>(d.datatype)).load(std::memory_order_relaxed);
      // A pair that disagrees never completes, like real NCCL; the reason stays on record for observers.
      if (count != count_ || datatype != static_cast<std::uint64_t>(datatype_)) {
        reason_ = name + " mismatch: receiving " + describe_message(count_, datatype_) + ", rank " +
                  std::to_string(peer_) + " sends " + describe_message(count, datatype);
        return StepResult::kWaiting;
      }
      matched_ = true;
    }
    bool progressed = false;
    const std::uint64_t read = load_acquire(channel.bytes_read);
    const std::uint64_t available = load_acquire(channel.bytes_written) - read;
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(available, bytes_ - received_));
    if (n > 0) {
      const std::size_t start = static_cast<std::size_t>(read % kChannelRingBytes);
      const std::size_t first = std::min(n, kChannelRingBytes - start);
      std::memcpy(buff_ + received_, channel.ring + start, first);
      std::memcpy(buff_ + received_ + first, channel.ring, n - first);
      received_ += n;
      store_release(channel.bytes_read, read + n);
      comm_->segment->ring_doorbell();
      progressed = true;
    }
    if (received_ < bytes_) {
      reason_ = name + " (" + describe_message(count_, datatype_) + ") waiting for data";
      return progressed ? StepResult::kProgressed : StepResult::kWaiting;
    }
    store_release(channel.recvs_done, message_ + 1);
    comm_->segment->ring_doorbell();
    return StepResult::kDone;
  }

  std::string waiting_reason() const override { return reason_; }

 private:
  unsigned char* buff_;
  std::size_t count_;
  ncclDataType_t datatype_;
  int peer_;
  std::size_t bytes_;
  std::uint64_t message_ = 0;
  bool numbered_ = false;
  std::size_t received_ = 0;
  bool matched_ = false;
  std::string reason_;
};

}  // namespace

std::unique_ptr<Operation> make_send(ncclComm* comm, const void* buff, std::size_t count, ncclDataType_t datatype,
                                     int peer) {
  return std::make_unique<Send>(comm, buff, count, datatype, peer);
}

std::unique_ptr<Operation> make_recv(ncclComm* comm, void* buff, std::size_t count, ncclDataType_t datatype, int peer) {
  return std::make_unique<Recv>(comm, buff, count, datatype, peer);
}

}  // namespace tsfake
