// The coordinator's rules with injected time: every kind of mismatch, certain and timed desyncs (of collectives and of
// sends/receives whose other side never comes), vanished ranks, long clean runs without any verdict, the memory
// bounds, and the job manifest's warnings.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "collectors/exchange/coordinator_core.h"
#include "collectors/exchange/host_identity.h"

namespace trainscope::exchange {
namespace {

using recorder::Op;

constexpr uint64_t kComm = 0x3f2a9c0011223344ull;
constexpr uint64_t kT0 = 1700000000000000000ull;
constexpr uint64_t kCoreSecond = 1000000000ull;
constexpr int8_t kFloat16 = 6;
constexpr int8_t kFloat32 = 7;
constexpr int32_t kSum = 0;
constexpr int32_t kMax = 2;

Fingerprint call(int32_t comm_rank, int32_t nranks, uint64_t seq, Op op, uint64_t count, int8_t dtype = kFloat32,
                 int32_t redop = kSum, int32_t peer = -1, uint64_t comm = kComm) {
  Fingerprint f{};
  f.comm_id = comm;
  f.comm_rank = comm_rank;
  f.nranks = nranks;
  f.seq = seq;
  f.op = static_cast<uint16_t>(op);
  f.count = count;
  f.dtype = dtype;
  f.redop = redop;
  f.peer = peer;
  f.kind = static_cast<uint8_t>(EventKind::kCall);
  f.result = recorder::kResultPending;
  f.start_ns = kT0 + seq * 1000;
  return f;
}

CallStack native_stack(std::vector<std::string> frames) {
  CallStack stack;
  stack.native = std::move(frames);
  return stack;
}

// A call made from Python: two Python frames, innermost first, above the native ones.
CallStack python_stack() {
  CallStack stack;
  stack.python = {{"train.py", 88, "backward"}, {"train.py", 120, "main"}};
  stack.native = {"ncclAllReduce at nccl.cc:1", "PyEval_EvalFrame at ceval.c:2"};
  return stack;
}

Fingerprint ended(int32_t comm_rank, int32_t nranks, Op how) {
  Fingerprint f = call(comm_rank, nranks, 0, how, 0);
  f.kind = static_cast<uint8_t>(EventKind::kCommEnded);
  return f;
}

class CoreTest : public ::testing::Test {
 protected:
  explicit CoreTest(CoordinatorOptions options = {}) : core_(options) {}
  // Global rank == communicator rank in these tests.
  void feed(const Fingerprint& f, uint64_t now = kT0) { core_.on_fingerprints(f.comm_rank, {&f, 1}, 0, now); }
  std::vector<CoreVerdict> tick(uint64_t now = kT0) { return core_.tick(now); }
  CoordinatorCore core_;
};

const reports::MismatchReport& mismatch_of(const CoreVerdict& v) { return std::get<reports::MismatchReport>(v.report); }
const reports::DesyncReport& desync_of(const CoreVerdict& v) { return std::get<reports::DesyncReport>(v.report); }

TEST_F(CoreTest, AllReduceCountMismatchIsReportedWhenAllMembersArrived) {
  feed(call(0, 2, 1, Op::kAllReduce, 1048576, kFloat16));
  feed(call(1, 2, 1, Op::kAllReduce, 1048576, kFloat16));
  feed(call(0, 2, 2, Op::kAllReduce, 1048576, kFloat16));
  feed(call(1, 2, 2, Op::kAllReduce, 524288, kFloat16));
  auto verdicts = tick();
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(verdicts[0].kind, VerdictKind::kMismatch);
  EXPECT_EQ(verdicts[0].action, VerdictAction::kAbort);
  const auto& report = mismatch_of(verdicts[0]);
  EXPECT_EQ(report.seq, 2u);
  EXPECT_EQ(report.differences, std::vector<std::string>{"count"});
  const std::string text = reports::format_mismatch_text(report);
  EXPECT_EQ(text.substr(0, text.find("\nDiffers")),
            "Cannot apply desired operation due to shape mismatches. All shapes across devices must be valid.\n\n"
            "Operation: `ncclAllReduce` (communicator 3f2a9c, call #2)\n"
            "Input shapes:\n"
            "  - Process 0: [1048576] float16 sum\n"
            "  - Process 1: [524288] float16 sum\n");
  EXPECT_TRUE(tick(kT0 + 100 * kCoreSecond).empty());
}

struct CountRuleCase {
  Op op;
  bool rooted;
};
class CountRuleTest : public CoreTest, public ::testing::WithParamInterface<CountRuleCase> {};

TEST_P(CountRuleTest, CountAsPassedMustAgree) {
  const auto [op, rooted] = GetParam();
  const int32_t root = rooted ? 0 : -1;
  // All-gather passes its send count, reduce-scatter its receive count: equal on every rank when correct.
  for (int32_t r = 0; r < 4; ++r) feed(call(r, 4, 1, op, 256, kFloat32, kSum, root));
  EXPECT_TRUE(tick().empty());
  for (int32_t r = 0; r < 4; ++r) feed(call(r, 4, 2, op, r == 3 ? 128 : 256, kFloat32, kSum, root));
  auto verdicts = tick();
  ASSERT_EQ(verdicts.size(), 1u) << recorder::op_name(op);
  EXPECT_EQ(mismatch_of(verdicts[0]).differences, std::vector<std::string>{"count"});
}

INSTANTIATE_TEST_SUITE_P(EveryCollective, CountRuleTest,
                         ::testing::Values(CountRuleCase{Op::kAllReduce, false}, CountRuleCase{Op::kAllGather, false},
                                           CountRuleCase{Op::kReduceScatter, false},
                                           CountRuleCase{Op::kAlltoAll, false}, CountRuleCase{Op::kBroadcast, true},
                                           CountRuleCase{Op::kBcast, true}, CountRuleCase{Op::kReduce, true},
                                           CountRuleCase{Op::kGather, true}, CountRuleCase{Op::kScatter, true}));

TEST_F(CoreTest, DataTypeMismatch) {
  feed(call(0, 2, 1, Op::kAllGather, 64, kFloat32));
  feed(call(1, 2, 1, Op::kAllGather, 64, kFloat16));
  auto verdicts = tick();
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(mismatch_of(verdicts[0]).differences, std::vector<std::string>{"data type"});
}

TEST_F(CoreTest, ReductionOpMismatchAndDynamicOps) {
  feed(call(0, 2, 1, Op::kAllReduce, 8, kFloat32, kSum));
  feed(call(1, 2, 1, Op::kAllReduce, 8, kFloat32, kMax));
  auto verdicts = tick();
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(mismatch_of(verdicts[0]).differences, std::vector<std::string>{"reduction op"});
  // PreMulSum handles are per communicator and may differ by rank: both dynamic is agreement.
  feed(call(0, 2, 2, Op::kReduceScatter, 8, kFloat32, 5));
  feed(call(1, 2, 2, Op::kReduceScatter, 8, kFloat32, 6));
  EXPECT_TRUE(tick().empty());
  // A dynamic op against a built-in one is not.
  feed(call(0, 2, 3, Op::kReduce, 8, kFloat32, 5, 0));
  feed(call(1, 2, 3, Op::kReduce, 8, kFloat32, kSum, 0));
  verdicts = tick();
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(mismatch_of(verdicts[0]).differences, std::vector<std::string>{"reduction op"});
  // Operations that do not reduce ignore the field.
  feed(call(0, 2, 4, Op::kAllGather, 8, kFloat32, kSum));
  feed(call(1, 2, 4, Op::kAllGather, 8, kFloat32, kMax));
  EXPECT_TRUE(tick().empty());
}

TEST_F(CoreTest, RootMismatchAndBcastMeetsBroadcast) {
  feed(call(0, 2, 1, Op::kBroadcast, 8, kFloat32, -1, 0));
  feed(call(1, 2, 1, Op::kBcast, 8, kFloat32, -1, 0));
  EXPECT_TRUE(tick().empty());
  feed(call(0, 2, 2, Op::kBroadcast, 8, kFloat32, -1, 0));
  feed(call(1, 2, 2, Op::kBroadcast, 8, kFloat32, -1, 1));
  auto verdicts = tick();
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(mismatch_of(verdicts[0]).differences, std::vector<std::string>{"root"});
  EXPECT_NE(reports::format_mismatch_text(mismatch_of(verdicts[0])).find("[8] float32 root 1"), std::string::npos);
}

TEST_F(CoreTest, OperationDivergenceIsReportedOnceAtTheFirstDifferingCall) {
  feed(call(0, 2, 1, Op::kAllReduce, 8));
  feed(call(1, 2, 1, Op::kAllReduce, 8));
  feed(call(0, 2, 2, Op::kAllReduce, 8));
  feed(call(1, 2, 2, Op::kBroadcast, 8, kFloat32, -1, 0));
  feed(call(0, 2, 3, Op::kBroadcast, 8, kFloat32, -1, 0));
  feed(call(1, 2, 3, Op::kAllReduce, 4));
  auto verdicts = tick();
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(verdicts[0].seq, 2u);
  EXPECT_EQ(mismatch_of(verdicts[0]).differences, std::vector<std::string>{"operation"});
  const std::string text = reports::format_mismatch_text(mismatch_of(verdicts[0]));
  EXPECT_NE(text.find("  - Process 1: [8] float32 root 0 `ncclBroadcast`"), std::string::npos) << text;
  EXPECT_EQ(core_.stats().suppressed_mismatches, 1u);
}

TEST_F(CoreTest, SendRecvPairsInsideGroupsAreMatchedPairwise) {
  // 0 -> 1 twice, 1 -> 0 once, all inside a group: the second send from 0 meets the second receive on 1.
  auto in_group = [](Fingerprint f) {
    f.flags |= recorder::kFlagInGroup;
    return f;
  };
  feed(in_group(call(0, 2, 1, Op::kSend, 10, kFloat32, -1, 1)));
  feed(in_group(call(0, 2, 2, Op::kSend, 20, kFloat32, -1, 1)));
  feed(in_group(call(0, 2, 1, Op::kRecv, 30, kFloat32, -1, 1)));
  feed(in_group(call(1, 2, 1, Op::kSend, 30, kFloat32, -1, 0)));
  feed(in_group(call(1, 2, 1, Op::kRecv, 10, kFloat32, -1, 0)));
  EXPECT_TRUE(tick().empty());
  feed(in_group(call(1, 2, 2, Op::kRecv, 20, kFloat16, -1, 0)));
  auto verdicts = tick();
  ASSERT_EQ(verdicts.size(), 1u);
  const auto& report = mismatch_of(verdicts[0]);
  EXPECT_TRUE(report.point_to_point);
  EXPECT_EQ(report.differences, std::vector<std::string>{"data type"});
  const std::string text = reports::format_mismatch_text(report);
  EXPECT_NE(text.find("Operation: `ncclSend`/`ncclRecv` (communicator 3f2a9c, send #2 from rank 0 to rank 1)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  - Process 0: [20] float32 send to rank 1"), std::string::npos);
  EXPECT_NE(text.find("  - Process 1: [20] float16 recv from rank 0"), std::string::npos);
  // A count disagreement.
  feed(call(1, 2, 2, Op::kSend, 5, kFloat32, -1, 0));
  feed(call(0, 2, 2, Op::kRecv, 6, kFloat32, -1, 1));
  verdicts = tick();
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(mismatch_of(verdicts[0]).differences, std::vector<std::string>{"count"});
}

TEST_F(CoreTest, MismatchWaitsForMissingMembersThenReportsWhatItHas) {
  feed(call(0, 3, 1, Op::kAllReduce, 8), kT0);
  feed(call(1, 3, 1, Op::kAllReduce, 9), kT0);
  EXPECT_TRUE(tick(kT0 + kCoreSecond).empty());
  auto verdicts = tick(kT0 + 2 * kCoreSecond);
  ASSERT_EQ(verdicts.size(), 1u);
  const std::string text = reports::format_mismatch_text(mismatch_of(verdicts[0]));
  EXPECT_NE(text.find("  - Process ? (communicator rank 2): (had not reached call #1 when this was reported)"),
            std::string::npos)
      << text;
  feed(call(2, 3, 1, Op::kAllReduce, 8), kT0 + 3 * kCoreSecond);
  EXPECT_TRUE(tick(kT0 + 4 * kCoreSecond).empty());
}

TEST_F(CoreTest, MismatchReportShowsEachRanksStack) {
  core_.on_stack(StackDefinition{1, 7, native_stack({"train_step at train.cc:42", "main at train.cc:80"})});
  feed(call(0, 2, 1, Op::kAllReduce, 8));
  Fingerprint f = call(1, 2, 1, Op::kAllReduce, 9);
  f.stack_id = 7;
  feed(f);
  auto verdicts = tick();
  ASSERT_EQ(verdicts.size(), 1u);
  const std::string text = reports::format_mismatch_text(mismatch_of(verdicts[0]));
  EXPECT_NE(text.find("  Process 1:\n    #0 train_step at train.cc:42\n    #1 main at train.cc:80\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  Process 0:\n    (no stack captured"), std::string::npos) << text;
}

TEST_F(CoreTest, MismatchReportShowsPythonFramesAboveNativeOnesAndTheNote) {
  core_.on_stack(StackDefinition{0, 3, python_stack()});
  CallStack unreadable;
  unreadable.python_note = "Python 3.14 is not supported by this trainscope (3.9 to 3.13)";
  unreadable.native = {"ncclAllReduce at nccl.cc:1"};
  core_.on_stack(StackDefinition{1, 3, unreadable});  // stack ids are per rank: the same id, another stack
  Fingerprint a = call(0, 2, 1, Op::kAllReduce, 8);
  a.stack_id = 3;
  Fingerprint b = call(1, 2, 1, Op::kAllReduce, 9);
  b.stack_id = 3;
  feed(a);
  feed(b);
  auto verdicts = tick();
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(mismatch_of(verdicts[0]).calls[0].stack, python_stack());
  const std::string text = reports::format_mismatch_text(mismatch_of(verdicts[0]));
  EXPECT_NE(text.find("\nStacks at the call:\n"
                      "  Process 0:\n"
                      "    File \"train.py\", line 88, in backward\n"
                      "    File \"train.py\", line 120, in main\n"
                      "    #0 ncclAllReduce at nccl.cc:1\n"
                      "    #1 PyEval_EvalFrame at ceval.c:2\n"
                      "  Process 1:\n"
                      "    (Python stack not captured: Python 3.14 is not supported by this trainscope (3.9 to 3.13))\n"
                      "    #0 ncclAllReduce at nccl.cc:1\n"),
            std::string::npos)
      << text;
}

TEST_F(CoreTest, StacksArePerRankAndBoundedPerRank) {
  CoordinatorOptions options;
  options.max_stacks_per_rank = 1;
  CoordinatorCore core(options);
  core.on_stack(StackDefinition{1, 1, native_stack({"first"})});
  core.on_stack(StackDefinition{1, 2, native_stack({"second: over the bound"})});
  core.on_stack(StackDefinition{1, 1, native_stack({"first, again"})});  // a known id is replaced
  core.on_stack(StackDefinition{0, 2, native_stack({"rank 0's own"})});
  Fingerprint a = call(0, 2, 1, Op::kAllReduce, 8);
  a.stack_id = 2;
  Fingerprint b = call(1, 2, 1, Op::kAllReduce, 9);
  b.stack_id = 2;
  core.on_fingerprints(0, {&a, 1}, 0, kT0);
  core.on_fingerprints(1, {&b, 1}, 0, kT0);
  auto verdicts = core.tick(kT0);
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(mismatch_of(verdicts[0]).calls[0].stack, native_stack({"rank 0's own"}));
  EXPECT_TRUE(mismatch_of(verdicts[0]).calls[1].stack.empty());
}

TEST_F(CoreTest, CollectiveDesyncShowsTheWaitingCallsAndTheMissingRanksLastCalls) {
  CoordinatorCore core;
  core.on_stack(StackDefinition{0, 4, python_stack()});
  core.on_stack(StackDefinition{2, 5, native_stack({"evaluate at eval.cc:7"})});
  auto feed_to = [&](Fingerprint f, uint32_t stack_id, uint64_t caller) {
    f.stack_id = stack_id;
    f.caller = caller;
    core.on_fingerprints(f.comm_rank, {&f, 1}, 0, kT0);
  };
  feed_to(call(0, 3, 1, Op::kAllReduce, 8), 0, 0x100);
  feed_to(call(1, 3, 1, Op::kAllReduce, 8), 0, 0x100);
  feed_to(call(2, 3, 1, Op::kAllReduce, 8), 5, 0x500);
  feed_to(call(0, 3, 2, Op::kAllReduce, 8), 4, 0x400);  // ranks 0 and 1 wait in call 2; rank 2 never comes
  feed_to(call(1, 3, 2, Op::kAllReduce, 8), 0, 0x401234);
  Fingerprint destroyed = ended(2, 3, Op::kCommDestroy);
  core.on_fingerprints(2, {&destroyed, 1}, 0, kT0 + kCoreSecond);
  const auto verdicts = core.tick(kT0 + kCoreSecond);
  ASSERT_EQ(verdicts.size(), 1u);
  const auto& report = desync_of(verdicts[0]);
  ASSERT_EQ(report.waiting.size(), 2u);
  EXPECT_EQ(report.waiting[0].stack, python_stack());
  EXPECT_EQ(report.waiting[0].caller, 0x400u);
  EXPECT_TRUE(report.waiting[1].stack.empty());
  ASSERT_EQ(report.missing.size(), 1u);
  EXPECT_EQ(report.missing[0].last_stack, native_stack({"evaluate at eval.cc:7"}));
  const std::string text = reports::format_desync_text(report);
  EXPECT_NE(text.find("\nStacks at the waiting calls:\n"
                      "  Process 0:\n"
                      "    File \"train.py\", line 88, in backward\n"
                      "    File \"train.py\", line 120, in main\n"
                      "    #0 ncclAllReduce at nccl.cc:1\n"
                      "    #1 PyEval_EvalFrame at ceval.c:2\n"
                      "  Process 1:\n"
                      "    (no stack captured; call site 0x401234)\n"
                      "\n"
                      "Stacks at the last calls of the ranks that did not arrive:\n"
                      "  Process 2:\n"
                      "    #0 evaluate at eval.cc:7\n"),
            std::string::npos)
      << text;
}

TEST_F(CoreTest, CollectiveDesyncWaitingCallsIgnoreStaleHeartbeats) {
  CoordinatorCore core;
  core.on_stack(StackDefinition{0, 1, native_stack({"call one"})});
  core.on_stack(StackDefinition{0, 5, native_stack({"call five"})});
  core.on_stack(StackDefinition{2, 5, native_stack({"rank 2's call five"})});
  // Ranks 0 and 2 go on to call 5; the last heartbeat of rank 0 came while it was inside call 1 (calls return fast,
  // heartbeats are a second apart), rank 2's says it is inside call 5 since a given time.
  for (uint64_t seq = 1; seq <= 5; ++seq) {
    for (int32_t rank : {0, 2}) {
      Fingerprint f = call(rank, 3, seq, Op::kAllReduce, 8);
      f.stack_id = seq == 1 || seq == 5 ? static_cast<uint32_t>(seq) : 0;
      f.caller = 0x100 * seq;
      core.on_fingerprints(rank, {&f, 1}, 0, kT0);
    }
  }
  Fingerprint other = call(1, 3, 1, Op::kAllReduce, 8);
  core.on_fingerprints(1, {&other, 1}, 0, kT0);
  core.on_heartbeat(Heartbeat{0, kT0, {HeartbeatCall{kComm, 1, kT0 + 1, uint16_t(Op::kAllReduce)}}}, kT0);
  core.on_heartbeat(Heartbeat{2, kT0, {HeartbeatCall{kComm, 5, kT0 + 77, uint16_t(Op::kAllReduce)}}}, kT0);
  Fingerprint destroyed = ended(1, 3, Op::kCommDestroy);
  core.on_fingerprints(1, {&destroyed, 1}, 0, kT0 + kCoreSecond);
  const auto verdicts = core.tick(kT0 + kCoreSecond);
  ASSERT_EQ(verdicts.size(), 1u);
  const auto& report = desync_of(verdicts[0]);
  EXPECT_EQ(report.seq, 2u);
  ASSERT_EQ(report.waiting.size(), 2u);
  EXPECT_EQ(report.waiting[0].seq, 5u) << "not the stale heartbeat's call 1";
  EXPECT_EQ(report.waiting[0].since_ns, kT0 + 5 * 1000);
  EXPECT_EQ(report.waiting[0].stack, native_stack({"call five"}));
  EXPECT_EQ(report.waiting[0].caller, 0x500u);
  EXPECT_EQ(report.waiting[1].seq, 5u);
  EXPECT_EQ(report.waiting[1].since_ns, kT0 + 77) << "a current heartbeat says since when";
  EXPECT_EQ(report.waiting[1].stack, native_stack({"rank 2's call five"}));
}

class CertainDesyncTest : public CoreTest, public ::testing::WithParamInterface<Op> {};

TEST_P(CertainDesyncTest, ALaggingMemberThatEndedTheCommunicatorIsReportedAtOnce) {
  for (uint64_t seq = 1; seq <= 4; ++seq) {
    feed(call(0, 2, seq, Op::kAllReduce, 8));
    feed(call(1, 2, seq, Op::kAllReduce, 8));
  }
  feed(call(0, 2, 5, Op::kAllReduce, 8));
  EXPECT_TRUE(tick().empty());
  feed(ended(1, 2, GetParam()));
  auto verdicts = tick();
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(verdicts[0].kind, VerdictKind::kDesync);
  EXPECT_EQ(verdicts[0].action, VerdictAction::kAbort);
  const auto& report = desync_of(verdicts[0]);
  EXPECT_TRUE(report.certain);
  EXPECT_EQ(report.seq, 5u);
  ASSERT_EQ(report.waiting.size(), 1u);
  EXPECT_EQ(report.waiting[0].global_rank, 0);
  ASSERT_EQ(report.missing.size(), 1u);
  EXPECT_EQ(report.missing[0].last_seq, 4u);
  EXPECT_FALSE(report.missing[0].process_gone);
  const std::string text = reports::format_desync_text(report);
  EXPECT_NE(text.find("last call #4 `ncclAllReduce`"), std::string::npos) << text;
  EXPECT_NE(text.find(reports::laggard_state_text(report.missing[0].state)), std::string::npos) << text;
}

INSTANTIATE_TEST_SUITE_P(HowItEnded, CertainDesyncTest,
                         ::testing::Values(Op::kCommDestroy, Op::kCommAbort, Op::kCommFinalize, Op::kCommRevoke));

TEST_F(CoreTest, ALaggingMemberThatVanishedOrExitedIsACertainDesync) {
  for (int32_t lagging : {1, 2}) {
    CoordinatorCore core;
    for (int32_t r = 0; r < 3; ++r) {
      Hello hello;
      hello.global_rank = r;
      hello.host = "node" + std::to_string(r);
      hello.pid = 100 + r;
      core.on_hello(hello, kT0);
    }
    auto feed_to = [&](const Fingerprint& f) { core.on_fingerprints(f.comm_rank, {&f, 1}, 0, kT0); };
    for (int32_t r = 0; r < 3; ++r) feed_to(call(r, 3, 1, Op::kAllReduce, 8));
    for (int32_t r = 0; r < 3; ++r) {
      if (r != lagging) feed_to(call(r, 3, 2, Op::kAllReduce, 8));
    }
    if (lagging == 1) {
      core.on_disconnect(1, false, kT0 + kCoreSecond);
    } else {
      core.on_goodbye(2, kT0 + kCoreSecond);
    }
    auto verdicts = core.tick(kT0 + kCoreSecond);
    ASSERT_EQ(verdicts.size(), lagging == 1 ? 2u : 1u);
    const CoreVerdict& desync = verdicts.back();
    ASSERT_EQ(desync.kind, VerdictKind::kDesync);
    const auto& report = desync_of(desync);
    EXPECT_TRUE(report.certain);
    ASSERT_EQ(report.missing.size(), 1u);
    EXPECT_TRUE(report.missing[0].process_gone);
    EXPECT_EQ(report.missing[0].state,
              lagging == 1 ? reports::LaggardState::kVanished : reports::LaggardState::kExited);
    EXPECT_EQ(report.missing[0].host, "node" + std::to_string(lagging));
    EXPECT_EQ(report.waiting.size(), 2u);
  }
}

TEST_F(CoreTest, RanksLeavingAfterAStopOnRequestAreNoDesyncAndNoVanishing) {
  CoordinatorCore core;
  auto feed_to = [&](const Fingerprint& f) { core.on_fingerprints(f.comm_rank, {&f, 1}, 0, kT0); };
  for (int32_t r = 0; r < 3; ++r) feed_to(call(r, 3, 1, Op::kAllReduce, 8));
  feed_to(call(0, 3, 2, Op::kAllReduce, 8));  // rank 0 is in call 2 when rank 1 stops the job after its batch
  core.on_goodbye(1, kT0 + kCoreSecond, /*stopping_job=*/true);
  core.on_disconnect(2, false, kT0 + kCoreSecond);  // rank 2 stopped itself too, without a goodbye
  for (uint64_t t = 1; t < 10; ++t) EXPECT_TRUE(core.tick(kT0 + t * kCoreSecond).empty()) << t;
}

TEST_F(CoreTest, AliveButSilentMemberIsAWarningAfterTheTimeoutThenAgain) {
  CoordinatorOptions options;
  options.desync_timeout_ns = 300 * kCoreSecond;
  CoordinatorCore core(options);
  auto feed_to = [&](const Fingerprint& f, uint64_t now) { core.on_fingerprints(f.comm_rank, {&f, 1}, 0, now); };
  feed_to(call(0, 2, 1, Op::kAllReduce, 8), kT0);
  feed_to(call(1, 2, 1, Op::kAllReduce, 8), kT0);
  feed_to(call(0, 2, 2, Op::kAllReduce, 8), kT0 + kCoreSecond);
  Heartbeat heartbeat{0, kT0 + 2 * kCoreSecond, {HeartbeatCall{kComm, 2, kT0 + kCoreSecond, uint16_t(Op::kAllReduce)}}};
  core.on_heartbeat(heartbeat, kT0 + 2 * kCoreSecond);
  EXPECT_TRUE(core.tick(kT0 + 300 * kCoreSecond).empty());
  auto verdicts = core.tick(kT0 + 301 * kCoreSecond);
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(verdicts[0].kind, VerdictKind::kDesync);
  EXPECT_EQ(verdicts[0].action, VerdictAction::kWarn);
  const auto& first = desync_of(verdicts[0]);
  EXPECT_FALSE(first.certain);
  EXPECT_EQ(first.repeat, 1u);
  ASSERT_EQ(first.waiting.size(), 1u);
  EXPECT_EQ(first.waiting[0].since_ns, kT0 + kCoreSecond);
  ASSERT_EQ(first.missing.size(), 1u);
  EXPECT_EQ(first.missing[0].state, reports::LaggardState::kAlive);
  EXPECT_TRUE(core.tick(kT0 + 400 * kCoreSecond).empty());
  verdicts = core.tick(kT0 + 601 * kCoreSecond);
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(desync_of(verdicts[0]).repeat, 2u);
  EXPECT_EQ(reports::desync_base_name(desync_of(verdicts[0])), "desync-3f2a9c-2-2");
  // The checkpoint is done: it arrives, nothing more is said.
  feed_to(call(1, 2, 2, Op::kAllReduce, 8), kT0 + 700 * kCoreSecond);
  EXPECT_TRUE(core.tick(kT0 + 2000 * kCoreSecond).empty());
}

TEST_F(CoreTest, VanishedRankReportNamesHostPidLastCallAndRecorder) {
  Hello hello;
  hello.global_rank = 1;
  hello.host = "node7";
  hello.pid = 4242;
  hello.flight_recorder_path = "/runs/r1/rank1.tsfr";
  core_.on_hello(hello, kT0);
  feed(call(1, 2, 1, Op::kAllReduce, 8));
  feed(call(0, 2, 1, Op::kAllReduce, 8));
  core_.on_disconnect(1, false, kT0 + 5 * kCoreSecond);
  auto verdicts = tick(kT0 + 5 * kCoreSecond);
  ASSERT_EQ(verdicts.size(), 1u);  // nobody waits for it: no desync
  EXPECT_EQ(verdicts[0].kind, VerdictKind::kVanished);
  EXPECT_EQ(verdicts[0].action, VerdictAction::kAbort);  // it is still a member of a live communicator
  const auto& report = std::get<reports::VanishedReport>(verdicts[0].report);
  const std::string text = reports::format_vanished_text(report);
  EXPECT_NE(text.find("Rank 1 vanished"), std::string::npos);
  EXPECT_NE(text.find("Host: node7, pid 4242"), std::string::npos);
  EXPECT_NE(text.find("Last call: `ncclAllReduce` (communicator 3f2a9c, call #1)"), std::string::npos) << text;
  EXPECT_NE(text.find("/runs/r1/rank1.tsfr"), std::string::npos);
  EXPECT_EQ(text.find("Stack at the last call:"), std::string::npos) << "no stack known: no section";
  core_.on_disconnect(1, false, kT0 + 6 * kCoreSecond);  // reported once
  EXPECT_TRUE(tick(kT0 + 6 * kCoreSecond).empty());
}

TEST_F(CoreTest, VanishedRankReportShowsTheStackOfItsLastCall) {
  core_.on_stack(StackDefinition{1, 2, python_stack()});
  feed(call(0, 2, 1, Op::kAllReduce, 8));
  Fingerprint last = call(1, 2, 1, Op::kAllReduce, 8);
  last.stack_id = 2;
  feed(last);
  core_.on_disconnect(1, false, kT0 + 5 * kCoreSecond);
  auto verdicts = tick(kT0 + 5 * kCoreSecond);
  ASSERT_EQ(verdicts.size(), 1u);
  const auto& report = std::get<reports::VanishedReport>(verdicts[0].report);
  EXPECT_EQ(report.last_stack, python_stack());
  const std::string text = reports::format_vanished_text(report);
  EXPECT_NE(text.find(" UTC\nStack at the last call:\n"
                      "  File \"train.py\", line 88, in backward\n"
                      "  File \"train.py\", line 120, in main\n"
                      "  #0 ncclAllReduce at nccl.cc:1\n"
                      "  #1 PyEval_EvalFrame at ceval.c:2\n"
                      "Flight recorder: "),
            std::string::npos)
      << text;
}

// All ranks of one host gone in the same settling (a node lost, its link cut): one verdict naming the host and its
// ranks; the recorder of a rank of another host is named as that host's.
TEST(CoordinatorHostsTest, AllRanksOfOneHostVanishingTogetherIsAHostLost) {
  CoordinatorOptions options;
  options.own_host_id = "boot-a/1/1";
  CoordinatorCore core(options);
  const std::vector<std::pair<std::string, std::string>> hosts = {
      {"host0", "boot-a/1/1"}, {"host1", "boot-a/2/2"}, {"host2", "boot-a/3/3"}};
  for (int32_t rank = 0; rank < 6; ++rank) {
    Hello hello;
    hello.global_rank = rank;
    hello.world_size = 6;
    hello.pid = 10 + rank;
    hello.host = hosts[static_cast<size_t>(rank / 2)].first;
    hello.host_id = hosts[static_cast<size_t>(rank / 2)].second;
    hello.flight_recorder_path = "/runs/r1/rank" + std::to_string(rank) + ".tsrec";
    core.on_hello(hello, kT0);
  }
  for (int32_t rank = 0; rank < 6; ++rank) {
    Fingerprint f = call(rank, 6, 1, Op::kAllReduce, 8);
    core.on_fingerprints(rank, std::span<const Fingerprint>(&f, 1), 0, kT0);
  }
  core.on_disconnect(5, false, kT0 + kCoreSecond);
  core.on_disconnect(4, false, kT0 + kCoreSecond);
  auto verdicts = core.tick(kT0 + kCoreSecond);
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(verdicts[0].kind, VerdictKind::kVanished);
  EXPECT_EQ(verdicts[0].action, VerdictAction::kAbort);
  const auto& report = std::get<reports::VanishedReport>(verdicts[0].report);
  EXPECT_EQ(report.host_ranks_lost, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(report.flight_recorder_elsewhere, "host2");
  const std::string text = reports::format_vanished_text(report);
  EXPECT_NE(text.find("Host lost: host2, ranks 4 and 5 vanished together\n"), std::string::npos) << text;
  EXPECT_NE(text.find("Flight recorder: /runs/r1/rank5.tsrec on host2 (not on the coordinator's host"),
            std::string::npos)
      << text;
  EXPECT_EQ(reports::vanished_json(report)["host_ranks_lost"], nlohmann::json::array({4, 5}));
  EXPECT_EQ(core.manifest()["ranks"][4]["host_id"], "boot-a/3/3");  // which ranks share a host, for a reader
}

// Ranks 0 and 1 on host0, 2 and 3 on host1 (host names only: no host identity).
void hellos_from_two_hosts(CoordinatorCore& core) {
  for (int32_t rank = 0; rank < 4; ++rank) {
    Hello hello;
    hello.global_rank = rank;
    hello.world_size = 4;
    hello.host = rank < 2 ? "host0" : "host1";
    core.on_hello(hello, kT0);
  }
}

TEST(CoordinatorHostsTest, AJobVanishingEverywhereAtOnceLostNoHost) {
  CoordinatorCore core;
  hellos_from_two_hosts(core);
  for (int32_t rank = 0; rank < 4; ++rank) core.on_disconnect(rank, false, kT0 + kCoreSecond);
  const auto verdicts = core.tick(kT0 + kCoreSecond);
  ASSERT_EQ(verdicts.size(), 4u);  // one per rank, as on one host
  for (const CoreVerdict& verdict : verdicts)
    EXPECT_TRUE(std::get<reports::VanishedReport>(verdict.report).host_ranks_lost.empty());
}

TEST(CoordinatorHostsTest, HostIdentityIsBootIdAndNamespaces) {
  const std::string id = host_identity();
  ASSERT_FALSE(id.empty()) << "this test runs where /proc tells the boot id";
  EXPECT_EQ(std::count(id.begin(), id.end(), '/'), 2) << id;
  EXPECT_EQ(id.find('/'), 36u) << id;  // a UUID first
  EXPECT_TRUE(same_host_identity(id, host_identity()));
  EXPECT_FALSE(same_host_identity("", ""));
  EXPECT_FALSE(same_host_identity(id, id.substr(0, id.rfind('/')) + "/1"));
}

TEST(CoordinatorHostsTest, OneRankOfAHostVanishingIsNoHostLost) {
  CoordinatorCore core;
  hellos_from_two_hosts(core);
  core.on_disconnect(3, false, kT0 + kCoreSecond);
  auto verdicts = core.tick(kT0 + kCoreSecond);
  ASSERT_EQ(verdicts.size(), 1u);
  const auto& report = std::get<reports::VanishedReport>(verdicts[0].report);
  EXPECT_TRUE(report.host_ranks_lost.empty());
  EXPECT_TRUE(report.flight_recorder_elsewhere.empty()) << "the coordinator's own identity is not known";
  EXPECT_EQ(reports::format_vanished_text(report).find("Host lost"), std::string::npos);
}

TEST_F(CoreTest, GoodbyeThenDisconnectIsNoReport) {
  feed(call(0, 2, 1, Op::kAllReduce, 8));
  feed(call(1, 2, 1, Op::kAllReduce, 8));
  feed(ended(1, 2, Op::kCommDestroy));
  core_.on_goodbye(1, kT0);
  core_.on_disconnect(1, true, kT0);
  core_.on_disconnect(1, false, kT0);
  EXPECT_TRUE(tick(kT0 + 1000 * kCoreSecond).empty());
}

TEST_F(CoreTest, CleanRunOfTenThousandCollectivesOnFourRanksHasNoVerdict) {
  constexpr uint64_t kCalls = 10000;
  constexpr uint64_t kBatch = 100;
  const Op ops[] = {Op::kAllReduce, Op::kAllGather, Op::kBroadcast, Op::kReduceScatter};
  uint64_t now = kT0;
  for (uint64_t first = 1; first <= kCalls; first += kBatch) {
    for (int32_t r = 3; r >= 0; --r) {  // ranks arrive in different orders and batches
      std::vector<Fingerprint> batch;
      for (uint64_t seq = first; seq < first + kBatch; ++seq) {
        const Op op = ops[seq % 4];
        batch.push_back(call(r, 4, seq, op, 1000 + seq % 7, kFloat16, kSum, op == Op::kBroadcast ? 0 : -1));
        batch.push_back(call(r, 4, seq, op, 0));
        batch.back().kind = static_cast<uint8_t>(EventKind::kReturned);
      }
      core_.on_fingerprints(r, batch, 0, now);
    }
    now += kCoreSecond / 10;
    ASSERT_TRUE(tick(now).empty());
  }
  for (int32_t r = 0; r < 4; ++r) {
    feed(ended(r, 4, Op::kCommDestroy), now);
    core_.on_goodbye(r, now);
    core_.on_disconnect(r, true, now);
  }
  EXPECT_TRUE(tick(now + 1000 * kCoreSecond).empty());
  EXPECT_EQ(core_.stats().outstanding_calls, 0u);
  EXPECT_EQ(core_.stats().verdicts, 0u);
}

TEST_F(CoreTest, LostFingerprintsCountAsArrivalsNotAsDesync) {
  feed(call(0, 2, 1, Op::kAllReduce, 8));
  feed(call(0, 2, 2, Op::kAllReduce, 8));
  feed(call(0, 2, 3, Op::kAllReduce, 8));
  feed(call(1, 2, 1, Op::kAllReduce, 8));
  feed(call(1, 2, 3, Op::kAllReduce, 8));  // its fingerprint of call 2 was dropped
  EXPECT_TRUE(tick(kT0 + 1000 * kCoreSecond).empty());
  EXPECT_EQ(core_.stats().outstanding_calls, 0u);
}

// ---- send/recv desyncs: a send or receive whose other side never comes ----

Fingerprint send(int32_t from, int32_t to, uint64_t n, int32_t nranks = 2) {
  return call(from, nranks, n, Op::kSend, 128, kFloat32, -1, to);
}
Fingerprint recv(int32_t on, int32_t from, uint64_t n, int32_t nranks = 2) {
  return call(on, nranks, n, Op::kRecv, 128, kFloat32, -1, from);
}

Hello hello_of(int32_t rank) {
  Hello hello;
  hello.global_rank = rank;
  hello.world_size = 2;
  hello.host = "node" + std::to_string(rank);
  hello.pid = 100 + rank;
  return hello;
}

class PointToPointTest : public CoreTest {
 protected:
  static CoordinatorOptions options() {
    CoordinatorOptions options;
    options.desync_timeout_ns = 300 * kCoreSecond;
    options.scan_interval_ns = 0;  // every tick looks: the timeout is checked to the nanosecond
    return options;
  }
  PointToPointTest() : CoreTest(options()) {
    for (int32_t r = 0; r < 2; ++r) core_.on_hello(hello_of(r), kT0);
  }
};

TEST_F(PointToPointTest, RecvWithoutItsSendIsAWarningAfterTheTimeoutThenAgain) {
  feed(send(0, 1, 1), kT0);
  feed(recv(1, 0, 1), kT0);
  // Rank 1 waits in its 2nd and 3rd receive from rank 0, which made one send only: one warning, about the 2nd.
  feed(recv(1, 0, 2), kT0 + kCoreSecond);
  feed(recv(1, 0, 3), kT0 + 2 * kCoreSecond);
  EXPECT_TRUE(tick(kT0 + kCoreSecond).empty());
  EXPECT_TRUE(tick(kT0 + 301 * kCoreSecond - 1).empty());
  auto verdicts = tick(kT0 + 301 * kCoreSecond);
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(verdicts[0].kind, VerdictKind::kDesync);
  EXPECT_EQ(verdicts[0].action, VerdictAction::kWarn);
  EXPECT_EQ(verdicts[0].comm_id, kComm);
  EXPECT_EQ(verdicts[0].seq, 2u);
  const auto& first = desync_of(verdicts[0]);
  EXPECT_TRUE(first.point_to_point);
  EXPECT_FALSE(first.certain);
  EXPECT_EQ(first.repeat, 1u);
  EXPECT_EQ(first.sender, 0);
  EXPECT_EQ(first.receiver, 1);
  EXPECT_EQ(first.seq, 2u);
  EXPECT_EQ(first.op, uint16_t(Op::kRecv));
  EXPECT_EQ(first.stuck_since_ns, kT0 + kCoreSecond);
  ASSERT_EQ(first.waiting.size(), 1u);
  EXPECT_EQ(first.waiting[0].global_rank, 1);
  EXPECT_EQ(first.waiting[0].seq, 2u);
  EXPECT_EQ(first.waiting[0].since_ns, recv(1, 0, 2).start_ns);
  ASSERT_EQ(first.missing.size(), 1u);
  EXPECT_EQ(first.missing[0].global_rank, 0);
  EXPECT_EQ(first.missing[0].state, reports::LaggardState::kAlive);
  EXPECT_EQ(first.missing[0].host, "node0");
  EXPECT_EQ(first.missing[0].last_op, uint16_t(Op::kSend));
  EXPECT_EQ(first.missing[0].last_seq, 1u);
  EXPECT_EQ(first.missing[0].last_peer, 1);
  EXPECT_EQ(reports::desync_base_name(first), "desync-3f2a9c-send-0-1-2");
  const std::string text = reports::format_desync_text(first);
  EXPECT_NE(text.find("rank 1 waits in recv #2 from rank 0; rank 0 has not made that send after 300.00s. It is alive"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("last call send #1 to rank 1 `ncclSend`"), std::string::npos) << text;
  // Not again before another timeout; then again, as the same stuck receive.
  EXPECT_TRUE(tick(kT0 + 600 * kCoreSecond).empty());
  verdicts = tick(kT0 + 601 * kCoreSecond);
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(desync_of(verdicts[0]).repeat, 2u);
  EXPECT_EQ(desync_of(verdicts[0]).seq, 2u);
  EXPECT_EQ(reports::desync_base_name(desync_of(verdicts[0])), "desync-3f2a9c-send-0-1-2-2");
  // The sends come: nothing more is said.
  feed(send(0, 1, 2), kT0 + 700 * kCoreSecond);
  feed(send(0, 1, 3), kT0 + 700 * kCoreSecond);
  EXPECT_TRUE(tick(kT0 + 2000 * kCoreSecond).empty());
  EXPECT_EQ(core_.stats().verdicts, 2u);
}

TEST_F(PointToPointTest, SendWithoutItsRecvIsAWarningAfterTheTimeoutThenAgain) {
  feed(send(0, 1, 1), kT0);
  feed(recv(1, 0, 1), kT0);
  feed(send(1, 0, 1), kT0 + 10 * kCoreSecond);
  EXPECT_TRUE(tick(kT0 + 310 * kCoreSecond - 1).empty());
  auto verdicts = tick(kT0 + 310 * kCoreSecond);
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(verdicts[0].action, VerdictAction::kWarn);
  const auto& report = desync_of(verdicts[0]);
  EXPECT_TRUE(report.point_to_point);
  EXPECT_EQ(report.sender, 1);
  EXPECT_EQ(report.receiver, 0);
  EXPECT_EQ(report.seq, 1u);
  EXPECT_EQ(report.op, uint16_t(Op::kSend));
  ASSERT_EQ(report.waiting.size(), 1u);
  EXPECT_EQ(report.waiting[0].global_rank, 1);
  ASSERT_EQ(report.missing.size(), 1u);
  EXPECT_EQ(report.missing[0].global_rank, 0);
  EXPECT_EQ(report.missing[0].last_op, uint16_t(Op::kSend));
  EXPECT_EQ(report.missing[0].last_peer, 1);
  EXPECT_EQ(reports::desync_base_name(report), "desync-3f2a9c-send-1-0-1");
  const std::string text = reports::format_desync_text(report);
  EXPECT_NE(text.find("rank 1 waits in send #1 to rank 0; rank 0 has not made that receive after 300.00s."),
            std::string::npos)
      << text;
  EXPECT_TRUE(tick(kT0 + 609 * kCoreSecond).empty());
  verdicts = tick(kT0 + 610 * kCoreSecond);
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(desync_of(verdicts[0]).repeat, 2u);
}

TEST_F(PointToPointTest, MatchedPairsArrivingLateInEitherOrderAreNoDesync) {
  uint64_t now = kT0;
  for (uint64_t n = 1; n <= 50; ++n) {
    const bool send_first = n % 2 == 0;
    feed(send_first ? send(0, 1, n) : recv(1, 0, n), now);
    feed(send_first ? recv(0, 1, n) : send(1, 0, n), now);
    ASSERT_TRUE(tick(now + 299 * kCoreSecond).empty()) << n;
    // The other side comes just within the timeout.
    now += 299 * kCoreSecond;
    feed(send_first ? recv(1, 0, n) : send(0, 1, n), now);
    feed(send_first ? send(1, 0, n) : recv(0, 1, n), now);
    ASSERT_TRUE(tick(now).empty()) << n;
  }
  for (int32_t r = 0; r < 2; ++r) core_.on_goodbye(r, now);
  EXPECT_TRUE(tick(now + 1000 * kCoreSecond).empty());
  EXPECT_EQ(core_.stats().verdicts, 0u);
  EXPECT_EQ(core_.stats().lost_counterparts, 0u);
}

TEST_F(PointToPointTest, ReceivesPostedFarAheadWaitFromTheMatchBeforeThemNotFromTheirArrival) {
  // Rank 1 posts ten receives at once; rank 0 sends one every 200 s: slow, but the pair moves.
  for (uint64_t n = 1; n <= 10; ++n) feed(recv(1, 0, n), kT0);
  for (uint64_t n = 1; n <= 5; ++n) {
    ASSERT_TRUE(tick(kT0 + (200 * n - 1) * kCoreSecond).empty()) << n;
    feed(send(0, 1, n), kT0 + 200 * n * kCoreSecond);
  }
  // Then rank 0 stops sending: receive #6 waits from the match of #5 on.
  EXPECT_TRUE(tick(kT0 + 1300 * kCoreSecond - 1).empty());
  const auto verdicts = tick(kT0 + 1300 * kCoreSecond);
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(desync_of(verdicts[0]).seq, 6u);
  EXPECT_EQ(desync_of(verdicts[0]).stuck_since_ns, kT0 + 1000 * kCoreSecond);
}

enum class HowItLeft { kDestroyed, kExited, kVanished };

class PeerLeftTest : public PointToPointTest, public ::testing::WithParamInterface<HowItLeft> {
 protected:
  void leave(int32_t rank, uint64_t now) {
    switch (GetParam()) {
      case HowItLeft::kDestroyed:
        feed(ended(rank, 2, Op::kCommDestroy), now);
        break;
      case HowItLeft::kExited:
        core_.on_goodbye(rank, now);
        core_.on_disconnect(rank, true, now);
        break;
      case HowItLeft::kVanished:
        core_.on_disconnect(rank, false, now);
        break;
    }
  }
  // The verdicts but the vanished-rank report.
  static std::vector<CoreVerdict> desyncs(std::vector<CoreVerdict> verdicts) {
    std::erase_if(verdicts, [](const CoreVerdict& v) { return v.kind == VerdictKind::kVanished; });
    return verdicts;
  }
  static reports::LaggardState state() {
    switch (GetParam()) {
      case HowItLeft::kDestroyed:
        return reports::LaggardState::kDestroyed;
      case HowItLeft::kExited:
        return reports::LaggardState::kExited;
      case HowItLeft::kVanished:
        return reports::LaggardState::kVanished;
    }
    return reports::LaggardState::kUnknown;
  }
};

TEST_P(PeerLeftTest, WhileARecvWaitsForItIsACertainDesync) {
  for (uint64_t n = 1; n <= 6; ++n) {
    feed(send(0, 1, n), kT0);
    feed(recv(1, 0, n), kT0);
  }
  core_.on_stack(
      StackDefinition{1, 9, native_stack({"recv_activations at pipeline.cc:88", "main at pipeline.cc:120"})});
  Fingerprint waiting = recv(1, 0, 7);
  waiting.stack_id = 9;
  feed(waiting, kT0 + kCoreSecond);
  EXPECT_TRUE(tick(kT0 + kCoreSecond).empty());
  leave(0, kT0 + 2 * kCoreSecond);
  const auto verdicts = desyncs(tick(kT0 + 2 * kCoreSecond));
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(verdicts[0].kind, VerdictKind::kDesync);
  EXPECT_EQ(verdicts[0].action, VerdictAction::kAbort);
  EXPECT_EQ(verdicts[0].seq, 7u);
  const auto& report = desync_of(verdicts[0]);
  EXPECT_TRUE(report.point_to_point);
  EXPECT_TRUE(report.certain);
  EXPECT_EQ(report.sender, 0);
  EXPECT_EQ(report.receiver, 1);
  EXPECT_EQ(report.seq, 7u);
  ASSERT_EQ(report.waiting.size(), 1u);
  EXPECT_EQ(report.waiting[0].stack.native,
            (std::vector<std::string>{"recv_activations at pipeline.cc:88", "main at pipeline.cc:120"}));
  ASSERT_EQ(report.missing.size(), 1u);
  EXPECT_EQ(report.missing[0].state, state());
  EXPECT_EQ(report.missing[0].process_gone, GetParam() != HowItLeft::kDestroyed);
  EXPECT_EQ(report.missing[0].last_seq, 6u);
  EXPECT_EQ(report.missing[0].last_op, uint16_t(Op::kSend));
  const std::string text = reports::format_desync_text(report);
  EXPECT_NE(text.find("rank 1 waits in recv #7 from rank 0; rank 0 can never make that send.\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find(reports::laggard_state_text(state())), std::string::npos) << text;
  EXPECT_NE(text.find("    #0 recv_activations at pipeline.cc:88\n"), std::string::npos) << text;
  // Reported once: no timeout warnings about it later.
  EXPECT_TRUE(desyncs(tick(kT0 + 1000 * kCoreSecond)).empty());
}

TEST_P(PeerLeftTest, BeforeTheWaitingSideArrivesIsACertainDesyncWhenItDoes) {
  // Rank 1 left after its 3 receives; rank 0's 4th send to it arrives afterwards.
  for (uint64_t n = 1; n <= 3; ++n) {
    feed(send(0, 1, n), kT0);
    feed(recv(1, 0, n), kT0);
  }
  leave(1, kT0 + kCoreSecond);
  const auto at_leave = tick(kT0 + kCoreSecond);
  EXPECT_TRUE(desyncs(at_leave).empty());
  feed(send(0, 1, 4), kT0 + 2 * kCoreSecond);
  const auto verdicts = desyncs(tick(kT0 + 2 * kCoreSecond));
  if (GetParam() == HowItLeft::kVanished) {
    // Vanishing while still a member of a live communicator stopped the job already: what follows is no news.
    ASSERT_EQ(at_leave.size(), 1u);
    EXPECT_EQ(at_leave[0].action, VerdictAction::kAbort);
    EXPECT_TRUE(verdicts.empty());
    return;
  }
  ASSERT_EQ(verdicts.size(), 1u);
  const auto& report = desync_of(verdicts[0]);
  EXPECT_TRUE(report.certain);
  EXPECT_EQ(report.op, uint16_t(Op::kSend));
  EXPECT_EQ(report.waiting[0].global_rank, 0);
  EXPECT_EQ(report.missing[0].global_rank, 1);
  EXPECT_NE(reports::format_desync_text(report).find("rank 0 waits in send #4 to rank 1; rank 1 can never make that "
                                                     "receive.\n"),
            std::string::npos);
}

TEST_P(PeerLeftTest, AfterItsLastSendMatchedTheOtherSideStillComingIsNoDesync) {
  // Rank 0 made its 3 sends and left; rank 1's receives are still on their way: nobody waits for rank 0.
  for (uint64_t n = 1; n <= 3; ++n) feed(send(0, 1, n), kT0);
  leave(0, kT0 + kCoreSecond);
  EXPECT_TRUE(desyncs(tick(kT0 + kCoreSecond)).empty());
  // Its own sends wait for nobody either, however long the receives take.
  EXPECT_TRUE(desyncs(tick(kT0 + 1000 * kCoreSecond)).empty());
  for (uint64_t n = 1; n <= 3; ++n) feed(recv(1, 0, n), kT0 + 1001 * kCoreSecond);
  EXPECT_TRUE(desyncs(tick(kT0 + 2000 * kCoreSecond)).empty());
  EXPECT_EQ(core_.stats().lost_counterparts, 0u);
}

INSTANTIATE_TEST_SUITE_P(HowItLeft, PeerLeftTest,
                         ::testing::Values(HowItLeft::kDestroyed, HowItLeft::kExited, HowItLeft::kVanished),
                         [](const ::testing::TestParamInfo<HowItLeft>& param_info) {
                           switch (param_info.param) {
                             case HowItLeft::kDestroyed:
                               return "Destroyed";
                             case HowItLeft::kExited:
                               return "Exited";
                             case HowItLeft::kVanished:
                               return "Vanished";
                           }
                           return "Unknown";
                         });

TEST(PointToPointOptionsTest, CertainDesyncFollowsOnDesyncAndAPeerThatDroppedFingerprintsOnlyWarns) {
  for (const bool lossy : {false, true}) {
    CoordinatorOptions options;
    options.on_desync = VerdictAction::kWarn;
    CoordinatorCore core(options);
    const Fingerprint s = send(0, 1, 1);
    core.on_fingerprints(0, {&s, 1}, lossy ? 5 : 0, kT0);
    const Fingerprint r1 = recv(1, 0, 1);
    const Fingerprint r2 = recv(1, 0, 2);
    core.on_fingerprints(1, {&r1, 1}, 0, kT0);
    core.on_fingerprints(1, {&r2, 1}, 0, kT0);
    core.on_goodbye(0, kT0);
    auto verdicts = core.tick(kT0);
    ASSERT_EQ(verdicts.size(), 1u) << lossy;
    EXPECT_EQ(verdicts[0].action, VerdictAction::kWarn);
    EXPECT_EQ(desync_of(verdicts[0]).note.empty(), !lossy);
  }
  // Abort by default, warn only for the lossy peer.
  CoordinatorCore core;
  const Fingerprint s = send(0, 1, 1);
  core.on_fingerprints(0, {&s, 1}, 5, kT0);
  const Fingerprint r = recv(1, 0, 2);
  core.on_fingerprints(1, {&r, 1}, 0, kT0);  // the fingerprint of its first receive is not here
  core.on_goodbye(0, kT0);
  auto verdicts = core.tick(kT0);
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(verdicts[0].action, VerdictAction::kWarn);
  EXPECT_NE(reports::format_desync_text(desync_of(verdicts[0])).find("Note: the missing rank dropped fingerprints"),
            std::string::npos);
}

TEST_F(PointToPointTest, HealthyPipelineEndIsNoVerdict) {
  // Four stages, 200 micro-batches: activations forward (r -> r+1), gradients back (r+1 -> r). Each rank's
  // fingerprints arrive in batches of its own, in a different order per rank; the last stage's arrive only after
  // every other stage has destroyed its communicator and said goodbye.
  constexpr int32_t kStages = 4;
  constexpr uint64_t kMicroBatches = 200;
  std::vector<std::vector<Fingerprint>> calls(kStages);
  for (uint64_t n = 1; n <= kMicroBatches; ++n) {
    for (int32_t r = 0; r < kStages; ++r) {
      if (r > 0) calls[r].push_back(recv(r, r - 1, n, kStages));
      if (r + 1 < kStages) calls[r].push_back(send(r, r + 1, n, kStages));
    }
    for (int32_t r = kStages - 1; r >= 0; --r) {
      if (r + 1 < kStages) calls[r].push_back(recv(r, r + 1, n, kStages));
      if (r > 0) calls[r].push_back(send(r, r - 1, n, kStages));
    }
  }
  for (int32_t r = 0; r < kStages; ++r) calls[r].push_back(ended(r, kStages, Op::kCommDestroy));
  uint64_t now = kT0;
  std::vector<size_t> next(kStages, 0);
  const auto fed = [&] {
    return next[0] == calls[0].size() && next[1] == calls[1].size() && next[2] == calls[2].size();
  };
  for (int32_t round = 0; !fed(); ++round) {
    for (int32_t r : {2, 0, 1}) {
      const size_t n = std::min<size_t>(17 + 5 * r, calls[r].size() - next[r]);
      core_.on_fingerprints(r, std::span(calls[r]).subspan(next[r], n), 0, now);
      next[r] += n;
    }
    now += kCoreSecond / 10;
    ASSERT_TRUE(tick(now).empty()) << round;
  }
  for (int32_t r : {1, 0, 2}) core_.on_goodbye(r, now);
  ASSERT_TRUE(tick(now).empty());
  for (size_t at = 0; at < calls[kStages - 1].size(); at += 50) {
    core_.on_fingerprints(
        kStages - 1, std::span(calls[kStages - 1]).subspan(at, std::min<size_t>(50, calls[kStages - 1].size() - at)), 0,
        now);
    ASSERT_TRUE(tick(now).empty()) << at;
  }
  core_.on_goodbye(kStages - 1, now);
  EXPECT_TRUE(tick(now + 1000 * kCoreSecond).empty());
  EXPECT_EQ(core_.stats().verdicts, 0u);
  EXPECT_EQ(core_.stats().lost_counterparts, 0u);
}

TEST_F(PointToPointTest, PeerLeavingOnAStopRequestIsNoDesync) {
  feed(send(0, 1, 1), kT0);
  feed(recv(1, 0, 1), kT0);
  feed(recv(1, 0, 2), kT0);  // rank 1 waits when rank 0 stops the job after its batch
  core_.on_goodbye(0, kT0 + kCoreSecond, /*stopping_job=*/true);
  for (uint64_t t = 1; t < 2000; t += 100) EXPECT_TRUE(tick(kT0 + t * kCoreSecond).empty()) << t;
}

TEST_F(PointToPointTest, PeerLeavingAfterAnAbortVerdictIsNoFurtherDesync) {
  // A collective mismatch stops the job; rank 0 then leaves while rank 1 waits in a receive from it.
  feed(call(0, 2, 1, Op::kAllReduce, 8));
  feed(call(1, 2, 1, Op::kAllReduce, 9));
  auto verdicts = tick(kT0);
  ASSERT_EQ(verdicts.size(), 1u);
  ASSERT_EQ(verdicts[0].action, VerdictAction::kAbort);
  feed(recv(1, 0, 1), kT0 + kCoreSecond);
  core_.on_disconnect(0, false, kT0 + 2 * kCoreSecond);
  EXPECT_TRUE(tick(kT0 + 2 * kCoreSecond).empty());
}

TEST(CoreMemoryTest, OutstandingCallsStayWithinTheWindow) {
  CoordinatorOptions options;
  options.max_outstanding_calls = 1000;
  CoordinatorCore core(options);
  std::vector<Fingerprint> batch;
  for (uint64_t seq = 1; seq <= 100000; seq += 100) {
    for (int32_t r = 0; r < 3; ++r) {  // rank 3 never calls
      batch.clear();
      for (uint64_t s = seq; s < seq + 100; ++s) batch.push_back(call(r, 4, s, Op::kAllReduce, 8));
      core.on_fingerprints(r, batch, 0, kT0);
    }
    ASSERT_LE(core.stats().outstanding_calls, 1000u);
  }
  EXPECT_EQ(core.stats().untracked_calls, 99000u);
  EXPECT_EQ(core.stats().fingerprints, 300000u);
}

TEST(CoreMemoryTest, PendingPointToPointIsBounded) {
  CoordinatorOptions options;
  options.max_pending_point_to_point = 16;
  CoordinatorCore core(options);
  for (uint64_t seq = 1; seq <= 100; ++seq) {
    const Fingerprint f = call(0, 2, seq, Op::kSend, 8, kFloat32, -1, 1);
    core.on_fingerprints(0, {&f, 1}, 0, kT0);
  }
  EXPECT_EQ(core.stats().untracked_point_to_point, 84u);
  // Stuck, the pair is one warning about its oldest send, however many wait behind it.
  auto verdicts = core.tick(kT0 + options.desync_timeout_ns);
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(desync_of(verdicts[0]).seq, 1u);
  EXPECT_EQ(core.stats().untracked_point_to_point, 84u);
}

TEST(CoreMemoryTest, NoPendingPointToPointWithABoundOfZero) {
  CoordinatorOptions options;
  options.max_pending_point_to_point = 0;
  CoordinatorCore core(options);
  const Fingerprint f = send(0, 1, 1);
  core.on_fingerprints(0, {&f, 1}, 0, kT0);
  EXPECT_EQ(core.stats().untracked_point_to_point, 1u);
  core.on_goodbye(1, kT0);
  EXPECT_TRUE(core.tick(kT0 + options.desync_timeout_ns).empty());
}

TEST(CoreManifestTest, WarnsAboutHeterogeneousGpusVersionsAndOldKernels) {
  CoordinatorCore core;
  for (int32_t r = 0; r < 4; ++r) {
    Hello hello;
    hello.global_rank = r;
    hello.world_size = 4;
    hello.host = "node" + std::to_string(r / 2);
    hello.pid = 10 + r;
    hello.gpu_name = r == 3 ? "NVIDIA A100-PCIE-40GB" : "NVIDIA A100-SXM4-80GB";
    hello.gpu_memory_bytes = (r == 3 ? 40ull : 80ull) << 30;
    hello.compute_capability_major = 8;
    hello.nccl_version = r == 0 ? "2.21.5" : "2.27.3";
    hello.cuda_runtime_version = "12.4";
    hello.driver_version = "550.54";
    hello.kernel_release = r == 2 ? "5.4.0-150-generic" : "6.1.0-18-amd64";
    core.on_hello(hello, kT0);
  }
  const auto warnings = core.manifest_warnings();
  auto has = [&](const std::string& part) {
    for (const auto& w : warnings) {
      if (w.find(part) != std::string::npos) return true;
    }
    return false;
  };
  EXPECT_EQ(warnings.size(), 4u);
  EXPECT_TRUE(has("GPUs of different models: 'NVIDIA A100-PCIE-40GB' on rank 3; 'NVIDIA A100-SXM4-80GB' on ranks 0-2"));
  EXPECT_TRUE(has("The smallest (40.0 GiB) bounds the batch size"));
  EXPECT_TRUE(has("different NCCL versions across ranks: '2.21.5' on rank 0; '2.27.3' on ranks 1-3"));
  EXPECT_TRUE(has("rank 2 (host node1) runs Linux kernel 5.4.0-150-generic"));
  const auto manifest = core.manifest();
  EXPECT_EQ(manifest["world_size"], 4);
  EXPECT_EQ(manifest["ranks"].size(), 4u);
  EXPECT_EQ(manifest["ranks"][3]["gpu"]["memory_bytes"], 40ull << 30);
  EXPECT_EQ(manifest.dump().find("token"), std::string::npos);
}

TEST(CoreHelpersTest, KernelVersionsAndRankRanges) {
  EXPECT_TRUE(kernel_older_than("5.4.0-150-generic", 5, 5));
  EXPECT_TRUE(kernel_older_than("4.19.0", 5, 5));
  EXPECT_FALSE(kernel_older_than("5.5.0", 5, 5));
  EXPECT_FALSE(kernel_older_than("6.1.0-18-amd64", 5, 5));
  EXPECT_FALSE(kernel_older_than("garbage", 5, 5));
  EXPECT_EQ(rank_ranges({0, 1, 2, 5, 7, 8}), "0-2,5,7-8");
  EXPECT_EQ(rank_ranges({}), "");
}

// ---- Origin of the first inf/nan ---------------------------------------------------------------------------------

NonfiniteMessage nonfinite(int32_t rank, NonfiniteWhere where, bool stop_job = false, uint64_t batch = 12,
                           uint64_t call_number = 812, NonfiniteKind kind = NonfiniteKind::kInf) {
  NonfiniteMessage message;
  message.rank = rank;
  message.batch_number = batch;
  message.comm_id = kComm;
  message.call_number = call_number;
  message.op = "ncclAllReduce";
  message.where = where;
  message.kind = kind;
  message.stop_job = stop_job;
  return message;
}

const NonfiniteOriginReport& origin_of(const CoreVerdict& v) { return std::get<NonfiniteOriginReport>(v.report); }

constexpr char kEightRankOrigin[] =
    "rank 3 sent inf in all-reduce call #812 in batch 12; ranks 0\u20132 and 4\u20137 first saw it in that call's "
    "output\n";

TEST(CoordinatorNonfiniteTest, SendRecvFirstsNameTheirPeerByGlobalRankOnceItIsKnown) {
  CoordinatorCore core;
  // Global ranks 5 and 7 are the communicator's ranks 0 and 1.
  const Fingerprint sent = send(0, 1, 5);
  core.on_fingerprints(5, {&sent, 1}, 0, kT0);
  NonfiniteMessage message = nonfinite(5, NonfiniteWhere::kInput);
  message.op = "ncclSend";
  message.call_number = 5;
  message.comm_rank = 0;
  message.peer = 1;
  core.on_nonfinite(message, kT0);
  ASSERT_EQ(core.nonfinite_firsts().size(), 1u);
  EXPECT_EQ(core.nonfinite_firsts()[0].peer_rank, -1) << "rank 7's fingerprints have not come yet";
  EXPECT_EQ(reports::format_origin_text(core.nonfinite_firsts()),
            "rank 5 sent inf in send #5 to communicator rank 1 in batch 12\n");
  const uint64_t generation = core.nonfinite_generation();
  const Fingerprint received = recv(1, 0, 5);
  core.on_fingerprints(7, {&received, 1}, 0, kT0 + 1);
  core.tick(kT0 + 2);
  EXPECT_EQ(core.nonfinite_firsts()[0].peer_rank, 7);
  EXPECT_GT(core.nonfinite_generation(), generation) << "the origin is rewritten with the peer's rank";
  EXPECT_EQ(reports::format_origin_text(core.nonfinite_firsts()), "rank 5 sent inf in send #5 to rank 7 in batch 12\n");
}

TEST(CoordinatorNonfiniteTest, FirstsOfAllRanksGiveTheOriginReport) {
  CoordinatorCore core;
  EXPECT_EQ(core.nonfinite_generation(), 0u);
  EXPECT_TRUE(core.nonfinite_firsts().empty());
  core.on_nonfinite(nonfinite(3, NonfiniteWhere::kInput), kT0);
  EXPECT_EQ(core.nonfinite_generation(), 1u);
  for (int32_t rank : {0, 1, 2, 4, 5, 6, 7}) core.on_nonfinite(nonfinite(rank, NonfiniteWhere::kOutput), kT0 + rank);
  EXPECT_EQ(core.nonfinite_generation(), 8u);
  const std::vector<reports::FirstNonfinite> firsts = core.nonfinite_firsts();
  ASSERT_EQ(firsts.size(), 8u);
  for (size_t i = 0; i < firsts.size(); ++i) {
    EXPECT_EQ(firsts[i].rank, static_cast<int32_t>(i));  // by rank
    EXPECT_EQ(firsts[i].batch_number, 12u);
    EXPECT_EQ(firsts[i].comm_id, kComm);
    EXPECT_EQ(firsts[i].call_number, 812u);
    EXPECT_EQ(firsts[i].op, "ncclAllReduce");
    EXPECT_EQ(firsts[i].kind, reports::NonfiniteKind::kInf);
    EXPECT_EQ(firsts[i].where, i == 3 ? reports::NonfiniteWhere::kInput : reports::NonfiniteWhere::kOutput);
  }
  EXPECT_EQ(reports::format_origin_text(firsts), kEightRankOrigin);
  EXPECT_EQ(core.stats().nonfinite_firsts, 8u);
  // Without a stop request the job goes on: no verdict, however long.
  EXPECT_TRUE(core.tick(kT0 + 1000 * kCoreSecond).empty());
}

TEST(CoordinatorNonfiniteTest, LaterReportsOfARankAreIgnored) {
  CoordinatorCore core;
  core.on_nonfinite(nonfinite(3, NonfiniteWhere::kInput), kT0);
  core.on_nonfinite(nonfinite(0, NonfiniteWhere::kOutput), kT0);
  const uint64_t generation = core.nonfinite_generation();
  // Rank 3 again, later and elsewhere: its first stays, and the set did not change.
  core.on_nonfinite(nonfinite(3, NonfiniteWhere::kOutput, false, 13, 900, NonfiniteKind::kNan), kT0 + kCoreSecond);
  core.on_nonfinite(nonfinite(3, NonfiniteWhere::kInput), kT0 + kCoreSecond);
  EXPECT_EQ(core.nonfinite_generation(), generation);
  const auto firsts = core.nonfinite_firsts();
  ASSERT_EQ(firsts.size(), 2u);
  EXPECT_EQ(firsts[1].rank, 3);
  EXPECT_EQ(firsts[1].batch_number, 12u);
  EXPECT_EQ(firsts[1].call_number, 812u);
  EXPECT_EQ(firsts[1].where, reports::NonfiniteWhere::kInput);
  EXPECT_EQ(firsts[1].kind, reports::NonfiniteKind::kInf);
  EXPECT_EQ(core.stats().nonfinite_firsts, 2u);
  EXPECT_EQ(core.stats().ignored_nonfinite, 2u);
}

TEST(CoordinatorNonfiniteTest, StopJobGivesOneAbortVerdictAfterTheGracePeriod) {
  CoordinatorOptions options;
  options.nonfinite_grace_ns = 3 * kCoreSecond;
  CoordinatorCore core(options);
  // Two ranks in a communicator, both past call 1: a disconnect now would be a vanished rank.
  for (int32_t rank : {0, 1}) {
    const Fingerprint f = call(rank, 2, 1, Op::kAllReduce, 8);
    core.on_fingerprints(rank, {&f, 1}, 0, kT0);
  }
  EXPECT_TRUE(core.tick(kT0).empty());
  core.on_nonfinite(nonfinite(3, NonfiniteWhere::kInput, true), kT0 + kCoreSecond);
  EXPECT_TRUE(core.tick(kT0 + kCoreSecond).empty());
  // The other ranks' firsts arrive during the grace period (one of them asks for the stop too).
  for (int32_t rank : {0, 1, 2, 4, 5, 6, 7})
    core.on_nonfinite(nonfinite(rank, NonfiniteWhere::kOutput, rank == 5), kT0 + 2 * kCoreSecond);
  EXPECT_TRUE(core.tick(kT0 + 4 * kCoreSecond - 1).empty());
  auto verdicts = core.tick(kT0 + 4 * kCoreSecond);
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(verdicts[0].kind, VerdictKind::kNonfinite);
  EXPECT_EQ(verdicts[0].action, VerdictAction::kAbort);
  EXPECT_EQ(verdicts[0].comm_id, kComm);
  EXPECT_EQ(verdicts[0].seq, 812u);
  const NonfiniteOriginReport& report = origin_of(verdicts[0]);
  EXPECT_EQ(report.requested_by, 3);
  EXPECT_EQ(report.detected_ns, kT0 + kCoreSecond);
  ASSERT_EQ(report.firsts.size(), 8u);
  EXPECT_EQ(reports::format_origin_text(report.firsts), kEightRankOrigin);
  EXPECT_EQ(core.stats().verdicts, 1u);
  // Once per job: later requests and ticks give nothing more.
  core.on_nonfinite(nonfinite(8, NonfiniteWhere::kOutput, true, 13, 1), kT0 + 5 * kCoreSecond);
  EXPECT_TRUE(core.tick(kT0 + 5 * kCoreSecond).empty());
  EXPECT_TRUE(core.tick(kT0 + 100 * kCoreSecond).empty());
  // The ranks now exit without a goodbye, as they were told to: that is not a vanished rank.
  core.on_disconnect(0, false, kT0 + 101 * kCoreSecond);
  core.on_disconnect(1, false, kT0 + 101 * kCoreSecond);
  EXPECT_TRUE(core.tick(kT0 + 102 * kCoreSecond).empty());
  EXPECT_EQ(core.stats().verdicts, 1u);
}

TEST(CoordinatorNonfiniteTest, StopComesBeforeTheGraceEndsWhenEveryRankReported) {
  CoordinatorCore core;  // default grace: 1 s
  for (int32_t rank : {0, 1}) {
    Hello hello;
    hello.global_rank = rank;
    hello.world_size = 2;
    core.on_hello(hello, kT0);
  }
  core.on_nonfinite(nonfinite(1, NonfiniteWhere::kOutput, true, 4, 20, NonfiniteKind::kNan), kT0);
  EXPECT_TRUE(core.tick(kT0 + 1).empty());
  core.on_nonfinite(nonfinite(0, NonfiniteWhere::kOutput, false, 4, 20, NonfiniteKind::kNan), kT0 + 2);
  auto verdicts = core.tick(kT0 + 3);
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(verdicts[0].kind, VerdictKind::kNonfinite);
  EXPECT_EQ(reports::format_origin_text(origin_of(verdicts[0]).firsts),
            "no rank sent inf/nan in all-reduce call #20 in batch 4: its inputs were finite, and ranks 0 and 1 first "
            "saw nan in its output\n");
}

TEST(CoordinatorNonfiniteTest, TheOriginShowsTheStackOfItsCall) {
  CoordinatorCore core;
  core.on_stack(StackDefinition{3, 11, python_stack()});
  NonfiniteMessage origin = nonfinite(3, NonfiniteWhere::kInput);
  origin.stack_id = 11;  // defined before it: the client sends definitions first
  core.on_nonfinite(origin, kT0);
  for (int32_t rank : {0, 1, 2, 4, 5, 6, 7}) core.on_nonfinite(nonfinite(rank, NonfiniteWhere::kOutput), kT0 + rank);
  const auto firsts = core.nonfinite_firsts();
  EXPECT_EQ(firsts[3].stack, python_stack());
  EXPECT_TRUE(firsts[0].stack.empty());
  EXPECT_EQ(reports::format_origin_text(firsts), std::string(kEightRankOrigin) +
                                                     "\n"
                                                     "Stack of the call it came from (rank 3, all-reduce call #812 in "
                                                     "batch 12):\n"
                                                     "  File \"train.py\", line 88, in backward\n"
                                                     "  File \"train.py\", line 120, in main\n"
                                                     "  #0 ncclAllReduce at nccl.cc:1\n"
                                                     "  #1 PyEval_EvalFrame at ceval.c:2\n");
}

TEST(CoordinatorNonfiniteTest, AStackDefinedAfterTheFirstRewritesTheOrigin) {
  CoordinatorCore core;
  NonfiniteMessage origin = nonfinite(3, NonfiniteWhere::kInput);
  origin.stack_id = 11;
  core.on_nonfinite(origin, kT0);
  core.on_nonfinite(nonfinite(0, NonfiniteWhere::kOutput), kT0);
  EXPECT_TRUE(core.nonfinite_firsts()[1].stack.empty());
  const std::string before = reports::format_origin_text(core.nonfinite_firsts());
  EXPECT_EQ(before.find("Stack of the call"), std::string::npos) << before;
  const uint64_t generation = core.nonfinite_generation();
  // Another rank's stack of the same id, and another id of rank 3: nothing to rewrite.
  core.on_stack(StackDefinition{0, 11, native_stack({"rank 0's"})});
  core.on_stack(StackDefinition{3, 12, native_stack({"another site"})});
  EXPECT_EQ(core.nonfinite_generation(), generation);
  core.on_stack(StackDefinition{3, 11, python_stack()});
  EXPECT_GT(core.nonfinite_generation(), generation) << "the origin is rewritten with the stack";
  EXPECT_EQ(core.nonfinite_firsts()[1].stack, python_stack());
  EXPECT_NE(reports::format_origin_text(core.nonfinite_firsts())
                .find("Stack of the call it came from (rank 3, all-reduce call #812 in batch 12):\n"
                      "  File \"train.py\", line 88, in backward\n"),
            std::string::npos);
  // Once: the same definition again changes nothing more.
  const uint64_t after = core.nonfinite_generation();
  core.on_stack(StackDefinition{3, 11, python_stack()});
  EXPECT_EQ(core.nonfinite_generation(), after);
}

TEST(CoordinatorNonfiniteTest, DefaultGraceIsOneSecond) {
  EXPECT_EQ(CoordinatorOptions{}.nonfinite_grace_ns, kCoreSecond);
  CoordinatorCore core;
  core.on_nonfinite(nonfinite(0, NonfiniteWhere::kInput, true), kT0);
  EXPECT_TRUE(core.tick(kT0 + kCoreSecond - 1).empty());
  EXPECT_EQ(core.tick(kT0 + kCoreSecond).size(), 1u);
}

// ---- a communicator's creation: members waiting in ncclCommInitRank for others that never come ----

Fingerprint creating(int32_t comm_rank, int32_t nranks, uint64_t comm = kComm) {
  Fingerprint f = call(comm_rank, nranks, 0, Op::kCommInitRank, 0, kFloat32, kSum, -1, comm);
  f.kind = static_cast<uint8_t>(EventKind::kCommCreating);
  return f;
}

class CreationTest : public ::testing::Test {
 protected:
  static CoordinatorOptions options() {
    CoordinatorOptions o;
    o.desync_timeout_ns = 30 * kCoreSecond;
    return o;
  }
  CreationTest() : core_(options()) {}
  void hello(int32_t rank, int32_t world) {
    Hello h;
    h.global_rank = rank;
    h.world_size = world;
    h.host = "node" + std::to_string(rank);
    h.pid = 100 + rank;
    core_.on_hello(h, kT0);
  }
  void feed(int32_t global_rank, const Fingerprint& f, uint64_t now = kT0) {
    core_.on_fingerprints(global_rank, {&f, 1}, 0, now);
  }
  CoordinatorCore core_;
};

// vLLM's start-up failure: rank 0 made the unique id and exited; rank 1 waits in ncclCommInitRank for it.
TEST_F(CreationTest, AMemberWhoseProcessIsGoneIsACertainDesyncAfterTheGrace) {
  hello(0, 2);
  hello(1, 2);
  core_.on_goodbye(0, kT0);
  feed(1, creating(1, 2));
  EXPECT_TRUE(core_.tick(kT0 + kCoreSecond).empty());  // within the grace a restarted rank 0 could still come
  const auto verdicts = core_.tick(kT0 + kCreationGraceNs + kCoreSecond);
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(verdicts[0].kind, VerdictKind::kDesync);
  EXPECT_EQ(verdicts[0].action, VerdictAction::kAbort);
  const auto& report = desync_of(verdicts[0]);
  EXPECT_TRUE(report.creation);
  EXPECT_TRUE(report.certain);
  ASSERT_EQ(report.waiting.size(), 1u);
  EXPECT_EQ(report.waiting[0].global_rank, 1);
  ASSERT_EQ(report.missing.size(), 1u);
  EXPECT_EQ(report.missing[0].global_rank, 0);
  EXPECT_EQ(report.missing[0].comm_rank, 0);
  EXPECT_EQ(report.missing[0].state, reports::LaggardState::kExited);
  EXPECT_TRUE(report.missing[0].process_gone);
  const std::string text = reports::format_desync_text(report);
  EXPECT_NE(text.find("Desync on communicator 3f2a9c at its creation (`ncclCommInitRank`, 1 of its 2 ranks missing): "
                      "the missing ranks can never join it"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  - Process 0 (communicator rank 0, host node0, pid 100): never joined it; exited; process "
                      "gone\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(reports::desync_base_name(report), "desync-3f2a9c-creation");
  EXPECT_EQ(reports::desync_json(report)["creation"], true);
  EXPECT_TRUE(core_.tick(kT0 + 100 * kCoreSecond).empty());  // said once
}

// A rank that has not said hello yet may be starting slowly: a warning after the timeout, repeated, never a stop.
TEST_F(CreationTest, AMemberNotYetSeenIsAWarningAfterTheTimeoutNotAStop) {
  hello(1, 2);
  feed(1, creating(1, 2));
  EXPECT_TRUE(core_.tick(kT0 + 20 * kCoreSecond).empty());
  auto verdicts = core_.tick(kT0 + 31 * kCoreSecond);
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(verdicts[0].action, VerdictAction::kWarn);
  EXPECT_FALSE(desync_of(verdicts[0]).certain);
  EXPECT_EQ(desync_of(verdicts[0]).missing[0].state, reports::LaggardState::kUnknown);
  verdicts = core_.tick(kT0 + 62 * kCoreSecond);
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(desync_of(verdicts[0]).repeat, 2u);
  EXPECT_EQ(reports::desync_base_name(desync_of(verdicts[0])), "desync-3f2a9c-creation-2");
}

// A restarted rank says hello again within the grace: it is alive, and nothing stops the waiting rank.
TEST_F(CreationTest, ARankThatComesBackWithinTheGraceIsNoDesync) {
  hello(0, 2);
  hello(1, 2);
  core_.on_goodbye(0, kT0);
  feed(1, creating(1, 2));
  hello(0, 2);
  feed(0, creating(0, 2), kT0 + kCoreSecond);
  Fingerprint made = creating(1, 2);
  made.kind = static_cast<uint8_t>(EventKind::kCommCreated);
  feed(1, made, kT0 + 2 * kCoreSecond);
  EXPECT_TRUE(core_.tick(kT0 + kCreationGraceNs + kCoreSecond).empty());
  EXPECT_TRUE(core_.tick(kT0 + 100 * kCoreSecond).empty());
}

// A creation every member is in (or that returned) is NCCL's own business; a communicator made of some ranks of a
// bigger world is certain only when too few of the ranks outside it are alive to fill its empty seats.
TEST_F(CreationTest, ASubsetCommunicatorIsCertainOnlyWhenTooFewOfTheOtherRanksAreAlive) {
  for (int32_t r = 0; r < 4; ++r) hello(r, 4);
  feed(2, creating(0, 2));  // ranks 2 and 3 in a 2-rank communicator, as seats 0 and 1
  core_.on_goodbye(0, kT0);
  EXPECT_TRUE(core_.tick(kT0 + kCreationGraceNs + kCoreSecond).empty());  // ranks 1 and 3 are alive: no certainty
  core_.on_goodbye(1, kT0);
  core_.on_goodbye(3, kT0);
  const auto verdicts = core_.tick(kT0 + kCreationGraceNs + 2 * kCoreSecond);
  ASSERT_EQ(verdicts.size(), 1u);
  const auto& report = desync_of(verdicts[0]);
  EXPECT_TRUE(report.certain);
  ASSERT_EQ(report.missing.size(), 1u);
  EXPECT_EQ(report.missing[0].comm_rank, 1);
  EXPECT_NE(report.note.find("is a guess"), std::string::npos);
}

}  // namespace
}  // namespace trainscope::exchange
