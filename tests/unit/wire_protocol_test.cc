// The exchange's encoding: every message round-trips byte for byte, and hand-made malformed input is refused with
// a reason instead of being trusted.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "collectors/wire_protocol.h"

namespace trainscope::exchange {
namespace {

Fingerprint sample_fingerprint(uint64_t seq) {
  Fingerprint f{};
  f.comm_id = 0x3f2a9c0011223344ull;
  f.seq = seq;
  f.count = 1048576;
  f.record_index = 99;
  f.start_ns = 1700000000000000000ull;
  f.caller = 0x401234;
  f.comm_rank = 1;
  f.nranks = 4;
  f.peer = -1;
  f.redop = 0;
  f.result = -1;
  f.stack_id = 3;
  f.op = static_cast<uint16_t>(recorder::Op::kAllReduce);
  f.dtype = 6;
  f.kind = static_cast<uint8_t>(EventKind::kCall);
  f.flags = recorder::kFlagInGroup;
  return f;
}

Hello sample_hello() {
  Hello hello;
  hello.token = "s3cret";
  hello.global_rank = 3;
  hello.world_size = 8;
  hello.launcher_rank = 3;
  hello.pid = 1234;
  hello.host = "node1";
  hello.gpu_name = "NVIDIA H100 80GB HBM3";
  hello.gpu_memory_bytes = 80ull << 30;
  hello.compute_capability_major = 9;
  hello.gpu_bus_id = "0000:18:00.0";
  hello.driver_version = "550.54.15";
  hello.cuda_runtime_version = "12.4";
  hello.nccl_version = "2.21.5";
  hello.kernel_release = "6.1.0";
  hello.flight_recorder_path = "/tmp/run/rank3.tsfr";
  return hello;
}

std::vector<uint8_t> roundtrip(const std::vector<uint8_t>& bytes) {
  const DecodeResult decoded = decode(bytes);
  EXPECT_TRUE(decoded.ok) << decoded.error;
  return encode(decoded.message);
}

TEST(WireProtocolTest, EveryMessageRoundTrips) {
  const Hello hello = sample_hello();
  const auto hello_bytes = encode(hello);
  const DecodeResult decoded_hello = decode(hello_bytes);
  ASSERT_TRUE(decoded_hello.ok) << decoded_hello.error;
  EXPECT_EQ(std::get<Hello>(decoded_hello.message), hello);

  FingerprintBatch batch;
  batch.rank = 3;
  batch.batch_number = 7;
  batch.dropped_total = 2;
  for (uint64_t seq = 1; seq <= 3; ++seq) batch.fingerprints.push_back(sample_fingerprint(seq));
  const auto batch_bytes = encode(batch);
  EXPECT_EQ(batch_bytes.size(), kHeaderBytes + 24 + 3 * kFingerprintWireBytes);
  const DecodeResult decoded_batch = decode(batch_bytes);
  ASSERT_TRUE(decoded_batch.ok) << decoded_batch.error;
  const auto& got = std::get<FingerprintBatch>(decoded_batch.message);
  ASSERT_EQ(got.fingerprints.size(), 3u);
  EXPECT_EQ(std::memcmp(&got.fingerprints[2], &batch.fingerprints[2], sizeof(Fingerprint)), 0);
  EXPECT_EQ(got.dropped_total, 2u);

  const std::vector<std::vector<uint8_t>> messages = {
      hello_bytes,
      batch_bytes,
      encode(StackDefinition{3, 9, {"frame one", "frame two"}}),
      encode(Heartbeat{3, 5, {HeartbeatCall{1, 2, 3, 12}}}),
      encode(Goodbye{3, 77}),
      encode(Welcome{88}),
      encode(Reject{RejectReason::kNeedHello, "send a hello first"}),
      encode(Verdict{VerdictKind::kDesync, VerdictAction::kWarn, 5, 6, "/a.txt", "/a.json", "text"})};
  for (const auto& bytes : messages) EXPECT_EQ(roundtrip(bytes), bytes);
}

TEST(WireProtocolTest, HeaderIsLittleEndian) {
  const auto bytes = encode(Goodbye{1, 2});
  ASSERT_GE(bytes.size(), kHeaderBytes);
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 4), "TSXC");
  EXPECT_EQ(bytes[4], 1);  // version
  EXPECT_EQ(bytes[6], static_cast<uint8_t>(MessageType::kGoodbye));
  EXPECT_EQ(bytes[8], 12);  // payload: i32 rank + u64 time
}

