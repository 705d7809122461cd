// The exchange's encoding: every message round-trips byte for byte, and hand-made malformed input is refused with
// a reason instead of being trusted.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "collectors/exchange/wire_protocol.h"

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
  hello.host_id = "0b6c2f5e-1f0a-4c1e-9d51-7f3a2b1c0d9e/4026531836/4026531841";
  return hello;
}

// A call site's stack as the engine sends it: Python frames, innermost first, above the native ones.
StackDefinition sample_stack() {
  StackDefinition stack;
  stack.rank = 3;
  stack.stack_id = 9;
  stack.stack.python = {{"train.py", 88, "backward"}, {"/opt/lib/trainer.py", 1204, "training_step"}};
  stack.stack.native = {"frame one", "frame two"};
  return stack;
}

NonfiniteMessage sample_nonfinite() {
  NonfiniteMessage message;
  message.rank = 3;
  message.batch_number = 12;
  message.comm_id = 0x3f2a9c0011223344ull;
  message.call_number = 812;
  message.op = "ncclAllReduce";
  message.where = NonfiniteWhere::kInput;
  message.kind = NonfiniteKind::kInf;
  message.stop_job = true;
  message.comm_rank = 2;
  message.peer = 3;
  message.stack_id = 17;
  return message;
}

// Header, rank, batch, communicator, call number, op length, where, kind, stop_job, comm rank, peer, stack id:
// everything but the op's bytes.
constexpr size_t kNonfiniteFixedBytes = kHeaderBytes + 4 + 8 + 8 + 8 + 4 + 1 + 1 + 1 + 4 + 4 + 4;

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
  EXPECT_LT(batch_bytes.size(), kHeaderBytes + 24 + 60 + 2 * 8) << "after the first, a fingerprint whose seq and "
                                                                   "record index moved takes a few bytes";
  const DecodeResult decoded_batch = decode(batch_bytes);
  ASSERT_TRUE(decoded_batch.ok) << decoded_batch.error;
  const auto& got = std::get<FingerprintBatch>(decoded_batch.message);
  ASSERT_EQ(got.fingerprints.size(), 3u);
  EXPECT_EQ(std::memcmp(&got.fingerprints[2], &batch.fingerprints[2], sizeof(Fingerprint)), 0);
  EXPECT_EQ(got.dropped_total, 2u);

  const std::vector<std::vector<uint8_t>> messages = {
      hello_bytes,
      batch_bytes,
      encode(sample_stack()),
      encode(StackDefinition{3, 10, CallStack{{}, "Python 3.14 is not supported by this trainscope", {"native"}}}),
      encode(StackDefinition{3, 11, CallStack{}}),
      encode(Heartbeat{3, 5, {HeartbeatCall{1, 2, 3, 12}}}),
      encode(Goodbye{3, 77}),
      encode(Goodbye{3, 78, true}),
      encode(Welcome{88}),
      encode(Reject{RejectReason::kNeedHello, "send a hello first"}),
      encode(Verdict{VerdictKind::kDesync, VerdictAction::kWarn, 5, 6, "/a.txt", "/a.json", "text"}),
      encode(Verdict{VerdictKind::kNonfinite, VerdictAction::kAbort, 5, 812, "/origin.txt", "/origin.json", "t"}),
      encode(sample_nonfinite())};
  for (const auto& bytes : messages) EXPECT_EQ(roundtrip(bytes), bytes);
}

TEST(WireProtocolTest, NonfiniteMessageRoundTripsEveryField) {
  const NonfiniteMessage message = sample_nonfinite();
  const auto bytes = encode(message);
  EXPECT_EQ(bytes.size(), kNonfiniteFixedBytes + message.op.size());
  EXPECT_EQ(bytes[6], static_cast<uint8_t>(MessageType::kNonfinite));
  const DecodeResult decoded = decode(bytes);
  ASSERT_TRUE(decoded.ok) << decoded.error;
  EXPECT_EQ(std::get<NonfiniteMessage>(decoded.message), message);

  NonfiniteMessage other;
  other.rank = 0;
  other.where = NonfiniteWhere::kOutput;
  other.kind = NonfiniteKind::kNan;
  other.stop_job = false;  // and an empty op
  const DecodeResult decoded_other = decode(encode(other));
  ASSERT_TRUE(decoded_other.ok) << decoded_other.error;
  EXPECT_EQ(std::get<NonfiniteMessage>(decoded_other.message), other);

  // An op name over the limit is cut when encoding, so what goes out is always accepted.
  NonfiniteMessage long_op = sample_nonfinite();
  long_op.op = std::string(kMaxOpNameBytes + 100, 'x');
  const DecodeResult decoded_long = decode(encode(long_op));
  ASSERT_TRUE(decoded_long.ok) << decoded_long.error;
  EXPECT_EQ(std::get<NonfiniteMessage>(decoded_long.message).op, std::string(kMaxOpNameBytes, 'x'));

  EXPECT_STREQ(verdict_kind_name(VerdictKind::kNonfinite), "nonfinite");
}

