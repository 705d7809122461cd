// Reads flight recorder files back, validating every size and offset so a hostile or broken file only errs.
#include "base/flight_recorder_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "base/bounded_file.h"
#include "base/run_files.h"

namespace trainscope::recorder {
namespace {

// Slots read per pread: bounds memory for big rings while keeping syscalls few.
constexpr size_t kChunkRecords = 16384;

// Far above TRAINSCOPE_RECORDER_RECORDS' limit (2^24); a bigger claim is a corrupt or hostile header, and a
// sparse file could otherwise make the reader walk terabytes of zeros.
constexpr uint64_t kMaxReadableCapacity = uint64_t{1} << 28;
// The same for the site table (the writer's default is 4096; Record::site can name at most 65535).
constexpr uint32_t kMaxReadableSites = 65535;
// The same for the version 3 tables (the writer's defaults are 4096 names, 256 streams).
constexpr uint32_t kMaxReadableNames = uint32_t{1} << 20;
constexpr uint32_t kMaxReadableStreams = uint32_t{1} << 16;

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Reads exactly `bytes` at `offset`; a short read means the file shrank under us.
bool read_exact(int fd, void* buffer, size_t bytes, uint64_t offset, std::string* why) {
  auto* p = static_cast<char*>(buffer);
  while (bytes > 0) {
    const ssize_t n = pread(fd, p, bytes, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      *why = std::string("read failed: ") + std::strerror(errno);
      return false;
    }
    if (n == 0) {
      *why = "file became shorter while it was being read";
      return false;
    }
    p += n;
    bytes -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return true;
}

uint64_t load_next(int fd) {
  uint64_t next = 0;
  std::string ignored;
  if (!read_exact(fd, &next, sizeof(next), offsetof(FileHeader, next), &ignored)) return 0;
  return next;
}

bool all_zero(const char* p, size_t n) {
  return std::all_of(p, p + n, [](char c) { return c == 0; });
}

template <size_t N>
void terminate_field(char (&field)[N]) {
  field[N - 1] = '\0';
}

bool fail(std::string* error, const std::string& path, const std::string& what) {
  *error = path + ": " + what;
  return false;
}

// Whether the opened `fd` is a regular file long enough to hold a header; sets `size` to its length.
bool check_file_itself(int fd, const std::string& path, uint64_t* size, std::string* error) {
  if (fd < 0) return fail(error, path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) return fail(error, path, std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    return fail(error, path, std::string("not a regular file (") + files::file_type_name(st.st_mode) + ")");
  *size = static_cast<uint64_t>(st.st_size);
  if (*size == 0) {
    return fail(error, path, "empty file (0 bytes): its process died while creating the recorder, or it is not one");
  }
  if (*size < kHeaderBytes) {
    return fail(error, path,
                "truncated: " + std::to_string(*size) + " bytes, shorter than the " + std::to_string(kHeaderBytes) +
                    "-byte header");
  }
  return true;
}

// Whether the header is a recorder's at all, of a version this reader knows.
bool check_identity(const FileHeader& h, const std::string& path, std::string* error) {
  if (all_zero(h.magic, sizeof(h.magic))) {
    return fail(error, path, "header never written (no magic): its process died while creating the recorder");
  }
  if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0) {
    return fail(error, path, "not a trainscope flight recorder (wrong magic; expected \"TSFREC01\")");
  }
  if (h.version < kOldestFormatVersion || h.version > kFormatVersion) {
    return fail(error, path,
                "format version " + std::to_string(h.version) + "; this trainscope reads versions " +
                    std::to_string(kOldestFormatVersion) + " to " + std::to_string(kFormatVersion));
  }
  return true;
}

// An older file's bytes where newer fields now sit are something else: they become the zeros that say "not known",
// so that every reader sees one layout.
void clear_fields_newer_than_the_file(FileHeader& h) {
  if (h.version == 1) {
    h.sites_used = 0;
    h.max_sites = 0;
    h.python_major = 0;
    h.python_minor = 0;
    std::memset(h.python_note, 0, sizeof(h.python_note));
    h.end_flags = 0;
  }
  if (h.version < 3) {
    // Its layout has no name or stream table.
    h.max_names = 0;
    h.names_used = 0;
    h.max_streams = 0;
    h.streams_used = 0;
    h.launch_mode = static_cast<uint32_t>(LaunchMode::kNone);
    h.cuda_errors = 0;
    h.first_error_index = 0;
    h.completions_ns = 0;
    h.dropped_launches = 0;
    std::memset(h.launch_note, 0, sizeof(h.launch_note));
    h.exchange_state = static_cast<uint32_t>(ExchangeState::kNotSaid);
    std::memset(h.exchange_note, 0, sizeof(h.exchange_note));
  }
  if (h.exchange_state > static_cast<uint32_t>(ExchangeState::kDidNotRun))
    h.exchange_state = static_cast<uint32_t>(ExchangeState::kNotSaid);  // a value no writer stores says nothing
}

// Every size and count the header claims, checked against the limits and against the file's real length before any
// offset computed from them is used.
bool check_layout(const FileHeader& h, uint64_t size, const std::string& path, std::string* error) {
  if (h.header_bytes != kHeaderBytes || h.record_bytes != sizeof(Record) || h.comm_bytes != sizeof(CommEntry)) {
    return fail(error, path,
                "corrupt header: sizes header/record/comm " + std::to_string(h.header_bytes) + "/" +
                    std::to_string(h.record_bytes) + "/" + std::to_string(h.comm_bytes) + ", expected " +
                    std::to_string(kHeaderBytes) + "/" + std::to_string(sizeof(Record)) + "/" +
                    std::to_string(sizeof(CommEntry)));
  }
  if (h.capacity == 0 || h.capacity > kMaxReadableCapacity) {
    return fail(error, path,
                "corrupt header: ring capacity " + std::to_string(h.capacity) + " (accepted: 1.." +
                    std::to_string(kMaxReadableCapacity) + ")");
  }
  if (h.max_sites > kMaxReadableSites) {
    return fail(error, path,
                "corrupt header: " + std::to_string(h.max_sites) + " site slots (accepted: 0.." +
                    std::to_string(kMaxReadableSites) + ")");
  }
  if (h.max_names > kMaxReadableNames || h.max_streams > kMaxReadableStreams) {
    return fail(error, path,
                "corrupt header: " + std::to_string(h.max_names) + " name slots and " + std::to_string(h.max_streams) +
                    " stream slots (accepted: 0.." + std::to_string(kMaxReadableNames) + " and 0.." +
                    std::to_string(kMaxReadableStreams) + ")");
  }
  const uint64_t expected = file_bytes(h.max_comms, h.max_sites, h.capacity, h.max_names, h.max_streams);
  if (size != expected) {
    return fail(error, path,
                std::string(size < expected ? "truncated" : "size mismatch") + ": " + std::to_string(size) +
                    " bytes, the header describes " + std::to_string(expected) + " (" + std::to_string(h.capacity) +
                    " record slots, " + std::to_string(h.max_comms) + " comm slots" +
                    (h.version == 1 ? std::string() : ", " + std::to_string(h.max_sites) + " site slots") +
                    (h.version < 3 ? std::string()
                                   : ", " + std::to_string(h.max_names) + " name slots, " +
                                         std::to_string(h.max_streams) + " stream slots") +
                    ")");
  }
  return true;
}

// The header's strings end inside their fields, and its other fields say only what their flags vouch for.
void keep_what_the_header_vouches_for(FileHeader& h) {
  terminate_field(h.host);
  terminate_field(h.run_id);
  terminate_field(h.exe);
  terminate_field(h.python_note);
  terminate_field(h.unwritten_report);
  terminate_field(h.unwritten_cause);
  terminate_field(h.launch_note);
  terminate_field(h.exchange_note);
  // The first error's index is trusted only when it names a claimed slot; first_error() also checks its record.
  if (h.first_error_index > h.next) h.first_error_index = 0;
  // How the process ended: only what its flags vouch for (a version 1 file, or one written before these fields,
  // holds zeros: nothing said).
  if ((h.end_flags & kEndExitStatus) == 0) h.exit_status = 0;
  h.exit_status &= 0xff;
  if ((h.end_flags & kEndStopped) == 0) {
    h.stop_reason = 0;
    h.stop_comm_id = 0;
    h.stop_seq = 0;
    h.end_flags &= ~static_cast<uint32_t>(kEndReportMissing | kEndStopBatch);
  }
  if ((h.end_flags & kEndStopBatch) == 0) h.stop_batch = 0;
  if ((h.end_flags & kEndUnwritten) == 0 ||
      (h.unwritten_note != kNoteWithoutCause && h.unwritten_note != kNoteWithCause)) {
    std::memset(h.unwritten_report, 0, sizeof(h.unwritten_report));
    std::memset(h.unwritten_cause, 0, sizeof(h.unwritten_cause));
  }
  if (h.python_major <= 0 || h.python_minor < 0) {  // no Python, or nothing a writer writes: no Python known
    h.python_major = 0;
    h.python_minor = 0;
  }
}

// Comm table: only the claimed prefix; an entry counts once its commit names its own slot.
bool read_comm_table(int fd, RecorderFile* out, std::string* why) {
  const FileHeader& h = out->header;
  const uint32_t comms_used = std::min(h.comms_used, h.max_comms);
  if (comms_used == 0) return true;
  std::vector<CommEntry> table(comms_used);
  if (!read_exact(fd, table.data(), table.size() * sizeof(CommEntry), comm_table_offset(), why)) return false;
  for (uint32_t i = 0; i < comms_used; ++i) {
    if (table[i].commit == uint64_t{i} + 1) {
      out->comms.push_back(table[i]);
    } else {
      ++out->torn_comms;
    }
  }
  return true;
}

// Site table: only the claimed prefix. An entry counts once its commit names its own slot and it holds what a
// writer writes; anything else stays in place as zeros, so that the ids after it still index the table.
bool read_site_table(int fd, RecorderFile* out, std::string* why) {
  const FileHeader& h = out->header;
  const uint32_t sites_used = std::min(h.sites_used, h.max_sites);
  if (sites_used == 0) return true;
  out->sites.resize(sites_used);
  if (!read_exact(fd, out->sites.data(), out->sites.size() * sizeof(SiteEntry), site_table_offset(h.max_comms), why)) {
    return false;
  }
  for (uint32_t i = 0; i < sites_used; ++i) {
    SiteEntry& site = out->sites[i];
    if (site.commit != uint64_t{i} + 1 || site.python_frames > 2) {
      site = SiteEntry{};
      ++out->torn_sites;
      continue;
    }
    for (uint32_t f = 0; f < 2; ++f) {
      SiteFrame& frame = site.frames[f];
      if (f >= site.python_frames) {
        frame = SiteFrame{};
        continue;
      }
      terminate_field(frame.function);
      terminate_field(frame.file);
      if (frame.line < 0) frame.line = 0;  // "not known"
    }
  }
  return true;
}

// Name table: as the site table, torn slots kept as zeros so that ids still index.
bool read_name_table(int fd, RecorderFile* out, std::string* why) {
  const FileHeader& h = out->header;
  const uint32_t names_used = std::min(h.names_used, h.max_names);
  if (names_used == 0) return true;
  out->names.resize(names_used);
  if (!read_exact(fd, out->names.data(), out->names.size() * sizeof(NameEntry),
                  name_table_offset(h.max_comms, h.max_sites), why)) {
    return false;
  }
  for (uint32_t i = 0; i < names_used; ++i) {
    NameEntry& name = out->names[i];
    if (name.commit != uint64_t{i} + 1) {
      name = NameEntry{};
      ++out->torn_names;
      continue;
    }
    terminate_field(name.text);
  }
  return true;
}

// Stream table: streams are looked up by handle, not by id, so a torn slot is simply left out.
bool read_stream_table(int fd, RecorderFile* out, std::string* why) {
  const FileHeader& h = out->header;
  const uint32_t streams_used = std::min(h.streams_used, h.max_streams);
  if (streams_used == 0) return true;
  std::vector<StreamEntry> table(streams_used);
  if (!read_exact(fd, table.data(), table.size() * sizeof(StreamEntry),
                  stream_table_offset(h.max_comms, h.max_sites, h.max_names), why)) {
    return false;
  }
  for (uint32_t i = 0; i < streams_used; ++i) {
    if (table[i].commit == uint64_t{i} + 1) {
      out->streams.push_back(table[i]);
    } else {
      ++out->torn_streams;
    }
  }
  return true;
}

// Version 1 held an int32 redop where redop and site are now (little-endian: redop's bytes first).
void convert_version_1_record(Record& record) {
  int32_t redop = 0;
  std::memcpy(&redop, reinterpret_cast<const char*>(&record) + offsetof(Record, redop), sizeof(redop));
  record.redop = static_cast<int16_t>(std::clamp<int32_t>(redop, INT16_MIN, INT16_MAX));
  record.site = 0;
}

// The ring's claims [lo, next) as read in one pass, before a live writer's later claims are accounted for.
struct RingWindow {
  uint64_t window = 0;
  uint64_t lo = 0;
  uint64_t next = 0;
};

// Ring: the slots of the last `capacity` claims, streamed in index order a chunk at a time, so memory follows
// what the file really holds rather than what its header claims.
bool read_ring(int fd, const ReadLimits& limits, RecorderFile* out, RingWindow* read, std::string* why) {
  const FileHeader& h = out->header;
  const uint64_t capacity = h.capacity;
  read->next = h.next;
  read->window = std::min(capacity, limits.max_records);
  read->lo = read->next > read->window ? read->next - read->window : 0;
  std::vector<Record> chunk;
  uint64_t chunk_first = 0;
  for (uint64_t index = read->lo; index < read->next; ++index) {
    const uint64_t slot = index % capacity;
    if (chunk.empty() || slot < chunk_first || slot >= chunk_first + chunk.size()) {
      chunk_first = slot;
      chunk.resize(static_cast<size_t>(std::min<uint64_t>(kChunkRecords, capacity - slot)));
      if (!read_exact(fd, chunk.data(), chunk.size() * sizeof(Record), ring_offset(h) + slot * sizeof(Record), why)) {
        return false;
      }
    }
    const Record& r = chunk[static_cast<size_t>(slot - chunk_first)];
    if (r.commit == index + 1 && r.checksum == record_checksum(r, h.version)) {
      out->records.push_back(RecordedCall{index, r});
      if (h.version == 1) convert_version_1_record(out->records.back().record);
    } else {
      ++out->torn_records;
    }
  }
  return true;
}

// A live writer may have lapped the oldest slots while we copied them: drop those rather than trust them.
// Claims made after the first look at `next` were not read; they are in flight, not torn.
void drop_lapped_records(int fd, const RingWindow& read, RecorderFile* out) {
  const uint64_t next_after = std::max(read.next, load_next(fd));
  out->header.next = next_after;
  const uint64_t lo_after = std::max(read.lo, next_after > read.window ? next_after - read.window : 0);
  if (lo_after <= read.lo) return;
  const auto kept = std::lower_bound(out->records.begin(), out->records.end(), lo_after,
                                     [](const RecordedCall& c, uint64_t i) { return c.index < i; });
  const uint64_t dropped_valid = static_cast<uint64_t>(kept - out->records.begin());
  const uint64_t dropped_torn = std::min(std::min(lo_after, read.next) - read.lo - dropped_valid, out->torn_records);
  out->torn_records -= dropped_torn;
  out->records.erase(out->records.begin(), kept);
}

}  // namespace

bool read_recorder_file(const std::string& path, RecorderFile* out, std::string* error, const ReadLimits& limits) {
  *out = RecorderFile{};
  out->path = path;
  // O_NONBLOCK: a FIFO named *.tsrec must not hang the reader.
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | (limits.follow_links ? 0 : O_NOFOLLOW)));
  uint64_t size = 0;
  if (!check_file_itself(fd.get(), path, &size, error)) return false;

