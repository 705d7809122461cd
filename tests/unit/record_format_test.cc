// Checks the invariants of the on-disk record format that the writer and reader both rely on.
#include <gtest/gtest.h>

#include <cstring>

#include "base/flight_record_format.h"

namespace trainscope::recorder {
namespace {

TEST(RecordFormat, ChecksumCoversEveryBitOfEveryImmutableFieldInEveryVersion) {
  Record r{};
  r.op = static_cast<uint16_t>(Op::kAllReduce);
  r.count = 1024;
  for (uint32_t version : {1u, kFormatVersion}) {
    const uint32_t base = record_checksum(r, version);
    for (size_t byte = kChecksummedBegin; byte < kChecksummedEnd; ++byte) {
      for (int bit = 0; bit < 8; ++bit) {
        Record changed = r;
        reinterpret_cast<unsigned char*>(&changed)[byte] ^= static_cast<unsigned char>(1u << bit);
        EXPECT_NE(record_checksum(changed, version), base)
            << "version " << version << " byte " << byte << " bit " << bit;
      }
    }
  }
}

// A slot torn between two records (a lapping writer): the halves of two different calls must not pass as one.
TEST(RecordFormat, ARecordMadeOfTwoRecordsHalvesFailsTheChecksum) {
  Record a{};
  a.op = static_cast<uint16_t>(Op::kAllReduce);
  a.seq = 41;
  a.count = 16;
  a.start_ns = 1'700'000'000'000'000'000ull;
  Record b = a;
  b.seq = 42;
  b.start_ns += 60'000;
  a.checksum = record_checksum(a);
  b.checksum = record_checksum(b);
  for (size_t cut = kChecksummedBegin + 8; cut < kChecksummedEnd; cut += 8) {
    Record torn = b;
    std::memcpy(reinterpret_cast<char*>(&torn) + kChecksummedBegin,
                reinterpret_cast<const char*>(&a) + kChecksummedBegin, cut - kChecksummedBegin);
    if (std::memcmp(&torn, &a, kChecksummedEnd) == 0 || std::memcmp(&torn, &b, kChecksummedEnd) == 0) continue;
    EXPECT_NE(record_checksum(torn), torn.checksum) << "cut at byte " << cut;
  }
  EXPECT_NE(record_checksum(a, 1), record_checksum(a)) << "version 4 has a checksum of its own";
}

TEST(RecordFormat, ChecksumIgnoresMutableFields) {
  Record r{};
  const uint32_t base = record_checksum(r);
  r.commit = 7;
  r.result = 3;
  r.end_ns = 99;
  EXPECT_EQ(record_checksum(r), base);
}

TEST(RecordFormat, EveryOpHasAName) {
  for (uint16_t i = 1; i < static_cast<uint16_t>(Op::kCount); ++i) {
    if (static_cast<Op>(i) == Op::kStepMarker || static_cast<Op>(i) == Op::kModuleForward) continue;
    if (is_cuda_record(static_cast<Op>(i))) {  // the launch collector's records: named for the reports, not NCCL
      EXPECT_STRNE(op_name(static_cast<Op>(i)), "unknown") << i;
      continue;
    }
    EXPECT_EQ(std::strncmp(op_name(static_cast<Op>(i)), "nccl", 4), 0) << i;
  }
  EXPECT_STREQ(op_name(Op::kStepMarker), "nvtxRangePush");
  EXPECT_STREQ(op_name(Op::kKernelLaunch), "kernel launch");
  EXPECT_STREQ(op_name(Op::kModuleForward), "module forward");
  EXPECT_STREQ(op_name(static_cast<Op>(999)), "unknown");
}

}  // namespace
}  // namespace trainscope::recorder

namespace trainscope::recorder {
namespace {

TEST(RecordFormat, DtypeBytesFollowNcclH) {
  const size_t expected[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};  // ncclInt8 ... ncclFloat8e5m2
  for (int dtype = 0; dtype < 12; ++dtype) EXPECT_EQ(nccl_dtype_bytes(dtype), expected[dtype]) << dtype;
  EXPECT_EQ(nccl_dtype_bytes(-1), 0u);
  EXPECT_EQ(nccl_dtype_bytes(12), 0u);
}

}  // namespace
}  // namespace trainscope::recorder
