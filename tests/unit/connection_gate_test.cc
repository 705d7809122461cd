// The coordinator's admission rules for connections that have not said a valid hello (ConnectionGate): the cap on
// those at once, the bound of the job's rank count plus a margin, the descriptors kept free for the job, and the
// hello deadline. The time and the descriptor counts are passed in: every rule is checked without sockets or clocks.
#include "collectors/exchange/connection_gate.h"

#include <gtest/gtest.h>

namespace trainscope::exchange {
namespace {

constexpr uint64_t kSecond = 1'000'000'000ull;
constexpr DescriptorUse kPlenty{100, 1u << 20};

ConnectionGateOptions options() {
  ConnectionGateOptions options;
  options.hello_deadline_ns = 5 * kSecond;
  options.max_unauthenticated = 4;
  return options;
}

// Admits `fd` and says whether it came in without anyone making way for it.
bool admitted_freely(ConnectionGate& gate, int fd, uint64_t now_ns, size_t ranks = 0, DescriptorUse use = kPlenty) {
  const ConnectionGate::Admission admission =
      gate.on_accepted({fd, static_cast<uint64_t>(fd) + 100}, now_ns, ranks, use);
  return admission.refusal == Refusal::kNone && admission.made_way == Refusal::kNone;
}

TEST(ConnectionGate, CapsTheConnectionsThatHaveNotSaidHelloTheOldestMakesWay) {
  ConnectionGate gate(options());
  for (int fd = 10; fd < 14; ++fd) EXPECT_TRUE(admitted_freely(gate, fd, fd * kSecond)) << fd;
  // Over the cap: the oldest one that has not said hello makes way (idle outsiders cannot keep a rank out).
  ConnectionGate::Admission admission = gate.on_accepted({14, 114}, 14 * kSecond, 0, kPlenty);
  EXPECT_EQ(admission.refusal, Refusal::kNone);
  EXPECT_EQ(admission.made_way, Refusal::kTooManyUnauthenticated);
  EXPECT_EQ(admission.oldest.fd, 10);
  EXPECT_EQ(admission.oldest.identity, 110u);
  EXPECT_FALSE(gate.knows(10));
  EXPECT_EQ(gate.stats().unauthenticated, 4u);
  // One says hello: it never makes way, and its place is free for the next.
  EXPECT_TRUE(gate.on_authenticated(11));
  EXPECT_TRUE(admitted_freely(gate, 15, 15 * kSecond));
  // One closes: so is its place.
  gate.on_closed(12);
  EXPECT_TRUE(admitted_freely(gate, 16, 16 * kSecond));
  admission = gate.on_accepted({17, 117}, 17 * kSecond, 0, kPlenty);
  EXPECT_EQ(admission.made_way, Refusal::kTooManyUnauthenticated);
  EXPECT_EQ(admission.oldest.fd, 13);
  const ConnectionGateStats stats = gate.stats();
  EXPECT_EQ(stats.accepted, 8u);
  EXPECT_EQ(stats.refused_unauthenticated, 2u);
  EXPECT_EQ(stats.refused(), 2u);
  EXPECT_EQ(stats.connections, 5u);
  EXPECT_EQ(stats.unauthenticated, 4u);
}

TEST(ConnectionGate, TheCapGrowsWithTheJobButStaysWellBelowTheDescriptorLimit) {
  ConnectionGate gate(options());
  EXPECT_EQ(gate.unauthenticated_cap(0, 1u << 20), 4u);
  EXPECT_EQ(gate.unauthenticated_cap(512, 1u << 20), 512u);  // a large job's ranks all connect at its start
  EXPECT_EQ(gate.unauthenticated_cap(512, 1024), 128u);      // an eighth of the limit at most
  EXPECT_EQ(gate.unauthenticated_cap(0, 4), 1u);
}

TEST(ConnectionGate, AllConnectionsAreBoundedByTheRankCountPlusAMargin) {
  ConnectionGateOptions big_cap = options();
  big_cap.max_unauthenticated = 1000;
  ConnectionGate gate(big_cap);
  EXPECT_EQ(ConnectionGate::connection_bound(0), 0u);  // unknown: no bound from it
  EXPECT_EQ(ConnectionGate::connection_bound(2), 18u);
  EXPECT_EQ(ConnectionGate::connection_bound(1000), 1250u);
  for (int fd = 0; fd < 17; ++fd) {
    ASSERT_TRUE(admitted_freely(gate, fd, 0, 2)) << fd;
    ASSERT_TRUE(gate.on_authenticated(fd));
  }
  ASSERT_TRUE(admitted_freely(gate, 17, 0, 2));  // the 18th has not said hello
  // Over the bound: the one without hello makes way; then, with none left to, the new one is refused.
  ConnectionGate::Admission admission = gate.on_accepted({18, 118}, 0, 2, kPlenty);
  EXPECT_EQ(admission.made_way, Refusal::kMoreThanTheRanks);
  EXPECT_EQ(admission.oldest.fd, 17);
  ASSERT_TRUE(gate.on_authenticated(18));
  admission = gate.on_accepted({19, 119}, 0, 2, kPlenty);
  EXPECT_EQ(admission.refusal, Refusal::kMoreThanTheRanks);
  EXPECT_FALSE(gate.knows(19));
  EXPECT_EQ(gate.stats().refused_over_ranks, 2u);
  EXPECT_EQ(gate.stats().connections, 18u);
}

TEST(ConnectionGate, NeverTakesTheJobsLastDescriptors) {
  ConnectionGate gate(options());
  EXPECT_EQ(gate.descriptor_reserve(256), 64u);
  EXPECT_EQ(gate.descriptor_reserve(1024), 256u);
  EXPECT_EQ(gate.descriptor_reserve(100), 64u);
  EXPECT_TRUE(admitted_freely(gate, 3, 0, 0, DescriptorUse{192, 256}));
  // Even a connection that would say hello: the job's own files come first.
  EXPECT_EQ(gate.on_accepted({4, 104}, 0, 0, DescriptorUse{193, 256}).refusal, Refusal::kDescriptorReserve);
  EXPECT_EQ(gate.on_accepted({5, 105}, 0, 0, DescriptorUse{300, 256}).refusal, Refusal::kDescriptorReserve);
  EXPECT_EQ(gate.stats().refused_descriptors, 2u);
  EXPECT_EQ(gate.stats().connections, 1u);
}

TEST(ConnectionGate, AConnectionWithoutHelloIsClosedAfterTheDeadlineOnce) {
  ConnectionGate gate(options());
  ASSERT_TRUE(admitted_freely(gate, 7, 0));
  ASSERT_TRUE(admitted_freely(gate, 8, 1 * kSecond));
  ASSERT_TRUE(admitted_freely(gate, 9, 1 * kSecond));
  ASSERT_TRUE(gate.on_authenticated(9));
  EXPECT_TRUE(gate.take_expired(5 * kSecond - 1).empty());
  const auto expired = gate.take_expired(5 * kSecond);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].fd, 7);
  EXPECT_EQ(expired[0].identity, 107u);
  EXPECT_TRUE(gate.take_expired(5 * kSecond + 1).empty());  // returned once
  EXPECT_EQ(gate.stats().connections, 2u);
  const auto later = gate.take_expired(60 * kSecond);
  ASSERT_EQ(later.size(), 1u);  // the rank that said hello has no deadline
  EXPECT_EQ(later[0].fd, 8);
  gate.on_closed(7);  // their close events, after they left the gate
  gate.on_closed(8);
  EXPECT_EQ(gate.stats().hello_timeouts, 2u);
  EXPECT_EQ(gate.stats().unauthenticated, 0u);
  EXPECT_EQ(gate.stats().connections, 1u);
}

TEST(ConnectionGate, ADescriptorNumberAcceptedAgainIsANewConnection) {
  ConnectionGate gate(options());
  ASSERT_TRUE(admitted_freely(gate, 7, 0));
  ASSERT_TRUE(gate.on_authenticated(7));
  // Its close was not seen (the events are read in turn): the new connection on 7 has not said hello.
  ASSERT_TRUE(admitted_freely(gate, 7, 1 * kSecond));
  EXPECT_EQ(gate.stats().unauthenticated, 1u);
  EXPECT_EQ(gate.stats().connections, 1u);
  EXPECT_FALSE(gate.on_authenticated(99));  // never accepted
  EXPECT_EQ(gate.take_expired(6 * kSecond).size(), 1u);
}

}  // namespace
}  // namespace trainscope::exchange