  FileHeader& h = out->header;
  std::string why;
  if (!read_exact(fd.get(), &h, sizeof(h), 0, &why)) return fail(error, path, why);
  if (!check_identity(h, path, error)) return false;
  clear_fields_newer_than_the_file(h);
  if (!check_layout(h, size, path, error)) return false;
  keep_what_the_header_vouches_for(h);

  if (!read_comm_table(fd.get(), out, &why) || !read_site_table(fd.get(), out, &why) ||
      !read_name_table(fd.get(), out, &why) || !read_stream_table(fd.get(), out, &why)) {
    return fail(error, path, why);
  }
  RingWindow read;
  if (!read_ring(fd.get(), limits, out, &read, &why)) return fail(error, path, why);
  drop_lapped_records(fd.get(), read, out);
  return true;
}

std::string launch_mode_name(uint32_t mode) {
  switch (static_cast<LaunchMode>(mode)) {
    case LaunchMode::kNone:
      return "none";
    case LaunchMode::kCallbacks:
      return "callbacks";
    case LaunchMode::kCompletions:
      return "completions";
    case LaunchMode::kUnavailable:
      return "unavailable";
  }
  return "unknown (" + std::to_string(mode) + ")";
}

const StreamEntry* RecorderFile::stream_entry(uint64_t stream, uint64_t context) const {
  for (const StreamEntry& entry : streams) {
    if (entry.stream == stream && entry.context == context) return &entry;
  }
  return nullptr;
}

