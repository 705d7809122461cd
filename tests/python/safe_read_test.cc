// shim/safe_read.cc: good memory reads back, bad memory fails instead of faulting, through both mechanisms.
#include "shim/safe_read.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

namespace trainscope::testing {
namespace {

using shim::SafeReader;

class SafeRead : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { shim::force_safe_reads_through_pipe(GetParam()); }
  void TearDown() override { shim::force_safe_reads_through_pipe(false); }
};

TEST_P(SafeRead, ReadsGoodMemory) {
  SafeReader reader;
  static char big[20000];  // more than one pipe chunk
  for (size_t i = 0; i < sizeof(big); ++i) big[i] = static_cast<char>(i * 7);
  char copy[sizeof(big)] = {};
  ASSERT_TRUE(reader.read(reinterpret_cast<uintptr_t>(big), copy, sizeof(big)));
  EXPECT_EQ(std::memcmp(big, copy, sizeof(big)), 0);
  uint64_t value = 0x1122334455667788ull, got = 0;
  ASSERT_TRUE(reader.get(reinterpret_cast<uintptr_t>(&value), &got));
  EXPECT_EQ(got, value);
}

TEST_P(SafeRead, FailsOnBadMemoryWithoutFaulting) {
  SafeReader reader;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  // Two pages: the first readable, the second not. Then the whole mapping gone.
  void* map = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  auto base = reinterpret_cast<uintptr_t>(map);
  ASSERT_EQ(mprotect(reinterpret_cast<void*>(base + page), page, PROT_NONE), 0);
  uint64_t value = 0;
  EXPECT_TRUE(reader.get(base + page - 8, &value));
  EXPECT_FALSE(reader.get(base + page - 4, &value)) << "straddles into the unreadable page";
  EXPECT_FALSE(reader.get(base + page, &value));
  EXPECT_FALSE(reader.get(0, &value));
  EXPECT_FALSE(reader.get(16, &value)) << "the first page";
  EXPECT_FALSE(reader.get(~uintptr_t{0} - 3, &value)) << "wraps around";
  ASSERT_EQ(munmap(map, 2 * page), 0);
  SafeReader fresh;  // `reader` may keep the block it read before the unmapping: one reader is for one walk
  EXPECT_FALSE(fresh.get(base, &value));
  // The reader is still good after failures (the pipe was drained).
  uint64_t good = 42;
  EXPECT_TRUE(fresh.get(reinterpret_cast<uintptr_t>(&good), &value));
  EXPECT_EQ(value, 42u);
}

INSTANTIATE_TEST_SUITE_P(Both, SafeRead, ::testing::Values(false, true),
                         [](const auto& param_info) { return param_info.param ? "ThroughPipe" : "ProcessVmReadv"; });

}  // namespace
}  // namespace trainscope::testing
