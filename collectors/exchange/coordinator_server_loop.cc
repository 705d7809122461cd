// The coordinator server's thread: each wakeup reads the router and the socket monitor, admits or closes
// connections, feeds the core, and delivers its verdicts (reports on disk first, then to every rank). Kept apart from
// the server's setup so that each step of a wakeup is a function of its own, over the state in
// coordinator_server_state.h.
#include <pthread.h>
#include <time.h>

#include <algorithm>

#include <chrono>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "base/clocks.h"
#include "base/private_files.h"
#include "base/run_files.h"
#include "collectors/exchange/accepted_sockets.h"
#include "collectors/exchange/coordinator_server.h"
#include "collectors/exchange/coordinator_server_state.h"
#include "collectors/exchange/host_identity.h"
#include "collectors/exchange/job_secret.h"
#include "collectors/exchange/recorder_tail.h"

namespace trainscope::exchange {
namespace {

constexpr uint64_t kAbortResendIntervalNs = 1000000000ull;
constexpr uint64_t kRefusalSummaryIntervalNs =
    60'000'000'000ull;  // refused connections are summed up at most this often
constexpr uint64_t kDescriptorRecountIntervalNs = 100'000'000ull;

using clocks::realtime_ns;

}  // namespace

// The server thread's loop (run()): one member function per step of a wakeup. It owns, while it runs, the server's
// state, its own tally of the statistics (published under the server's lock), and the paths of the origin report.
class CoordinatorServer::Loop {
 public:
  explicit Loop(CoordinatorServer& server);
  void run();

 private:
  void log(LogLevel level, const std::string& message);
  void unwritten(reports::UnwrittenReport report);
  bool send_to(const std::string& id, const std::vector<uint8_t>& bytes);
  void log_malformed(const std::string& why);
  void write_manifest(uint64_t now_ns, bool force);
  bool write_origin();
  bool readable_here(const Hello* hello) const;
  std::string elsewhere(const Hello* hello) const;
  void read_missing_from_recorders(CoreVerdict& verdict);
  void read_launches_from_recorders(CoreVerdict& verdict);
  void publish_stats();
  void deliver(std::vector<CoreVerdict> verdicts);
  void resend_abort_verdicts(uint64_t now_ns);
  void log_turned_away(uint64_t now_ns, bool at_stop);
  void log_first_turned_away(const std::string& what, uint64_t now_ns);
  size_t known_ranks() const;
  DescriptorUse descriptor_use(int fd, uint64_t now_ns);
  void on_accepted(int fd, uint64_t now_ns);
  void close_expired(uint64_t now_ns);
  void connection_closed(int32_t rank, uint64_t now_ns);
  void read_monitor_events(uint64_t now_ns, int max_events = 1024);
  bool authenticated(int fd, uint64_t now_ns);
  void attach(int fd, int32_t rank, uint64_t now_ns);
  void handle(const std::string& id, zmq::message_t& payload, uint64_t now_ns);
  void settle_disconnects(uint64_t now_ns);
  void receive(size_t max, uint64_t now_ns);