LaunchProgress RecorderFile::launch_progress(const Record& launch) const {
  if (launch.result != 0 && launch.result != kResultPending) return {LaunchState::kNotLaunched, 0};
  const StreamEntry* entry = stream_entry(launch.stream, launch.aux);
  if (entry == nullptr) return {};
  if (entry->completed_seq != 0 && launch.seq <= entry->completed_seq) {
    return {LaunchState::kFinished, entry->completed_ns};
  }
  // Completion is brought up to date from CUPTI's kernel activity: a launch that had started by then and is not in
  // it had not finished then. A launch after that last update may have finished since; nothing says.
  if (header.completions_ns != 0 && launch.start_ns < header.completions_ns) {
    return {LaunchState::kNotFinished, header.completions_ns};
  }
  return {};
}

const RecordedCall* RecorderFile::at_index(uint64_t index) const {
  const auto it = std::lower_bound(records.begin(), records.end(), index,
                                   [](const RecordedCall& c, uint64_t i) { return c.index < i; });
  if (it == records.end() || it->index != index) return nullptr;
  return &*it;
}

const RecordedCall* RecorderFile::first_error() const {
  if (header.first_error_index == 0) return nullptr;
  const RecordedCall* call = at_index(header.first_error_index - 1);
  if (call == nullptr || call->record.op != static_cast<uint16_t>(Op::kCudaError)) return nullptr;
  return call;
}

