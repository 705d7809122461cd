// Writes flight recorder files and reads them back: fields, ring wrap, concurrency, torn slots, SIGKILL, errors.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/flight_recorder_reader.h"
#include "base/flight_recorder_writer.h"
#include "support/text_files.h"
#include "tests/support/subprocess.h"

namespace trainscope::recorder {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

constexpr uint32_t kSites = 4;  // site slots of the files these tests write, unless said otherwise

WriterOptions options_for(const std::string& path, uint64_t capacity, uint32_t max_comms = 8,
                          uint32_t max_sites = kSites) {
  WriterOptions o{};
  o.path = path.c_str();
  o.capacity = capacity;
  o.max_comms = max_comms;
  o.max_sites = max_sites;
  o.pid = 4242;
  o.launcher_rank = 3;
  o.launcher_world = 8;
  o.local_rank = 1;
  o.host = "node-17";
  o.run_id = "run-2024-abc";
  o.exe = "/usr/bin/python3";
  o.start_ns = 1700000000123456789ull;
  return o;
}

// A record whose every field is derived from `i`, so a read-back can be checked field by field.
Record sample(uint64_t i) {
  Record r{};
  r.start_ns = 1000 + i;
  r.comm_id = 0x3f2a9c0011223344ull + i;
  r.seq = i;
  r.count = i * 7 + 1;
  r.sendbuff = 0x7f0000000000ull + i;
  r.recvbuff = 0x7f1000000000ull + i;
  r.stream = 0x5500 + i;
  r.caller = 0x401000 + i;
  r.group = i % 3;
  r.aux = (i << 32) | 5;
  r.rank = static_cast<int32_t>(i % 4);
  r.nranks = 4;
  r.peer = static_cast<int32_t>(i % 5) - 1;
  r.redop = static_cast<int16_t>(i % 6);
  r.site = static_cast<uint16_t>(i % 3);
  r.tid = static_cast<uint32_t>(100 + i);
  r.op = static_cast<uint16_t>(Op::kAllReduce);
  r.dtype = static_cast<int8_t>(i % 12);
  r.flags = static_cast<uint8_t>(i & 0xf);
  return r;
}

void expect_same_call(const Record& got, const Record& want) {
  EXPECT_EQ(std::memcmp(reinterpret_cast<const char*>(&got) + kChecksummedBegin,
                        reinterpret_cast<const char*>(&want) + kChecksummedBegin, kChecksummedEnd - kChecksummedBegin),
            0);
}

RecorderFile read_ok(const std::string& path) {
  RecorderFile file;
  std::string error;
  EXPECT_TRUE(read_recorder_file(path, &file, &error)) << error;
  return file;
}

std::string read_error(const std::string& path) {
  RecorderFile file;
  std::string error;
  EXPECT_FALSE(read_recorder_file(path, &file, &error));
  return error;
}

void patch(const std::string& path, uint64_t offset, const void* bytes, size_t n) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, bytes, n, static_cast<off_t>(offset)), static_cast<ssize_t>(n));
  ::close(fd);
}

// Makes a file written by this version one of an older `version`: its version field, and its records' checksums as
// that version computed them.
void make_older(const std::string& path, uint32_t version) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  FileHeader h{};
  ASSERT_EQ(pread(fd, &h, sizeof(h), 0), static_cast<ssize_t>(sizeof(h)));
  const uint64_t ring = ring_offset(h);
  for (uint64_t slot = 0; slot < h.capacity; ++slot) {
    Record r{};
    const auto at = static_cast<off_t>(ring + slot * sizeof(Record));
    ASSERT_EQ(pread(fd, &r, sizeof(r), at), static_cast<ssize_t>(sizeof(r)));
    if (r.commit == 0) continue;
    r.checksum = record_checksum(r, version);
    ASSERT_EQ(pwrite(fd, &r, sizeof(r), at), static_cast<ssize_t>(sizeof(r)));
  }
  ASSERT_EQ(pwrite(fd, &version, sizeof(version), offsetof(FileHeader, version)),
            static_cast<ssize_t>(sizeof(version)));
  ::close(fd);
}

uint64_t slot_offset(uint32_t max_comms, uint64_t slot, uint32_t max_sites = kSites) {
  return ring_offset(max_comms, max_sites) + slot * sizeof(Record);
}

TEST(FlightRecorder, RoundTripsEveryField) {
  TempDir dir;
  const std::string path = dir.file("r.tsrec");
  Writer w;
  ASSERT_EQ(w.open(options_for(path, 16)), 0);
  ASSERT_TRUE(w.is_open());
  w.set_global_rank(5);
  w.set_nccl_version(22809);

  CommEntry c{};
  c.id = 0xabcdef0123456789ull;
  c.parent_id = 0x1111;
  c.handle = 0x2222;
  c.created_ns = 77;
  c.rank = 2;
  c.nranks = 4;
  c.color = 9;
  c.state = static_cast<uint16_t>(CommState::kLive);
  c.origin = static_cast<uint16_t>(Op::kCommSplit);
  CommEntry* entry = w.add_comm(c);
  ASSERT_NE(entry, nullptr);
  Writer::set_comm_state(entry, CommState::kDestroyed, 88);

  const Pending p0 = w.append(sample(0));
  const Pending p1 = w.append(sample(1));
  w.append(sample(2));  // never completed: it "hung"
  EXPECT_EQ(p0.commit, 1u);
  EXPECT_EQ(p1.commit, 2u);
  Writer::complete(p0, 0, 5000);
  Writer::complete(p1, 6, 6000);
  w.close(999);
  EXPECT_FALSE(w.is_open());

  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  const RecorderFile f = read_ok(path);
  const FileHeader& h = f.header;
  EXPECT_EQ(std::memcmp(h.magic, kMagic, 8), 0);
  EXPECT_EQ(h.version, kFormatVersion);
  EXPECT_EQ(h.capacity, 16u);
  EXPECT_EQ(h.max_comms, 8u);
  EXPECT_EQ(h.pid, 4242);
  EXPECT_EQ(h.launcher_rank, 3);
  EXPECT_EQ(h.launcher_world, 8);
  EXPECT_EQ(h.local_rank, 1);
  EXPECT_EQ(h.global_rank, 5);
  EXPECT_EQ(h.nccl_version, 22809);
  EXPECT_EQ(h.state, static_cast<uint32_t>(ProcessState::kExited));
  EXPECT_EQ(h.start_ns, 1700000000123456789ull);
  EXPECT_EQ(h.exit_ns, 999u);
  EXPECT_EQ(h.next, 3u);
  EXPECT_STREQ(h.host, "node-17");
  EXPECT_STREQ(h.run_id, "run-2024-abc");
  EXPECT_STREQ(h.exe, "/usr/bin/python3");

  ASSERT_EQ(f.comms.size(), 1u);
  const CommEntry& got = f.comms[0];
  EXPECT_EQ(got.commit, 1u);
  EXPECT_EQ(got.id, c.id);
  EXPECT_EQ(got.parent_id, c.parent_id);
  EXPECT_EQ(got.handle, c.handle);
  EXPECT_EQ(got.created_ns, 77u);
  EXPECT_EQ(got.ended_ns, 88u);
  EXPECT_EQ(got.rank, 2);
  EXPECT_EQ(got.nranks, 4);
  EXPECT_EQ(got.color, 9);
  EXPECT_EQ(got.state, static_cast<uint16_t>(CommState::kDestroyed));
  EXPECT_EQ(got.origin, static_cast<uint16_t>(Op::kCommSplit));

  ASSERT_EQ(f.records.size(), 3u);
  EXPECT_EQ(f.torn_records, 0u);
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(f.records[i].index, i);
    EXPECT_EQ(f.records[i].record.commit, i + 1);
    expect_same_call(f.records[i].record, sample(i));
  }
  EXPECT_EQ(f.records[0].record.result, 0);
  EXPECT_EQ(f.records[0].record.end_ns, 5000u);
  EXPECT_EQ(f.records[1].record.result, 6);
  EXPECT_EQ(f.records[1].record.end_ns, 6000u);
  EXPECT_FALSE(f.records[1].pending());
  EXPECT_TRUE(f.records[2].pending());
}

