// The rank side of the exchange: lock-free fingerprint queue and the background thread that talks to the
// coordinator (see exchange_client.h).
#include "collectors/exchange/exchange_client.h"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string_view>
#include <unordered_set>

#include <zmq.hpp>

#include "base/clocks.h"
#include "collectors/exchange/job_secret.h"

namespace trainscope::exchange {
namespace {

// What the client's socket monitor reports: the connection's state as far as the job's key is concerned.
constexpr int kMonitoredEvents =
    ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED | kHandshakeFailedEvents;

using clocks::realtime_ns;

uint64_t monotonic_ms() { return clocks::monotonic_ns() / 1000000ull; }

}  // namespace

int ms_to_next_flush(uint64_t now_ns, int interval_ms) {
  if (interval_ms <= 0) return 0;
  const uint64_t interval_ns = static_cast<uint64_t>(interval_ms) * 1000000ull;
  const uint64_t left_ns = interval_ns - now_ns % interval_ns;  // in (0, interval]
  return static_cast<int>((left_ns + 999999ull) / 1000000ull);
}

namespace {

// False when the socket could not take the frame now (no connection: ZMQ_IMMEDIATE; or the high-water mark).
bool try_send(zmq::socket_t& socket, const std::vector<uint8_t>& bytes) {
  try {
    return socket.send(zmq::const_buffer(bytes.data(), bytes.size()), zmq::send_flags::dontwait).has_value();
  } catch (const zmq::error_t&) {
    return false;
  }
}

}  // namespace

FingerprintQueue::FingerprintQueue(size_t capacity) {
  const size_t size = std::bit_ceil(std::max<size_t>(capacity, 2));
  cells_ = std::make_unique<Cell[]>(size);
  for (size_t i = 0; i < size; ++i) cells_[i].sequence.store(i, std::memory_order_relaxed);
  mask_ = size - 1;
}

bool FingerprintQueue::push(const Fingerprint& fingerprint) {
  uint64_t position = enqueue_position_.load(std::memory_order_relaxed);
  for (;;) {
    Cell& cell = cells_[position & mask_];
    const uint64_t sequence = cell.sequence.load(std::memory_order_acquire);
    const auto difference = static_cast<int64_t>(sequence - position);
    if (difference == 0) {
      if (enqueue_position_.compare_exchange_weak(position, position + 1, std::memory_order_relaxed)) {
        cell.value = fingerprint;
        cell.sequence.store(position + 1, std::memory_order_release);
        return true;
      }
    } else if (difference < 0) {
      return false;  // full
    } else {
      position = enqueue_position_.load(std::memory_order_relaxed);
    }
  }
}

bool FingerprintQueue::pop(Fingerprint& fingerprint) {
  uint64_t position = dequeue_position_.load(std::memory_order_relaxed);
  for (;;) {
    Cell& cell = cells_[position & mask_];
    const uint64_t sequence = cell.sequence.load(std::memory_order_acquire);
    const auto difference = static_cast<int64_t>(sequence - (position + 1));
    if (difference == 0) {
      if (dequeue_position_.compare_exchange_weak(position, position + 1, std::memory_order_relaxed)) {
        fingerprint = cell.value;
        cell.sequence.store(position + mask_ + 1, std::memory_order_release);
        return true;
      }
    } else if (difference < 0) {
      return false;  // empty
    } else {
      position = dequeue_position_.load(std::memory_order_relaxed);
    }
  }
}

ExchangeClient::ExchangeClient(ExchangeClientOptions options)
    : options_(std::move(options)), queue_(options_.queue_capacity) {
  options_.max_batch = std::clamp<size_t>(options_.max_batch, 1, kMaxFingerprintsPerBatch);
}

ExchangeClient::~ExchangeClient() { stop(); }

void ExchangeClient::start() {
  if (started_) return;
  started_ = true;
  thread_ = std::thread([this] { run(); });
}

void ExchangeClient::stop(bool stopping_job) {
  if (!thread_.joinable()) return;
  stopping_job_.store(stopping_job);
  int expected = 0;
  stop_mode_.compare_exchange_strong(expected, 1);
  thread_.join();
}

void ExchangeClient::abandon() {
  if (!thread_.joinable()) return;
  stop_mode_.store(2);
  thread_.join();
}

bool ExchangeClient::push(const Fingerprint& fingerprint) {
  if (queue_.push(fingerprint)) {
    pushed_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  dropped_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void ExchangeClient::define_stack(uint32_t stack_id, exchange::CallStack stack) {
  if (stack_id == 0) return;  // "no stack" on the wire: nothing to define
  std::lock_guard<std::mutex> lock(stacks_lock_);
  if (defined_stacks_.size() >= kMaxStackIds || !defined_stacks_.insert(stack_id).second) return;
  StackDefinition definition;
  definition.rank = options_.hello.global_rank;
  definition.stack_id = stack_id;
  definition.stack = std::move(stack);
  pending_stacks_.push_back(std::move(definition));
}

void ExchangeClient::report_nonfinite(const reports::FirstNonfinite& first, bool stop_job, uint32_t stack_id) {
  PendingNonfinite pending;
  pending.message.rank = options_.hello.global_rank;
  pending.message.batch_number = first.batch_number;
  pending.message.comm_id = first.comm_id;
  pending.message.call_number = first.call_number;
  pending.message.op = first.op.substr(0, kMaxOpNameBytes);
  pending.message.where =
      first.where == reports::NonfiniteWhere::kInput ? NonfiniteWhere::kInput : NonfiniteWhere::kOutput;
  pending.message.kind = first.kind == reports::NonfiniteKind::kNan ? NonfiniteKind::kNan : NonfiniteKind::kInf;
  pending.message.stop_job = stop_job;
  pending.message.comm_rank = first.comm_rank;
  pending.message.peer = first.peer;
  pending.message.stack_id = stack_id;
  pending.after_fingerprints = pushed_.load();
  std::lock_guard<std::mutex> lock(nonfinite_lock_);
  // Counted together with those the client's thread holds already: the bound is on everything not yet sent.
  if (pending_nonfinite_.size() + nonfinite_held_.load(std::memory_order_relaxed) >= kMaxPendingNonfinite) {
    nonfinite_dropped_.fetch_add(1);
    return;
  }
  pending_nonfinite_.push_back(std::move(pending));
}

ExchangeClientStats ExchangeClient::stats() const {
  ExchangeClientStats stats;
  stats.pushed = pushed_.load();
  stats.dropped = dropped_.load();
  stats.sent_fingerprints = sent_fingerprints_.load();
  stats.batches = batches_.load();
  stats.heartbeats = heartbeats_.load();
  stats.verdicts = verdicts_.load();
  stats.repeated_verdicts = repeated_verdicts_.load();
  stats.hellos = hellos_.load();
  stats.nonfinite_sent = nonfinite_sent_.load();
  stats.nonfinite_dropped = nonfinite_dropped_.load();
  stats.welcomed = welcomed_.load();
  stats.reached = reached_.load();
  stats.rejected = rejected_.load();
  stats.impostors = impostors_.load();
  return stats;
}

void ExchangeClient::log(LogLevel level, const std::string& message) const {
  if (options_.log) options_.log(level, message);
}

// What the client's thread holds while it runs: its sockets, the connection as the monitor tells it, and what is
// taken from the queues but not sent yet. Only that thread touches it.
struct ExchangeClient::Session {
  zmq::context_t context{1};
  zmq::socket_t socket{context, zmq::socket_type::dealer};
  zmq::socket_t monitor{context, zmq::socket_type::pair};
  // The connection as the monitor tells it: up once the handshake proved the peer holds the job's key.
  bool connected = false;
  bool tcp_connected = false;  // a TCP connection whose handshake has not succeeded (yet)
  bool warned_impostor = false;
  std::vector<uint8_t> hello;  // encoded
  bool hello_sent = false;
  bool warned_unreachable = false;
  uint64_t unreachable_since_ms = 0;
  uint64_t next_heartbeat_ms = 0;
  uint64_t batch_number = 0;
  std::vector<Fingerprint> batch;
  std::vector<uint8_t> encoded_batch;  // built, not yet taken by the socket
  size_t encoded_count = 0;
  std::vector<StackDefinition> stacks;
  std::vector<PendingNonfinite> nonfinite;  // taken from pending_nonfinite_, not sent yet
  std::unordered_set<size_t> seen_abort_verdicts;
};

void ExchangeClient::run() {
  pthread_setname_np(pthread_self(), "ts-client");  // shim/engine/engine_threads.h counts ts-* threads
  Session s;
  if (!open_socket(s)) return;
  s.hello = encode(options_.hello);
  s.unreachable_since_ms = monotonic_ms();
  s.batch.reserve(options_.max_batch);
  while (stop_mode_.load() == 0) {
    zmq::pollitem_t items[] = {{s.socket.handle(), 0, ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, 1,
                std::chrono::milliseconds(ms_to_next_flush(clocks::realtime_ns(), options_.flush_interval_ms)));
    } catch (const zmq::error_t&) {
    }
    read_monitor(s);
    receive_all(s);
    if (options_.before_send) options_.before_send();
    if (rejected_.load()) {
      Fingerprint discard;
      while (queue_.pop(discard)) {
      }
      continue;
    }
    const uint64_t now_ms = monotonic_ms();
    if (send_pending(s)) {
      s.unreachable_since_ms = now_ms;
    } else {
      note_unreachable(s, now_ms);
    }
    if (s.hello_sent && now_ms >= s.next_heartbeat_ms) {
      Heartbeat heartbeat;
      heartbeat.rank = options_.hello.global_rank;
      heartbeat.time_ns = realtime_ns();
      if (options_.inside_calls) heartbeat.inside = options_.inside_calls();
      if (try_send(s.socket, encode(heartbeat))) heartbeats_.fetch_add(1);
      s.next_heartbeat_ms = now_ms + static_cast<uint64_t>(options_.heartbeat_interval_ms);
    }
  }
  if (stop_mode_.load() == 1 && !rejected_.load()) flush_and_say_goodbye(s);
  zmq_socket_monitor(s.socket.handle(), nullptr, 0);
  s.monitor.close();
  s.socket.close();
  s.context.close();
}

bool ExchangeClient::open_socket(Session& s) {
  try {
    // A routing id that survives reconnections, so a coordinator that only lost the TCP connection still knows us.
    std::random_device random;
    char routing_id[64];
    std::snprintf(routing_id, sizeof(routing_id), "rank%d-pid%d-%08x%08x", options_.hello.global_rank,
                  options_.hello.pid, random(), random());
    s.socket.set(zmq::sockopt::routing_id, zmq::const_buffer(routing_id, std::strlen(routing_id)));
    s.socket.set(zmq::sockopt::linger, 0);
    s.socket.set(zmq::sockopt::immediate, 1);  // queue only on a live connection: a failed send means "unreachable"
    s.socket.set(zmq::sockopt::sndhwm, 1000);
    s.socket.set(zmq::sockopt::rcvhwm, 1000);
    s.socket.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxMessageBytes));
    s.socket.set(zmq::sockopt::reconnect_ivl, options_.reconnect_interval_ms);
    s.socket.set(zmq::sockopt::reconnect_ivl_max, options_.reconnect_interval_max_ms);
    s.socket.set(zmq::sockopt::tcp_maxrt, options_.link_timeout_ms);
    // A listener that never completes the handshake (a program that is not a coordinator) is left in bounded time.
    s.socket.set(zmq::sockopt::handshake_ivl, options_.handshake_timeout_ms);
    // The coordinator's public key comes from the job's secret: only the job's own coordinator can complete the
    // handshake, so a rank never talks to whatever else listens at the address.
    const CurveKeyPair server = coordinator_key_pair(options_.hello.token);
    const CurveKeyPair own = fresh_key_pair();
    if (zmq_setsockopt(s.socket.handle(), ZMQ_CURVE_SERVERKEY, server.public_key.data(), server.public_key.size()) !=
            0 ||
        zmq_setsockopt(s.socket.handle(), ZMQ_CURVE_PUBLICKEY, own.public_key.data(), own.public_key.size()) != 0 ||
        zmq_setsockopt(s.socket.handle(), ZMQ_CURVE_SECRETKEY, own.secret_key.data(), own.secret_key.size()) != 0) {
      throw zmq::error_t();
    }
    char monitor_address[64];
    std::snprintf(monitor_address, sizeof(monitor_address), "inproc://trainscope-client-%p", static_cast<void*>(this));
    if (zmq_socket_monitor(s.socket.handle(), monitor_address, kMonitoredEvents) != 0) throw zmq::error_t();
    s.monitor.set(zmq::sockopt::linger, 0);
    s.monitor.connect(monitor_address);
    s.socket.connect(options_.endpoint);
  } catch (const std::exception& e) {
    log(LogLevel::kError, "exchange: cannot connect to the coordinator at '" + options_.endpoint + "': " + e.what() +
                              "; cross-rank checks are off, the job runs on and records locally");
    return false;
  }
  return true;
}

void ExchangeClient::read_monitor(Session& s) {
  for (int i = 0; i < 64; ++i) {
    zmq::message_t event;
    zmq::message_t address;
    try {
      if (!s.monitor.recv(event, zmq::recv_flags::dontwait)) return;
      if (event.more()) (void)s.monitor.recv(address, zmq::recv_flags::dontwait);
    } catch (const zmq::error_t&) {
      return;
    }
    if (event.size() < 6) continue;
    uint16_t kind = 0;
    std::memcpy(&kind, event.data(), 2);
    bool refused = (kind & kHandshakeFailedEvents) != 0;
    if (kind == ZMQ_EVENT_CONNECTED) {
      s.tcp_connected = true;
    } else if (kind == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      s.connected = true;
      reached_.store(true);
      s.tcp_connected = false;
    } else if (kind == ZMQ_EVENT_DISCONNECTED) {
      // Dropped before the handshake succeeded: the listener could not prove it holds the job's key.
      if (s.tcp_connected && !s.connected) refused = true;
      s.connected = s.tcp_connected = false;
    }
    if (refused) {
      s.connected = s.tcp_connected = false;
      if (!s.warned_impostor) {
        s.warned_impostor = true;
        log(LogLevel::kWarn, "exchange: the program listening at " + options_.endpoint +
                                 " is not this job's coordinator (it cannot prove it holds the job's key): "
                                 "nothing is sent to it, cross-rank checks wait for the real one; is another "
                                 "program or another run using that port?");
      }
      // Counted after the warning: whoever sees the count (stats()) then finds the warning written too.
      impostors_.fetch_add(1);
    }
  }
}

void ExchangeClient::note_unreachable(Session& s, uint64_t now_ms) {
  if (!s.warned_unreachable &&
      now_ms - s.unreachable_since_ms >= static_cast<uint64_t>(options_.unreachable_warning_ms)) {
    s.warned_unreachable = true;
    log(LogLevel::kWarn, "exchange: the coordinator at " + options_.endpoint +
                             " is not reachable; the job runs on and records locally, retrying in the background");
  }
}

void ExchangeClient::receive_all(Session& s) {
  for (int i = 0; i < 64; ++i) {
    zmq::message_t message;
    zmq::recv_result_t received;
    try {
      received = s.socket.recv(message, zmq::recv_flags::dontwait);
    } catch (const zmq::error_t&) {
      return;
    }
    if (!received) return;
    const DecodeResult decoded =
        decode(std::span<const uint8_t>(static_cast<const uint8_t*>(message.data()), message.size()));
    if (!decoded.ok) {
      log(LogLevel::kWarn, "exchange: dropped a malformed message from the coordinator: " + decoded.error);
      continue;
    }
    if (std::holds_alternative<Welcome>(decoded.message)) {
      if (!welcomed_.exchange(true)) {
        log(s.warned_unreachable ? LogLevel::kWarn : LogLevel::kDebug,
            "exchange: connected to the coordinator at " + options_.endpoint);
      }
    } else if (const auto* reject = std::get_if<Reject>(&decoded.message)) {
      if (reject->reason == RejectReason::kNeedHello) {
        s.hello_sent = false;  // a restarted coordinator: introduce ourselves again
        welcomed_.store(false);
      } else if (!rejected_.exchange(true)) {
        log(LogLevel::kError, "exchange: the coordinator refused this rank: " + reject->detail +
                                  "; cross-rank checks are off for this rank");
      }
    } else if (const auto* verdict = std::get_if<Verdict>(&decoded.message)) {
      // The coordinator repeats a stopped job's verdicts until the rank goes, and replays them after a new hello:
      // each one is acted on once. (Warnings are never repeated as such: a desync still stuck is a new report.)
      const std::string_view bytes(static_cast<const char*>(message.data()), message.size());
      if (verdict->action == VerdictAction::kAbort &&
          !s.seen_abort_verdicts.insert(std::hash<std::string_view>{}(bytes)).second) {
        repeated_verdicts_.fetch_add(1);
        continue;
      }
      verdicts_.fetch_add(1);
      if (options_.on_verdict) options_.on_verdict(*verdict);
    }
  }
}

// Takes the stacks defined so far and sends them, in definition order; false when the connection is not there (the
// rest wait, and so does everything sent after them).
bool ExchangeClient::send_stacks(Session& s) {
  {
    std::lock_guard<std::mutex> lock(stacks_lock_);
    for (auto& stack : pending_stacks_) s.stacks.push_back(std::move(stack));
    pending_stacks_.clear();
  }
  while (!s.stacks.empty()) {
    if (!try_send(s.socket, encode(s.stacks.front()))) return false;
    s.stacks.erase(s.stacks.begin());
  }
  return true;
}

// Sends what it can without waiting; returns false when the connection is not there.
bool ExchangeClient::send_pending(Session& s) {
  if (!s.hello_sent) {
    if (!try_send(s.socket, s.hello)) return false;
    s.hello_sent = true;
    hellos_.fetch_add(1);
  }
  for (int round = 0; round < 64; ++round) {
    if (s.encoded_batch.empty()) {
      s.batch.clear();
      Fingerprint f;
      while (s.batch.size() < options_.max_batch && queue_.pop(f)) s.batch.push_back(f);
      if (s.batch.empty()) break;
      encode_fingerprint_batch(options_.hello.global_rank, ++s.batch_number, dropped_.load(), s.batch, s.encoded_batch);
      s.encoded_count = s.batch.size();
    }
    // Taken after the batch was popped: a stack defined before the push of any fingerprint in it (define_stack's
    // unlock happens before that push, the push before the pop) is in pending_stacks_ by now, and goes first.
    if (!send_stacks(s)) return false;
    if (!try_send(s.socket, s.encoded_batch)) return false;
    s.encoded_batch.clear();
    batches_.fetch_add(1);
    sent_fingerprints_.fetch_add(s.encoded_count);
  }
  // Reports of inf/nan, each once the fingerprints pushed before it are out, in the order they were made.
  {
    std::lock_guard<std::mutex> lock(nonfinite_lock_);
    for (auto& pending : pending_nonfinite_) s.nonfinite.push_back(std::move(pending));
    pending_nonfinite_.clear();
    nonfinite_held_.store(s.nonfinite.size(), std::memory_order_relaxed);
  }
  // The stacks they name were defined before they were reported, so they are pending by now: first those.
  if (!send_stacks(s)) return false;
  while (!s.nonfinite.empty() && s.nonfinite.front().after_fingerprints <= sent_fingerprints_.load()) {
    if (!try_send(s.socket, encode(s.nonfinite.front().message))) return false;
    s.nonfinite.erase(s.nonfinite.begin());
    nonfinite_held_.store(s.nonfinite.size(), std::memory_order_relaxed);
    nonfinite_sent_.fetch_add(1);
  }
  return true;
}

// At exit, an absent coordinator costs at most kAbsentCoordinatorWaitMs: wait that long for a connection that is
// not there, then go. A short job may stop before its first hello went out: the flush connects and says hello.
void ExchangeClient::flush_and_say_goodbye(Session& s) {
  const uint64_t started_ms = monotonic_ms();
  const uint64_t deadline = started_ms + static_cast<uint64_t>(options_.stop_flush_timeout_ms);
  uint64_t unconnected_since_ms = started_ms;
  bool flushed = false;
  read_monitor(s);
  if (!s.connected && !s.tcp_connected) {
    // ZeroMQ retries a refused connection only after its reconnect interval (100 ms, backing off to seconds), longer
    // than the wait below: a rank that started before its coordinator listened and ends early (a rank that leaves
    // the loop at once) would go unheard, and the others wait for it forever. Try again now.
    try {
      s.socket.disconnect(options_.endpoint);
      s.socket.connect(options_.endpoint);
    } catch (const zmq::error_t&) {
    }
  }
  for (;;) {
    const uint64_t now_ms = monotonic_ms();
    if (s.connected) unconnected_since_ms = now_ms;
    // An inf/nan report still waiting for its fingerprints keeps the flush going (bounded by the same deadline).
    if (s.connected && (flushed = send_pending(s)) && s.nonfinite.empty()) break;
    if (now_ms >= deadline || now_ms - unconnected_since_ms >= kAbsentCoordinatorWaitMs) break;
    wait_a_little(s);
  }
  if (s.connected) {
    Goodbye goodbye{options_.hello.global_rank, realtime_ns(), stopping_job_.load()};
    (void)flushed;  // the goodbye goes even after a partial flush: it says the exit was clean
    try_send(s.socket, encode(goodbye));
    s.socket.set(zmq::sockopt::linger, options_.stop_flush_timeout_ms);
  } else if (!welcomed_.load() && !s.warned_unreachable) {
    // A short job ends before the unreachable warning is due: say it here, once, or nobody learns it.
    log(LogLevel::kWarn, "exchange: the coordinator at " + options_.endpoint +
                             " was never reached: this rank's calls were not checked against the other ranks'");
  }
}

void ExchangeClient::wait_a_little(Session& s) {
  zmq::pollitem_t items[] = {{s.socket.handle(), 0, ZMQ_POLLOUT, 0}, {s.monitor.handle(), 0, ZMQ_POLLIN, 0}};
  try {
    zmq::poll(items, 2, std::chrono::milliseconds(5));
  } catch (const zmq::error_t&) {
  }
  read_monitor(s);
}

}  // namespace trainscope::exchange
