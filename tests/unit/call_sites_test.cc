// The shim's table of call sites: the first call of a key claims it, later calls get the published id, keys that
// differ only in their Python stack are different sites, and a full table answers "no site" instead of failing.
#include "shim/call_sites.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

namespace trainscope::shim {
namespace {

class CallSites : public ::testing::Test {
 protected:
  void SetUp() override { reset_call_sites(); }
  void TearDown() override { reset_call_sites(); }
};

TEST_F(CallSites, FirstCallClaimsLaterCallsGetThePublishedId) {
  const uint64_t key = call_site_key(0x401234, 0);
  const SiteLookup first = look_up_site(key);
  ASSERT_GE(first.claimed_slot, 0);
  EXPECT_EQ(first.id, 0u);
  // While the first call captures the site, others see it known but without an id.
  EXPECT_EQ(look_up_site(key).claimed_slot, -1);
  EXPECT_EQ(look_up_site(key).id, 0u);
  publish_site(first.claimed_slot, 7);
  const SiteLookup later = look_up_site(key);
  EXPECT_EQ(later.claimed_slot, -1);
  EXPECT_EQ(later.id, 7u);
}

TEST_F(CallSites, ThePythonStackMakesTheSameNativeAddressTwoSites) {
  const uint64_t forward = call_site_key(0x401234, 0x1111);
  const uint64_t backward = call_site_key(0x401234, 0x2222);
  const uint64_t native_only = call_site_key(0x401234, 0);
  EXPECT_NE(forward, backward);
  EXPECT_NE(forward, native_only);
  EXPECT_EQ(forward, call_site_key(0x401234, 0x1111));
  publish_site(look_up_site(forward).claimed_slot, 1);
  publish_site(look_up_site(backward).claimed_slot, 2);
  EXPECT_EQ(look_up_site(forward).id, 1u);
  EXPECT_EQ(look_up_site(backward).id, 2u);
}

TEST_F(CallSites, KeyZeroIsAKeyLikeAnyOther) {
  const SiteLookup first = look_up_site(0);
  ASSERT_GE(first.claimed_slot, 0);
  publish_site(first.claimed_slot, 3);
  EXPECT_EQ(look_up_site(0).id, 3u);
}

TEST_F(CallSites, NoSiteIsAValidAnswer) {
  const SiteLookup first = look_up_site(99);
  publish_site(first.claimed_slot, 0);  // the recorder's site table was full
  const SiteLookup later = look_up_site(99);
  EXPECT_EQ(later.id, 0u);
  EXPECT_EQ(later.claimed_slot, -1);  // never captured again
}

TEST_F(CallSites, AFullTableAnswersNoSiteForNewKeys) {
  int claimed = 0;
  for (uint64_t i = 1; i <= 20000; ++i) {
    const SiteLookup found = look_up_site(call_site_key(i, 0));
    if (found.claimed_slot >= 0) {
      ++claimed;
      publish_site(found.claimed_slot, static_cast<uint32_t>(i));
    }
  }
  EXPECT_GT(claimed, 4000);
  EXPECT_LE(claimed, 8192);
  EXPECT_EQ(look_up_site(call_site_key(1, 0)).id, 1u);  // what was claimed stays found
}

TEST_F(CallSites, ExactlyOneOfManyThreadsClaimsASite) {
  std::atomic<int> claims{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (uint64_t i = 1; i <= 500; ++i) {
        const SiteLookup found = look_up_site(call_site_key(i, 42));
        if (found.claimed_slot >= 0) {
          claims.fetch_add(1);
          publish_site(found.claimed_slot, static_cast<uint32_t>(i));
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(claims.load(), 500);
  for (uint64_t i = 1; i <= 500; ++i) EXPECT_EQ(look_up_site(call_site_key(i, 42)).id, static_cast<uint32_t>(i));
}

}  // namespace
}  // namespace trainscope::shim