TEST(FlightRecorder, LongStringsAreTruncatedAndTerminated) {
  TempDir dir;
  const std::string path = dir.file("r.tsrec");
  const std::string long_host(300, 'h');
  const std::string long_exe(1000, 'e');
  WriterOptions o = options_for(path, 4);
  o.host = long_host.c_str();
  o.exe = long_exe.c_str();
  o.run_id = nullptr;
  Writer w;
  ASSERT_EQ(w.open(o), 0);
  w.close(1);
  const RecorderFile f = read_ok(path);
  EXPECT_EQ(std::string(f.header.host), std::string(63, 'h'));
  EXPECT_EQ(std::string(f.header.exe), std::string(255, 'e'));
  EXPECT_STREQ(f.header.run_id, "");
}

TEST(FlightRecorder, AbandonLeavesTheProcessRunning) {
  TempDir dir;
  const std::string path = dir.file("r.tsrec");
  Writer w;
  ASSERT_EQ(w.open(options_for(path, 4)), 0);
  w.append(sample(0));
  w.abandon();
  EXPECT_FALSE(w.is_open());
  EXPECT_EQ(w.append(sample(1)).slot, nullptr);  // closed: nothing claimed, nothing written
  const RecorderFile f = read_ok(path);
  EXPECT_EQ(f.header.state, static_cast<uint32_t>(ProcessState::kRunning));
  EXPECT_EQ(f.header.exit_ns, 0u);
  EXPECT_EQ(f.records.size(), 1u);
}

TEST(FlightRecorder, ReadingWhileAppendingReturnsOnlyWholeRecords) {
  TempDir dir;
  const std::string path = dir.file("live.tsrec");
  Writer w;
  ASSERT_EQ(w.open(options_for(path, 256)), 0);
  std::atomic<bool> stop{false};
  std::thread appender([&w, &stop] {
    for (uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) Writer::complete(w.append(sample(i)), 0, 1);
  });
  for (int round = 0; round < 200; ++round) {
    const RecorderFile f = read_ok(path);
    for (size_t k = 0; k < f.records.size(); ++k) {
      if (k > 0) {
        ASSERT_GT(f.records[k].index, f.records[k - 1].index);
      }
      ASSERT_GE(f.records[k].index + 256, f.records_total());
      expect_same_call(f.records[k].record, sample(f.records[k].index));
    }
  }
  stop.store(true);
  appender.join();
  w.close(1);
}

TEST(FlightRecorder, RingKeepsOnlyTheLastCapacityRecordsInOrder) {
  TempDir dir;
  const std::string path = dir.file("r.tsrec");
  Writer w;
  ASSERT_EQ(w.open(options_for(path, 8)), 0);
  for (uint64_t i = 0; i < 21; ++i) Writer::complete(w.append(sample(i)), 0, 1);
  w.close(2);
  const RecorderFile f = read_ok(path);
  EXPECT_EQ(f.records_total(), 21u);
  EXPECT_EQ(f.torn_records, 0u);
  ASSERT_EQ(f.records.size(), 8u);
  for (size_t k = 0; k < 8; ++k) {
    EXPECT_EQ(f.records[k].index, 13 + k);
    expect_same_call(f.records[k].record, sample(13 + k));
  }
}

TEST(FlightRecorder, ConcurrentAppendsAreAllPresentExactlyOnce) {
  TempDir dir;
  const std::string path = dir.file("r.tsrec");
  constexpr int kThreads = 8;
  constexpr uint64_t kPerThread = 20000;
  Writer w;
  ASSERT_EQ(w.open(options_for(path, kThreads * kPerThread)), 0);
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&w, &go, t] {
      while (!go.load(std::memory_order_acquire)) {
      }
      for (uint64_t i = 0; i < kPerThread; ++i) {
        Record r = sample(i);
        r.tid = static_cast<uint32_t>(t);
        r.seq = i;
        Writer::complete(w.append(r), 0, i);
      }
    });
  }
  go.store(true, std::memory_order_release);
  for (auto& th : threads) th.join();
  w.close(3);

  const RecorderFile f = read_ok(path);
  EXPECT_EQ(f.torn_records, 0u);
  ASSERT_EQ(f.records.size(), kThreads * kPerThread);
  std::set<std::pair<uint32_t, uint64_t>> seen;
  for (size_t k = 0; k < f.records.size(); ++k) {
    const Record& r = f.records[k].record;
    EXPECT_EQ(f.records[k].index, k);
    EXPECT_EQ(r.checksum, record_checksum(r));
    EXPECT_FALSE(f.records[k].pending());
    ASSERT_LT(r.tid, static_cast<uint32_t>(kThreads));
    Record want = sample(r.seq);
    want.tid = r.tid;
    expect_same_call(r, want);
    EXPECT_TRUE(seen.insert({r.tid, r.seq}).second) << "duplicate thread " << r.tid << " call " << r.seq;
  }
  EXPECT_EQ(seen.size(), kThreads * kPerThread);
}

TEST(FlightRecorder, CompleteOnALappedSlotLeavesItAlone) {
  TempDir dir;
  const std::string path = dir.file("r.tsrec");
  Writer w;
  ASSERT_EQ(w.open(options_for(path, 4)), 0);
  const Pending old = w.append(sample(0));
  for (uint64_t i = 1; i <= 4; ++i) w.append(sample(i));  // index 4 reuses slot 0
  Writer::complete(old, 3, 12345);
  EXPECT_EQ(old.slot->commit, 5u);
  EXPECT_EQ(old.slot->result, kResultPending);
  EXPECT_EQ(old.slot->end_ns, 0u);
  Writer::complete(Pending{nullptr, 0}, 0, 1);  // from a closed writer: a no-op
  w.close(1);
  const RecorderFile f = read_ok(path);
  ASSERT_EQ(f.records.size(), 4u);
  EXPECT_EQ(f.records[0].index, 1u);
  EXPECT_EQ(f.records[3].index, 4u);
  EXPECT_TRUE(f.records[3].pending());
  expect_same_call(f.records[3].record, sample(4));
}

// A launch is recorded at its exit: its slot is committed with the result, never seen pending in between (the frame
// thread counts an optimizer kernel as the end of a batch only when it ran).
TEST(FlightRecorder, AnAppendWithItsResultIsCommittedWithIt) {
  TempDir dir;
  const std::string path = dir.file("r.tsrec");
  Writer w;
  ASSERT_EQ(w.open(options_for(path, 4)), 0);
  const Pending ended = w.append(sample(0), 2, 777);
  ASSERT_NE(ended.slot, nullptr);
  EXPECT_EQ(ended.slot->commit, 1u);
  EXPECT_EQ(ended.slot->result, 2);
  EXPECT_EQ(ended.slot->end_ns, 777u);
  const Pending running = w.append(sample(1));
  EXPECT_EQ(running.slot->result, kResultPending);
  w.close(1);
  const RecorderFile f = read_ok(path);
  ASSERT_EQ(f.records.size(), 2u);
  EXPECT_FALSE(f.records[0].pending());
  EXPECT_EQ(f.records[0].record.result, 2);
  EXPECT_EQ(f.records[0].record.end_ns, 777u);
  expect_same_call(f.records[0].record, sample(0));
  EXPECT_TRUE(f.records[1].pending());
}

TEST(FlightRecorder, TornSlotsAreSkippedAndCounted) {
  TempDir dir;
  const std::string path = dir.file("r.tsrec");
  constexpr uint32_t kComms = 8;
  Writer w;
  ASSERT_EQ(w.open(options_for(path, 16, kComms)), 0);
  for (uint64_t i = 0; i < 10; ++i) Writer::complete(w.append(sample(i)), 0, 1);
  w.close(1);

  const uint64_t zero = 0;
  patch(path, slot_offset(kComms, 2), &zero, sizeof(zero));  // commit 0: being written
  const uint64_t wrong = 9;                                  // names index 8, which lives in slot 8
  patch(path, slot_offset(kComms, 5), &wrong, sizeof(wrong));
  const unsigned char flipped = 0x5a;  // a byte of `count` changed after the checksum
  patch(path, slot_offset(kComms, 7) + offsetof(Record, count), &flipped, 1);

  const RecorderFile f = read_ok(path);
  EXPECT_EQ(f.torn_records, 3u);
  ASSERT_EQ(f.records.size(), 7u);
  std::vector<uint64_t> indices;
  for (const auto& call : f.records) {
    indices.push_back(call.index);
    expect_same_call(call.record, sample(call.index));
  }
  EXPECT_EQ(indices, (std::vector<uint64_t>{0, 1, 3, 4, 6, 8, 9}));
}