TEST(WireProtocolTest, HeaderIsLittleEndian) {
  const auto bytes = encode(Goodbye{1, 2});
  ASSERT_GE(bytes.size(), kHeaderBytes);
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 4), "TSXC");
  EXPECT_EQ(bytes[4], kWireVersion);  // version
  EXPECT_EQ(bytes[6], static_cast<uint8_t>(MessageType::kGoodbye));
  EXPECT_EQ(bytes[8], 13);  // payload: i32 rank + u64 time + u8 stopping_job
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
  poke(trailing, 8, 14, 4);
  expect_refused(trailing, "trailing");

  auto truncated = encode(Goodbye{1, 2});
  truncated.resize(kHeaderBytes + 6);
  poke(truncated, 8, 6, 4);
  expect_refused(truncated, "truncated");

  auto negative_rank = encode(Goodbye{1, 2});
  poke(negative_rank, kHeaderBytes, 0xFFFFFFFFull, 4);
  expect_refused(negative_rank, "rank -1 out of range");

  auto bad_flag = encode(Goodbye{1, 2, true});
  bad_flag.back() = 2;
  expect_refused(bad_flag, "stopping_job");

  // A string length beyond its limit, and one beyond the frame.
  auto long_token = encode(sample_hello());
  poke(long_token, kHeaderBytes, 100000, 4);
  expect_refused(long_token, "token is 100000 bytes");
  auto overrunning_token = encode(sample_hello());  // one byte more than the rest of the frame, within the limit
  ASSERT_LE(overrunning_token.size() - kHeaderBytes - 3, kMaxTokenBytes);
  poke(overrunning_token, kHeaderBytes, overrunning_token.size() - kHeaderBytes - 3, 4);
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

  // Fields out of range inside a fingerprint: kind, op, nranks (the encoder checks nothing; the decoder does).
  const auto with = [&](auto change) {
    FingerprintBatch b = batch;
    b.fingerprints.push_back(sample_fingerprint(2));
    change(b.fingerprints.back());
    return encode(b);
  };
  expect_refused(with([](Fingerprint& f) { f.kind = 9; }), "fingerprint 1: kind 9 out of range");
  expect_refused(with([](Fingerprint& f) { f.op = 500; }), "fingerprint 1: op 500 out of range");
  expect_refused(with([](Fingerprint& f) { f.nranks = 0x7FFFFFFF; }), "fingerprint 1: nranks 2147483647 out of range");
  expect_refused(with([](Fingerprint& f) { f.comm_rank = -2; }), "fingerprint 1: comm_rank -2 out of range");

  // Enums of the coordinator's messages.
  auto bad_verdict = encode(Verdict{});
  poke(bad_verdict, kHeaderBytes, 7, 1);
  expect_refused(bad_verdict, "verdict kind");
  auto bad_reject = encode(Reject{});
  poke(bad_reject, kHeaderBytes, 0, 1);
  expect_refused(bad_reject, "reject reason");
  auto zero_stack = encode(StackDefinition{1, 1, CallStack{}});
  poke(zero_stack, kHeaderBytes + 4, 0, 4);
  expect_refused(zero_stack, "stack_id");

  std::vector<uint8_t> huge(kMaxMessageBytes + 1, 0);
  expect_refused(huge, "over the limit");
}

