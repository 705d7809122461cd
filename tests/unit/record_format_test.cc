// Checks the invariants of the on-disk record format that the writer and reader both rely on.
#include <gtest/gtest.h>

#include <cstring>

#include "reports/flight_record_format.h"

namespace trainscope::recorder {
namespace {

TEST(RecordFormat, ChecksumCoversEveryImmutableField) {
  Record r{};
  r.op = static_cast<uint16_t>(Op::kAllReduce);
  const uint32_t base = record_checksum(r);
  for (size_t byte = kChecksummedBegin; byte < kChecksummedEnd; ++byte) {
    Record changed = r;
    reinterpret_cast<unsigned char*>(&changed)[byte] ^= 0x10;
    EXPECT_NE(record_checksum(changed), base) << "byte " << byte;
  }
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