TEST(FlightRecorder, UncommittedCommEntriesAreSkippedAndCounted) {
  TempDir dir;
  const std::string path = dir.file("r.tsrec");
  Writer w;
  ASSERT_EQ(w.open(options_for(path, 4, 2)), 0);
  CommEntry c{};
  c.id = 1;
  ASSERT_NE(w.add_comm(c), nullptr);
  c.id = 2;
  CommEntry* second = w.add_comm(c);
  ASSERT_NE(second, nullptr);
  c.id = 3;
  EXPECT_EQ(w.add_comm(c), nullptr);  // table full
  EXPECT_EQ(w.add_comm(c), nullptr);
  EXPECT_EQ(w.dropped_comms(), 2u);
  EXPECT_EQ(w.header()->comms_used, 2u);
  second->commit = 0;  // as if the process died while writing it
  w.close(1);
  const RecorderFile f = read_ok(path);
  ASSERT_EQ(f.comms.size(), 1u);
  EXPECT_EQ(f.comms[0].id, 1u);
  EXPECT_EQ(f.torn_comms, 1u);
}

// Copies `from` to `to`, keeping only the first `bytes` bytes when given.
void copy_file(const std::string& from, const std::string& to, uint64_t bytes = UINT64_MAX) {
  const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(in, 0);
  const int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(out, 0);
  char buffer[65536];
  uint64_t left = bytes;
  while (left > 0) {
    const ssize_t n = read(in, buffer, static_cast<size_t>(std::min<uint64_t>(sizeof(buffer), left)));
    ASSERT_GE(n, 0);
    if (n == 0) break;
    ASSERT_EQ(write(out, buffer, static_cast<size_t>(n)), n);
    left -= static_cast<uint64_t>(n);
  }
  ::close(in);
  ::close(out);
}

// Creates a file holding `text`.
void expect_error(const std::string& path, const std::string& words) {
  const std::string e = read_error(path);
  EXPECT_EQ(e.rfind(path + ": ", 0), 0u) << e;
  EXPECT_NE(e.find(words), std::string::npos) << e;
}

TEST(FlightRecorder, BrokenFilesGiveClearErrors) {
  TempDir dir;
  const std::string good = dir.file("good.tsrec");
  Writer w;
  ASSERT_EQ(w.open(options_for(good, 16)), 0);
  w.append(sample(0));
  w.close(1);
  const uint64_t size = fs::file_size(good);

  const std::string empty = dir.file("empty.tsrec");
  testing::write_text(empty, "");
  expect_error(empty, "empty file (0 bytes)");

  const std::string short_header = dir.file("short.tsrec");
  copy_file(good, short_header, 100);
  expect_error(short_header, "truncated: 100 bytes, shorter than the 4096-byte header");

  const std::string cut = dir.file("cut.tsrec");
  copy_file(good, cut, size - 128);
  expect_error(cut,
               "truncated: " + std::to_string(size - 128) + " bytes, the header describes " + std::to_string(size));

  const std::string longer = dir.file("longer.tsrec");
  copy_file(good, longer);
  patch(longer, size, "x", 1);
  expect_error(longer, "size mismatch");

  const std::string foreign = dir.file("foreign.tsrec");
  copy_file(good, foreign);
  patch(foreign, 0,
        "\x7f"
        "ELF\x02\x01\x01\x00",
        8);
  expect_error(foreign, "not a trainscope flight recorder (wrong magic");

  const std::string unfinished = dir.file("unfinished.tsrec");
  copy_file(good, unfinished);
  patch(unfinished, 0, "\0\0\0\0\0\0\0\0", 8);
  expect_error(unfinished, "header never written");

  const std::string future = dir.file("future.tsrec");
  copy_file(good, future);
  const uint32_t version = 7;
  patch(future, offsetof(FileHeader, version), &version, sizeof(version));
  expect_error(future, "format version 7; this trainscope reads versions 1 to 4");

  const std::string sites = dir.file("sites.tsrec");
  copy_file(good, sites);
  const uint32_t max_sites = 100000;
  patch(sites, offsetof(FileHeader, max_sites), &max_sites, sizeof(max_sites));
  expect_error(sites, "corrupt header: 100000 site slots (accepted: 0..65535)");
  const uint32_t more_sites = kSites + 1;  // one more slot than the file holds
  patch(sites, offsetof(FileHeader, max_sites), &more_sites, sizeof(more_sites));
  expect_error(sites, "truncated: " + std::to_string(size) + " bytes, the header describes " +
                          std::to_string(size + sizeof(SiteEntry)) +
                          " (16 record slots, 8 comm slots, 5 site slots, 0 name slots, 0 stream slots)");

  const std::string sizes = dir.file("sizes.tsrec");
  copy_file(good, sizes);
  const uint32_t record_bytes = 64;
  patch(sizes, offsetof(FileHeader, record_bytes), &record_bytes, sizeof(record_bytes));
  expect_error(sizes, "corrupt header: sizes header/record/comm 4096/64/64");

  const std::string huge = dir.file("huge.tsrec");
  copy_file(good, huge);
  const uint64_t capacity = UINT64_MAX;
  patch(huge, offsetof(FileHeader, capacity), &capacity, sizeof(capacity));
  expect_error(huge, "corrupt header: ring capacity 18446744073709551615 (accepted: 1..268435456)");

  // A header claiming far more records than the ring holds only looks at the last `capacity` of them.
  const std::string lying = dir.file("lying.tsrec");
  copy_file(good, lying);
  const uint64_t next = UINT64_MAX - 3;
  patch(lying, offsetof(FileHeader, next), &next, sizeof(next));
  const RecorderFile f = read_ok(lying);
  EXPECT_TRUE(f.records.empty());
  EXPECT_EQ(f.torn_records, 16u);

  const std::string names = dir.file("names.tsrec");
  copy_file(good, names);
  const uint32_t max_names = 1u << 24;
  patch(names, offsetof(FileHeader, max_names), &max_names, sizeof(max_names));
  expect_error(names, "corrupt header: 16777216 name slots and 0 stream slots (accepted: 0..1048576 and 0..65536)");
  const uint32_t one_name = 1;  // a table the file does not hold
  patch(names, offsetof(FileHeader, max_names), &one_name, sizeof(one_name));
  expect_error(names, "1 name slots, 0 stream slots)");

  expect_error(dir.file("missing.tsrec"), "cannot open: No such file or directory");
  expect_error(dir.path(), "not a regular file");
}

TEST(FlightRecorder, OpenRefusesAnExistingFileAndKeepsIt) {
  TempDir dir;
  const std::string path = dir.file("r.tsrec");
  testing::write_text(path, "someone else's");
  Writer w;
  EXPECT_EQ(w.open(options_for(path, 4)), EEXIST);
  EXPECT_FALSE(w.is_open());
  EXPECT_EQ(fs::file_size(path), 14u);
}