// Overwrites `size` bytes at `offset` with a little-endian value.
void poke(std::vector<uint8_t>& bytes, size_t offset, uint64_t value, size_t size) {
  for (size_t i = 0; i < size; ++i) bytes[offset + i] = static_cast<uint8_t>(value >> (8 * i));
}

void expect_refused(const std::vector<uint8_t>& bytes, const std::string& reason_part) {
  const DecodeResult decoded = decode(bytes);
  EXPECT_FALSE(decoded.ok);
  EXPECT_NE(decoded.error.find(reason_part), std::string::npos) << "error was: " << decoded.error;
}

TEST(WireProtocolTest, MalformedInputIsRefusedWithAReason) {
  expect_refused({}, "header");
  expect_refused({'T', 'S', 'X'}, "header");

  auto bad_magic = encode(Goodbye{1, 2});
  bad_magic[0] = 'X';
  expect_refused(bad_magic, "magic");

  auto bad_version = encode(Goodbye{1, 2});
  poke(bad_version, 4, 99, 2);
  expect_refused(bad_version, "version");

  auto bad_type = encode(Goodbye{1, 2});
  poke(bad_type, 6, 42, 2);
  expect_refused(bad_type, "unknown message type");

  auto short_frame = encode(Goodbye{1, 2});
  short_frame.pop_back();
  expect_refused(short_frame, "payload bytes");

  auto trailing = encode(Goodbye{1, 2});
  trailing.push_back(0);
  poke(trailing, 8, 13, 4);
  expect_refused(trailing, "trailing");

  auto truncated = encode(Goodbye{1, 2});
  truncated.resize(kHeaderBytes + 6);
  poke(truncated, 8, 6, 4);
  expect_refused(truncated, "truncated");

  auto negative_rank = encode(Goodbye{1, 2});
  poke(negative_rank, kHeaderBytes, 0xFFFFFFFFull, 4);
  expect_refused(negative_rank, "rank -1 out of range");

  // A string length beyond its limit, and one beyond the frame.
  auto long_token = encode(sample_hello());
  poke(long_token, kHeaderBytes, 100000, 4);
  expect_refused(long_token, "token is 100000 bytes");
  auto overrunning_token = encode(sample_hello());
  poke(overrunning_token, kHeaderBytes, 200, 4);
  expect_refused(overrunning_token, "truncated in token");

  // A batch claiming more fingerprints than the frame carries, or more than allowed.
  FingerprintBatch batch;
  batch.rank = 0;
  batch.fingerprints = {sample_fingerprint(1)};
  auto lying_count = encode(batch);
  poke(lying_count, kHeaderBytes + 20, 4000, 4);
  expect_refused(lying_count, "does not fit");
  auto huge_count = encode(batch);
  poke(huge_count, kHeaderBytes + 20, 0xFFFFFFFFull, 4);
  expect_refused(huge_count, "over the limit");

  // Fields out of range inside a fingerprint: kind, op, nranks.
  const size_t fingerprint_at = kHeaderBytes + 24;
  auto bad_kind = encode(batch);
  poke(bad_kind, fingerprint_at + 83, 9, 1);
  expect_refused(bad_kind, "kind 9 out of range");
  auto bad_op = encode(batch);
  poke(bad_op, fingerprint_at + 80, 500, 2);
  expect_refused(bad_op, "op 500 out of range");
  auto bad_nranks = encode(batch);
  poke(bad_nranks, fingerprint_at + 60, 0x7FFFFFFF, 4);
  expect_refused(bad_nranks, "nranks");

  // Enums of the coordinator's messages.
  auto bad_verdict = encode(Verdict{});
  poke(bad_verdict, kHeaderBytes, 7, 1);
  expect_refused(bad_verdict, "verdict kind");
  auto bad_reject = encode(Reject{});
  poke(bad_reject, kHeaderBytes, 0, 1);
  expect_refused(bad_reject, "reject reason");
  auto zero_stack = encode(StackDefinition{1, 1, {}});
  poke(zero_stack, kHeaderBytes + 4, 0, 4);
  expect_refused(zero_stack, "stack_id");

  std::vector<uint8_t> huge(kMaxMessageBytes + 1, 0);
  expect_refused(huge, "over the limit");
}

TEST(WireProtocolTest, TokensCompareExactly) {
  EXPECT_TRUE(tokens_equal("abc123", "abc123"));
  EXPECT_FALSE(tokens_equal("abc123", "abc124"));
  EXPECT_FALSE(tokens_equal("abc123", "abc12"));
  EXPECT_FALSE(tokens_equal("abc123", "abc1234"));
  EXPECT_FALSE(tokens_equal("", ""));  // an empty expected token never authenticates anyone
}

}  // namespace
}  // namespace trainscope::exchange
