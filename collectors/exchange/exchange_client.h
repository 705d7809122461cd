// A rank's side of the out-of-band exchange: a bounded lock-free queue of fingerprints that any thread may push
// to, and a background thread that batches them to the coordinator over a ZeroMQ DEALER socket.
//
// How the engine drives it:
//   ExchangeClient client(options);   // endpoint, the Hello (token, identity, GPU, versions), callbacks
//   client.start();                   // starts the client's own thread; never blocks on the network
//   client.push(fingerprint);         // any thread, lock-free, never blocks; false (and counted) when full
//   client.define_stack(id, stack);   // before the first fingerprint with that stack_id (any thread, locks briefly;
//                                     // a repeated id is ignored, so calling it once per call is cheap)
//   client.report_nonfinite(first, stop_job, stack_id);  // this rank's first inf/nan (any thread, locks briefly)
//   client.stop();                    // flushes for at most stop_flush_timeout_ms, says goodbye, joins
// Verdicts and log lines arrive through the callbacks, on the client's thread; each abort verdict once, however often
// the coordinator sends it.
//
// Order on the connection: a stack definition made before a push() or report_nonfinite() goes out before the
// fingerprint batch or the inf/nan message that carries it, so the coordinator always knows a stack id before a call
// names it.
//
// No coordinator reachable: nothing blocks and nothing fails. The queue fills and counts what it drops, one warning
// goes to the log, and the socket reconnects in the background; once a coordinator answers, the hello is sent again
// and the queue drains. A coordinator that restarted answers "need hello" and the client sends it again.
//
// Fork: the child must never touch the parent's client (its thread does not exist in the child; its ZeroMQ context
// and sockets belong to the parent). In the child, do not call stop() and do not destroy it: leak the pointer and,
// if the child needs an exchange of its own, construct a new client.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "base/call_stack.h"
#include "base/fingerprint.h"
#include "collectors/exchange/wire_protocol.h"
#include "reports/frame_report.h"

namespace trainscope::exchange {

struct ExchangeClientOptions {
  std::string endpoint;              // "tcp://host:port" or "ipc://path"
  Hello hello;                       // sent first on every connection; hello.token is the job token
  size_t queue_capacity = 1u << 16;  // fingerprints (rounded up to a power of two)
  size_t max_batch = 1024;           // fingerprints per message (at most kMaxFingerprintsPerBatch)
  // A partial batch waits at most this long. The client sends at the multiples of it on the wall clock, so that the
  // ranks of a host (and of hosts whose clocks NTP keeps together) send in the same moment and the coordinator, its
  // ZeroMQ thread and theirs each wake once for all of them, not once per rank: on a node whose cores the ranks fill,
  // every wakeup takes a core from one (whole_job.sh: 1.03x -> 1.00x for the defaults, 1.11x -> 1.07x watch off).
  int flush_interval_ms = 50;
  int heartbeat_interval_ms = 1000;  // the calls the rank is inside, for desync reports
  // TCP_USER_TIMEOUT (ZMQ_TCP_MAXRT): data the coordinator has not acknowledged this long (the answers to its pings
  // every 250 ms, the heartbeats) closes the connection, so a cut link is seen within about 2.5 s, whatever TCP would
  // wait. The coordinator pings; the rank only answers (CoordinatorServerOptions::heartbeat_interval_ms).
  int link_timeout_ms = 1500;
  int reconnect_interval_ms = 100;  // ZMQ_RECONNECT_IVL, backing off to reconnect_interval_max_ms
  int reconnect_interval_max_ms = 5000;
  int unreachable_warning_ms = 3000;  // no connection for this long: one warning
  int stop_flush_timeout_ms = 2000;   // stop(): how long to try to deliver what is queued and the goodbye to a
                                      // connected coordinator (an absent one is waited for kAbsentCoordinatorWaitMs)
  int handshake_timeout_ms = 2000;    // a listener that has not proved it is the job's coordinator by then is left
  LogSink log;                        // may be empty
  std::function<void(const Verdict&)> on_verdict;            // may be empty
  std::function<std::vector<HeartbeatCall>()> inside_calls;  // calls in progress, for heartbeats; may be empty
  // Called on the client's thread before each round of sending, until stop(): the engine reads its flight recorder
  // into the queue there, so that one thread wakes once per flush interval for both (on a node whose cores are
  // all busy with the job, each wakeup of ours takes a core from a rank). May be empty.
  std::function<void()> before_send;
};

// Milliseconds from `now_ns` (wall clock) to its next multiple of `interval_ms`, in [1, interval_ms] (0 for an interval
// of 0): when the client sends next.
int ms_to_next_flush(uint64_t now_ns, int interval_ms);

struct ExchangeClientStats {
  uint64_t pushed = 0;
  uint64_t dropped = 0;  // the queue was full
  uint64_t sent_fingerprints = 0;
  uint64_t batches = 0;
  uint64_t heartbeats = 0;
  uint64_t verdicts = 0;
  uint64_t repeated_verdicts = 0;  // copies of a verdict already acted on (the coordinator repeats abort verdicts)
  uint64_t hellos = 0;             // sent; more than one after reconnections to a restarted coordinator
  uint64_t nonfinite_sent = 0;
  uint64_t nonfinite_dropped = 0;  // more than kMaxPendingNonfinite waiting to be sent
  bool welcomed = false;           // the coordinator accepted the hello (and has not asked for it again since)
  bool reached = false;            // a handshake with the job's coordinator succeeded, at least once
  bool rejected = false;           // the coordinator refused the job token: nothing more is sent
  uint64_t impostors = 0;          // connections to a listener that could not prove it holds the job's key
};

// At exit, how long a rank waits for a coordinator it is not connected to before it leaves.
inline constexpr uint64_t kAbsentCoordinatorWaitMs = 80;  // with the rest of the exit: under 100 ms

// A bounded multi-producer multi-consumer queue (D. Vyukov's): one atomic ticket per push, no locks, no allocation.
class FingerprintQueue {
 public:
  explicit FingerprintQueue(size_t capacity);
  bool push(const Fingerprint& fingerprint);
  bool pop(Fingerprint& fingerprint);

