// tsfake_stuck_state: lets a test read, from any process, which ranks are blocked in which call and why.
#include <atomic>
#include <cstring>
#include <memory>
#include <string>

#include "../fake_nccl_debug.h"
#include "shared_segment.h"

extern "C" __attribute__((visibility("default"))) int tsfake_stuck_state(const ncclUniqueId* id, char* buf,
                                                                         size_t len) {
  if (buf != nullptr && len > 0) buf[0] = '\0';
  if (id == nullptr) return -1;
  const std::string name(
      id->internal + tsfake::kUniqueIdNameOffset,
      strnlen(id->internal + tsfake::kUniqueIdNameOffset, NCCL_UNIQUE_ID_BYTES - tsfake::kUniqueIdNameOffset));
  std::unique_ptr<tsfake::SharedSegment> segment(tsfake::SharedSegment::observe(name));
  if (!segment) return -1;
  std::string report;
  int blocked = 0;
  for (int r = 0; r < segment->nranks(); ++r) {
    tsfake::RankSlot& slot = segment->rank(r);
    if (tsfake::load_acquire(slot.block_state) != static_cast<std::uint32_t>(tsfake::BlockState::kWaiting)) continue;
    ++blocked;
    std::string reason;
    for (std::size_t i = 0; i < tsfake::kStuckReasonBytes; ++i) {
      const char c = std::atomic_ref<char>(slot.stuck_reason[i]).load(std::memory_order_relaxed);
      if (c == '\0') break;
      reason.push_back(c);
    }
    report += "rank " + std::to_string(r) + ": " + reason + "\n";
  }
  if (buf != nullptr && len > 0) {
    const std::size_t n = std::min(report.size(), len - 1);
    std::memcpy(buf, report.data(), n);
    buf[n] = '\0';
  }
  return blocked;
}