TEST(WireProtocolTest, MalformedNonfiniteMessagesAreRefused) {
  // Payload: i32 rank @0 | u64 batch @4 | u64 comm @12 | u64 call @20 | u32 op length @28, op @32 | u8 where |
  // u8 kind | u8 stop_job | i32 comm_rank | i32 peer.
  const NonfiniteMessage message = sample_nonfinite();
  const size_t op_at = kHeaderBytes + 28;
  const size_t where_at = op_at + 4 + message.op.size();

  auto negative_rank = encode(message);
  poke(negative_rank, kHeaderBytes, 0xFFFFFFFFull, 4);
  expect_refused(negative_rank, "rank -1 out of range");

  auto bad_flag = encode(Goodbye{1, 2, true});
  bad_flag.back() = 2;
  expect_refused(bad_flag, "stopping_job");
  auto huge_rank = encode(message);
  poke(huge_rank, kHeaderBytes, static_cast<uint64_t>(kMaxRanks), 4);
  expect_refused(huge_rank, "rank");

  auto long_op = encode(message);
  poke(long_op, op_at, kMaxOpNameBytes + 1, 4);
  expect_refused(long_op, "op is 513 bytes, limit 512");
  auto overrunning_op = encode(message);
  poke(overrunning_op, op_at, 60, 4);
  expect_refused(overrunning_op, "truncated in op");

  auto bad_where = encode(message);
  poke(bad_where, where_at, 2, 1);
  expect_refused(bad_where, "nonfinite where 2 out of range");
  auto bad_kind = encode(message);
  poke(bad_kind, where_at + 1, 7, 1);
  expect_refused(bad_kind, "nonfinite kind 7 out of range");
  auto bad_stop = encode(message);
  poke(bad_stop, where_at + 2, 2, 1);
  expect_refused(bad_stop, "stop_job 2 out of range");

  auto older = encode(message);  // a coordinator or rank of the previous wire version
  poke(older, 4, kWireVersion - 1, 2);
  expect_refused(older,
                 "protocol version " + std::to_string(kWireVersion - 1) + ", expected " + std::to_string(kWireVersion));

  auto truncated = encode(message);
  truncated.pop_back();
  poke(truncated, 8, truncated.size() - kHeaderBytes, 4);
  expect_refused(truncated, "truncated at stack_id");
  auto truncated_peer = encode(message);
  truncated_peer.resize(truncated_peer.size() - 5);
  poke(truncated_peer, 8, truncated_peer.size() - kHeaderBytes, 4);
  expect_refused(truncated_peer, "truncated at peer");
  auto bad_peer = encode(message);
  poke(bad_peer, where_at + 3 + 4, 0xFFFFFFFEull, 4);  // -2: below "none" (-1)
  expect_refused(bad_peer, "peer -2 out of range");
  auto huge_comm_rank = encode(message);
  poke(huge_comm_rank, where_at + 3, static_cast<uint64_t>(kMaxRanks), 4);
  expect_refused(huge_comm_rank, "comm_rank");

  auto trailing = encode(message);
  trailing.push_back(0);
  poke(trailing, 8, trailing.size() - kHeaderBytes, 4);
  expect_refused(trailing, "1 trailing bytes");

  // Verdict kinds stop at kNonfinite.
  auto bad_verdict = encode(Verdict{});
  poke(bad_verdict, kHeaderBytes, 5, 1);
  expect_refused(bad_verdict, "verdict kind 5 out of range");
}

TEST(WireProtocolTest, StackDefinitionsCarryPythonFramesAndTheNote) {
  StackDefinition stack = sample_stack();
  stack.stack.python_note = "";
  const auto bytes = encode(stack);
  // rank, id, native count + 2 strings, python count + 2 x (file, line, function), note.
  EXPECT_EQ(bytes.size(),
            kHeaderBytes + 4 + 4 + 4 + (4 + 9) + (4 + 9) + 4 + (4 + 8 + 4 + 4 + 8) + (4 + 19 + 4 + 4 + 13) + 4);
  const DecodeResult decoded = decode(bytes);
  ASSERT_TRUE(decoded.ok) << decoded.error;
  EXPECT_EQ(std::get<StackDefinition>(decoded.message), stack);

  // What cannot go out whole is cut when encoding, so what goes out is always accepted: too many frames, long
  // strings, a negative line ("not known": 0).
  StackDefinition big;
  big.rank = 0;
  big.stack_id = 1;
  for (size_t i = 0; i < kMaxFramesPerStack + 5; ++i) big.stack.python.push_back({"f.py", 1, "g"});
  big.stack.python[0] = {std::string(kMaxFrameBytes + 1, 'p'), -7, std::string(kMaxFrameBytes + 9, 'q')};
  big.stack.python_note = std::string(kMaxFrameBytes * 2, 'n');
  const DecodeResult decoded_big = decode(encode(big));
  ASSERT_TRUE(decoded_big.ok) << decoded_big.error;
  const CallStack& got = std::get<StackDefinition>(decoded_big.message).stack;
  ASSERT_EQ(got.python.size(), kMaxFramesPerStack);
  EXPECT_EQ(got.python[0].file, std::string(kMaxFrameBytes, 'p'));
  EXPECT_EQ(got.python[0].line, 0);
  EXPECT_EQ(got.python[0].function, std::string(kMaxFrameBytes, 'q'));
  EXPECT_EQ(got.python_note, std::string(kMaxFrameBytes, 'n'));
}

