// The messages of the out-of-band exchange between ranks and the coordinator, and their byte encoding.
//
// Every message is one ZeroMQ frame: a 12-byte header then the payload, all integers little-endian:
//   u32 magic "TSXC" | u16 version | u16 type | u32 payload length
// Decoding never trusts the input: every length, count, enum and range is checked before use, strings are
// length-limited, trailing bytes are an error, and a failure returns a one-line reason instead of a message.
// Encoding is canonical, so encode(decode(bytes)) == bytes for every accepted input (the fuzz target checks it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/call_stack.h"
#include "base/fingerprint.h"
#include "base/log_level.h"

namespace trainscope::exchange {

inline constexpr uint32_t kWireMagic = 0x43585354;  // "TSXC" in little-endian byte order
// 3: a stack definition carries the call site's Python frames and the note saying why they are missing next to its
// native frames, and the first-inf/nan message names the stack of its call (2: the first-inf/nan message carries
// the send/recv's communicator rank and peer). A peer of another version is refused by name ("protocol version 2,
// expected 3"), never misread. 4: a batch's fingerprints are delta-coded (fingerprint_codec.h), 12-20 bytes each
// instead of 85. 5: the hello carries the rank's host_id (host_identity.h), so the coordinator reads a rank's flight
// recorder only where its path names the same file, and never judges a process of another host by its pid.
inline constexpr uint16_t kWireVersion = 5;
inline constexpr size_t kHeaderBytes = 12;
inline constexpr size_t kMaxMessageBytes = 4u << 20;  // larger frames are refused before decoding

// Limits on variable-length fields: a peer cannot make the other side allocate more than these.
inline constexpr size_t kMaxTokenBytes = 256;
inline constexpr size_t kMaxShortStringBytes = 256;  // host, GPU name, versions, kernel release
inline constexpr size_t kMaxPathBytes = 4096;
inline constexpr size_t kMaxFingerprintsPerBatch = 4096;
inline constexpr size_t kMaxFramesPerStack = 128;  // native frames, and Python frames, of one stack
inline constexpr size_t kMaxFrameBytes = 1024;     // a native frame; a Python frame's file and function; the note
inline constexpr size_t kMaxHeartbeatCalls = 256;
inline constexpr size_t kMaxReasonBytes = 1024;
inline constexpr size_t kMaxReportTextBytes = 1u << 20;
// An NCCL function name ("ncclReduceScatter"), a kernel's short name, or a module frame's "module <name> <class>"
// (a qualified name of a deep model is long).
inline constexpr size_t kMaxOpNameBytes = 512;
inline constexpr int32_t kMaxRanks = 1 << 20;

enum class MessageType : uint16_t {
  kHello = 1,             // rank -> coordinator, first message of every connection
  kFingerprintBatch = 2,  // rank -> coordinator
  kStackDefinition = 3,   // rank -> coordinator, once per stack id, before the first fingerprint using it
  kHeartbeat = 4,         // rank -> coordinator, periodically
  kGoodbye = 5,           // rank -> coordinator, clean exit
  kWelcome = 6,           // coordinator -> rank: the hello was accepted
  kReject = 7,            // coordinator -> rank: a message was refused, with the reason
  kVerdict = 8,           // coordinator -> every rank
  kNonfinite = 9,         // rank -> coordinator: the rank's first frame holding inf/nan
};

enum class VerdictKind : uint8_t { kMismatch = 1, kDesync = 2, kVanished = 3, kNonfinite = 4 };
enum class VerdictAction : uint8_t { kAbort = 1, kWarn = 2 };
enum class RejectReason : uint8_t {
  kBadToken = 1,   // the hello's job token is wrong: the client stops sending
  kNeedHello = 2,  // the coordinator does not know this connection (it restarted): send the hello again
  kBadRank = 3,    // the rank in a message is not the rank of the hello on this connection
};

// Where the client and the server send their one-line messages (the engine forwards them to its logger). Called on
// the client's or server's own thread; it must not block for long and must not throw.
using trainscope::LogLevel;  // base/log_level.h
using LogSink = std::function<void(LogLevel level, const std::string& message)>;

const char* verdict_kind_name(VerdictKind kind);        // "mismatch", "desync", "vanished", "nonfinite"
const char* verdict_action_name(VerdictAction action);  // "abort", "warn"

struct Hello {
  std::string token;
  int32_t global_rank = -1;
  int32_t world_size = -1;     // -1: not known yet
  int32_t launcher_rank = -1;  // from the launcher's environment, -1 if none
  int32_t pid = 0;
  std::string host;
  // GPU and software; empty / 0 where not present (a CPU-only rank, a library that is not loaded).
  std::string gpu_name;
  uint64_t gpu_memory_bytes = 0;
  int32_t compute_capability_major = 0;
  int32_t compute_capability_minor = 0;
  std::string gpu_bus_id;
  std::string driver_version;
  std::string cuda_runtime_version;
  std::string nccl_version;
  std::string kernel_release;
  std::string flight_recorder_path;
  // Which machine, process tree and file system the rank lives in: "<boot id>/<pid ns inode>/<mount ns inode>"
  // (host_identity.h); empty when unknown. The host name is no such proof: containers and namespaces share names.
  std::string host_id;
  bool operator==(const Hello&) const = default;
};

struct FingerprintBatch {
  int32_t rank = -1;           // global rank of the sender
  uint64_t batch_number = 0;   // 1-based, per connection of the client
  uint64_t dropped_total = 0;  // fingerprints the sender dropped so far (full queue, coordinator unreachable)
  std::vector<Fingerprint> fingerprints;
};

// The stack of one call site of a rank, sent once per stack id before any fingerprint or first-inf/nan message that
// names it. Payload: i32 rank | u32 stack_id (>= 1) | u32 native count, each a string | u32 Python frame count, each
// string file, i32 line (>= 0), string function | string python_note. Counts at most kMaxFramesPerStack, strings at
// most kMaxFrameBytes (longer ones are cut when encoding).
struct StackDefinition {
  int32_t rank = -1;
  uint32_t stack_id = 0;
  CallStack stack{};
  bool operator==(const StackDefinition&) const = default;
};

// A call the rank is inside right now (it has not returned), so a desync report can say since when it waits.
struct HeartbeatCall {
  uint64_t comm_id = 0;
  uint64_t seq = 0;
  uint64_t since_ns = 0;  // CLOCK_REALTIME at the call's start
  uint16_t op = 0;        // recorder::Op
  bool operator==(const HeartbeatCall&) const = default;
};

struct Heartbeat {
  int32_t rank = -1;
  uint64_t time_ns = 0;
  std::vector<HeartbeatCall> inside;
  bool operator==(const Heartbeat&) const = default;
};

struct Goodbye {
  int32_t rank = -1;
  uint64_t time_ns = 0;
  // The rank leaves because the user asked the job to stop (TRAINSCOPE_ABORT_AFTER_BATCH, ON_NONFINITE=abort):
  // the other ranks are about to leave too, and the calls they leave unfinished are no desync.
  bool stopping_job = false;
  bool operator==(const Goodbye&) const = default;
};

struct Welcome {
  uint64_t coordinator_time_ns = 0;
  bool operator==(const Welcome&) const = default;
};

struct Reject {
  RejectReason reason = RejectReason::kBadToken;
  std::string detail;
  bool operator==(const Reject&) const = default;
};

struct Verdict {
  VerdictKind kind = VerdictKind::kMismatch;
  VerdictAction action = VerdictAction::kAbort;
  uint64_t comm_id = 0;   // 0 for a vanished rank
  uint64_t seq = 0;       // the call the verdict is about; 0 when none
  std::string text_path;  // the report files in the coordinator's run directory (empty if writing failed)
  std::string json_path;
  std::string text;  // the report's text, for the ranks' logs
  bool operator==(const Verdict&) const = default;
};

// Where a rank first saw a non-finite value, and which; the same values as reports::NonfiniteWhere / NonfiniteKind
// (the wire layer does not depend on the reports).
enum class NonfiniteWhere : uint8_t { kInput = 0, kOutput = 1 };  // the call's send buffer / its receive buffer
enum class NonfiniteKind : uint8_t { kInf = 0, kNan = 1 };

// A rank's first frame holding a non-finite value (reports::FirstNonfinite on the wire), for the origin report.
struct NonfiniteMessage {
  int32_t rank = -1;  // global rank of the sender
  uint64_t batch_number = 0;
  uint64_t comm_id = 0;
  uint64_t call_number = 0;
  std::string op;  // NCCL function name ("ncclAllReduce"), at most kMaxOpNameBytes
  NonfiniteWhere where = NonfiniteWhere::kOutput;
  NonfiniteKind kind = NonfiniteKind::kInf;
  bool stop_job = false;   // TRAINSCOPE_ON_NONFINITE=abort: the coordinator stops every rank after a grace period
  int32_t comm_rank = -1;  // a send/recv: the sender's and its peer's communicator ranks; -1 for a collective
  int32_t peer = -1;
  uint32_t stack_id = 0;  // the stack of the call where this rank first saw the value (a StackDefinition); 0: none
  bool operator==(const NonfiniteMessage&) const = default;
};

using Message = std::variant<Hello, FingerprintBatch, StackDefinition, Heartbeat, Goodbye, Welcome, Reject, Verdict,
                             NonfiniteMessage>;

std::vector<uint8_t> encode(const Hello& message);
std::vector<uint8_t> encode(const FingerprintBatch& message);
std::vector<uint8_t> encode(const StackDefinition& message);
std::vector<uint8_t> encode(const Heartbeat& message);
std::vector<uint8_t> encode(const Goodbye& message);
std::vector<uint8_t> encode(const Welcome& message);
std::vector<uint8_t> encode(const Reject& message);
std::vector<uint8_t> encode(const Verdict& message);
std::vector<uint8_t> encode(const NonfiniteMessage& message);
std::vector<uint8_t> encode(const Message& message);
// Writes a batch straight from a span (the client's hot loop does not build a FingerprintBatch).
void encode_fingerprint_batch(int32_t rank, uint64_t batch_number, uint64_t dropped_total,
                              std::span<const Fingerprint> fingerprints, std::vector<uint8_t>& out);

// Decodes and checks one message. Every string in it but the token has its control characters escaped
// (reports::printable; a verdict's text keeps its lines): nothing a peer sends can drive a terminal or a report reader.
struct DecodeResult {
  bool ok = false;
  Message message;
  std::string error;  // why the bytes were refused, when !ok
};
DecodeResult decode(std::span<const uint8_t> bytes);

// Compares two tokens in time that depends only on their lengths, not on where they differ.
bool tokens_equal(std::string_view expected, std::string_view presented);

}  // namespace trainscope::exchange