  CoordinatorServer& server_;
  const CoordinatorServerOptions& options_;
  State& state_;
  CoordinatorServerStats local_stats_;
  const std::string origin_text_path_;
  const std::string origin_json_path_;
  const std::string own_host_id_;
};

CoordinatorServer::Loop::Loop(CoordinatorServer& server)
    : server_(server),
      options_(server.options_),
      state_(*server.state_),
      origin_text_path_(options_.run_dir + "/" + kOriginBaseName + ".txt"),
      origin_json_path_(options_.run_dir + "/" + kOriginBaseName + ".json"),
      own_host_id_(host_identity()) {}

void CoordinatorServer::run() {
  pthread_setname_np(pthread_self(), "ts-coordinator");  // shim/engine/engine_threads.h counts ts-* threads
  Loop(*this).run();
}

void CoordinatorServer::Loop::run() {
  while (!server_.stopping_.load()) {
    zmq::pollitem_t items[] = {{state_.router.handle(), 0, ZMQ_POLLIN, 0}, {state_.monitor.handle(), 0, ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, 2, std::chrono::milliseconds(options_.tick_interval_ms));
    } catch (const zmq::error_t&) {
    }
    uint64_t now_ns = realtime_ns();
    receive(options_.max_messages_per_wakeup, now_ns);
    now_ns = realtime_ns();
    read_monitor_events(now_ns);
    close_expired(now_ns);
    log_turned_away(now_ns, false);
    settle_disconnects(now_ns);
    write_origin();
    deliver(state_.core.tick(now_ns));
    resend_abort_verdicts(now_ns);
    write_manifest(now_ns, false);
    publish_stats();
  }
  // The host stops its coordinator once the other ranks' connections have closed; a connection's close can be seen
  // before its last messages (a rank's first inf/nan, its goodbye) were taken from the router: take them now, so the
  // origin holds every rank that reported. Bounded: a rank still sending must not hold the host's exit up.
  receive(options_.max_messages_per_wakeup * 4, realtime_ns());
  write_origin();
  write_manifest(realtime_ns(), true);
  log_turned_away(realtime_ns(), true);
  zmq_socket_monitor(state_.router.handle(), nullptr, 0);
  state_.monitor.close();
  state_.router.close();
  state_.context.close();
}

void CoordinatorServer::Loop::log(LogLevel level, const std::string& message) {
  if (options_.log) options_.log(level, message);
}

void CoordinatorServer::Loop::unwritten(reports::UnwrittenReport report) {
  report.by = "the coordinator";
  if (options_.on_unwritten) options_.on_unwritten(report);
}

bool CoordinatorServer::Loop::send_to(const std::string& id, const std::vector<uint8_t>& bytes) {
  try {
    if (!state_.router.send(zmq::buffer(id), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) return false;
    return state_.router.send(zmq::buffer(bytes), zmq::send_flags::dontwait).has_value();
  } catch (const zmq::error_t&) {
    return false;  // EHOSTUNREACH: the peer is gone
  }
}

void CoordinatorServer::Loop::log_malformed(const std::string& why) {
  ++local_stats_.malformed;
  // The first few in full, then a sample: a broken or hostile peer must not flood the log.
  if (state_.malformed_logged < 10 || local_stats_.malformed % 1000 == 0) {
    ++state_.malformed_logged;
    log(LogLevel::kWarn,
        "coordinator: dropped a malformed message (" + std::to_string(local_stats_.malformed) + " so far): " + why);
  }
}

void CoordinatorServer::Loop::write_manifest(uint64_t now_ns, bool force) {
  const size_t hellos = state_.core.hellos();
  if (hellos == state_.manifest_hellos) return;
  const int32_t world = state_.core.world_size();
  // All ranks in, or a second since the last write: a thousand hellos do not mean a thousand rewrites.
  if (!force && !(world > 0 && hellos >= static_cast<size_t>(world)) &&
      now_ns - state_.manifest_written_ns < 1000000000ull)
    return;
  state_.manifest_hellos = hellos;
  state_.manifest_written_ns = now_ns;
  const nlohmann::json manifest = state_.core.manifest();
  const std::string path = options_.run_dir + "/" + run_files::kManifestFile;
  const std::string content = manifest.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (const int error = files::replace_file(path.c_str(), content.data(), content.size()); error != 0) {
    if (!state_.manifest_failed) {
      log(LogLevel::kWarn, "coordinator: cannot write " + path + ": " + files::error_text(error));
      unwritten({run_files::kManifestFile, files::error_text(error), ""});
    }
    state_.manifest_failed = true;
  }
  for (const auto& warning : manifest["warnings"]) {
    const std::string text = warning.get<std::string>();
    if (state_.logged_warnings.insert(text).second) log(LogLevel::kWarn, "job manifest: " + text);
  }
}

// origin.txt / origin.json follow the set of ranks' first inf/nan: replaced whenever it changed, so they always
// hold everything the coordinator knows. Returns whether the files hold the current set.
bool CoordinatorServer::Loop::write_origin() {
  const uint64_t generation = state_.core.nonfinite_generation();
  if (generation == state_.origin_generation) return generation != 0;
  if (generation == state_.origin_failed_generation) return false;  // tried already; the next change tries again
  const std::vector<reports::FirstNonfinite> firsts = state_.core.nonfinite_firsts();
  const std::string text = reports::format_origin_text(firsts);
  const nlohmann::json json = reports::origin_json(firsts);
  // The JSON first: whoever sees the new text sees the JSON that goes with it.
  const std::string json_text = json.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  const std::string* failed = &origin_json_path_;
  int error = files::replace_file(origin_json_path_.c_str(), json_text.data(), json_text.size());
  if (error == 0) {
    failed = &origin_text_path_;
    error = files::replace_file(origin_text_path_.c_str(), text.data(), text.size());
  }
  if (error != 0) {
    ++local_stats_.report_errors;
    if (state_.origin_failed_generation == 0) {  // once: a full disk must not flood the log
      log(LogLevel::kError, "coordinator: cannot write " + *failed + ": " + files::error_text(error));
      unwritten({failed->substr(failed->rfind('/') + 1), files::error_text(error), ""});
    }
    state_.origin_failed_generation = generation;
    return false;
  }
  const bool first_write = state_.origin_generation == 0;
  state_.origin_generation = generation;
  log(first_write ? LogLevel::kWarn : LogLevel::kDebug,
      "coordinator: inf/nan origin (" + std::to_string(firsts.size()) + (firsts.size() == 1 ? " rank" : " ranks") +
          " so far), report " + origin_text_path_ + "\n" + text);
  return true;
}

// A desync's missing ranks as their own flight recorders have them, where those are readable from here: a rank
// frozen (SIGSTOP, a hang of its own) keeps its last fingerprints, and the coordinator alone would name a call it
// had long passed, and the wrong call for the divergence.
// Only where the rank's host identity is the coordinator's does its path name the same file: a rank on another
// machine, container or mount namespace has its recorder there, and the report says so instead of guessing.
bool CoordinatorServer::Loop::readable_here(const Hello* hello) const {
  return hello != nullptr && same_host_identity(hello->host_id, own_host_id_);
}

std::string CoordinatorServer::Loop::elsewhere(const Hello* hello) const {
  if (hello == nullptr || hello->host_id.empty() || own_host_id_.empty() || hello->host_id == own_host_id_) return {};
  return hello->host.empty() ? hello->host_id : hello->host;
}

void CoordinatorServer::Loop::read_missing_from_recorders(CoreVerdict& verdict) {
  auto* desync = std::get_if<reports::DesyncReport>(&verdict.report);
  if (desync == nullptr || desync->point_to_point || desync->missing.empty()) return;
  bool corrected = false;
  uint64_t first_not_reached = UINT64_MAX;  // by some missing rank
  for (reports::MissingRank& m : desync->missing) {
    const Hello* hello = state_.core.hello_of(m.global_rank);
    m.flight_recorder_elsewhere = elsewhere(hello);
    RecordedCall call;
    if (readable_here(hello) && latest_recorded_collective(hello->flight_recorder_path, desync->comm_id, &call) &&
        (!m.has_last_call || call.seq > m.last_seq)) {
      m.has_last_call = true;
      m.last_seq = call.seq;
      m.last_op = call.op;
      m.last_peer = -1;
      m.last_call_ns = call.start_ns;
      m.last_stack = state_.core.stack_of(m.global_rank, call.site);
      m.last_call_from_recorder = true;
      m.last_call_returned = call.returned;
      corrected = true;
    }
    first_not_reached = std::min(first_not_reached, m.has_last_call ? m.last_seq + 1 : uint64_t{1});
  }
  if (!corrected) return;
  // Where the ranks diverged: the first call a missing rank has not reached, at most the one the others wait in.
  uint64_t furthest_waiting = 0;
  for (const reports::WaitingRank& w : desync->waiting) furthest_waiting = std::max(furthest_waiting, w.seq);
  const uint64_t seq = std::min(first_not_reached, furthest_waiting);
  if (seq <= desync->seq) return;
  desync->seq = seq;
  verdict.seq = seq;
  desync->stuck_since_ns = 0;
  for (const reports::WaitingRank& w : desync->waiting) {
    if (w.seq != seq) continue;
    desync->op = w.op;
    if (desync->stuck_since_ns == 0 || w.since_ns < desync->stuck_since_ns) desync->stuck_since_ns = w.since_ns;
  }
}

// What the GPU streams of a desync's ranks were doing, from their flight recorders where readable from here: the
// last launch on each stream and whether it finished (a rank stuck behind a kernel that never ends is a GPU hang,
// not a missing collective call).
void CoordinatorServer::Loop::read_launches_from_recorders(CoreVerdict& verdict) {
  auto* desync = std::get_if<reports::DesyncReport>(&verdict.report);
  if (desync == nullptr) return;
  const auto read = [&](int32_t global_rank, bool* launches_read, std::vector<recorder::StreamLastLaunch>* out) {
    const Hello* hello = state_.core.hello_of(global_rank);
    *launches_read = readable_here(hello) && recorded_last_launches(hello->flight_recorder_path, out);
  };
  for (reports::WaitingRank& w : desync->waiting) read(w.global_rank, &w.launches_read, &w.launches);
  for (reports::MissingRank& m : desync->missing) read(m.global_rank, &m.launches_read, &m.launches);
}

void CoordinatorServer::Loop::publish_stats() {
  local_stats_.peers = state_.peers.size();
  local_stats_.connections = state_.rank_by_fd.size();
  local_stats_.hellos = state_.core.hellos();
  local_stats_.gate = state_.gate.stats();
  local_stats_.core = state_.core.stats();
  std::lock_guard<std::mutex> lock(server_.stats_lock_);
  server_.stats_ = local_stats_;
}

void CoordinatorServer::Loop::deliver(std::vector<CoreVerdict> verdicts) {
  // The host rank, told of an abort verdict, stays while other ranks are connected (stats().connections): they
  // must be counted before any rank can hear of it, or a rank that connected in this very pass is not waited for,
  // and the verdict queued for it dies with the host.
  if (!verdicts.empty()) publish_stats();
  for (CoreVerdict& verdict : verdicts) {
    read_missing_from_recorders(verdict);
    read_launches_from_recorders(verdict);
  }
  for (const CoreVerdict& verdict : verdicts) {
    const RenderedReport rendered = render_report(verdict);
    // The report is on disk before any rank hears of the verdict (and may abort).
    reports::WrittenReport written;
    if (std::holds_alternative<NonfiniteOriginReport>(verdict.report)) {
      // Its report is the origin report itself (the same firsts: the core has not changed since the tick).
      if (write_origin()) {
        written.text_path = origin_text_path_;
        written.json_path = origin_json_path_;
      }
    } else {
      written = reports::write_report(options_.run_dir, rendered.base_name, rendered.text, rendered.json);
    }
    if (!written.error.empty()) {
      ++local_stats_.report_errors;
      log(LogLevel::kError, "coordinator: " + written.error);
      if (!written.unwritten.report.empty()) unwritten(written.unwritten);
    }
    Verdict message;
    message.kind = verdict.kind;
    message.action = verdict.action;
    message.comm_id = verdict.comm_id;
    message.seq = verdict.seq;
    message.text_path = written.text_path;
    message.json_path = written.json_path;
    message.text = rendered.text;
    log(verdict.action == VerdictAction::kAbort ? LogLevel::kError : LogLevel::kWarn,
        std::string("coordinator: ") + verdict_kind_name(verdict.kind) + " (" + verdict_action_name(verdict.action) +
            ")" + (written.text_path.empty() ? "" : ", report " + written.text_path) + "\n" + rendered.text);
    const std::vector<uint8_t> bytes = encode(message);
    if (verdict.action == VerdictAction::kAbort) {
      state_.abort_verdicts.push_back(bytes);
      state_.next_abort_resend_ns = realtime_ns() + kAbortResendIntervalNs;
    }
    std::string sent_to;
    std::string unreachable;
    for (auto it = state_.peers.begin(); it != state_.peers.end();) {
      if (it->second.said_goodbye) {
        ++it;
        continue;
      }
      const std::string rank = " " + std::to_string(it->second.rank);
      if (!send_to(it->first, bytes)) {
        unreachable += rank;
        it = state_.peers.erase(it);  // unroutable: that connection is gone
        continue;
      }
      sent_to += rank;
      ++it;
    }
    log(LogLevel::kDebug, "coordinator: verdict sent to ranks" + (sent_to.empty() ? " (none)" : sent_to) +
                              (unreachable.empty() ? "" : "; unreachable:" + unreachable));
    ++local_stats_.verdicts;
    if (options_.on_verdict) options_.on_verdict(message);
  }
}

// A stopped job's verdict goes again, every second, to every rank that has not gone: a rank must never be left
// waiting alone in a collective its peers have left because one message did not reach it (a connection dropped and
// remade under load loses what was queued on it; a rank that reconnects without a new hello gets no replay). Ranks
// act on a verdict once (ExchangeClient drops repeats).
void CoordinatorServer::Loop::resend_abort_verdicts(uint64_t now_ns) {
  if (state_.abort_verdicts.empty() || now_ns < state_.next_abort_resend_ns) return;
  state_.next_abort_resend_ns = now_ns + kAbortResendIntervalNs;
  std::string sent_to;
  for (const auto& [id, peer] : state_.peers) {
    if (peer.said_goodbye) continue;
    for (const std::vector<uint8_t>& verdict : state_.abort_verdicts) send_to(id, verdict);
    sent_to += " " + std::to_string(peer.rank);
  }
  if (!sent_to.empty()) log(LogLevel::kDebug, "coordinator: stop verdict sent again to ranks" + sent_to);
}

// Connections that have not proved they are the job's ranks (connection_gate.h). The first refusal or hello
// timeout is said at once, with the limits; later ones are summed up at most once a minute, and at the stop.
void CoordinatorServer::Loop::log_turned_away(uint64_t now_ns, bool at_stop) {
  const ConnectionGateStats gate = state_.gate.stats();
  const uint64_t turned_away = gate.refused() + gate.hello_timeouts;
  if (turned_away == state_.turned_away_logged || (!at_stop && now_ns < state_.next_refusal_summary_ns)) return;
  state_.next_refusal_summary_ns = now_ns + kRefusalSummaryIntervalNs;
  log(LogLevel::kWarn, "coordinator: closed " + std::to_string(turned_away - state_.turned_away_logged) +
                           " more connection(s) of peers that had not said a valid hello; in all " +
                           std::to_string(gate.hello_timeouts) + " without a hello within " +
                           std::to_string(options_.hello_deadline_ms) + " ms, " +
                           std::to_string(gate.refused_unauthenticated) + " over the cap on those at once, " +
                           std::to_string(gate.refused_over_ranks) + " over the job's rank count, " +
                           std::to_string(gate.refused_descriptors) + " to keep the job's last descriptors free");
  state_.turned_away_logged = turned_away;
}

void CoordinatorServer::Loop::log_first_turned_away(const std::string& what, uint64_t now_ns) {
  if (state_.turned_away_logged != 0) return;
  state_.turned_away_logged = 1;
  state_.next_refusal_summary_ns = now_ns + kRefusalSummaryIntervalNs;
  log(LogLevel::kWarn, "coordinator: closed a connection that had not said a valid hello: " + what +
                           " (not one of this job's ranks, or one that will connect again); later ones are "
                           "counted and summed up at most once a minute");
}

size_t CoordinatorServer::Loop::known_ranks() const {
  return static_cast<size_t>(std::max({options_.expected_ranks, state_.core.world_size(), int32_t{0}}));
}

// The process's descriptors: a descriptor number is a lower bound (the kernel hands out the lowest free one),
// the last count plus the accepts since is an upper estimate; counted again when old, or before a refusal.
DescriptorUse CoordinatorServer::Loop::descriptor_use(int fd, uint64_t now_ns) {
  const size_t limit = descriptor_limit();
  ++state_.accepted_since_count;
  size_t open = std::max(static_cast<size_t>(fd) + 1, state_.open_descriptors + state_.accepted_since_count);
  if (now_ns - state_.descriptors_counted_ns >= kDescriptorRecountIntervalNs ||
      open + state_.gate.descriptor_reserve(limit) > limit) {
    if (const size_t counted = count_open_descriptors(); counted > 0) {
      state_.open_descriptors = counted;
      state_.accepted_since_count = 0;
      state_.descriptors_counted_ns = now_ns;
      open = std::max(static_cast<size_t>(fd) + 1, counted);
    }
  }
  return DescriptorUse{open, limit};
}

void CoordinatorServer::Loop::on_accepted(int fd, uint64_t now_ns) {
  const AcceptedSockets& sockets = *state_.accepted_sockets;
  const uint64_t identity = sockets.identity_of(fd);
  if (identity == 0 && sockets.closes_connections()) return;  // closed already: its disconnect event follows
  const size_t ranks = known_ranks();
  const DescriptorUse descriptors = descriptor_use(fd, now_ns);
  const ConnectionGate::Admission admission = state_.gate.on_accepted({fd, identity}, now_ns, ranks, descriptors);
  Refusal refusal = admission.refusal;
  if (refusal != Refusal::kNone) {
    sockets.shut_down(fd, identity);
  } else if (admission.made_way != Refusal::kNone) {
    sockets.shut_down(admission.oldest.fd, admission.oldest.identity);
    refusal = admission.made_way;
  } else {
    return;
  }
  std::string limits;
  if (refusal == Refusal::kTooManyUnauthenticated) {
    limits = std::to_string(state_.gate.unauthenticated_cap(ranks, descriptors.limit)) + " at once";
  } else if (refusal == Refusal::kMoreThanTheRanks) {
    limits = std::to_string(ConnectionGate::connection_bound(ranks)) + " connections for " + std::to_string(ranks) +
             " ranks";
  } else {
    limits = std::to_string(descriptors.open) + " of " + std::to_string(descriptors.limit) + " descriptors open, " +
             std::to_string(state_.gate.descriptor_reserve(descriptors.limit)) +
             " kept free for the job; raise `ulimit -n` for more connections";
  }
  log_first_turned_away(std::string(refusal_reason(refusal)) + ", " + limits, now_ns);
}

void CoordinatorServer::Loop::close_expired(uint64_t now_ns) {
  for (const ConnectionGate::Connection& expired : state_.gate.take_expired(now_ns)) {
    state_.accepted_sockets->shut_down(expired.fd, expired.identity);  // false: gone already
    log_first_turned_away("no valid hello within " + std::to_string(options_.hello_deadline_ms) + " ms", now_ns);
  }
}

// The rank's connection closed: unless it sends again (a new connection) within the grace, it vanished
// (settle_disconnects). The grace runs from the first close; a later one, or a late message read from the closed
// connection, only moves the time its coming back is counted from.
void CoordinatorServer::Loop::connection_closed(int32_t rank, uint64_t now_ns) {
  const uint64_t report_after = now_ns + static_cast<uint64_t>(options_.vanish_grace_ms) * 1000000ull;
  const auto [it, added] = state_.dropped_connections.try_emplace(rank, now_ns, report_after);
  if (!added) it->second.first = std::max(it->second.first, now_ns);
}

void CoordinatorServer::Loop::read_monitor_events(uint64_t now_ns, int max_events) {
  for (int i = 0; i < max_events; ++i) {
    zmq::message_t event;
    zmq::message_t address;
    try {
      if (!state_.monitor.recv(event, zmq::recv_flags::dontwait)) return;
      if (event.more()) (void)state_.monitor.recv(address, zmq::recv_flags::dontwait);
    } catch (const zmq::error_t&) {
      return;
    }
    if (event.size() < 6) continue;
    uint16_t kind = 0;
    int32_t fd = -1;
    std::memcpy(&kind, event.data(), 2);
    std::memcpy(&fd, static_cast<const char*>(event.data()) + 2, 4);
    if (kind == ZMQ_EVENT_ACCEPTED) {
      on_accepted(fd, now_ns);
      continue;
    }
    if ((kind & kHandshakeFailedEvents) != 0) {
      // Someone without the job's secret: a stray program, another job, or an attack. Refused by ZeroMQ already.
      ++local_stats_.rejected_handshakes;
      if (local_stats_.rejected_handshakes <= 3 || local_stats_.rejected_handshakes % 1000 == 0)
        log(LogLevel::kWarn, "coordinator: refused a connection that does not hold this job's key (" +
                                 std::to_string(local_stats_.rejected_handshakes) +
                                 " so far): not one of this job's ranks");
      continue;
    }
    if (kind != ZMQ_EVENT_DISCONNECTED) continue;
    state_.gate.on_closed(fd);
    auto it = state_.rank_by_fd.find(fd);
    if (it == state_.rank_by_fd.end()) continue;
    const int32_t rank = it->second;
    state_.rank_by_fd.erase(it);
    connection_closed(rank, now_ns);
  }
}

// A valid hello, or a message of a rank that said one, came on `fd`. Its accept event is in the monitor's queue
// before any of its messages can arrive: read it when the gate has not seen it yet. False when the connection
// is gone already: its close was among those events, before `rank_by_fd` knew it.
bool CoordinatorServer::Loop::authenticated(int fd, uint64_t now_ns) {
  if (fd < 0 || state_.gate.is_authenticated(fd)) return true;
  // Every event of this connection and of an earlier one on the same number (its close) is queued before this
  // message could come: read them all first, or an old connection's close would be taken for this one's.
  read_monitor_events(now_ns, 1 << 16);
  return state_.gate.on_authenticated(fd);  // still unknown: a message of a connection that is gone
}

// The rank's connection on `fd` carries its messages, and its close is that rank's; unless it closed before its
// first message was read (a short job's rank sends everything and leaves in one pass): then its close was
// consumed already, and is the rank's now. Counted as connected, it would hold the host's exit for the linger.
void CoordinatorServer::Loop::attach(int fd, int32_t rank, uint64_t now_ns) {
  if (fd < 0) return;
  if (authenticated(fd, now_ns)) {
    state_.rank_by_fd[fd] = rank;
  } else {
    connection_closed(rank, now_ns);
  }
}

void CoordinatorServer::Loop::handle(const std::string& id, zmq::message_t& payload, uint64_t now_ns) {
  ++local_stats_.messages;
  const DecodeResult decoded =
      decode(std::span<const uint8_t>(static_cast<const uint8_t*>(payload.data()), payload.size()));
  if (!decoded.ok) {
    log_malformed(decoded.error);
    return;
  }
  if (const auto* hello = std::get_if<Hello>(&decoded.message)) {
    if (!tokens_equal(options_.token, hello->token)) {
      ++local_stats_.rejected_tokens;
      log(LogLevel::kWarn, "coordinator: rejected rank " + std::to_string(hello->global_rank) + " (host " +
                               hello->host + ", pid " + std::to_string(hello->pid) + "): wrong job token");
      send_to(id, encode(Reject{RejectReason::kBadToken, "wrong job token"}));
      return;
    }
    if (!state_.peers.contains(id) && state_.peers.size() >= options_.max_peers) {
      send_to(id, encode(Reject{RejectReason::kBadToken, "too many connections"}));
      return;
    }
    state_.peers[id] = State::Peer{hello->global_rank, false};
    state_.last_message_ns[hello->global_rank] = now_ns;
    attach(payload.get(ZMQ_SRCFD), hello->global_rank, now_ns);
    state_.core.on_hello(*hello, now_ns);
    send_to(id, encode(Welcome{now_ns}));
    // A rank whose hello comes after the job was stopped must stop too, or it waits alone forever.
    for (const std::vector<uint8_t>& verdict : state_.abort_verdicts) send_to(id, verdict);
    log(LogLevel::kDebug, "coordinator: rank " + std::to_string(hello->global_rank) + " (host " + hello->host +
                              ", pid " + std::to_string(hello->pid) + ") connected");
    return;
  }
  auto peer = state_.peers.find(id);
  if (peer == state_.peers.end()) {
    ++local_stats_.unknown_peers;
    send_to(id, encode(Reject{RejectReason::kNeedHello, "send a hello first"}));
    return;
  }
  const int32_t rank = peer->second.rank;
  auto claimed_rank = [&](int32_t claimed) {
    if (claimed == rank) return true;
    log_malformed("connection of rank " + std::to_string(rank) + " sent a message as rank " + std::to_string(claimed));
    return false;
  };
  state_.last_message_ns[rank] = now_ns;
  attach(payload.get(ZMQ_SRCFD), rank, now_ns);  // after a reconnection the descriptor changes
  if (const auto* batch = std::get_if<FingerprintBatch>(&decoded.message)) {
    if (claimed_rank(batch->rank)) state_.core.on_fingerprints(rank, batch->fingerprints, batch->dropped_total, now_ns);
  } else if (const auto* stack = std::get_if<StackDefinition>(&decoded.message)) {
    if (claimed_rank(stack->rank)) state_.core.on_stack(*stack);
  } else if (const auto* heartbeat = std::get_if<Heartbeat>(&decoded.message)) {
    if (claimed_rank(heartbeat->rank)) state_.core.on_heartbeat(*heartbeat, now_ns);
  } else if (const auto* nonfinite = std::get_if<NonfiniteMessage>(&decoded.message)) {
    if (claimed_rank(nonfinite->rank)) state_.core.on_nonfinite(*nonfinite, now_ns);
  } else if (const auto* goodbye = std::get_if<Goodbye>(&decoded.message)) {
    if (claimed_rank(goodbye->rank)) {
      peer->second.said_goodbye = true;
      state_.core.on_goodbye(rank, now_ns, goodbye->stopping_job);
    }
  } else {
    log_malformed("a rank sent a coordinator-to-rank message");
  }
}

void CoordinatorServer::Loop::settle_disconnects(uint64_t now_ns) {
  // A host lost drops all its ranks' connections within a heartbeat of each other: once one of them is due, the
  // others of its host that dropped too are settled with it, so the core tells them as one lost host.
  std::set<std::string> due_hosts;
  for (const auto& [rank, times] : state_.dropped_connections) {
    if (now_ns >= times.second && state_.last_message_ns[rank] <= times.first) {
      const std::string key = state_.core.host_key(rank);
      if (!key.empty()) due_hosts.insert(key);
    }
  }
  for (auto it = state_.dropped_connections.begin(); it != state_.dropped_connections.end();) {
    const auto [dropped_at, report_after] = it->second;
    const uint64_t last = state_.last_message_ns[it->first];
    if (last > dropped_at) {
      it = state_.dropped_connections.erase(it);  // it came back
    } else if (now_ns >= report_after ||
               (!due_hosts.empty() && due_hosts.count(state_.core.host_key(it->first)) != 0)) {
      state_.core.on_disconnect(it->first, false, now_ns);  // a rank that said goodbye is ignored by the core
      it = state_.dropped_connections.erase(it);
    } else {
      ++it;
    }
  }
}

// Handles what the router holds now, at most `max` messages.
void CoordinatorServer::Loop::receive(size_t max, uint64_t now_ns) {
  for (size_t i = 0; i < max; ++i) {
    zmq::message_t id;
    zmq::message_t payload;
    try {
      if (!state_.router.recv(id, zmq::recv_flags::dontwait)) break;
      if (!id.more()) {
        log_malformed("a frame without payload");
        continue;
      }
      (void)state_.router.recv(payload, zmq::recv_flags::dontwait);
      bool extra_frames = false;
      while (payload.more()) {  // a DEALER of ours sends one frame; drain anything else
        zmq::message_t extra;
        (void)state_.router.recv(extra, zmq::recv_flags::dontwait);
        extra_frames = true;
        if (!extra.more()) break;
      }
      if (extra_frames) {
        log_malformed("a message of several frames");
        continue;
      }
    } catch (const zmq::error_t&) {
      break;
    }
    if ((i & 63) == 0) now_ns = realtime_ns();
    handle(id.to_string(), payload, now_ns);
  }
}

}  // namespace trainscope::exchange