TEST(WireProtocolTest, MalformedStackDefinitionsAreRefused) {
  // Payload: i32 rank @0 | u32 id @4 | u32 native count @8, "frame one" @12, "frame two" @25 | u32 python count @38 |
  // u32 file length @42, "train.py" @46 | i32 line @54 | u32 function length @58 ...
  const StackDefinition stack = sample_stack();
  const size_t python_count_at = kHeaderBytes + 38;
  const size_t file_at = python_count_at + 4;
  const size_t line_at = file_at + 4 + 8;

  auto too_many = encode(stack);
  poke(too_many, python_count_at, kMaxFramesPerStack + 1, 4);
  expect_refused(too_many, "python frame count 129 over the limit 128");
  auto lying = encode(stack);
  poke(lying, python_count_at, 100, 4);
  expect_refused(lying, "python frame count 100 does not fit");
  auto long_file = encode(stack);
  poke(long_file, file_at, kMaxFrameBytes + 1, 4);
  expect_refused(long_file, "python file is 1025 bytes, limit 1024");
  auto negative_line = encode(stack);
  poke(negative_line, line_at, 0xFFFFFFFFull, 4);
  expect_refused(negative_line, "python line -1 out of range");
  auto too_many_native = encode(stack);
  poke(too_many_native, kHeaderBytes + 8, kMaxFramesPerStack + 1, 4);
  expect_refused(too_many_native, "frame count 129 over the limit 128");
  auto long_note = encode(stack);  // the note is last: its length, then nothing
  poke(long_note, long_note.size() - 4, kMaxFrameBytes + 1, 4);
  expect_refused(long_note, "python_note is 1025 bytes, limit 1024");
  auto no_note = encode(stack);
  no_note.resize(no_note.size() - 4);
  poke(no_note, 8, no_note.size() - kHeaderBytes, 4);
  expect_refused(no_note, "truncated at python_note");
  auto trailing = encode(stack);
  trailing.push_back(0);
  poke(trailing, 8, trailing.size() - kHeaderBytes, 4);
  expect_refused(trailing, "1 trailing bytes");
}

TEST(WireProtocolTest, APeerOfAnOlderVersionIsRefusedByName) {
  EXPECT_EQ(kWireVersion, 5);
  FingerprintBatch batch;
  batch.fingerprints = {sample_fingerprint(1)};
  for (auto bytes : {encode(sample_stack()), encode(sample_nonfinite()), encode(sample_hello()), encode(batch)}) {
    poke(bytes, 4, 4, 2);
    expect_refused(bytes, "protocol version 4, expected 5");
  }
}

// A peer's strings end up in reports, the manifest and logs: their control characters arrive escaped, while the token
// (compared, never shown) arrives exactly as sent and a verdict's text keeps its lines.
TEST(WireProtocolTest, StringsFromAPeerArriveWithTheirControlCharactersEscaped) {
  Hello hello = sample_hello();
  hello.host = "node\x1b]0;owned\x07";
  hello.gpu_name = "GPU\x1b[2J";
  hello.token =
      "tok\x01"
      "en";
  const DecodeResult decoded_hello = decode(encode(hello));
  ASSERT_TRUE(decoded_hello.ok) << decoded_hello.error;
  const Hello& got = std::get<Hello>(decoded_hello.message);
  EXPECT_EQ(got.host, "node\\x1b]0;owned\\x07");
  EXPECT_EQ(got.gpu_name, "GPU\\x1b[2J");
  EXPECT_EQ(got.token,
            "tok\x01"
            "en");

  StackDefinition stack = sample_stack();
  stack.stack.native = {"main+0x10\x1b[31m"};
  stack.stack.python = {{"train\n.py", 3, "step\x9b"}};
  const DecodeResult decoded_stack = decode(encode(stack));
  ASSERT_TRUE(decoded_stack.ok) << decoded_stack.error;
  const CallStack& got_stack = std::get<StackDefinition>(decoded_stack.message).stack;
  EXPECT_EQ(got_stack.native[0], "main+0x10\\x1b[31m");
  EXPECT_EQ(got_stack.python[0].file, "train\\x0a.py");
  EXPECT_EQ(got_stack.python[0].function, "step\\x9b");

  Verdict verdict;
  verdict.text = "Cannot apply\n  - Process 1: host \x1b[8m\n";
  const DecodeResult decoded_verdict = decode(encode(verdict));
  ASSERT_TRUE(decoded_verdict.ok) << decoded_verdict.error;
  EXPECT_EQ(std::get<Verdict>(decoded_verdict.message).text, "Cannot apply\n  - Process 1: host \\x1b[8m\n");
}