TEST(FlightRecorder, OpenReportsErrnoAndStaysClosed) {
  TempDir dir;
  Writer w;
  EXPECT_EQ(w.open(options_for(dir.file("no/such/dir/r.tsrec"), 4)), ENOENT);
  EXPECT_FALSE(w.is_open());
  EXPECT_EQ(w.open(options_for(dir.file("zero.tsrec"), 0)), EINVAL);
  EXPECT_FALSE(fs::exists(dir.file("zero.tsrec")));
  EXPECT_EQ(w.open(options_for(dir.file("big.tsrec"), UINT64_MAX / 2)), EFBIG);

  // Root ignores directory permissions; a read-only directory then needs another witness.
  const std::string locked = dir.file("locked");
  ASSERT_EQ(mkdir(locked.c_str(), 0500), 0);
  const std::string target = geteuid() == 0 ? "/proc/trainscope-test.tsrec" : locked + "/r.tsrec";
  const int error = w.open(options_for(target, 4));
  EXPECT_NE(error, 0);
  EXPECT_TRUE(error == EACCES || error == EROFS || error == EPERM || error == ENOENT) << std::strerror(error);
  EXPECT_FALSE(w.is_open());

  ASSERT_EQ(w.open(options_for(dir.file("ok.tsrec"), 4)), 0);
  EXPECT_EQ(w.open(options_for(dir.file("again.tsrec"), 4)), EBUSY);
  EXPECT_TRUE(w.is_open());
  w.close(1);
}

