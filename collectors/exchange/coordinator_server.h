// The coordinator's transport: a ZeroMQ ROUTER that authenticates ranks by the job's secret (CURVE keys derived from
// it, then the token in the encrypted hello: collectors/exchange/job_secret.h), feeds the coordinator
// core, writes its reports into the run directory and sends every verdict to every connected rank.
//
// Run directory: manifest.json (the job's ranks, GPUs, versions); one <kind>-....txt/.json pair per verdict; and
// origin.txt / origin.json, the origin of the first inf/nan (reports::format_origin_text / origin_json), replaced
// atomically whenever another rank's first arrives. A stop on inf/nan (kNonfinite verdict) points at those two.
//
// How it is driven (rank 0's engine, or `trainscope coordinator`):
//   CoordinatorServer server(options);   // bind address, token, run directory, core options, callbacks
//   std::string error;
//   if (!server.start(&error)) ...       // binds on the caller's thread (errors come back here), then runs its own
//                                        // thread: decode, check, feed the core, tick, report, broadcast
//   server.endpoint();                   // the bound address, with the real port for "tcp://host:*"
//   server.stop();                       // within about one tick interval; idempotent; the destructor calls it
// Nothing blocks forever: every socket operation is non-blocking or polled with a timeout, linger is bounded.
//
// A vanished rank: ZeroMQ does not tell a ROUTER which peer went away, so the server watches its socket's
// disconnect events and maps them to ranks through the connection's file descriptor (ZMQ_SRCFD of that rank's
// messages). A rank that does not come back within vanish_grace_ms (a reconnection after a network blip) is
// reported. ZeroMQ heartbeats close connections to peers that died without closing theirs (a host that lost power).
//
// Peers that have not proved they are the job's ranks: every connection costs rank 0's process a descriptor, so what
// they may hold is bounded (connection_gate.h): a connection that has not completed its handshake and said a valid
// hello within hello_deadline_ms is closed; at most max(max_unauthenticated, ranks) such connections at once; at
// most the job's rank count plus a margin in all; and none that would leave the job fewer than max(64, limit / 4)
// free descriptors. Each refusal is counted (stats().gate); the first is logged, then a sum at most once a minute.
//
// Fork: a forked child must never use the server (its thread is not in the child; the context and sockets are
// the parent's). Leak it in the child; do not stop or destroy it there.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "base/run_files.h"
#include "collectors/exchange/connection_gate.h"
#include "collectors/exchange/coordinator_core.h"
#include "collectors/exchange/wire_protocol.h"
#include "reports/unwritten_report.h"

namespace trainscope::exchange {

struct CoordinatorServerOptions {
  std::string bind_address;  // "tcp://0.0.0.0:29400", "tcp://127.0.0.1:*" (any free port), "ipc:///path"
  std::string token;         // the job token every hello must present
  std::string run_dir;       // reports and manifest.json go here (created 0700 when missing)
  CoordinatorOptions core;
  int tick_interval_ms = 50;  // how often timeouts are checked when no message arrives
  int vanish_grace_ms = 500;  // a dropped connection that does not come back in time is a vanished rank (the
                              // kernel tells of a dead process at once; a network blip reconnects in 100 ms)
  // ZeroMQ-level pings to every rank: a connection that leaves one unanswered for heartbeat_timeout_ms is closed (then
  // counted as a drop), so a host whose link was cut is a vanished host within about interval + timeout + vanish
  // grace (2-2.5 s), not when TCP gives up. The ranks do not ping back on their own (that would double the idle
  // traffic): they see a cut link by TCP_USER_TIMEOUT on their answers and heartbeats.
  int heartbeat_interval_ms = 250;
  int heartbeat_timeout_ms = 1500;
  size_t max_peers = 1u << 16;
  int hello_deadline_ms = 5000;     // accept to valid hello; ZeroMQ's own handshake limit is a second more
  size_t max_unauthenticated = 64;  // connections without a valid hello at once (or the rank count, when larger)
  int32_t expected_ranks = 0;       // the job's rank count when known before any hello (0: the largest one announced)
  size_t max_messages_per_wakeup = 4096;           // then tick and look at disconnects before reading more
  LogSink log;                                     // may be empty
  std::function<void(const Verdict&)> on_verdict;  // on the server thread, after the report is written; may be empty
  // A report (or the manifest, or origin.*) it could not write, a full disk say: on the server thread, once per report
  // (the manifest's and the origin's once until they are written again); may be empty. Its log says so too, in words.
  std::function<void(const reports::UnwrittenReport&)> on_unwritten;
};

struct CoordinatorServerStats {
  uint64_t messages = 0;
  uint64_t malformed = 0;  // failed decoding, or carried another rank's number
  uint64_t rejected_tokens = 0;
  uint64_t rejected_handshakes = 0;  // connections without the job's key (CURVE handshake failed)
  uint64_t unknown_peers = 0;        // messages before a hello (told to send one)
  uint64_t verdicts = 0;
  uint64_t report_errors = 0;  // reports that could not be written
  uint64_t peers = 0;          // authenticated connections now
  uint64_t connections = 0;    // of those, the ones whose transport is still open (a rank gone drops out at once)
  uint64_t hellos = 0;         // ranks that said hello
  ConnectionGateStats gate;    // accepted connections: those that have not said a valid hello, refusals, timeouts
  CoreStats core;
};

class CoordinatorServer {
 public:
  explicit CoordinatorServer(CoordinatorServerOptions options);
  ~CoordinatorServer();
  CoordinatorServer(const CoordinatorServer&) = delete;
  CoordinatorServer& operator=(const CoordinatorServer&) = delete;

  bool start(std::string* error);
  void stop();
  std::string endpoint() const;
  CoordinatorServerStats stats() const;

 private:
  struct State;
  class Loop;  // the server thread's loop, over State (coordinator_server.cc)
  void run();

  CoordinatorServerOptions options_;
  std::unique_ptr<State> state_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::string endpoint_;
  mutable std::mutex stats_lock_;
  CoordinatorServerStats stats_;
};

// Base name of the origin report in the run directory: origin.txt, origin.json.
inline constexpr const char* kOriginBaseName = run_files::info_of(run_files::ReportKind::kOrigin).stem;

// Text, JSON and file base name of a verdict's report.
struct RenderedReport {
  std::string text;
  nlohmann::json json;
  std::string base_name;
};
RenderedReport render_report(const CoreVerdict& verdict);

}  // namespace trainscope::exchange