// A string escaped on arrival grows; sent on, it is cut at its field's limit, and the cut must not split a character,
// or the next decoder escapes the broken bytes again and the text changes at every hop (found by the fuzzer).
TEST(WireProtocolTest, AnEscapedStringCutAtItsLimitIsAFixedPoint) {
  Hello hello = sample_hello();
  // Escaped, "\x01" (4 bytes) then the 'a's puts the cut at the limit between the two bytes of the e-acute.
  hello.host = "\x01" + std::string(kMaxShortStringBytes - 5, 'a') + "\xc3\xa9";
  const DecodeResult once = decode(encode(hello));
  ASSERT_TRUE(once.ok) << once.error;
  ASSERT_EQ(std::get<Hello>(once.message).host.size(), kMaxShortStringBytes + 1);
  const std::vector<uint8_t> sent_on = encode(once.message);
  const DecodeResult twice = decode(sent_on);
  ASSERT_TRUE(twice.ok) << twice.error;
  const std::string& host = std::get<Hello>(twice.message).host;
  EXPECT_EQ(host, "\\x01" + std::string(kMaxShortStringBytes - 5, 'a')) << "cut before the character, not in it";
  EXPECT_EQ(encode(twice.message), sent_on);
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

namespace trainscope::exchange {
namespace {

// The delta coding (fingerprint_codec.h): what a rank's calls cost on the wire, and every way its bytes can lie.
std::vector<uint8_t> batch_of(const std::vector<Fingerprint>& fingerprints) {
  FingerprintBatch batch;
  batch.rank = 1;
  batch.fingerprints = fingerprints;
  return encode(batch);
}

TEST(FingerprintCoding, ALoopsCallsTakeAFewBytesEachAndComeBackExactly) {
  // The whole-job benchmark's loop: all-reduce, broadcast, all-gather, reduce-scatter, then a send and a receive.
  std::vector<Fingerprint> calls;
  uint64_t index = 0;
  for (uint64_t step = 0; step < 200; ++step) {
    for (int k = 0; k < 6; ++k) {
      Fingerprint f = sample_fingerprint(step * 4 + static_cast<uint64_t>(k < 4 ? k : 3) + 1);
      f.op = static_cast<uint16_t>(k == 0   ? recorder::Op::kAllReduce
                                   : k == 1 ? recorder::Op::kBroadcast
                                   : k == 2 ? recorder::Op::kAllGather
                                   : k == 3 ? recorder::Op::kReduceScatter
                                   : k == 4 ? recorder::Op::kSend
                                            : recorder::Op::kRecv);
      if (k >= 4) f.seq = step + 1;
      f.peer = k == 1 ? 0 : k >= 4 ? 2 : -1;
      f.count = k == 2 || k == 3 ? 4 : 16;
      f.caller = 0x401000 + static_cast<uint64_t>(k) * 0x40;
      f.stack_id = static_cast<uint32_t>(k + 1);
      f.record_index = index++;
      f.start_ns = 1700000000000000000ull + index * 61'000 + (index * 7919) % 3000;
      f.result = k % 2 == 0 ? 0 : -1;
      calls.push_back(f);
    }
  }
  const std::vector<uint8_t> bytes = batch_of(calls);
  const double per_call = static_cast<double>(bytes.size() - kHeaderBytes - 24) / static_cast<double>(calls.size());
  EXPECT_LT(per_call, 20.0) << "the coding's point: against 85 bytes of plain fields";
  const DecodeResult decoded = decode(bytes);
  ASSERT_TRUE(decoded.ok) << decoded.error;
  const auto& got = std::get<FingerprintBatch>(decoded.message).fingerprints;
  ASSERT_EQ(got.size(), calls.size());
  for (size_t i = 0; i < calls.size(); ++i)
    ASSERT_EQ(std::memcmp(&got[i], &calls[i], sizeof(Fingerprint)), 0) << "fingerprint " << i;
  EXPECT_EQ(encode(decoded.message), bytes);
}

TEST(FingerprintCoding, ExtremeValuesOfEveryFieldComeBackExactly) {
  Fingerprint low{};
  low.comm_id = 0;
  low.seq = ~0ull;
  low.count = 0;
  low.start_ns = ~0ull;
  low.caller = 1ull << 63;
  low.comm_rank = -1;
  low.nranks = kMaxRanks;
  low.peer = INT32_MIN;
  low.redop = INT32_MAX;
  low.result = INT32_MIN;
  low.stack_id = UINT32_MAX;
  low.op = static_cast<uint16_t>(recorder::Op::kCount) - 1;
  low.dtype = -128;
  low.kind = static_cast<uint8_t>(EventKind::kCommCreating);
  low.flags = 0xff;
  Fingerprint high = low;
  high.seq = 0;
  high.comm_id = ~0ull;
  high.peer = INT32_MAX;
  high.redop = INT32_MIN;
  high.dtype = 127;
  high.comm_rank = kMaxRanks - 1;
  const std::vector<uint8_t> bytes = batch_of({low, high, low, sample_fingerprint(5)});
  const DecodeResult decoded = decode(bytes);
  ASSERT_TRUE(decoded.ok) << decoded.error;
  const auto& got = std::get<FingerprintBatch>(decoded.message).fingerprints;
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(std::memcmp(&got[0], &low, sizeof(Fingerprint)), 0);
  EXPECT_EQ(std::memcmp(&got[1], &high, sizeof(Fingerprint)), 0);
  EXPECT_EQ(std::memcmp(&got[2], &low, sizeof(Fingerprint)), 0);
  EXPECT_EQ(encode(decoded.message), bytes);
}

// The payload after the count: byte 0 is the first fingerprint's mask.
constexpr size_t kFirstFingerprint = kHeaderBytes + 24;

std::vector<uint8_t> with_fingerprint_bytes(const std::vector<uint8_t>& coded) {
  std::vector<uint8_t> bytes = batch_of({});
  bytes[kHeaderBytes + 20] = 1;  // one fingerprint
  bytes.insert(bytes.end(), coded.begin(), coded.end());
  const auto length = static_cast<uint32_t>(bytes.size() - kHeaderBytes);
  std::memcpy(bytes.data() + 8, &length, 4);
  return bytes;
}

void expect_refused_coding(const std::vector<uint8_t>& coded, const std::string& words) {
  const DecodeResult decoded = decode(with_fingerprint_bytes(coded));
  EXPECT_FALSE(decoded.ok);
  EXPECT_NE(decoded.error.find(words), std::string::npos) << decoded.error;
}

TEST(FingerprintCoding, BytesThatWouldNotReEncodeTheSameAreRefused) {
  // Mask bit 13 (kind) with a zigzag difference of 2 (+1): a valid fingerprint of kind 1 and nothing else set.
  EXPECT_TRUE(decode(with_fingerprint_bytes({0x80, 0x40, 2})).ok)
      << decode(with_fingerprint_bytes({0x80, 0x40, 2})).error;
  expect_refused_coding({0x80, 0x40, 0}, "fingerprint 0: kind is in the mask but unchanged");
  expect_refused_coding({0x80, 0xc0, 0x00, 2}, "overlong field mask");
  expect_refused_coding({0x80, 0x40, 0x82, 0x00}, "overlong kind");
  expect_refused_coding({0x80, 0x80, 0x08}, "unknown fields in the mask");
  expect_refused_coding({0x80, 0x40}, "truncated or overlong kind");
  expect_refused_coding({0x80}, "truncated or overlong field mask");
  // op (bit 3) of 70000: beyond uint16_t.
  expect_refused_coding({0x88, 0x40, 0xe0, 0xc5, 0x08, 2}, "op does not fit its type");
  // A varint running past 64 bits.
  expect_refused_coding({0x81, 0x40, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 2}, "overlong seq");
  // The first fingerprint alone, unchanged against the zeroed one, is kind 0: out of range.
  expect_refused_coding({0x00}, "kind 0 out of range");
  EXPECT_EQ(kFirstFingerprint, kHeaderBytes + 24);
}

}  // namespace
}  // namespace trainscope::exchange