 private:
  struct alignas(64) Cell {
    std::atomic<uint64_t> sequence;
    Fingerprint value;
  };
  std::unique_ptr<Cell[]> cells_;
  uint64_t mask_;
  alignas(64) std::atomic<uint64_t> enqueue_position_{0};
  alignas(64) std::atomic<uint64_t> dequeue_position_{0};
};

class ExchangeClient {
 public:
  explicit ExchangeClient(ExchangeClientOptions options);
  ~ExchangeClient();  // stop()
  ExchangeClient(const ExchangeClient&) = delete;
  ExchangeClient& operator=(const ExchangeClient&) = delete;

  void start();
  // Flushes (bounded), sends Goodbye, closes, joins. Idempotent. `stopping_job`: see Goodbye.
  void stop(bool stopping_job = false);
  // For tests and for a rank that must disappear without a goodbye: closes at once, drops what is queued.
  void abandon();

  bool push(const Fingerprint& fingerprint);
  // Sends the stack of call site `stack_id` (>= 1; 0 is ignored) once: a later call with the same id does nothing.
  // At most kMaxStackIds ids are remembered; definitions past that are dropped (the reports then show no stack).
  void define_stack(uint32_t stack_id, exchange::CallStack stack);
  static constexpr size_t kMaxStackIds = 1u << 16;
  // Queues this rank's first frame with inf/nan for the coordinator's origin report; `stop_job` asks it to stop the
  // job (TRAINSCOPE_ON_NONFINITE=abort); `stack_id` names the stack of that call (defined with define_stack() before
  // this call; 0: none). The message goes out from the client's thread within about one flush_interval_ms, after
  // every fingerprint pushed and every stack defined before this call (the coordinator sees the calls first). The
  // rank sent is the hello's (first.rank and first.stack are not used). Never waits on the network; at most
  // kMaxPendingNonfinite messages wait for a connection, more are dropped and counted.
  void report_nonfinite(const reports::FirstNonfinite& first, bool stop_job, uint32_t stack_id = 0);
  static constexpr size_t kMaxPendingNonfinite = 64;

  ExchangeClientStats stats() const;

 private:
  struct Session;  // what the client's thread holds while it runs (exchange_client.cc)
  void run();
  bool open_socket(Session& s);  // false (said) when the socket cannot be set up
  void read_monitor(Session& s);
  void note_unreachable(Session& s, uint64_t now_ms);
  void receive_all(Session& s);
  bool send_stacks(Session& s);
  bool send_pending(Session& s);
  void flush_and_say_goodbye(Session& s);
  void wait_a_little(Session& s);
  void log(LogLevel level, const std::string& message) const;

  ExchangeClientOptions options_;
  FingerprintQueue queue_;
  std::thread thread_;
  std::atomic<bool> stopping_job_{false};
  std::atomic<uint64_t> impostors_{0};
  std::atomic<int> stop_mode_{0};  // 0 running, 1 stop with goodbye, 2 abandon
  bool started_ = false;
  std::mutex stacks_lock_;
  std::vector<StackDefinition> pending_stacks_;  // defined, not yet taken by the client's thread
  std::unordered_set<uint32_t> defined_stacks_;  // every id ever defined (pending or sent), for the dedupe
  struct PendingNonfinite {
    NonfiniteMessage message;
    uint64_t after_fingerprints;  // sent once this many fingerprints (those pushed before it) have gone out
  };
  std::mutex nonfinite_lock_;
  std::vector<PendingNonfinite> pending_nonfinite_;
  std::atomic<size_t> nonfinite_held_{0};  // taken from pending_nonfinite_ by the client's thread, not sent yet
  std::atomic<uint64_t> pushed_{0}, dropped_{0}, sent_fingerprints_{0}, batches_{0}, heartbeats_{0}, verdicts_{0},
      repeated_verdicts_{0}, hellos_{0}, nonfinite_sent_{0}, nonfinite_dropped_{0};
  std::atomic<bool> welcomed_{false}, rejected_{false}, reached_{false};
};

}  // namespace trainscope::exchange
