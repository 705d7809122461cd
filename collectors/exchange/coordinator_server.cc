// The coordinator's ZeroMQ transport, its setup: ROUTER socket, CURVE keys, socket monitor, and the rendering of a
// verdict's report. The thread that runs it is coordinator_server_loop.cc.
#include "collectors/exchange/coordinator_server.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <set>
#include <unordered_map>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "collectors/exchange/accepted_sockets.h"
#include "collectors/exchange/coordinator_server_state.h"
#include "collectors/exchange/host_identity.h"
#include "collectors/exchange/job_secret.h"
#include "collectors/exchange/recorder_tail.h"

namespace trainscope::exchange {

RenderedReport render_report(const CoreVerdict& verdict) {
  RenderedReport rendered;
  if (const auto* mismatch = std::get_if<reports::MismatchReport>(&verdict.report)) {
    rendered.text = reports::format_mismatch_text(*mismatch);
    rendered.json = reports::mismatch_json(*mismatch);
    rendered.base_name = reports::mismatch_base_name(*mismatch);
  } else if (const auto* desync = std::get_if<reports::DesyncReport>(&verdict.report)) {
    rendered.text = reports::format_desync_text(*desync);
    rendered.json = reports::desync_json(*desync);
    rendered.base_name = reports::desync_base_name(*desync);
  } else if (const auto* vanished = std::get_if<reports::VanishedReport>(&verdict.report)) {
    rendered.text = reports::format_vanished_text(*vanished);
    rendered.json = reports::vanished_json(*vanished);
    rendered.base_name = reports::vanished_base_name(*vanished);
  } else if (const auto* origin = std::get_if<NonfiniteOriginReport>(&verdict.report)) {
    rendered.text = reports::format_origin_text(origin->firsts);
    rendered.json = reports::origin_json(origin->firsts);
    rendered.base_name = kOriginBaseName;
  }
  rendered.json["action"] = verdict_action_name(verdict.action);
  return rendered;
}

CoordinatorServer::CoordinatorServer(CoordinatorServerOptions options) : options_(std::move(options)) {}

CoordinatorServer::~CoordinatorServer() { stop(); }

bool CoordinatorServer::start(std::string* error) {
  if (state_) {
    if (error) *error = "already started";
    return false;
  }
  if (options_.token.empty()) {
    if (error) *error = "the job token is empty";
    return false;
  }
  if (!reports::make_report_directory(options_.run_dir, error)) return false;
  if (options_.hello_deadline_ms <= 0) {
    if (error) *error = "the hello deadline must be a positive number of milliseconds";
    return false;
  }
  ConnectionGateOptions gate_options;
  gate_options.hello_deadline_ns = static_cast<uint64_t>(options_.hello_deadline_ms) * 1000000ull;
  gate_options.max_unauthenticated = options_.max_unauthenticated;
  CoordinatorOptions core_options = options_.core;
  if (core_options.own_host_id.empty()) core_options.own_host_id = host_identity();
  auto state = std::make_unique<State>(core_options, gate_options);
  try {
    state->router.set(zmq::sockopt::linger, 500);  // verdicts in flight at stop get half a second
    state->router.set(zmq::sockopt::router_mandatory, 1);
    state->router.set(zmq::sockopt::router_handover, 1);  // a reconnecting rank takes its routing id back
    state->router.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxMessageBytes));
    state->router.set(zmq::sockopt::sndhwm, 10000);
    state->router.set(zmq::sockopt::rcvhwm, 100000);
    state->router.set(zmq::sockopt::heartbeat_ivl, options_.heartbeat_interval_ms);
    state->router.set(zmq::sockopt::heartbeat_timeout, options_.heartbeat_timeout_ms);
    state->router.set(zmq::sockopt::heartbeat_ttl, options_.heartbeat_timeout_ms);
    // A backstop only: the hello deadline closes a connection first, and counts it (ConnectionGate).
    state->router.set(zmq::sockopt::handshake_ivl, options_.hello_deadline_ms + 1000);
    char monitor_address[64];
    std::snprintf(monitor_address, sizeof(monitor_address), "inproc://trainscope-coordinator-%p",
                  static_cast<void*>(state.get()));
    // Only holders of the job's secret can connect (CURVE needs the coordinator's public key, derived from it).
    const CurveKeyPair keys = coordinator_key_pair(options_.token);
    const int curve_server = 1;
    if (zmq_setsockopt(state->router.handle(), ZMQ_CURVE_SERVER, &curve_server, sizeof(curve_server)) != 0 ||
        zmq_setsockopt(state->router.handle(), ZMQ_CURVE_SECRETKEY, keys.secret_key.data(), keys.secret_key.size()) !=
            0) {
      throw zmq::error_t();
    }
    if (zmq_socket_monitor(state->router.handle(), monitor_address,
                           ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | kHandshakeFailedEvents) != 0) {
      throw zmq::error_t();
    }
    state->monitor.set(zmq::sockopt::linger, 0);
    state->monitor.connect(monitor_address);
    state->router.bind(options_.bind_address);
    endpoint_ = state->router.get(zmq::sockopt::last_endpoint);
    state->accepted_sockets = std::make_unique<AcceptedSockets>(endpoint_);
  } catch (const zmq::error_t& e) {
    if (error) *error = "cannot bind the coordinator to '" + options_.bind_address + "': " + e.what();
    return false;
  }
  state_ = std::move(state);
  thread_ = std::thread([this] { run(); });
  return true;
}

void CoordinatorServer::stop() {
  if (!thread_.joinable()) return;
  stopping_.store(true);
  thread_.join();
}

std::string CoordinatorServer::endpoint() const { return endpoint_; }

CoordinatorServerStats CoordinatorServer::stats() const {
  std::lock_guard<std::mutex> lock(stats_lock_);
  return stats_;
}

}  // namespace trainscope::exchange
