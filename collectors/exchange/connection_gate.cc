// The coordinator's admission rules for accepted connections (connection_gate.h).
#include "collectors/exchange/connection_gate.h"

#include <algorithm>

namespace trainscope::exchange {

const char* refusal_reason(Refusal refusal) {
  switch (refusal) {
    case Refusal::kNone:
      return "admitted";
    case Refusal::kTooManyUnauthenticated:
      return "too many connections that have not said a valid hello";
    case Refusal::kMoreThanTheRanks:
      return "more connections than the job has ranks";
    case Refusal::kDescriptorReserve:
      return "it would take one of the job's last file descriptors";
  }
  return "refused";
}

size_t ConnectionGate::unauthenticated_cap(size_t ranks, size_t limit) const {
  return std::max<size_t>(1, std::min(std::max(options_.max_unauthenticated, ranks), limit / 8));
}

size_t ConnectionGate::connection_bound(size_t ranks) {
  return ranks == 0 ? 0 : ranks + std::max<size_t>(16, ranks / 4);
}

size_t ConnectionGate::descriptor_reserve(size_t limit) const {
  return std::max(options_.min_descriptor_reserve, limit / 4);
}

bool ConnectionGate::take_oldest_unauthenticated(Connection* oldest) {
  auto found = connections_.end();
  for (auto it = connections_.begin(); it != connections_.end(); ++it) {
    if (!it->second.authenticated &&
        (found == connections_.end() || it->second.deadline_ns < found->second.deadline_ns))
      found = it;
  }
  if (found == connections_.end()) return false;
  *oldest = Connection{found->first, found->second.identity};
  connections_.erase(found);
  --unauthenticated_;
  return true;
}

ConnectionGate::Admission ConnectionGate::on_accepted(Connection connection, uint64_t now_ns, size_t ranks,
                                                      DescriptorUse descriptors) {
  ++stats_.accepted;
  on_closed(connection.fd);  // a connection on this number that was never seen to close is gone
  Admission admission;
  if (descriptors.limit < descriptors.open ||
      descriptors.limit - descriptors.open < descriptor_reserve(descriptors.limit)) {
    ++stats_.refused_descriptors;
    admission.refusal = Refusal::kDescriptorReserve;
    return admission;
  }
  Refusal over = Refusal::kNone;
  const size_t bound = connection_bound(ranks);
  if (unauthenticated_ >= unauthenticated_cap(ranks, descriptors.limit)) {
    over = Refusal::kTooManyUnauthenticated;
  } else if (bound != 0 && connections_.size() >= bound) {
    over = Refusal::kMoreThanTheRanks;
  }
  if (over != Refusal::kNone) {
    ++(over == Refusal::kTooManyUnauthenticated ? stats_.refused_unauthenticated : stats_.refused_over_ranks);
    if (!take_oldest_unauthenticated(&admission.oldest)) {
      admission.refusal = over;
      return admission;
    }
    admission.made_way = over;
  }
  connections_[connection.fd] = Held{connection.identity, now_ns + options_.hello_deadline_ns, false};
  ++unauthenticated_;
  return admission;
}

bool ConnectionGate::on_authenticated(int fd) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return false;
  if (!it->second.authenticated) {
    it->second.authenticated = true;
    --unauthenticated_;
  }
  return true;
}

void ConnectionGate::on_closed(int fd) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  if (!it->second.authenticated) --unauthenticated_;
  connections_.erase(it);
}

std::vector<ConnectionGate::Connection> ConnectionGate::take_expired(uint64_t now_ns) {
  std::vector<Connection> expired;
  if (unauthenticated_ == 0) return expired;
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (it->second.authenticated || now_ns < it->second.deadline_ns) {
      ++it;
      continue;
    }
    expired.push_back({it->first, it->second.identity});
    --unauthenticated_;
    ++stats_.hello_timeouts;
    it = connections_.erase(it);
  }
  return expired;
}

ConnectionGateStats ConnectionGate::stats() const {
  ConnectionGateStats stats = stats_;
  stats.connections = connections_.size();
  stats.unauthenticated = unauthenticated_;
  return stats;
}

}  // namespace trainscope::exchange