// Reads `next` through the parent's own read-only mapping of the child's header.
class HeaderWatch {
 public:
  explicit HeaderWatch(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    void* map = mmap(nullptr, kHeaderBytes, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (map != MAP_FAILED) header_ = static_cast<const FileHeader*>(map);
  }
  ~HeaderWatch() {
    if (header_ != nullptr) munmap(const_cast<FileHeader*>(header_), kHeaderBytes);
  }
  bool ok() const { return header_ != nullptr; }
  uint64_t next() const { return __atomic_load_n(&header_->next, __ATOMIC_ACQUIRE); }

 private:
  const FileHeader* header_ = nullptr;
};

TEST(FlightRecorder, SurvivesSigkillMidAppend) {
  TempDir dir;
  const std::string path = dir.file("killed.tsrec");
  constexpr uint64_t kCapacity = 65536;
  int ready[2];
  ASSERT_EQ(pipe2(ready, O_CLOEXEC), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Child: only async-signal-safe work and _exit; never return into the test framework.
    Writer w;
    const char status = w.open(options_for(path, kCapacity)) == 0 ? 'y' : 'n';
    if (write(ready[1], &status, 1) != 1 || status != 'y') _exit(1);
    for (uint64_t i = 0;; ++i) {
      Record r = sample(i);
      Writer::complete(w.append(r), 0, r.start_ns + 10);
    }
  }
  ::close(ready[1]);
  pollfd pfd{ready[0], POLLIN, 0};
  char status = 0;
  const bool child_ready = poll(&pfd, 1, 30000) == 1 && read(ready[0], &status, 1) == 1 && status == 'y';
  ::close(ready[0]);
  if (!child_ready) {
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    FAIL() << "child did not open its recorder";
  }

  HeaderWatch watch(path);
  ASSERT_TRUE(watch.ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (watch.next() < 100000 && std::chrono::steady_clock::now() < deadline) sched_yield();
  const uint64_t seen = watch.next();
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  EXPECT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL);
  ASSERT_GE(seen, 100000u) << "child appended too slowly within 30 s";

  const RecorderFile f = read_ok(path);
  const uint64_t next = f.records_total();
  ASSERT_GE(next, seen);
  EXPECT_EQ(f.header.state, static_cast<uint32_t>(ProcessState::kRunning));
  // One appending thread: at most the single in-flight record is missing or pending, and only at the end.
  EXPECT_LE(f.torn_records, 1u);
  ASSERT_GE(f.records.size(), kCapacity - 1);
  ASSERT_LE(f.records.size(), kCapacity);
  EXPECT_GE(f.records.back().index + 2, next);
  for (size_t k = 0; k < f.records.size(); ++k) {
    const RecordedCall& call = f.records[k];
    if (k > 0) {
      const uint64_t previous = f.records[k - 1].index;
      // Contiguous, except that a torn in-flight slot may leave one gap at the very end.
      if (k + 1 == f.records.size()) {
        EXPECT_TRUE(call.index == previous + 1 || call.index == previous + 2) << call.index;
      } else {
        ASSERT_EQ(call.index, previous + 1);
      }
    }
    EXPECT_EQ(call.record.checksum, record_checksum(call.record));
    expect_same_call(call.record, sample(call.index));
    if (call.pending()) {
      EXPECT_EQ(k + 1, f.records.size()) << "only the last call can have been in flight";
    } else {
      EXPECT_EQ(call.record.result, 0);
      EXPECT_EQ(call.record.end_ns, call.record.start_ns + 10);
    }
  }
}

// Writes a minimal recorder with the given identity into `dir`.
void write_rank(const std::string& path, int32_t rank, int32_t pid) {
  Writer w;
  WriterOptions o = options_for(path, 4);
  o.launcher_rank = rank;
  o.pid = pid;
  ASSERT_EQ(w.open(o), 0);
  w.append(sample(static_cast<uint64_t>(pid)));
  w.close(1);
}

TEST(FlightRecorder, RunDirectoryIsSortedByRankThenPidWithErrorsCollected) {
  TempDir dir;
  write_rank(dir.file("a.tsrec"), 2, 10);
  write_rank(dir.file("b.tsrec"), kUnknown, 5);
  write_rank(dir.file("c.tsrec"), 0, 30);
  write_rank(dir.file("d.tsrec"), 2, 7);
  testing::write_text(dir.file("e.tsrec"), "garbage");
  testing::write_text(dir.file("notes.txt"), "not a recorder");
  ASSERT_EQ(mkdir(dir.file("sub.tsrec").c_str(), 0700), 0);    // a folder named like a recorder is one, unreadable
  ASSERT_EQ(mkfifo(dir.file("pipe.tsrec").c_str(), 0600), 0);  // as a FIFO is, and never blocks the reader

  RunDirectory run;
  std::string error;
  ASSERT_TRUE(read_run_directory(dir.path(), &run, &error)) << error;
  ASSERT_EQ(run.files.size(), 4u);
  EXPECT_EQ(run.files[0].global_rank(), 0);
  EXPECT_EQ(run.files[1].pid(), 7);
  EXPECT_EQ(run.files[2].pid(), 10);
  EXPECT_EQ(run.files[3].global_rank(), kUnknown);
  ASSERT_EQ(run.errors.size(), 3u);
  EXPECT_EQ(run.errors[0].path, dir.file("e.tsrec"));
  EXPECT_NE(run.errors[0].message.find("truncated: 7 bytes"), std::string::npos) << run.errors[0].message;
  EXPECT_EQ(run.errors[1].path, dir.file("pipe.tsrec"));
  EXPECT_EQ(run.errors[1].message, dir.file("pipe.tsrec") + ": not a regular file (a FIFO)");
  EXPECT_EQ(run.errors[2].path, dir.file("sub.tsrec"));
  EXPECT_EQ(run.errors[2].message, dir.file("sub.tsrec") + ": not a regular file (a folder)");
}

TEST(FlightRecorder, RunDirectoryErrorsNameTheDirectory) {
  TempDir dir;
  RunDirectory run;
  std::string error;
  EXPECT_FALSE(read_run_directory(dir.file("nope"), &run, &error));
  EXPECT_EQ(error, "'" + dir.file("nope") + "' does not exist");

  testing::write_text(dir.file("plain"), "x");
  EXPECT_FALSE(read_run_directory(dir.file("plain"), &run, &error));
  EXPECT_EQ(error, "'" + dir.file("plain") + "' is not a directory");

  ASSERT_EQ(mkdir(dir.file("run-1").c_str(), 0700), 0);
  write_rank(dir.file("run-1/r.tsrec"), 0, 1);
  EXPECT_FALSE(read_run_directory(dir.path(), &run, &error));
  EXPECT_NE(error.find("is not a run directory: it holds no *.tsrec flight recorder files"), std::string::npos);
  EXPECT_NE(error.find("pass one of them: run-1"), std::string::npos) << error;
}

// ---- Call sites (format version 2) --------------------------------------------------------------------------------

SiteEntry site_entry(uint64_t caller, std::vector<SiteFrame> frames, uint32_t depth) {
  SiteEntry entry{};
  entry.caller = caller;
  entry.python_depth = depth;
  entry.python_frames = static_cast<uint32_t>(frames.size());
  for (size_t i = 0; i < frames.size() && i < 2; ++i) entry.frames[i] = frames[i];
  return entry;
}

SiteFrame site_frame(int32_t line, const char* function, const char* file) {
  SiteFrame frame{};
  frame.line = line;
  std::strncpy(frame.function, function, sizeof(frame.function) - 1);
  std::strncpy(frame.file, file, sizeof(frame.file) - 1);
  return frame;
}

TEST(FlightRecorder, SitesAndPythonRoundTrip) {
  static_assert(sizeof(Record) == 128);
  static_assert(sizeof(SiteEntry) == 512);
  static_assert(offsetof(Record, site) == offsetof(Record, redop) + 2);
  TempDir dir;
  const std::string path = dir.file("r.tsrec");
  Writer w;
  ASSERT_EQ(w.open(options_for(path, 8)), 0);
  EXPECT_EQ(w.header()->max_sites, kSites);
  w.set_python(3, 12, "");
  EXPECT_EQ(w.add_site(site_entry(
                0x401000, {site_frame(88, "backward", "train.py"), site_frame(120, "main", "/home/me/train.py")}, 37)),
            1u);
  EXPECT_EQ(w.add_site(site_entry(0x402000, {}, 0)), 2u);  // a native caller
  EXPECT_EQ(w.add_site(site_entry(0x403000, {site_frame(7, "step", "loop.py")}, 1)), 3u);
  Record r = sample(1);
  r.site = 1;
  w.append(r);
  r.site = 3;
  r.redop = kUnknown;
  w.append(r);
  w.close(1);

  const RecorderFile f = read_ok(path);
  EXPECT_EQ(f.header.version, kFormatVersion);
  EXPECT_EQ(f.header.max_sites, kSites);
  EXPECT_EQ(f.header.sites_used, 3u);
  EXPECT_EQ(f.header.python_major, 3);
  EXPECT_EQ(f.header.python_minor, 12);
  EXPECT_STREQ(f.header.python_note, "");
  ASSERT_EQ(f.sites.size(), 3u);
  EXPECT_EQ(f.torn_sites, 0u);
  ASSERT_NE(f.site(1), nullptr);
  const SiteEntry& first = f.sites[0];
  EXPECT_EQ(first.commit, 1u);
  EXPECT_EQ(first.caller, 0x401000u);
  EXPECT_EQ(first.python_depth, 37u);
  ASSERT_EQ(first.python_frames, 2u);
  EXPECT_EQ(first.frames[0].line, 88);
  EXPECT_STREQ(first.frames[0].function, "backward");
  EXPECT_STREQ(first.frames[0].file, "train.py");
  EXPECT_STREQ(first.frames[1].file, "/home/me/train.py");
  ASSERT_NE(f.site(2), nullptr);
  EXPECT_EQ(f.sites[1].python_frames, 0u);
  EXPECT_EQ(f.sites[2].frames[0].line, 7);
  EXPECT_EQ(f.site(0), nullptr);
  EXPECT_EQ(f.site(4), nullptr);
  ASSERT_EQ(f.records.size(), 2u);
  EXPECT_EQ(f.records[0].record.site, 1u);
  EXPECT_EQ(f.records[1].record.site, 3u);
  EXPECT_EQ(f.records[1].record.redop, kUnknown);
  expect_same_call(f.records[0].record, [] {
    Record want = sample(1);
    want.site = 1;
    return want;
  }());
}

TEST(FlightRecorder, AFullSiteTableDropsAndCounts) {
  TempDir dir;
  const std::string path = dir.file("r.tsrec");
  Writer w;
  EXPECT_EQ(w.add_site(site_entry(1, {}, 0)), 0u) << "closed";
  ASSERT_EQ(w.open(options_for(path, 4, 2, 2)), 0);
  EXPECT_EQ(w.add_site(site_entry(1, {}, 0)), 1u);
  EXPECT_EQ(w.add_site(site_entry(2, {}, 0)), 2u);
  EXPECT_EQ(w.add_site(site_entry(3, {}, 0)), 0u);
  EXPECT_EQ(w.add_site(site_entry(4, {}, 0)), 0u);
  EXPECT_EQ(w.dropped_sites(), 2u);
  EXPECT_EQ(w.header()->sites_used, 2u);
  w.append(sample(0));
  w.close(1);
  const RecorderFile f = read_ok(path);
  ASSERT_EQ(f.sites.size(), 2u);
  EXPECT_EQ(f.sites[1].caller, 2u);
  ASSERT_EQ(f.records.size(), 1u);
  expect_same_call(f.records[0].record, sample(0));

  // No site table at all (max_sites 0): add_site() hands out nothing, and the ring starts right after the comms.
  const std::string bare = dir.file("bare.tsrec");
  Writer b;
  ASSERT_EQ(b.open(options_for(bare, 4, 2, 0)), 0);
  EXPECT_EQ(b.add_site(site_entry(1, {}, 0)), 0u);
  b.append(sample(2));
  b.close(1);
  EXPECT_EQ(fs::file_size(bare), kHeaderBytes + 2 * sizeof(CommEntry) + 4 * sizeof(Record));
  const RecorderFile g = read_ok(bare);
  EXPECT_TRUE(g.sites.empty());
  ASSERT_EQ(g.records.size(), 1u);
  expect_same_call(g.records[0].record, sample(2));
}

TEST(FlightRecorder, SiteStringsAreTerminatedAndFramesBounded) {
  TempDir dir;
  const std::string path = dir.file("r.tsrec");
  Writer w;
  ASSERT_EQ(w.open(options_for(path, 4)), 0);
  SiteEntry entry = site_entry(1, {site_frame(1, "f", "a.py")}, 1);
  std::memset(entry.frames[0].function, 'x', sizeof(entry.frames[0].function));  // no NUL anywhere
  std::memset(entry.frames[0].file, 'y', sizeof(entry.frames[0].file));
  entry.python_frames = 9;  // nothing a writer means: at most two are stored
  EXPECT_EQ(w.add_site(entry), 1u);
  w.set_python(3, 14, std::string(500, 'n').c_str());
  w.close(1);
  const RecorderFile f = read_ok(path);
  ASSERT_NE(f.site(1), nullptr);
  const SiteEntry& site = f.sites[0];
  EXPECT_EQ(site.python_frames, 2u);
  EXPECT_EQ(std::string(site.frames[0].function), std::string(sizeof(SiteFrame::function) - 1, 'x'));
  EXPECT_EQ(std::string(site.frames[0].file), std::string(sizeof(SiteFrame::file) - 1, 'y'));
  EXPECT_EQ(std::string(f.header.python_note), std::string(sizeof(FileHeader::python_note) - 1, 'n'));
  EXPECT_EQ(f.header.python_minor, 14);
}

TEST(FlightRecorder, TornSiteEntriesAreZeroedAndCountedAndLaterIdsStillIndex) {
  TempDir dir;
  const std::string path = dir.file("r.tsrec");
  constexpr uint32_t kComms = 8;
  Writer w;
  ASSERT_EQ(w.open(options_for(path, 8, kComms)), 0);
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(w.add_site(site_entry(0x1000u + i, {site_frame(i + 1, "f", "s.py")}, 1)), uint32_t(i + 1));
  }
  for (uint16_t site = 1; site <= 4; ++site) {
    Record r = sample(site);
    r.site = site;
    w.append(r);
  }
  w.close(1);
  const auto site_at = [&](uint32_t slot) { return site_table_offset(kComms) + slot * sizeof(SiteEntry); };
  const uint64_t zero = 0;
  patch(path, site_at(0), &zero, sizeof(zero));  // commit 0: the process died writing it
  const uint64_t wrong = 7;
  patch(path, site_at(1), &wrong, sizeof(wrong));  // a commit naming another slot
  const uint32_t too_many = 3;
  patch(path, site_at(2) + offsetof(SiteEntry, python_frames), &too_many, sizeof(too_many));
  const int32_t negative = -5;  // a line no writer knows: read as "not known"
  patch(path, site_at(3) + offsetof(SiteEntry, frames) + offsetof(SiteFrame, line), &negative, sizeof(negative));
  // The unused second frame of slot 3 holds garbage without a NUL: it is cleared, never shown.
  patch(path, site_at(3) + offsetof(SiteEntry, frames) + sizeof(SiteFrame) + offsetof(SiteFrame, file), "zzzz", 4);