bool read_run_directory(const std::string& dir, RunDirectory* out, std::string* error) {
  namespace fs = std::filesystem;
  *out = RunDirectory{};
  out->path = dir;
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) {
    *error = "cannot access '" + dir + "': " + ec.message();
    return false;
  }
  if (!fs::exists(status)) {
    *error = "'" + dir + "' does not exist";
    return false;
  }
  if (!fs::is_directory(status)) {
    *error = "'" + dir + "' is not a directory";
    return false;
  }
  std::vector<std::string> paths;
  std::vector<std::string> subdirs_with_records;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    *error = "cannot list '" + dir + "': " + ec.message();
    return false;
  }
  for (const fs::directory_entry& entry : it) {
    const fs::path& p = entry.path();
    std::error_code entry_ec;
    // Anything named *.tsrec is a recorder to read, a folder or a FIFO too: what it is instead is said as its error.
    if (p.extension() == run_files::kRecorderExtension) {
      paths.push_back(p.string());
    } else if (entry.is_directory(entry_ec)) {
      // Remember run folders one level down: the user may have passed TRAINSCOPE_DIR itself.
      std::error_code sub_ec;
      for (const fs::directory_entry& sub : fs::directory_iterator(p, sub_ec)) {
        if (sub.path().extension() == run_files::kRecorderExtension) {
          subdirs_with_records.push_back(p.filename().string());
          break;
        }
      }
    }
  }
  if (paths.empty()) {
    *error = "'" + dir + "' is not a run directory: it holds no *.tsrec flight recorder files";
    if (!subdirs_with_records.empty()) {
      std::sort(subdirs_with_records.begin(), subdirs_with_records.end());
      *error += "; these sub-folders do, pass one of them:";
      const size_t shown = std::min<size_t>(subdirs_with_records.size(), 5);
      for (size_t i = subdirs_with_records.size() - shown; i < subdirs_with_records.size(); ++i) {
        *error += " " + subdirs_with_records[i];
      }
    }
    return false;
  }
  std::sort(paths.begin(), paths.end());
  for (const std::string& path : paths) {
    RecorderFile file;
    std::string file_error;
    if (read_recorder_file(path, &file, &file_error)) {
      out->files.push_back(std::move(file));
    } else {
      out->errors.push_back(FileError{path, file_error});
    }
  }
  std::stable_sort(out->files.begin(), out->files.end(), [](const RecorderFile& a, const RecorderFile& b) {
    // Unknown ranks (kUnknown) after every known one.
    const auto key = [](const RecorderFile& f) { return std::make_pair(f.global_rank() < 0 ? 1 : 0, f.global_rank()); };
    if (key(a) != key(b)) return key(a) < key(b);
    return a.pid() < b.pid();
  });
  return true;
}

}  // namespace trainscope::recorder
