// The shim's table of communicators: ids every member agrees on, lookups, numbering, reuse of freed handles.
#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <vector>

#include "shim/comm_registry.h"

namespace trainscope::shim {
namespace {

class CommRegistry : public ::testing::Test {
 protected:
  void SetUp() override { reset_comm_registry(); }
  void TearDown() override { reset_comm_registry(); }
};

const void* handle(uintptr_t v) { return reinterpret_cast<const void*>(v); }

TEST_F(CommRegistry, RegisterFindUnregister) {
  EXPECT_EQ(find_comm(handle(0x1000)), nullptr);
  CommInfo* info = register_comm(handle(0x1000), 42, 0, 1, 4, false);
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(find_comm(handle(0x1000)), info);
  EXPECT_EQ(info->id, 42u);
  EXPECT_EQ(info->rank, 1);
  EXPECT_EQ(info->nranks, 4);
  unregister_comm(handle(0x1000));
  EXPECT_EQ(find_comm(handle(0x1000)), nullptr);
  EXPECT_EQ(find_comm(nullptr), nullptr);
  EXPECT_EQ(register_comm(nullptr, 1, 0, 0, 1, false), nullptr);
}

TEST_F(CommRegistry, AReusedHandleStartsItsNumberingAgain) {
  CommInfo* first = register_comm(handle(0x2000), 1, 0, 0, 2, false);
  EXPECT_EQ(next_collective_seq(first), 1u);
  EXPECT_EQ(next_collective_seq(first), 2u);
  unregister_comm(handle(0x2000));
  CommInfo* second = register_comm(handle(0x2000), 2, 0, 1, 2, false);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->id, 2u);
  EXPECT_EQ(next_collective_seq(second), 1u);
}

TEST_F(CommRegistry, PeerSequencesArePerPeerAndDirection) {
  CommInfo* info = register_comm(handle(0x3000), 7, 0, 0, 3, false);
  EXPECT_EQ(next_peer_seq(info, 1, false), 1u);
  EXPECT_EQ(next_peer_seq(info, 1, false), 2u);
  EXPECT_EQ(next_peer_seq(info, 1, true), 1u);
  EXPECT_EQ(next_peer_seq(info, 2, false), 1u);
  EXPECT_EQ(next_peer_seq(info, 3, false), 0u);  // out of range: no number
  EXPECT_EQ(next_peer_seq(info, -1, true), 0u);
}

TEST_F(CommRegistry, ManyCommunicatorsWithCollidingSlots) {
  std::vector<CommInfo*> infos;
  for (uintptr_t i = 1; i <= 1000; ++i) infos.push_back(register_comm(handle(i * 4096), i, 0, 0, 1, false));
  for (uintptr_t i = 1; i <= 1000; ++i) {
    ASSERT_EQ(find_comm(handle(i * 4096)), infos[i - 1]);
    EXPECT_EQ(infos[i - 1]->id, i);
  }
  for (uintptr_t i = 1; i <= 1000; i += 2) unregister_comm(handle(i * 4096));
  for (uintptr_t i = 2; i <= 1000; i += 2) EXPECT_EQ(find_comm(handle(i * 4096)), infos[i - 1]);
}

TEST_F(CommRegistry, ConcurrentNumberingHandsOutEachNumberOnce) {
  CommInfo* info = register_comm(handle(0x5000), 9, 0, 0, 2, false);
  std::vector<std::vector<uint64_t>> seen(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10000; ++i) seen[t].push_back(next_collective_seq(info));
    });
  for (auto& t : threads) t.join();
  std::set<uint64_t> all;
  for (auto& v : seen) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), 40000u);
  EXPECT_EQ(*all.begin(), 1u);
  EXPECT_EQ(*all.rbegin(), 40000u);
}

TEST(CommIds, SameUniqueIdSameIdAndChildrenDiffer) {
  unsigned char a[128] = {1, 2, 3};
  unsigned char b[128] = {1, 2, 4};
  EXPECT_EQ(comm_id_from_unique_ids(a, sizeof(a)), comm_id_from_unique_ids(a, sizeof(a)));
  EXPECT_NE(comm_id_from_unique_ids(a, sizeof(a)), comm_id_from_unique_ids(b, sizeof(b)));
  const uint64_t parent = comm_id_from_unique_ids(a, sizeof(a));
  std::set<uint64_t> children;
  for (uint64_t split = 1; split <= 4; ++split)
    for (int64_t color : {int64_t{0}, int64_t{1}, int64_t{2}, kShrinkColor})
      children.insert(comm_id_for_child(parent, split, color));
  EXPECT_EQ(children.size(), 16u);
  EXPECT_EQ(children.count(parent), 0u);
  EXPECT_EQ(comm_id_for_child(parent, 2, 1), comm_id_for_child(parent, 2, 1));
}

}  // namespace
}  // namespace trainscope::shim