  const RecorderFile f = read_ok(path);
  EXPECT_EQ(f.torn_sites, 3u);
  ASSERT_EQ(f.sites.size(), 4u);
  for (uint32_t id = 1; id <= 3; ++id) {
    EXPECT_EQ(f.site(id), nullptr) << id;
    EXPECT_EQ(f.sites[id - 1].commit, 0u) << "kept zeroed in place";
    EXPECT_EQ(f.sites[id - 1].caller, 0u);
  }
  ASSERT_NE(f.site(4), nullptr);
  EXPECT_EQ(f.sites[3].caller, 0x1003u);
  EXPECT_EQ(f.sites[3].frames[0].line, 0);
  EXPECT_EQ(f.sites[3].frames[1].file[0], '\0');
  ASSERT_EQ(f.records.size(), 4u);
  EXPECT_EQ(f.records[3].record.site, 4u);
}

// A version 1 file, byte by byte as the version 1 writer made it: no site table, an int32 redop where redop and
// site are now, nothing after `exe` in the header.
void write_version1_file(const std::string& path, const std::vector<int32_t>& redops) {
  constexpr uint32_t kComms = 2;
  constexpr uint64_t kCapacity = 4;
  std::vector<char> bytes(kHeaderBytes + kComms * sizeof(CommEntry) + kCapacity * sizeof(Record), 0);
  FileHeader h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.version = 1;
  h.header_bytes = kHeaderBytes;
  h.record_bytes = sizeof(Record);
  h.comm_bytes = sizeof(CommEntry);
  h.capacity = kCapacity;
  h.max_comms = kComms;
  h.pid = 99;
  h.global_rank = 1;
  h.state = static_cast<uint32_t>(ProcessState::kExited);
  h.next = redops.size();
  h.comms_used = 1;
  std::strcpy(h.host, "old-node");
  std::memcpy(bytes.data(), &h, offsetof(FileHeader, max_sites));  // a version 1 header ends at `exe`
  // What a version 2 reader must not take for version 2 fields: a version 1 file never wrote there, but a reader
  // that trusted them would misread it.
  const uint32_t max_sites = 7;
  std::memcpy(bytes.data() + offsetof(FileHeader, max_sites), &max_sites, sizeof(max_sites));
  CommEntry c{};
  c.commit = 1;
  c.id = 0xabc;
  std::memcpy(bytes.data() + kHeaderBytes, &c, sizeof(c));
  for (size_t i = 0; i < redops.size(); ++i) {
    Record r = sample(i);
    std::memcpy(reinterpret_cast<char*>(&r) + offsetof(Record, redop), &redops[i], sizeof(int32_t));
    r.commit = i + 1;
    r.checksum = record_checksum(r, 1);  // version 1 to 3 files carry the older checksum
    r.result = 0;
    std::memcpy(bytes.data() + kHeaderBytes + kComms * sizeof(CommEntry) + i * sizeof(Record), &r, sizeof(r));
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  ::close(fd);
}

TEST(FlightRecorder, AVersionOneFileIsStillRead) {
  TempDir dir;
  const std::string path = dir.file("old.tsrec");
  write_version1_file(path, {0, kUnknown, 5, 70000});
  const RecorderFile f = read_ok(path);
  EXPECT_EQ(f.header.version, 1u);
  EXPECT_EQ(f.header.max_sites, 0u) << "version 1 has no site table, whatever the bytes say";
  EXPECT_EQ(f.header.python_major, 0);
  EXPECT_STREQ(f.header.host, "old-node");
  EXPECT_TRUE(f.sites.empty());
  ASSERT_EQ(f.comms.size(), 1u);
  EXPECT_EQ(f.comms[0].id, 0xabcu);
  ASSERT_EQ(f.records.size(), 4u);
  EXPECT_EQ(f.torn_records, 0u);
  EXPECT_EQ(f.records[0].record.redop, 0);
  EXPECT_EQ(f.records[1].record.redop, kUnknown);  // -1 was 0xffffffff over redop and site
  EXPECT_EQ(f.records[2].record.redop, 5);
  EXPECT_EQ(f.records[3].record.redop, INT16_MAX) << "an id beyond int16 is kept as the largest";
  for (const RecordedCall& call : f.records) {
    EXPECT_EQ(call.record.site, 0u);
    EXPECT_EQ(call.record.count, sample(call.index).count);
    EXPECT_EQ(call.record.tid, sample(call.index).tid);
  }
}

// ---- Version 3: names, streams and the launch collector's header fields ----

WriterOptions launch_options_for(const std::string& path, uint32_t max_names, uint32_t max_streams) {
  WriterOptions o = options_for(path, 8);
  o.max_names = max_names;
  o.max_streams = max_streams;
  return o;
}

// The tables of a live mapping, found from its header as a reader would.
const NameEntry* names_of(const FileHeader* h) {
  return reinterpret_cast<const NameEntry*>(reinterpret_cast<const char*>(h) +
                                            name_table_offset(h->max_comms, h->max_sites));
}
const StreamEntry* streams_of(const FileHeader* h) {
  return reinterpret_cast<const StreamEntry*>(reinterpret_cast<const char*>(h) +
                                              stream_table_offset(h->max_comms, h->max_sites, h->max_names));
}

TEST(FlightRecorderV3, NamesAreInternedWithIdsAndCutTextEndsInDots) {
  TempDir dir;
  const std::string path = dir.file("r.tsrec");
  Writer w;
  EXPECT_EQ(w.add_name(1, "closed"), 0u);
  ASSERT_EQ(w.open(launch_options_for(path, 3, 2)), 0);
  EXPECT_EQ(fs::file_size(path), file_bytes(8, kSites, 8, 3, 2));
  EXPECT_EQ(w.add_name(0x7000, "void vectorAdd<float>(float const*, float*, int)"), 1u);
  const std::string long_name(600, 'k');
  EXPECT_EQ(w.add_name(kNameKeyApi | 7, long_name.c_str()), 2u);
  const std::string exact(sizeof(NameEntry::text) - 1, 'e');  // fits exactly: not cut
  EXPECT_EQ(w.add_name(0x7001, exact.c_str()), 3u);
  EXPECT_EQ(w.add_name(0x7002, "no room"), 0u);
  EXPECT_EQ(w.dropped_names(), 1u);
  const FileHeader* h = w.header();
  EXPECT_EQ(h->names_used, 3u);
  const NameEntry* names = names_of(h);
  EXPECT_EQ(names[0].commit, 1u);
  EXPECT_EQ(names[0].key, 0x7000u);
  EXPECT_STREQ(names[0].text, "void vectorAdd<float>(float const*, float*, int)");
  EXPECT_EQ(names[1].key, kNameKeyApi | 7);
  const std::string cut(names[1].text);
  EXPECT_EQ(cut.size(), sizeof(NameEntry::text) - 1);
  EXPECT_EQ(cut, std::string(sizeof(NameEntry::text) - 4, 'k') + "...");
  EXPECT_EQ(std::string(names[2].text), exact);
  w.close(1);
}

TEST(FlightRecorderV3, StreamProgressOnlyGrows) {
  TempDir dir;
  const std::string path = dir.file("r.tsrec");
  Writer w;
  EXPECT_EQ(w.add_stream(1, 2), nullptr);
  ASSERT_EQ(w.open(launch_options_for(path, 0, 1)), 0);
  EXPECT_EQ(w.add_name(1, "no table"), 0u) << "max_names 0: no name table";
  StreamEntry* s = w.add_stream(0x5500, 0xc0);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(w.add_stream(0x5600, 0xc0), nullptr);
  EXPECT_EQ(w.dropped_streams(), 1u);
  EXPECT_EQ(s, &const_cast<StreamEntry*>(streams_of(w.header()))[0]);
  EXPECT_EQ(s->commit, 1u);
  EXPECT_EQ(s->stream, 0x5500u);
  EXPECT_EQ(s->context, 0xc0u);
  Writer::set_stream_launched(s, 10);
  Writer::set_stream_launched(s, 12);
  EXPECT_EQ(s->launched_seq, 12u);
  EXPECT_EQ(s->launches, 2u);
  Writer::set_stream_completed(s, 10, 500, 600);
  EXPECT_EQ(s->completed_seq, 10u);
  EXPECT_EQ(s->completed_ns, 500u);
  EXPECT_EQ(s->checked_ns, 600u);
  // A late activity record of an older launch: what is known done does not shrink, but the check time moves.
  Writer::set_stream_completed(s, 9, 450, 700);
  EXPECT_EQ(s->completed_seq, 10u);
  EXPECT_EQ(s->completed_ns, 500u);
  EXPECT_EQ(s->checked_ns, 700u);
  Writer::set_stream_completed(s, 12, 800, 900);
  EXPECT_EQ(s->completed_seq, 12u);
  EXPECT_EQ(s->completed_ns, 800u);
  Writer::set_stream_launched(nullptr, 1);  // a full table's nullptr is harmless
  Writer::set_stream_completed(nullptr, 1, 1, 1);
  w.close(1);
}

TEST(FlightRecorderV3, HeaderFieldsOfTheLaunchCollector) {
  TempDir dir;
  const std::string path = dir.file("r.tsrec");
  Writer w;
  EXPECT_FALSE(w.count_cuda_error()) << "closed";
  ASSERT_EQ(w.open(launch_options_for(path, 4, 4)), 0);
  const FileHeader* h = w.header();
  EXPECT_EQ(h->version, kFormatVersion);
  EXPECT_EQ(h->max_names, 4u);
  EXPECT_EQ(h->max_streams, 4u);
  EXPECT_EQ(h->launch_mode, static_cast<uint32_t>(LaunchMode::kNone));
  w.set_launch_mode(LaunchMode::kUnavailable, std::string(400, 'c').c_str());
  EXPECT_EQ(h->launch_mode, static_cast<uint32_t>(LaunchMode::kUnavailable));
  EXPECT_EQ(std::string(h->launch_note), std::string(sizeof(FileHeader::launch_note) - 1, 'c'));
  w.set_launch_mode(LaunchMode::kCompletions, nullptr);
  EXPECT_STREQ(h->launch_note, "");
  EXPECT_TRUE(w.count_cuda_error());
  EXPECT_FALSE(w.count_cuda_error());
  EXPECT_EQ(h->cuda_errors, 2u);
  const Pending first = w.append(sample(1));
  w.set_first_error(first.commit);
  EXPECT_EQ(h->first_error_index, 1u);
  w.set_completions_checked(12345);
  EXPECT_EQ(h->completions_ns, 12345u);
  w.count_dropped_launch();
  w.count_dropped_launch();
  EXPECT_EQ(h->dropped_launches, 2u);
  w.close(1);
}

TEST(FlightRecorderV3, AttachWritesIntoTheOwnersMappingAndLeavesItMapped) {
  TempDir dir;
  const std::string path = dir.file("r.tsrec");
  Writer owner;
  ASSERT_EQ(owner.open(launch_options_for(path, 4, 4)), 0);
  EXPECT_EQ(owner.add_site(SiteEntry{}), 1u);
  const uint32_t shim_name = owner.add_name(1, "shim");

  Writer engine;
  EXPECT_FALSE(engine.attach(nullptr));
  FileHeader not_a_recorder{};
  EXPECT_FALSE(engine.attach(&not_a_recorder));
  EXPECT_FALSE(engine.is_open());
  ASSERT_TRUE(engine.attach(owner.header()));
  EXPECT_FALSE(engine.attach(owner.header())) << "already attached";
  EXPECT_EQ(engine.add_name(2, "from the engine"), shim_name + 1) << "one table, shared with the owner";
  EXPECT_NE(engine.add_stream(0x5500, 0), nullptr);
  owner.append(sample(0));
  engine.append(sample(1));
  engine.close(99);  // forgets the mapping: the owner's process is still running
  EXPECT_FALSE(engine.is_open());
  EXPECT_EQ(owner.header()->state, static_cast<uint32_t>(ProcessState::kRunning));
  owner.append(sample(2));  // still mapped
  EXPECT_EQ(owner.header()->next, 3u);
  EXPECT_STREQ(names_of(owner.header())[1].text, "from the engine");
  owner.close(7);
  const RecorderFile f = read_ok(path);
  ASSERT_EQ(f.records.size(), 3u);
  expect_same_call(f.records[1].record, sample(1));
  EXPECT_EQ(f.header.exit_ns, 7u);
}

TEST(FlightRecorderV3, TablesFilledFromManyThreadsCountEveryDrop) {
  TempDir dir;
  const std::string path = dir.file("r.tsrec");
  Writer w;
  constexpr uint32_t kNames = 50;
  constexpr uint32_t kStreams = 20;
  ASSERT_EQ(w.open(launch_options_for(path, kNames, kStreams)), 0);
  constexpr int kThreads = 4;
  constexpr int kEach = 100;
  std::vector<std::thread> threads;
  std::vector<std::vector<uint32_t>> ids(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&w, &ids, t] {
      for (int i = 0; i < kEach; ++i) {
        const std::string text = "kernel_" + std::to_string(t) + "_" + std::to_string(i);
        if (const uint32_t id = w.add_name(static_cast<uint64_t>(t * kEach + i), text.c_str())) ids[t].push_back(id);
        w.add_stream(static_cast<uint64_t>(t * kEach + i), 0);
        w.count_dropped_launch();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::set<uint32_t> all;
  for (const auto& v : ids) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), kNames) << "every id handed out once";
  EXPECT_EQ(*all.begin(), 1u);
  EXPECT_EQ(*all.rbegin(), kNames);
  EXPECT_EQ(w.dropped_names(), uint64_t{kThreads * kEach - kNames});
  EXPECT_EQ(w.dropped_streams(), uint64_t{kThreads * kEach - kStreams});
  EXPECT_EQ(w.header()->names_used, kNames);
  EXPECT_EQ(w.header()->streams_used, kStreams);
  EXPECT_EQ(w.header()->dropped_launches, uint64_t{kThreads * kEach});
  const NameEntry* names = names_of(w.header());
  for (uint32_t i = 0; i < kNames; ++i) {
    EXPECT_EQ(names[i].commit, i + 1);
    EXPECT_EQ(std::string(names[i].text).rfind("kernel_", 0), 0u);
  }
  w.close(1);
}

// A launch record as the collector appends it (format: "Launch records").
Record launch_record(uint64_t seq, uint64_t start_ns, uint64_t stream, uint32_t name_id) {
  Record r{};
  r.op = static_cast<uint16_t>(Op::kKernelLaunch);
  r.start_ns = start_ns;
  r.seq = seq;
  r.count = pack_grid(128, 2, 1);
  r.sendbuff = pack_block(256, 1, 1);
  r.recvbuff = 4096;
  r.stream = stream;
  r.caller = 0xf00;
  r.aux = 0xc0;
  r.peer = static_cast<int32_t>(name_id);
  r.redop = launch_api(CudaDomain::kRuntime, LaunchKind::kKernel);
  r.rank = kUnknown;
  r.nranks = kUnknown;
  r.dtype = kUnknown;
  return r;
}

TEST(FlightRecorderV3, ReaderReadsNamesStreamsAndLaunchHeader) {
  TempDir dir;
  const std::string path = dir.file("r.tsrec");
  Writer w;
  ASSERT_EQ(w.open(launch_options_for(path, 4, 4)), 0);
  const uint32_t kernel = w.add_name(0xf00, "vectorAdd(float const*, float*)");
  const uint32_t api = w.add_name(kNameKeyApi | 1, "cudaStreamSynchronize");
  StreamEntry* s1 = w.add_stream(0x5500, 0xc0);
  StreamEntry* s2 = w.add_stream(0x5600, 0xc0);
  w.append(launch_record(10, 100, 0x5500, kernel));
  Writer::set_stream_launched(s1, 10);
  w.append(launch_record(11, 200, 0x5500, kernel));
  Writer::set_stream_launched(s1, 11);
  w.append(launch_record(12, 300, 0x5600, kernel));
  Writer::set_stream_launched(s2, 12);
  w.append(launch_record(13, 900, 0x5600, kernel));  // after the last completion update
  Writer::set_stream_completed(s1, 10, 150, 500);
  w.set_completions_checked(500);
  w.set_launch_mode(LaunchMode::kCompletions, "");
  ASSERT_TRUE(w.count_cuda_error());
  Record error{};
  error.op = static_cast<uint16_t>(Op::kCudaError);
  error.start_ns = 950;
  error.stream = 0x5600;
  error.aux = 0xc0;
  error.peer = static_cast<int32_t>(api);
  const Pending pending = w.append(error);
  Writer::complete(pending, 700, 960);
  w.set_first_error(pending.commit);
  w.close(1000);

  const RecorderFile f = read_ok(path);
  EXPECT_EQ(f.header.version, kFormatVersion);
  EXPECT_EQ(f.header.launch_mode, static_cast<uint32_t>(LaunchMode::kCompletions));
  EXPECT_EQ(launch_mode_name(f.header.launch_mode), "completions");
  EXPECT_EQ(launch_mode_name(42), "unknown (42)");
  EXPECT_EQ(f.header.cuda_errors, 1u);
  EXPECT_STREQ(f.name(kernel), "vectorAdd(float const*, float*)");
  EXPECT_STREQ(f.name(api), "cudaStreamSynchronize");
  EXPECT_STREQ(f.name(0), "");
  EXPECT_STREQ(f.name(3), "") << "claimed by nobody";
  ASSERT_EQ(f.streams.size(), 2u);
  ASSERT_NE(f.stream_entry(0x5600, 0xc0), nullptr);
  EXPECT_EQ(f.stream_entry(0x5600, 0xc1), nullptr) << "the same handle in another context is another stream";
  ASSERT_EQ(f.records.size(), 5u);
  const LaunchProgress done = f.launch_progress(f.records[0].record);
  EXPECT_EQ(done.state, LaunchState::kFinished);
  EXPECT_EQ(done.at_ns, 150u);
  const LaunchProgress running = f.launch_progress(f.records[1].record);
  EXPECT_EQ(running.state, LaunchState::kNotFinished);
  EXPECT_EQ(running.at_ns, 500u);
  EXPECT_EQ(f.launch_progress(f.records[2].record).state, LaunchState::kNotFinished);
  EXPECT_EQ(f.launch_progress(f.records[3].record).state, LaunchState::kNotKnown) << "started after the update";
  EXPECT_EQ(f.launch_progress(launch_record(1, 1, 0x9999, kernel)).state, LaunchState::kNotKnown) << "no entry";
  Record failed = f.records[0].record;
  failed.result = 98;  // cudaErrorInvalidDeviceFunction: nothing was queued, so it never ran, whatever its stream did
  EXPECT_EQ(f.launch_progress(failed).state, LaunchState::kNotLaunched);
  ASSERT_NE(f.first_error(), nullptr);
  EXPECT_EQ(f.first_error()->record.result, 700);
  EXPECT_EQ(f.first_error()->index, 4u);
}

TEST(FlightRecorderV3, ReaderTrustsNoTableOrIndex) {
  TempDir dir;
  const std::string path = dir.file("r.tsrec");
  Writer w;
  constexpr uint32_t kComms = 8;
  ASSERT_EQ(w.open(launch_options_for(path, 3, 3)), 0);
  w.add_name(1, "first");
  w.add_name(2, "second");
  w.add_name(3, "third");
  w.add_stream(0x1, 0);
  w.add_stream(0x2, 0);
  w.append(sample(0));
  w.set_first_error(1);  // names a record that is no kCudaError
  w.close(1);
  // Tear name 2 and stream 1, fill name 3's text without a NUL, and point the first error past the ring.
  const uint64_t names_at = name_table_offset(kComms, kSites);
  const uint64_t zero = 0;
  patch(path, names_at + sizeof(NameEntry) + offsetof(NameEntry, commit), &zero, sizeof(zero));
  const std::string no_nul(sizeof(NameEntry::text), 'z');
  patch(path, names_at + 2 * sizeof(NameEntry) + offsetof(NameEntry, text), no_nul.data(), no_nul.size());
  patch(path, stream_table_offset(kComms, kSites, 3) + offsetof(StreamEntry, commit), &zero, sizeof(zero));
  std::string note(sizeof(FileHeader::launch_note), 'q');
  patch(path, offsetof(FileHeader, launch_note), note.data(), note.size());
  RecorderFile f = read_ok(path);
  EXPECT_EQ(f.first_error(), nullptr) << "record 0 is an NCCL call";
  EXPECT_STREQ(f.name(1), "first");
  EXPECT_STREQ(f.name(2), "") << "torn";
  EXPECT_EQ(f.torn_names, 1u);
  EXPECT_EQ(std::string(f.name(3)), std::string(sizeof(NameEntry::text) - 1, 'z'));
  EXPECT_EQ(f.torn_streams, 1u);
  ASSERT_EQ(f.streams.size(), 1u);
  EXPECT_EQ(f.streams[0].stream, 0x2u);
  EXPECT_EQ(std::string(f.header.launch_note).size(), sizeof(FileHeader::launch_note) - 1);
  const uint64_t far = 1000;
  patch(path, offsetof(FileHeader, first_error_index), &far, sizeof(far));
  f = read_ok(path);
  EXPECT_EQ(f.header.first_error_index, 0u) << "beyond every claimed record";
}

TEST(FlightRecorderV3, AVersionTwoFileHasNoLaunchFields) {
  TempDir dir;
  const std::string path = dir.file("v2.tsrec");
  Writer w;
  ASSERT_EQ(w.open(options_for(path, 4)), 0);  // no name or stream table: a version 2 layout
  w.append(sample(0));
  w.close(1);
  // Make it a version 2 file whose version 3 bytes hold garbage: nothing of it may be believed.
  make_older(path, 2);
  const uint32_t garbage = 77;
  patch(path, offsetof(FileHeader, launch_mode), &garbage, sizeof(garbage));
  patch(path, offsetof(FileHeader, cuda_errors), &garbage, sizeof(garbage));
  patch(path, offsetof(FileHeader, names_used), &garbage, sizeof(garbage));
  const RecorderFile f = read_ok(path);
  EXPECT_EQ(f.header.version, 2u);
  EXPECT_EQ(f.header.launch_mode, 0u);
  EXPECT_EQ(f.header.cuda_errors, 0u);
  EXPECT_TRUE(f.names.empty());
  ASSERT_EQ(f.records.size(), 1u);
  expect_same_call(f.records[0].record, sample(0));
}

TEST(FlightRecorderV3, ReadLimitsReadTheNewestRecordsAndRefuseLinks) {
  TempDir dir;
  const std::string path = dir.file("r.tsrec");
  Writer w;
  ASSERT_EQ(w.open(options_for(path, 16)), 0);
  for (uint64_t i = 0; i < 20; ++i) w.append(sample(i));
  w.close(1);
  ReadLimits limits;
  limits.max_records = 3;
  RecorderFile f;
  std::string error;
  ASSERT_TRUE(read_recorder_file(path, &f, &error, limits)) << error;
  ASSERT_EQ(f.records.size(), 3u);
  EXPECT_EQ(f.records[0].index, 17u);
  EXPECT_EQ(f.torn_records, 0u) << "older records are not read, not torn";
  EXPECT_EQ(f.records_total(), 20u);
  limits.max_records = 100;  // more than the ring: the ring
  ASSERT_TRUE(read_recorder_file(path, &f, &error, limits)) << error;
  EXPECT_EQ(f.records.size(), 16u);
  const std::string link = dir.file("link.tsrec");
  fs::create_symlink(path, link);
  EXPECT_TRUE(read_recorder_file(link, &f, &error)) << "links are followed by default";
  limits.follow_links = false;
  EXPECT_FALSE(read_recorder_file(link, &f, &error, limits));
  EXPECT_NE(error.find("cannot open"), std::string::npos) << error;
}

}  // namespace
}  // namespace trainscope::recorder
