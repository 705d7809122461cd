// Reads the tail of a flight recorder (see recorder_tail.h) with pread: the file may be large, and it is alive.
#include "collectors/exchange/recorder_tail.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "base/flight_record_format.h"
#include "base/flight_recorder_reader.h"

namespace trainscope::exchange {

namespace {

bool read_exactly(int fd, void* buffer, size_t bytes, off_t offset) {
  auto* at = static_cast<char*>(buffer);
  while (bytes > 0) {
    const ssize_t got = ::pread(fd, at, bytes, offset);
    if (got <= 0) return false;
    at += got;
    bytes -= static_cast<size_t>(got);
    offset += got;
  }
  return true;
}

}  // namespace

bool latest_recorded_collective(const std::string& path, uint64_t comm_id, RecordedCall* out, uint64_t max_records) {
  if (path.empty() || comm_id == 0) return false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return false;
  recorder::FileHeader header;
  if (static_cast<size_t>(st.st_size) < sizeof(header) || !read_exactly(fd, &header, sizeof(header), 0)) return false;
  if (std::memcmp(header.magic, recorder::kMagic, sizeof(header.magic)) != 0 ||
      header.version < recorder::kOldestFormatVersion || header.version > recorder::kFormatVersion ||
      header.capacity == 0)
    return false;
  const size_t ring = recorder::ring_offset(header);
  if (ring + header.capacity * sizeof(recorder::Record) > static_cast<size_t>(st.st_size)) return false;
  const uint64_t next = header.next;
  const uint64_t first = next > max_records ? next - max_records : 0;
  const uint64_t oldest = next > header.capacity ? next - header.capacity : 0;
  const uint64_t begin = first > oldest ? first : oldest;
  bool found = false;
  std::vector<recorder::Record> slice;
  constexpr uint64_t kChunk = 1024;
  for (uint64_t index = begin; index < next; index += kChunk) {
    // Records of one chunk are contiguous unless the ring wraps inside it: read up to the wrap.
    const uint64_t slot = index % header.capacity;
    uint64_t count = next - index < kChunk ? next - index : kChunk;
    if (slot + count > header.capacity) count = header.capacity - slot;
    slice.resize(count);
    if (!read_exactly(fd, slice.data(), count * sizeof(recorder::Record),
                      static_cast<off_t>(ring + slot * sizeof(recorder::Record))))
      return false;
    for (uint64_t i = 0; i < count; ++i) {
      const recorder::Record& r = slice[i];
      if (r.commit != index + i + 1 || r.checksum != recorder::record_checksum(r, header.version))
        continue;  // torn or overwritten
      if (r.comm_id != comm_id || !recorder::is_collective(static_cast<recorder::Op>(r.op))) continue;
      if (found && r.seq <= out->seq) continue;
      found = true;
      out->seq = r.seq;
      out->op = r.op;
      out->start_ns = r.start_ns;
      out->site = header.version >= 2 ? r.site : 0;
      out->returned = r.result != recorder::kResultPending;
    }
    index -= kChunk - count;  // a chunk cut at the wrap: go on from where it stopped
  }
  return found;
}

bool recorded_last_launches(const std::string& path, std::vector<recorder::StreamLastLaunch>* out,
                            uint64_t max_records) {
  out->clear();
  if (path.empty()) return false;
  recorder::RecorderFile file;
  std::string error;
  recorder::ReadLimits limits;
  limits.max_records = max_records;
  limits.follow_links = false;
  if (!recorder::read_recorder_file(path, &file, &error, limits)) return false;
  *out = recorder::last_launch_per_stream(file);
  return true;
}

}  // namespace trainscope::exchange
