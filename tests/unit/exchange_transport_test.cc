// The coordinator server and the rank client over real ZeroMQ sockets (loopback TCP and ipc:// in a temporary
// directory): token check, malformed messages, a mismatch round trip, a vanished rank, a client that starts
// before its coordinator, and the origin of the first inf/nan (origin files, the stop verdict). Every wait polls a
// condition under a deadline; nothing asserts on timing.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "base/flight_recorder_writer.h"
#include "collectors/exchange/accepted_sockets.h"
#include "collectors/exchange/coordinator_server.h"
#include "collectors/exchange/exchange_client.h"
#include "collectors/exchange/host_identity.h"
#include "collectors/exchange/job_secret.h"
#include "tests/support/subprocess.h"

namespace trainscope::exchange {
namespace {

using recorder::Op;
constexpr char kToken[] = "job-token-0123456789";
constexpr uint64_t kTransportComm = 0x3f2a9c0011223344ull;

// Polls `condition` until it holds or the deadline passes; returns whether it held.
bool wait_until(const std::function<bool()>& condition, std::chrono::seconds deadline = std::chrono::seconds(20)) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (std::chrono::steady_clock::now() < until) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return condition();
}

// Log lines from the server or a client, safe to read from the test thread.
class LogCapture {
 public:
  LogSink sink() {
    return [this](LogLevel, const std::string& message) {
      std::lock_guard<std::mutex> lock(lock_);
      lines_.push_back(message);
    };
  }
  bool contains(const std::string& part) { return count(part) > 0; }
  size_t count(const std::string& part) {
    std::lock_guard<std::mutex> lock(lock_);
    size_t found = 0;
    for (const auto& line : lines_) found += line.find(part) != std::string::npos;
    return found;
  }

 private:
  std::mutex lock_;
  std::vector<std::string> lines_;
};

class VerdictCapture {
 public:
  std::function<void(const Verdict&)> sink() {
    return [this](const Verdict& verdict) {
      std::lock_guard<std::mutex> lock(lock_);
      verdicts_.push_back(verdict);
    };
  }
  std::vector<Verdict> get() {
    std::lock_guard<std::mutex> lock(lock_);
    return verdicts_;
  }

 private:
  std::mutex lock_;
  std::vector<Verdict> verdicts_;
};

Fingerprint all_reduce(int32_t rank, int32_t nranks, uint64_t seq, uint64_t count) {
  Fingerprint f{};
  f.comm_id = kTransportComm;
  f.comm_rank = rank;
  f.nranks = nranks;
  f.seq = seq;
  f.count = count;
  f.dtype = 6;
  f.redop = 0;
  f.peer = -1;
  f.op = static_cast<uint16_t>(Op::kAllReduce);
  f.kind = static_cast<uint8_t>(EventKind::kCall);
  return f;
}

// A port nobody listens on: bind one, note it, close it.
std::string unused_tcp_endpoint() {
  zmq::context_t context(1);
  zmq::socket_t probe(context, zmq::socket_type::router);
  probe.set(zmq::sockopt::linger, 0);
  probe.bind("tcp://127.0.0.1:*");
  return probe.get(zmq::sockopt::last_endpoint);
}

// A raw DEALER that holds the job's key (as the job's ranks do), to send hand-made messages to the coordinator.
void connect_with_key(zmq::socket_t& socket, const std::string& endpoint, const std::string& token = kToken) {
  const CurveKeyPair server = coordinator_key_pair(token);
  const CurveKeyPair own = fresh_key_pair();
  socket.set(zmq::sockopt::linger, 0);
  ASSERT_EQ(zmq_setsockopt(socket.handle(), ZMQ_CURVE_SERVERKEY, server.public_key.data(), 32), 0);
  ASSERT_EQ(zmq_setsockopt(socket.handle(), ZMQ_CURVE_PUBLICKEY, own.public_key.data(), 32), 0);
  ASSERT_EQ(zmq_setsockopt(socket.handle(), ZMQ_CURVE_SECRETKEY, own.secret_key.data(), 32), 0);
  socket.connect(endpoint);
}

// The hello of a raw rank of a two-rank job.
std::vector<uint8_t> raw_hello(int32_t rank) {
  Hello hello;
  hello.token = kToken;
  hello.global_rank = rank;
  hello.world_size = 2;
  hello.pid = 1000 + rank;
  hello.host = "testhost";
  return encode(hello);
}

// A raw rank of a two-rank job joins: connects, says hello and sends its first all-reduce of `count` elements, both
// queued together (they arrive together once the connection is up).
void join_raw(zmq::socket_t& socket, const std::string& endpoint, int32_t rank, uint64_t count) {
  connect_with_key(socket, endpoint);
  FingerprintBatch batch;
  batch.rank = rank;
  batch.batch_number = 1;
  batch.fingerprints = {all_reduce(rank, 2, 1, count)};
  ASSERT_TRUE(socket.send(zmq::buffer(raw_hello(rank)), zmq::send_flags::none));
  ASSERT_TRUE(socket.send(zmq::buffer(encode(batch)), zmq::send_flags::none));
}

// The port of a "tcp://127.0.0.1:PORT" endpoint.
uint16_t port_of(const std::string& endpoint) {
  return static_cast<uint16_t>(std::stoi(endpoint.substr(endpoint.rfind(':') + 1)));
}

sockaddr_in loopback(uint16_t port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return address;
}

// A plain TCP connection that never says anything, as an outsider would hold one; -1 on failure.
int connect_idle(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const sockaddr_in address = loopback(port);
  if (fd >= 0 && connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0) return fd;
  if (fd >= 0) close(fd);
  return -1;
}

// Whether the other side closed `fd` (end of file, or a reset) within `timeout_ms`.
bool closed_by_peer(int fd, int timeout_ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    pollfd item{fd, POLLIN | POLLRDHUP, 0};
    if (left.count() <= 0 || poll(&item, 1, static_cast<int>(left.count())) <= 0) return false;
    char byte;
    const ssize_t got = recv(fd, &byte, 1, MSG_DONTWAIT);
    if (got == 0 || (got < 0 && errno == ECONNRESET)) return true;
    if (got < 0 && errno != EAGAIN && errno != EINTR) return false;
  }
}

// A raw ROUTER that holds the coordinator's key, standing in for the coordinator.
void serve_with_key(zmq::socket_t& router, const std::string& token = kToken) {
  const CurveKeyPair keys = coordinator_key_pair(token);
  const int one = 1;
  ASSERT_EQ(zmq_setsockopt(router.handle(), ZMQ_CURVE_SERVER, &one, sizeof(one)), 0);
  ASSERT_EQ(zmq_setsockopt(router.handle(), ZMQ_CURVE_SECRETKEY, keys.secret_key.data(), 32), 0);
}

// A job's token and a run id's suffix: fresh random bytes every time (a fixed or zero-filled token would let anyone
// who can compute it feed or pose as the job's coordinator).
TEST(JobSecret, RandomHexIsFreshAndOfTheAskedLength) {
  const std::string a = random_hex(16), b = random_hex(16);
  EXPECT_EQ(a.size(), 32u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos) << a;
  EXPECT_NE(a, b);
  EXPECT_NE(a, std::string(32, '0'));
  EXPECT_EQ(random_hex(3).size(), 6u);
  EXPECT_EQ(random_hex(0), "");
}

class TransportTest : public ::testing::Test {
 protected:
  CoordinatorServerOptions server_options(const std::string& bind) {
    CoordinatorServerOptions options;
    options.bind_address = bind;
    options.token = kToken;
    options.run_dir = dir_.path() + "/run";
    options.tick_interval_ms = 10;
    options.vanish_grace_ms = 100;
    options.log = server_log_.sink();
    return options;
  }
  ExchangeClientOptions client_options(const std::string& endpoint, int32_t rank, VerdictCapture* verdicts,
                                       LogCapture* log, const std::string& token = kToken) {
    ExchangeClientOptions options;
    options.endpoint = endpoint;
    options.hello.token = token;
    options.hello.global_rank = rank;
    options.hello.world_size = 2;
    options.hello.pid = 1000 + rank;
    options.hello.host = "testhost";
    options.hello.flight_recorder_path = "/tmp/rank" + std::to_string(rank) + ".tsfr";
    options.flush_interval_ms = 5;
    options.heartbeat_interval_ms = 50;
    options.unreachable_warning_ms = 50;
    options.stop_flush_timeout_ms = 500;
    if (verdicts) options.on_verdict = verdicts->sink();
    if (log) options.log = log->sink();
    return options;
  }

  // Rank 0 waits in all-reduce #5; rank 1 made calls #1 to #4, of which only #1 to #3 reached the coordinator before
  // it froze, and its flight recorder (written under `host`) holds all four. `rank1_host_id` is the host identity rank
  // 1's hello names. Returns the coordinator's first verdict (a desync), or a default verdict when none came.
  Verdict silent_rank_verdict(const std::string& host, const std::string& rank1_host_id);

  testing::TempDir dir_;
  LogCapture server_log_;
};

TEST_F(TransportTest, AClientOfAnotherJobCannotEvenConnect) {
  CoordinatorServer server(server_options("tcp://127.0.0.1:*"));
  std::string error;
  ASSERT_TRUE(server.start(&error)) << error;
  LogCapture client_log;
  ExchangeClient client(client_options(server.endpoint(), 0, nullptr, &client_log, "not-the-token"));
  client.start();
  ASSERT_TRUE(client.push(all_reduce(0, 2, 1, 1024)));
  // Its key check fails on both sides: the coordinator refuses it, and it refuses to talk to a coordinator that is
  // not its own job's.
  ASSERT_TRUE(wait_until([&] { return server.stats().rejected_handshakes >= 1 && client.stats().impostors >= 1; }));
  EXPECT_TRUE(server_log_.contains("does not hold this job's key"));
  EXPECT_TRUE(client_log.contains("is not this job's coordinator"));
  client.stop();
  EXPECT_FALSE(client.stats().welcomed);
  EXPECT_EQ(client.stats().sent_fingerprints, 0u);
  EXPECT_EQ(server.stats().hellos, 0u);
  EXPECT_EQ(server.stats().messages, 0u);
}

TEST_F(TransportTest, AConnectionWithoutAnyKeyIsRefused) {
  CoordinatorServer server(server_options("tcp://127.0.0.1:*"));
  std::string error;
  ASSERT_TRUE(server.start(&error)) << error;
  zmq::context_t context(1);
  zmq::socket_t plain(context, zmq::socket_type::dealer);
  plain.set(zmq::sockopt::linger, 0);
  plain.connect(server.endpoint());
  Hello hello;
  hello.token = kToken;  // even the right token, in the clear, gets nowhere
  hello.global_rank = 0;
  (void)plain.send(zmq::buffer(encode(hello)), zmq::send_flags::dontwait);
  ASSERT_TRUE(wait_until([&] { return server.stats().rejected_handshakes >= 1; }));
  EXPECT_EQ(server.stats().messages, 0u);
  EXPECT_EQ(server.stats().hellos, 0u);
}

TEST_F(TransportTest, AHelloWithTheWrongTokenIsRejected) {
  CoordinatorServer server(server_options("tcp://127.0.0.1:*"));
  std::string error;
  ASSERT_TRUE(server.start(&error)) << error;
  zmq::context_t context(1);
  zmq::socket_t raw(context, zmq::socket_type::dealer);
  connect_with_key(raw, server.endpoint());
  Hello hello;
  hello.token = "not-the-token";
  hello.global_rank = 0;
  ASSERT_TRUE(raw.send(zmq::buffer(encode(hello)), zmq::send_flags::none));
  EXPECT_TRUE(wait_until([&] { return server.stats().rejected_tokens >= 1; }));
  EXPECT_TRUE(server_log_.contains("wrong job token"));
  zmq::message_t reply;
  raw.set(zmq::sockopt::rcvtimeo, 20000);
  ASSERT_TRUE(raw.recv(reply));
  const DecodeResult decoded =
      decode(std::span<const uint8_t>(static_cast<const uint8_t*>(reply.data()), reply.size()));
  ASSERT_TRUE(decoded.ok);
  ASSERT_TRUE(std::holds_alternative<Reject>(decoded.message));
  EXPECT_EQ(std::get<Reject>(decoded.message).reason, RejectReason::kBadToken);
  EXPECT_EQ(server.stats().hellos, 0u);
}

TEST_F(TransportTest, ARankNeverTalksToAListenerThatIsNotItsCoordinator) {
  // Another program on the coordinator's port (here: a plain ZeroMQ ROUTER, as a stray service would be).
  zmq::context_t context(1);
  zmq::socket_t stray(context, zmq::socket_type::router);
  stray.set(zmq::sockopt::linger, 0);
  stray.bind("tcp://127.0.0.1:*");
  const std::string endpoint = stray.get(zmq::sockopt::last_endpoint);
  LogCapture client_log;
  ExchangeClientOptions options = client_options(endpoint, 0, nullptr, &client_log);
  options.handshake_timeout_ms = 200;
  ExchangeClient client(options);
  client.start();
  ASSERT_TRUE(client.push(all_reduce(0, 2, 1, 1024)));
  // The client counts the impostor before it logs the warning: both are waited for.
  ASSERT_TRUE(wait_until([&] { return client.stats().impostors >= 1; }));
  EXPECT_TRUE(wait_until([&] { return client_log.contains("is not this job's coordinator"); }));
  // Nothing the rank sent reached it.
  stray.set(zmq::sockopt::rcvtimeo, 0);
  zmq::message_t message;
  EXPECT_FALSE(stray.recv(message, zmq::recv_flags::dontwait).has_value());
  client.stop();
  EXPECT_EQ(client.stats().sent_fingerprints, 0u);
  EXPECT_FALSE(client.stats().welcomed);
}

TEST_F(TransportTest, AStopWithoutCoordinatorSaysTheChecksNeverRan) {
  const std::string endpoint = unused_tcp_endpoint();
  LogCapture client_log;
  ExchangeClientOptions options = client_options(endpoint, 0, nullptr, &client_log);
  options.unreachable_warning_ms = 600000;  // a short job: the periodic warning is not due
  ExchangeClient client(options);
  client.start();
  ASSERT_TRUE(client.push(all_reduce(0, 2, 1, 1024)));
  client.stop();
  EXPECT_TRUE(client_log.contains("was never reached"));
  EXPECT_EQ(client.stats().sent_fingerprints, 0u);
}

// A rank whose first connection was refused (its coordinator was not listening yet) and that ends early, before
// ZeroMQ's next attempt (its reconnect interval, here a minute): its stop connects at once, so the coordinator hears
// its calls and its goodbye instead of waiting for it forever. Whatever the order of the first attempt and the
// listen, the rank is heard.
TEST_F(TransportTest, ARankRefusedOnceThatEndsEarlyIsStillHeard) {
  const std::string endpoint = unused_tcp_endpoint();
  LogCapture client_log;
  ExchangeClientOptions options = client_options(endpoint, 0, nullptr, &client_log);
  options.reconnect_interval_ms = 60000;
  options.reconnect_interval_max_ms = 60000;
  options.unreachable_warning_ms = 100;  // said once its first attempt (a refused loopback connect) is long over
  ExchangeClient client(options);
  client.start();
  ASSERT_TRUE(client.push(all_reduce(0, 2, 1, 1024)));
  ASSERT_TRUE(wait_until([&] { return client_log.contains("not reachable"); }));

  CoordinatorServer server(server_options(endpoint));
  std::string error;
  ASSERT_TRUE(server.start(&error)) << error;
  client.stop();
  EXPECT_FALSE(client_log.contains("was never reached"));
  EXPECT_TRUE(wait_until([&] { return server.stats().core.fingerprints >= 1; }));
  EXPECT_EQ(client.stats().sent_fingerprints, 1u);
}

TEST_F(TransportTest, MalformedMessagesAreDroppedAndLogged) {
  CoordinatorServer server(server_options("tcp://127.0.0.1:*"));
  std::string error;
  ASSERT_TRUE(server.start(&error)) << error;
  zmq::context_t context(1);
  zmq::socket_t raw(context, zmq::socket_type::dealer);
  connect_with_key(raw, server.endpoint());
  const std::string garbage = "this is not a trainscope message";
  ASSERT_TRUE(raw.send(zmq::buffer(garbage), zmq::send_flags::none));
  auto truncated_hello = encode(Hello{});
  truncated_hello.resize(20);
  ASSERT_TRUE(raw.send(zmq::buffer(truncated_hello), zmq::send_flags::none));
  ASSERT_TRUE(wait_until([&] { return server.stats().malformed >= 2; }));
  EXPECT_TRUE(server_log_.contains("malformed"));
  // A well-formed message from a connection that never said hello is not trusted either.
  ASSERT_TRUE(raw.send(zmq::buffer(encode(Goodbye{0, 1})), zmq::send_flags::none));
  ASSERT_TRUE(wait_until([&] { return server.stats().unknown_peers >= 1; }));
  EXPECT_EQ(server.stats().hellos, 0u);
}

TEST_F(TransportTest, MismatchRoundTripWritesTheReportAndReachesEveryRank) {
  CoordinatorServer server(server_options("tcp://127.0.0.1:*"));
  std::string error;
  ASSERT_TRUE(server.start(&error)) << error;
  VerdictCapture verdicts0, verdicts1;
  ExchangeClient rank0(client_options(server.endpoint(), 0, &verdicts0, nullptr));
  ExchangeClient rank1(client_options(server.endpoint(), 1, &verdicts1, nullptr));
  rank0.start();
  rank1.start();
  CallStack stack;
  stack.native = {"train_step at train.py:42"};
  rank1.define_stack(5, stack);
  for (uint64_t seq = 1; seq <= 100; ++seq) {
    ASSERT_TRUE(rank0.push(all_reduce(0, 2, seq, 1048576)));
    Fingerprint f = all_reduce(1, 2, seq, seq == 100 ? 524288 : 1048576);
    f.stack_id = seq == 100 ? 5 : 0;
    ASSERT_TRUE(rank1.push(f));
  }
  ASSERT_TRUE(wait_until([&] { return !verdicts0.get().empty() && !verdicts1.get().empty(); }));
  const Verdict verdict = verdicts1.get().front();
  EXPECT_EQ(verdict.kind, VerdictKind::kMismatch);
  EXPECT_EQ(verdict.action, VerdictAction::kAbort);
  EXPECT_EQ(verdict.seq, 100u);
  EXPECT_EQ(verdict.text_path, dir_.path() + "/run/mismatch-3f2a9c-100.txt");
  const std::string text = testing::read_file(verdict.text_path);
  EXPECT_EQ(text, verdict.text);
  EXPECT_NE(text.find("  - Process 1: [524288] float16 sum"), std::string::npos) << text;
  EXPECT_NE(text.find("#0 train_step at train.py:42"), std::string::npos) << text;
  struct stat info {};
  ASSERT_EQ(stat(verdict.json_path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  rank0.stop();
  rank1.stop();
  ASSERT_TRUE(wait_until([&] { return std::filesystem::exists(dir_.path() + "/run/manifest.json"); }));
  EXPECT_EQ(verdicts0.get().size(), 1u);
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/run/vanished-rank0.txt"));
}

// A stopped job's verdict is sent again, every second, to every rank that has not gone: one lost on a dropped
// connection still reaches the rank (here, rank 1 ignores the first copy). A client acts on each verdict once.
TEST_F(TransportTest, AStoppedJobsVerdictIsSentAgainUntilTheRankGoesAndActedOnOnce) {
  CoordinatorServer server(server_options("tcp://127.0.0.1:*"));
  std::string error;
  ASSERT_TRUE(server.start(&error)) << error;
  VerdictCapture verdicts0;
  ExchangeClient rank0(client_options(server.endpoint(), 0, &verdicts0, nullptr));
  rank0.start();
  zmq::context_t context(1);
  zmq::socket_t rank1(context, zmq::socket_type::dealer);
  join_raw(rank1, server.endpoint(), 1, 512);
  ASSERT_TRUE(rank0.push(all_reduce(0, 2, 1, 1024)));

  // Every message rank 1 receives within the deadline, until it holds two copies of the verdict.
  rank1.set(zmq::sockopt::rcvtimeo, 100);
  std::vector<std::vector<uint8_t>> copies;
  ASSERT_TRUE(wait_until([&] {
    zmq::message_t message;
    if (!rank1.recv(message)) return false;
    const std::vector<uint8_t> bytes(static_cast<const uint8_t*>(message.data()),
                                     static_cast<const uint8_t*>(message.data()) + message.size());
    const DecodeResult decoded = decode(std::span<const uint8_t>(bytes));
    if (decoded.ok && std::holds_alternative<Verdict>(decoded.message)) copies.push_back(bytes);
    return copies.size() >= 2;
  })) << copies.size()
      << " verdict(s) received";
  EXPECT_EQ(copies[0], copies[1]);
  const DecodeResult first = decode(std::span<const uint8_t>(copies[0]));
  ASSERT_TRUE(first.ok);
  EXPECT_EQ(std::get<Verdict>(first.message).kind, VerdictKind::kMismatch);
  EXPECT_EQ(std::get<Verdict>(first.message).action, VerdictAction::kAbort);
  // Rank 0 was sent the same copies: it acts on the verdict once and counts the repeats it dropped.
  ASSERT_TRUE(wait_until([&] { return rank0.stats().repeated_verdicts >= 2; }));
  rank0.stop();
  EXPECT_EQ(rank0.stats().verdicts, 1u);
  EXPECT_EQ(verdicts0.get().size(), 1u);
}

// The host rank stays after an abort verdict while other ranks are connected (stats().connections): a rank whose hello
// and mismatching call arrive in the same pass must be counted before anyone hears of the verdict, or the host leaves
// at once and the verdict queued for that rank dies with it.
TEST_F(TransportTest, AVerdictCountsEveryConnectionBeforeAnyRankHearsOfIt) {
  CoordinatorServerOptions options = server_options("tcp://127.0.0.1:*");
  std::atomic<CoordinatorServer*> server_seen{nullptr};
  std::atomic<int64_t> connections_at_verdict{-1};
  options.on_verdict = [&](const Verdict&) {
    connections_at_verdict.store(static_cast<int64_t>(server_seen.load()->stats().connections));
  };
  CoordinatorServer server(options);
  server_seen.store(&server);
  std::string error;
  ASSERT_TRUE(server.start(&error)) << error;
  zmq::context_t context(1);
  zmq::socket_t rank0(context, zmq::socket_type::dealer);
  join_raw(rank0, server.endpoint(), 0, 1024);
  ASSERT_TRUE(wait_until([&] { return server.stats().hellos == 1 && server.stats().connections == 1; }));
  zmq::socket_t rank1(context, zmq::socket_type::dealer);
  join_raw(rank1, server.endpoint(), 1, 512);
  ASSERT_TRUE(wait_until([&] { return connections_at_verdict.load() >= 0; }));
  EXPECT_EQ(connections_at_verdict.load(), 2);
}

// What a coordinator receives from one client, in order, over a plain ROUTER socket.
TEST_F(TransportTest, StackDefinitionsGoOutOnceAndBeforeAnythingThatNamesThem) {
  zmq::context_t context(1);
  zmq::socket_t router(context, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.set(zmq::sockopt::rcvtimeo, 20000);
  serve_with_key(router);
  router.bind("tcp://127.0.0.1:*");
  ExchangeClient client(client_options(router.get(zmq::sockopt::last_endpoint), 0, nullptr, nullptr));
  client.start();
  constexpr uint32_t kSites = 40;
  CallStack stack;
  stack.python = {{"train.py", 88, "backward"}};
  // Definitions and calls interleave with the client's thread sending: each call's stack is defined (again, for
  // every call: the client sends each id once) just before the call is pushed.
  for (uint64_t seq = 1; seq <= 3000; ++seq) {
    const auto id = static_cast<uint32_t>(seq % kSites + 1);
    client.define_stack(id, stack);
    Fingerprint f = all_reduce(0, 1, seq, 8);
    f.stack_id = id;
    ASSERT_TRUE(client.push(f));
  }
  client.define_stack(kSites + 7, stack);
  reports::FirstNonfinite first;
  first.op = "ncclAllReduce";
  client.report_nonfinite(first, false, kSites + 7);
  client.define_stack(0, stack);  // 0 is "no stack": never sent

  std::map<uint32_t, int> definitions;
  uint64_t fingerprints = 0;
  bool nonfinite_seen = false;
  while (!nonfinite_seen) {
    zmq::message_t id;
    zmq::message_t payload;
    ASSERT_TRUE(router.recv(id));
    ASSERT_TRUE(router.recv(payload));
    const DecodeResult decoded =
        decode(std::span<const uint8_t>(static_cast<const uint8_t*>(payload.data()), payload.size()));
    ASSERT_TRUE(decoded.ok) << decoded.error;
    if (const auto* definition = std::get_if<StackDefinition>(&decoded.message)) {
      EXPECT_EQ(definition->stack, stack);
      ++definitions[definition->stack_id];
    } else if (const auto* batch = std::get_if<FingerprintBatch>(&decoded.message)) {
      for (const Fingerprint& f : batch->fingerprints) {
        EXPECT_TRUE(definitions.contains(f.stack_id)) << "call " << f.seq << " came before its stack " << f.stack_id;
        ++fingerprints;
      }
    } else if (const auto* nonfinite = std::get_if<NonfiniteMessage>(&decoded.message)) {
      EXPECT_EQ(nonfinite->stack_id, kSites + 7);
      EXPECT_TRUE(definitions.contains(kSites + 7)) << "the inf/nan report came before its stack";
      nonfinite_seen = true;
    }
  }
  EXPECT_EQ(fingerprints, 3000u);
  EXPECT_EQ(definitions.size(), kSites + 1);
  for (const auto& [stack_id, count] : definitions) EXPECT_EQ(count, 1) << "stack " << stack_id << " sent again";
  EXPECT_FALSE(definitions.contains(0));
  client.abandon();
}

TEST_F(TransportTest, RankThatDisappearsWithoutGoodbyeIsReportedAsVanished) {
  CoordinatorServer server(server_options("tcp://127.0.0.1:*"));
  std::string error;
  ASSERT_TRUE(server.start(&error)) << error;
  VerdictCapture verdicts0;
  ExchangeClient rank0(client_options(server.endpoint(), 0, &verdicts0, nullptr));
  ExchangeClient rank1(client_options(server.endpoint(), 1, nullptr, nullptr));
  rank0.start();
  rank1.start();
  ASSERT_TRUE(rank1.push(all_reduce(1, 2, 1, 8)));
  ASSERT_TRUE(wait_until([&] { return server.stats().core.fingerprints >= 1 && rank0.stats().welcomed; }));
  rank1.abandon();
  ASSERT_TRUE(wait_until([&] { return !verdicts0.get().empty(); }));
  const Verdict verdict = verdicts0.get().front();
  EXPECT_EQ(verdict.kind, VerdictKind::kVanished);
  EXPECT_NE(verdict.text.find("Rank 1 vanished"), std::string::npos) << verdict.text;
  EXPECT_NE(verdict.text.find("Host: testhost, pid 1001"), std::string::npos) << verdict.text;
  EXPECT_NE(verdict.text.find("/tmp/rank1.tsfr"), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(dir_.path() + "/run/vanished-rank1.txt"));
}

// The server-side connections on `port` still open (established, or closed by the peer and not yet by this side),
// from /proc/net/tcp: this process's ZeroMQ threads close theirs when they see the peer's end.
size_t open_connections_on(uint16_t port) {
  std::FILE* table = std::fopen("/proc/net/tcp", "r");
  if (table == nullptr) return 0;
  char line[512];
  size_t open = 0;
  (void)std::fgets(line, sizeof(line), table);  // the header
  while (std::fgets(line, sizeof(line), table) != nullptr) {
    unsigned local_port = 0, state = 0;
    if (std::sscanf(line, " %*d: %*x:%x %*x:%*x %x", &local_port, &state) == 2 && local_port == port &&
        (state == 0x01 || state == 0x08))
      ++open;
  }
  std::fclose(table);
  return open;
}

// A short job's rank says hello and goodbye and closes before the coordinator reads any of it: its close is read
// with its hello (among the monitor's events), before the connection was the rank's. It must not be counted as
// connected ever after, or the host rank waits its whole linger at exit (a 0.1 s job took 5.1 s).
TEST_F(TransportTest, ARankThatLeftBeforeItsHelloWasReadIsNotCountedAsConnected) {
  std::mutex gate;
  std::condition_variable changed;
  bool server_held = false, release = false;
  CoordinatorServerOptions options = server_options("tcp://127.0.0.1:*");
  options.log = [&](LogLevel, const std::string& message) {
    if (message.find("rank 0 (host") == std::string::npos) return;
    std::unique_lock<std::mutex> lock(gate);
    server_held = true;
    changed.notify_all();
    changed.wait_for(lock, std::chrono::seconds(20), [&] { return release; });
  };
  CoordinatorServer server(std::move(options));
  std::string error;
  ASSERT_TRUE(server.start(&error)) << error;
  zmq::context_t context;
  zmq::socket_t rank0(context, zmq::socket_type::dealer);
  connect_with_key(rank0, server.endpoint());
  ASSERT_TRUE(rank0.send(zmq::buffer(raw_hello(0)), zmq::send_flags::none));
  {
    std::unique_lock<std::mutex> lock(gate);
    ASSERT_TRUE(changed.wait_for(lock, std::chrono::seconds(20), [&] { return server_held; }));
  }
  // The server's thread is held in rank 0's hello: rank 1 comes, says everything and leaves meanwhile.
  {
    zmq::context_t own_context;
    zmq::socket_t rank1(own_context, zmq::socket_type::dealer);
    connect_with_key(rank1, server.endpoint());
    rank1.set(zmq::sockopt::linger, 5000);  // closing its context delivers the two messages first
    ASSERT_TRUE(rank1.send(zmq::buffer(raw_hello(1)), zmq::send_flags::none));
    ASSERT_TRUE(rank1.send(zmq::buffer(encode(Goodbye{1, 1, false})), zmq::send_flags::none));
  }
  EXPECT_TRUE(wait_until([&] { return open_connections_on(port_of(server.endpoint())) == 1; }));
  {
    std::lock_guard<std::mutex> lock(gate);
    release = true;
  }
  changed.notify_all();
  ASSERT_TRUE(rank0.send(zmq::buffer(encode(Goodbye{0, 2, false})), zmq::send_flags::none));
  rank0.close();
  EXPECT_TRUE(wait_until([&] { return server.stats().hellos == 2 && server.stats().connections == 0; }))
      << server.stats().hellos << " hellos, " << server.stats().connections << " connections";
  server.stop();
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/run/vanished-rank1.txt"));
}

Verdict TransportTest::silent_rank_verdict(const std::string& host, const std::string& rank1_host_id) {
  const std::string recorder_path = dir_.path() + "/rank-1.tsrec";
  recorder::Writer writer;
  recorder::WriterOptions o{};
  o.path = recorder_path.c_str();
  o.capacity = 64;
  o.max_comms = 4;
  o.max_sites = 4;
  o.pid = 1001;
  o.launcher_rank = 1;
  o.launcher_world = 2;
  o.host = host.c_str();
  o.run_id = "job";
  o.exe = "/bin/job";
  EXPECT_EQ(writer.open(o), 0);
  for (uint64_t seq = 1; seq <= 4; ++seq) {
    recorder::Record r{};
    r.comm_id = kTransportComm;
    r.seq = seq;
    r.count = 1024;
    r.op = static_cast<uint16_t>(Op::kAllReduce);
    r.start_ns = 1700000000000000000ull + seq;
    recorder::Writer::complete(writer.append(r), 0, r.start_ns + 1);
  }
  CoordinatorServerOptions options = server_options("tcp://127.0.0.1:*");
  options.core.desync_timeout_ns = 100000000ull;  // alive but silent: a warning after 0.1 s
  VerdictCapture verdicts;
  options.on_verdict = verdicts.sink();
  CoordinatorServer server(options);
  std::string error;
  EXPECT_TRUE(server.start(&error)) << error;
  ExchangeClientOptions waiting = client_options(server.endpoint(), 0, nullptr, nullptr);
  waiting.hello.host_id = host_identity();
  waiting.inside_calls = [] {
    return std::vector<HeartbeatCall>{
        {kTransportComm, 5, 1700000000000000005ull, static_cast<uint16_t>(Op::kAllReduce)}};
  };
  ExchangeClientOptions frozen = client_options(server.endpoint(), 1, nullptr, nullptr);
  frozen.hello.host = host;
  frozen.hello.host_id = rank1_host_id;
  frozen.hello.flight_recorder_path = recorder_path;
  ExchangeClient rank0(waiting);
  ExchangeClient rank1(frozen);
  rank0.start();
  rank1.start();
  for (uint64_t seq = 1; seq <= 5; ++seq) EXPECT_TRUE(rank0.push(all_reduce(0, 2, seq, 1024)));
  for (uint64_t seq = 1; seq <= 3; ++seq) EXPECT_TRUE(rank1.push(all_reduce(1, 2, seq, 1024)));
  EXPECT_TRUE(wait_until([&] { return !verdicts.get().empty(); }));
  const std::vector<Verdict> got = verdicts.get();
  rank0.abandon();
  rank1.abandon();
  writer.close(0);
  return got.empty() ? Verdict{} : got.front();
}

// The race of issue 11 ("at call #133 ... Process 1: last call #132" while rank 1's recorder showed #133-#136): a rank
// frozen (SIGSTOP) keeps its last fingerprints; the coordinator reads its flight recorder, on this host, instead.
TEST_F(TransportTest, ASilentRanksLastCallComesFromItsFlightRecorder) {
  char host[256] = "";
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  const Verdict verdict = silent_rank_verdict(host, host_identity());  // the coordinator's host
  EXPECT_EQ(verdict.kind, VerdictKind::kDesync);
  EXPECT_EQ(verdict.seq, 5u);
  EXPECT_NE(verdict.text.find("at call #5 (`ncclAllReduce`)"), std::string::npos) << verdict.text;
  EXPECT_NE(verdict.text.find("last call #4 `ncclAllReduce`"), std::string::npos) << verdict.text;
  EXPECT_NE(verdict.text.find("(from its flight recorder: it returned"), std::string::npos) << verdict.text;
}

// A rank of another host (another boot, pid or mount namespace) names a recorder path that is not the coordinator's
// file, even where a file of that name exists here: the report says where its recorder is, and reads nothing.
TEST_F(TransportTest, ARecorderOnAnotherHostIsNamedNotRead) {
  const Verdict verdict = silent_rank_verdict("host2", "00000000-0000-0000-0000-000000000002/1/2");
  EXPECT_EQ(verdict.kind, VerdictKind::kDesync);
  EXPECT_EQ(verdict.seq, 4u);  // what its fingerprints told: the recorder's #4 is on host2
  EXPECT_EQ(verdict.text.find("from its flight recorder"), std::string::npos) << verdict.text;
  EXPECT_NE(verdict.text.find("flight recorder on host2, not on the coordinator's host"), std::string::npos)
      << verdict.text;
}

TEST_F(TransportTest, ClientWithoutCoordinatorKeepsGoingAndConnectsWhenOneAppears) {
  const std::string endpoint = "ipc://" + dir_.path() + "/coordinator.sock";
  LogCapture client_log;
  ExchangeClientOptions options = client_options(endpoint, 0, nullptr, &client_log);
  options.queue_capacity = 64;
  ExchangeClient client(options);
  client.start();
  // Nothing blocks: pushes beyond the queue's capacity are dropped and counted.
  for (uint64_t seq = 1; seq <= 200; ++seq) client.push(all_reduce(0, 1, seq, 8));
  EXPECT_EQ(client.stats().pushed + client.stats().dropped, 200u);
  EXPECT_GE(client.stats().dropped, 200u - 64u);
  ASSERT_TRUE(wait_until([&] { return client_log.contains("not reachable"); }));

  CoordinatorServer server(server_options(endpoint));
  std::string error;
  ASSERT_TRUE(server.start(&error)) << error;
  ASSERT_TRUE(wait_until([&] { return client.stats().welcomed; }));
  ASSERT_TRUE(wait_until([&] { return server.stats().core.fingerprints >= 64; }));
  client.push(all_reduce(0, 1, 201, 8));
  ASSERT_TRUE(wait_until([&] { return server.stats().core.fingerprints >= 65; }));
  client.stop();
}

TEST_F(TransportTest, BadBindAddressIsAnErrorNotACrash) {
  CoordinatorServer server(server_options("nonsense://here"));
  std::string error;
  EXPECT_FALSE(server.start(&error));
  EXPECT_NE(error.find("cannot bind"), std::string::npos) << error;
}

// ---- Peers that have not said hello -------------------------------------------------------------------------------

TEST_F(TransportTest, AnIdleConnectionIsClosedAtTheHelloDeadline) {
  CoordinatorServerOptions options = server_options("tcp://127.0.0.1:*");
  options.hello_deadline_ms = 200;
  CoordinatorServer server(options);
  std::string error;
  ASSERT_TRUE(server.start(&error)) << error;
  const int idle = connect_idle(port_of(server.endpoint()));
  ASSERT_GE(idle, 0) << std::strerror(errno);
  // ZeroMQ alone would hold it for its default handshake limit, 30 s: the wait ends well before.
  EXPECT_TRUE(closed_by_peer(idle, 20000));
  close(idle);
  ASSERT_TRUE(wait_until([&] { return server.stats().gate.hello_timeouts >= 1; }));
  EXPECT_EQ(server.stats().gate.unauthenticated, 0u);
  EXPECT_TRUE(server_log_.contains("had not said a valid hello: no valid hello within 200 ms"));
}

TEST_F(TransportTest, AConnectionWithTheKeyThatNeverSaysHelloIsClosedAndARankStays) {
  CoordinatorServerOptions options = server_options("tcp://127.0.0.1:*");
  options.hello_deadline_ms = 300;
  CoordinatorServer server(options);
  std::string error;
  ASSERT_TRUE(server.start(&error)) << error;
  // A rank of the job, connected before: the deadline is not for it (it said hello, and its heartbeats follow).
  ExchangeClient rank(client_options(server.endpoint(), 0, nullptr, nullptr));
  rank.start();
  ASSERT_TRUE(wait_until([&] { return rank.stats().welcomed; }));

  zmq::context_t context(1);
  zmq::socket_t silent(context, zmq::socket_type::dealer);
  silent.set(zmq::sockopt::reconnect_ivl, -1);  // one connection, to see it end
  ASSERT_EQ(zmq_socket_monitor(silent.handle(), "inproc://silent-monitor",
                               ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED),
            0);
  zmq::socket_t monitor(context, zmq::socket_type::pair);
  monitor.set(zmq::sockopt::linger, 0);
  monitor.set(zmq::sockopt::rcvtimeo, 20000);
  monitor.connect("inproc://silent-monitor");
  connect_with_key(silent, server.endpoint());
  std::vector<uint16_t> events;
  while (events.size() < 2) {
    zmq::message_t event;
    zmq::message_t address;
    ASSERT_TRUE(monitor.recv(event)) << "no event within 20 s after " << events.size();
    ASSERT_TRUE(monitor.recv(address));
    uint16_t kind = 0;
    std::memcpy(&kind, event.data(), 2);
    events.push_back(kind);
  }
  // The handshake succeeded (it holds the key), then the coordinator closed it: no hello came.
  EXPECT_EQ(events[0], ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
  EXPECT_EQ(events[1], ZMQ_EVENT_DISCONNECTED);
  ASSERT_TRUE(wait_until([&] { return server.stats().gate.hello_timeouts >= 1; }));
  // The rank has been connected for longer than the deadline and is still there, on its first hello.
  EXPECT_EQ(server.stats().gate.hello_timeouts, 1u);
  EXPECT_EQ(server.stats().connections, 1u);
  EXPECT_EQ(rank.stats().hellos, 1u);
  EXPECT_TRUE(rank.stats().welcomed);
  zmq_socket_monitor(silent.handle(), nullptr, 0);
  rank.stop();
}

// Sets this process's soft descriptor limit for one test, and puts it back.
class DescriptorLimit {
 public:
  explicit DescriptorLimit(rlim_t soft) {
    getrlimit(RLIMIT_NOFILE, &saved_);
    rlimit lowered = saved_;
    lowered.rlim_cur = soft;
    set_ = saved_.rlim_max >= soft && setrlimit(RLIMIT_NOFILE, &lowered) == 0;
  }
  ~DescriptorLimit() {
    if (set_) setrlimit(RLIMIT_NOFILE, &saved_);
  }
  bool set() const { return set_; }
  const rlimit& saved() const { return saved_; }

 private:
  rlimit saved_{};
  bool set_ = false;
};

// An outsider in a child process holds `count` idle TCP connections to `port` until the parent closes its end of
// `hold`; it writes how many it made to `ready`. Only system calls after the fork (the parent has threads).
pid_t hold_idle_connections(uint16_t port, int count, rlim_t limit, int ready, const int hold[2]) {
  std::vector<pollfd> connections(static_cast<size_t>(count));
  const sockaddr_in address = loopback(port);
  const pid_t pid = fork();
  if (pid != 0) return pid;
  alarm(120);  // never outlives a broken test
  close(hold[1]);
  const rlimit enough{limit, limit};
  (void)setrlimit(RLIMIT_NOFILE, &enough);
  int pending = 0;
  for (pollfd& connection : connections) {
    connection.fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    connection.events = POLLOUT;
    if (connection.fd >= 0 &&
        (connect(connection.fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0 ||
         errno == EINPROGRESS)) {
      ++pending;
    } else {
      connection.fd = -1;
    }
  }
  // Each connect completes (the kernel does the TCP handshake) or, with the listener's queue full, not within 20 s.
  int made = 0;
  for (int round = 0; pending > 0 && round < 200; ++round) {
    if (poll(connections.data(), connections.size(), 100) < 0) break;
    for (pollfd& connection : connections) {
      if (connection.fd < 0 || connection.revents == 0) continue;
      int failure = 0;
      socklen_t length = sizeof(failure);
      if (getsockopt(connection.fd, SOL_SOCKET, SO_ERROR, &failure, &length) == 0 && failure == 0) ++made;
      connection.fd = -1 - connection.fd;  // poll() skips it from now on; the connection stays open
      --pending;
    }
  }
  // The connects still pending are dropped, so no SYN of theirs comes later (the wait for the kernel below ends).
  for (pollfd& connection : connections) {
    if (connection.fd >= 0) close(connection.fd);
  }
  (void)!write(ready, &made, sizeof(made));
  char byte;
  (void)!read(hold[0], &byte, 1);
  _exit(0);
}

// Connections to `port` the kernel has not handed to the listener's owner yet: connects not answered (SYN_SENT),
// handshakes not finished (SYN_RECV: their last ACK was dropped while the accept queue was full, the kernel sends
// its SYN-ACK again, seconds later) and the accept queue's length. Each of them becomes an accepted descriptor in a
// burst when it gets in, however quickly the gate then closes it. Both ends are on loopback: /proc/net/tcp has both.
size_t connections_pending_in_the_kernel(uint16_t port) {
  FILE* table = std::fopen("/proc/net/tcp", "r");
  if (table == nullptr) return 0;
  size_t pending = 0;
  char line[512];
  (void)!std::fgets(line, sizeof(line), table);  // the header
  while (std::fgets(line, sizeof(line), table) != nullptr) {
    unsigned local_address = 0, local_port = 0, remote_address = 0, remote_port = 0, state = 0;
    unsigned long tx_queue = 0, rx_queue = 0;
    if (std::sscanf(line, " %*u: %8X:%4X %8X:%4X %2X %8lX:%8lX", &local_address, &local_port, &remote_address,
                    &remote_port, &state, &tx_queue, &rx_queue) != 7)
      continue;
    constexpr unsigned kSynSent = 0x02, kSynRecv = 0x03, kListen = 0x0A;
    if (state == kSynSent && remote_port == port) ++pending;
    if (state == kSynRecv && local_port == port) ++pending;
    if (state == kListen && local_port == port) pending += rx_queue;  // a listener's rx_queue: its accept queue
  }
  std::fclose(table);
  return pending;
}

// The issue: under `ulimit -n 256`, 328 idle connections made the job's own open() fail with EMFILE.
TEST_F(TransportTest, IdleOutsidersLeaveTheJobItsDescriptorsAndARankStillJoins) {
  constexpr rlim_t kLimit = 256;
  constexpr int kOutsiderConnections = 320;
  constexpr int kJobFiles = 128;
  ASSERT_LT(count_open_descriptors(), 64u) << "the test process holds too many descriptors already";
  CoordinatorServerOptions options = server_options("tcp://127.0.0.1:*");
  options.hello_deadline_ms = 120000;  // the deadline is not what keeps the job's descriptors here
  DescriptorLimit limit(kLimit);
  if (!limit.set()) GTEST_SKIP() << "cannot lower RLIMIT_NOFILE to " << kLimit;
  CoordinatorServer server(options);
  std::string error;
  ASSERT_TRUE(server.start(&error)) << error;

  int ready[2];
  int hold[2];
  ASSERT_EQ(pipe2(ready, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(hold, O_CLOEXEC), 0);
  const pid_t outsider = hold_idle_connections(port_of(server.endpoint()), kOutsiderConnections,
                                               std::min<rlim_t>(limit.saved().rlim_max, 4096), ready[1], hold);
  ASSERT_GT(outsider, 0);
  close(ready[1]);
  close(hold[0]);
  auto end_outsider = [&] {
    close(hold[1]);
    int status = 0;
    EXPECT_TRUE(wait_until([&] { return waitpid(outsider, &status, WNOHANG) == outsider; }));
  };
  int made = 0;
  pollfd item{ready[0], POLLIN, 0};
  ASSERT_EQ(poll(&item, 1, 60000), 1);
  ASSERT_EQ(read(ready[0], &made, sizeof(made)), static_cast<ssize_t>(sizeof(made)));
  close(ready[0]);
  EXPECT_GT(made, static_cast<int>(kLimit));
  // The coordinator keeps a few and closes the rest: their descriptors are soon given back (ZeroMQ alone would hold
  // them for its default handshake limit, 30 s: the wait ends well before). First every connection the kernel still
  // holds must have come in: those come in bursts of up to ZeroMQ's accept backlog, and the gate sees a burst only
  // once ZeroMQ has accepted it (the transient cost of an outsider that is still connecting, not of idle ones).
  const uint16_t port = port_of(server.endpoint());
  EXPECT_TRUE(wait_until([&] { return connections_pending_in_the_kernel(port) == 0; }, std::chrono::seconds(90)))
      << connections_pending_in_the_kernel(port) << " connections still pending in the kernel";
  EXPECT_TRUE(wait_until([&] { return count_open_descriptors() + kJobFiles + 16 <= kLimit; }, std::chrono::seconds(15)))
      << count_open_descriptors() << " descriptors open";

  // The job opens its files (a checkpoint, a data loader) while the outsider holds on.
  std::vector<int> files;
  int emfile = 0;
  for (int i = 0; i < kJobFiles; ++i) {
    const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      files.push_back(fd);
    } else if (errno == EMFILE) {
      ++emfile;
    }
  }
  for (const int fd : files) close(fd);
  EXPECT_EQ(emfile, 0);
  EXPECT_EQ(files.size(), static_cast<size_t>(kJobFiles));
  // It kept an eighth of the limit at most. (Not every connection the outsider made has been accepted: past the
  // listener's queue, the kernel lets one in when it sends its SYN-ACK again, seconds later.)
  const ConnectionGateStats gate = server.stats().gate;
  EXPECT_LE(gate.connections, kLimit / 8);
  EXPECT_GT(gate.accepted, kLimit / 2);
  EXPECT_EQ(gate.refused(), gate.accepted - gate.connections);

  // A rank of the job still gets in: the oldest idle connection makes way for it.
  ExchangeClient rank(client_options(server.endpoint(), 0, nullptr, nullptr));
  rank.start();
  EXPECT_TRUE(wait_until([&] { return rank.stats().welcomed; }));
  rank.stop();
  end_outsider();
  server.stop();
  EXPECT_EQ(server.stats().hellos, 1u);
  // Counted, and said in a line or two, never one per connection.
  EXPECT_TRUE(server_log_.contains("closed a connection that had not said a valid hello"));
  EXPECT_LE(server_log_.count("had not said a valid hello"), 2u);
  EXPECT_TRUE(server_log_.contains("over the cap on those at once"));
}

// ---- Origin of the first inf/nan ---------------------------------------------------------------------------------

class ExchangeOriginTest : public TransportTest {
 protected:
  static reports::FirstNonfinite first(reports::NonfiniteWhere where) {
    reports::FirstNonfinite f;
    f.rank = 99;  // the client sends its hello's rank, whatever this says
    f.batch_number = 12;
    f.comm_id = kTransportComm;
    f.call_number = 812;
    f.op = "ncclAllReduce";
    f.where = where;
    f.kind = reports::NonfiniteKind::kInf;
    return f;
  }
  std::string origin_txt() const { return dir_.path() + "/run/origin.txt"; }
  std::string origin_json() const { return dir_.path() + "/run/origin.json"; }
  static constexpr char kTwoRankOrigin[] =
      "rank 1 sent inf in all-reduce call #812 in batch 12; rank 0 first saw it in that call's output\n";
};

TEST_F(ExchangeOriginTest, OriginFilesFollowTheRanksFirstsInTheRunDirectory) {
  CoordinatorServer server(server_options("tcp://127.0.0.1:*"));
  std::string error;
  ASSERT_TRUE(server.start(&error)) << error;
  VerdictCapture verdicts0, verdicts1;
  ExchangeClient rank0(client_options(server.endpoint(), 0, &verdicts0, nullptr));
  ExchangeClient rank1(client_options(server.endpoint(), 1, &verdicts1, nullptr));
  rank0.start();
  rank1.start();
  // Rank 1's calls go out before its report of the inf it sent.
  for (uint64_t seq = 1; seq <= 100; ++seq) ASSERT_TRUE(rank1.push(all_reduce(1, 2, seq, 8)));
  rank1.report_nonfinite(first(reports::NonfiniteWhere::kInput), false);
  ASSERT_TRUE(wait_until([&] {
    return testing::read_file(origin_txt()) == "rank 1 sent inf in all-reduce call #812 in batch 12\n";
  })) << testing::read_file(origin_txt());
  ASSERT_TRUE(wait_until([&] { return rank1.stats().nonfinite_sent == 1; }));
  EXPECT_GE(rank1.stats().sent_fingerprints, 100u);

  // Rank 0's first arrives: both files are replaced with the whole picture.
  rank0.report_nonfinite(first(reports::NonfiniteWhere::kOutput), false);
  ASSERT_TRUE(wait_until([&] { return testing::read_file(origin_txt()) == kTwoRankOrigin; }))
      << testing::read_file(origin_txt());
  ASSERT_TRUE(wait_until([&] {
    const nlohmann::json json = nlohmann::json::parse(testing::read_file(origin_json()), nullptr, false);
    return !json.is_discarded() && json.value("text", "") == kTwoRankOrigin;
  }));
  const nlohmann::json json = nlohmann::json::parse(testing::read_file(origin_json()));
  EXPECT_EQ(json["kind"], "nonfinite_origin");
  EXPECT_EQ(json["origin"]["call_number"], 812);
  EXPECT_EQ(json["origin"]["senders"], nlohmann::json::array({1}));
  EXPECT_EQ(json["origin"]["receivers"], nlohmann::json::array({0}));
  ASSERT_EQ(json["firsts"].size(), 2u);
  EXPECT_EQ(json["firsts"][1]["rank"], 1);
  for (const std::string& path : {origin_txt(), origin_json()}) {
    struct stat info {};
    ASSERT_EQ(stat(path.c_str(), &info), 0) << path;
    EXPECT_EQ(info.st_mode & 0777, 0600u) << path;
  }
  EXPECT_FALSE(std::filesystem::exists(origin_txt() + ".tmp"));

  // A repeated report of rank 1 changes nothing; nobody asked for a stop, so no verdict either.
  rank1.report_nonfinite(first(reports::NonfiniteWhere::kOutput), false);
  ASSERT_TRUE(wait_until([&] { return server.stats().core.ignored_nonfinite == 1; }));
  EXPECT_EQ(testing::read_file(origin_txt()), kTwoRankOrigin);
  EXPECT_EQ(server.stats().core.nonfinite_firsts, 2u);
  EXPECT_EQ(server.stats().verdicts, 0u);
  EXPECT_TRUE(verdicts0.get().empty());
  EXPECT_TRUE(verdicts1.get().empty());
  rank0.stop();
  rank1.stop();
}

TEST_F(ExchangeOriginTest, StopJobBroadcastsTheNonfiniteVerdictToEveryRank) {
  CoordinatorServerOptions options = server_options("tcp://127.0.0.1:*");
  options.core.nonfinite_grace_ns = 50'000'000;  // 50 ms for the other rank's first
  VerdictCapture on_server;
  options.on_verdict = on_server.sink();
  CoordinatorServer server(options);
  std::string error;
  ASSERT_TRUE(server.start(&error)) << error;
  VerdictCapture verdicts0, verdicts1;
  ExchangeClient rank0(client_options(server.endpoint(), 0, &verdicts0, nullptr));
  ExchangeClient rank1(client_options(server.endpoint(), 1, &verdicts1, nullptr));
  rank0.start();
  rank1.start();
  ASSERT_TRUE(wait_until([&] { return rank0.stats().welcomed && rank1.stats().welcomed; }));
  rank0.report_nonfinite(first(reports::NonfiniteWhere::kOutput), false);
  ASSERT_TRUE(wait_until([&] { return server.stats().core.nonfinite_firsts == 1; }));
  rank1.report_nonfinite(first(reports::NonfiniteWhere::kInput), true);
  ASSERT_TRUE(wait_until([&] { return !verdicts0.get().empty() && !verdicts1.get().empty(); }));
  for (VerdictCapture* capture : {&verdicts0, &verdicts1, &on_server}) {
    const std::vector<Verdict> got = capture->get();
    ASSERT_EQ(got.size(), 1u);
    const Verdict& verdict = got.front();
    EXPECT_EQ(verdict.kind, VerdictKind::kNonfinite);
    EXPECT_EQ(verdict.action, VerdictAction::kAbort);
    EXPECT_EQ(verdict.comm_id, kTransportComm);
    EXPECT_EQ(verdict.seq, 812u);
    EXPECT_EQ(verdict.text, kTwoRankOrigin);
    EXPECT_EQ(verdict.text_path, origin_txt());
    EXPECT_EQ(verdict.json_path, origin_json());
  }
  // The report is on disk before the verdict goes out.
  EXPECT_EQ(testing::read_file(origin_txt()), kTwoRankOrigin);
  // The server counts and logs the verdict after sending it: the ranks may hold it first (bounded wait).
  EXPECT_TRUE(wait_until([&] { return server.stats().verdicts == 1u; })) << server.stats().verdicts;
  EXPECT_TRUE(wait_until([&] { return server_log_.contains("nonfinite (abort)"); }));
  // One stop per job: another request adds its rank to the origin but no second verdict.
  rank0.report_nonfinite(first(reports::NonfiniteWhere::kOutput), true);
  ASSERT_TRUE(wait_until([&] { return server.stats().core.ignored_nonfinite == 1; }));
  EXPECT_EQ(server.stats().core.verdicts, 1u);
  rank0.stop();
  rank1.stop();
  EXPECT_EQ(verdicts0.get().size(), 1u);
}

TEST_F(ExchangeOriginTest, TheOriginShowsThePythonStackOfTheCallItCameFrom) {
  CoordinatorServer server(server_options("tcp://127.0.0.1:*"));
  std::string error;
  ASSERT_TRUE(server.start(&error)) << error;
  ExchangeClient rank0(client_options(server.endpoint(), 0, nullptr, nullptr));
  ExchangeClient rank1(client_options(server.endpoint(), 1, nullptr, nullptr));
  rank0.start();
  rank1.start();
  CallStack stack;
  stack.python = {{"train.py", 88, "backward"}, {"train.py", 120, "main"}};
  stack.native = {"ncclAllReduce at nccl.cc:1"};
  rank1.define_stack(3, stack);
  rank1.report_nonfinite(first(reports::NonfiniteWhere::kInput), false, 3);
  rank0.report_nonfinite(first(reports::NonfiniteWhere::kOutput), false);
  const std::string expected = std::string(kTwoRankOrigin) +
                               "\n"
                               "Stack of the call it came from (rank 1, all-reduce call #812 in batch 12):\n"
                               "  File \"train.py\", line 88, in backward\n"
                               "  File \"train.py\", line 120, in main\n"
                               "  #0 ncclAllReduce at nccl.cc:1\n";
  ASSERT_TRUE(wait_until([&] { return testing::read_file(origin_txt()) == expected; }))
      << testing::read_file(origin_txt());
  ASSERT_TRUE(wait_until([&] {
    const nlohmann::json json = nlohmann::json::parse(testing::read_file(origin_json()), nullptr, false);
    return !json.is_discarded() && json.value("text", "") == expected;
  }));
  const nlohmann::json json = nlohmann::json::parse(testing::read_file(origin_json()));
  EXPECT_EQ(json["origin"]["stack_rank"], 1);
  EXPECT_EQ(json["origin"]["python_stack"][0]["file"], "train.py");
  rank0.stop();
  rank1.stop();
}

TEST_F(ExchangeOriginTest, ReportUnderAnotherRanksNumberIsRefused) {
  CoordinatorServer server(server_options("tcp://127.0.0.1:*"));
  std::string error;
  ASSERT_TRUE(server.start(&error)) << error;
  zmq::context_t context(1);
  zmq::socket_t raw(context, zmq::socket_type::dealer);
  connect_with_key(raw, server.endpoint());
  ASSERT_TRUE(raw.send(zmq::buffer(raw_hello(0)), zmq::send_flags::none));
  NonfiniteMessage message;
  message.rank = 1;  // the connection said hello as rank 0
  message.op = "ncclAllReduce";
  message.stop_job = true;
  ASSERT_TRUE(raw.send(zmq::buffer(encode(message)), zmq::send_flags::none));
  ASSERT_TRUE(wait_until([&] { return server.stats().malformed >= 1; }));
  EXPECT_TRUE(server_log_.contains("sent a message as rank 1"));
  EXPECT_EQ(server.stats().core.nonfinite_firsts, 0u);
  EXPECT_FALSE(std::filesystem::exists(origin_txt()));
}

TEST_F(ExchangeOriginTest, ReportsAreBoundedAndNeverWaitForACoordinator) {
  const std::string endpoint = "ipc://" + dir_.path() + "/nobody.sock";
  ExchangeClient client(client_options(endpoint, 0, nullptr, nullptr));
  client.start();
  for (size_t i = 0; i < ExchangeClient::kMaxPendingNonfinite + 10; ++i)
    client.report_nonfinite(first(reports::NonfiniteWhere::kOutput), false);
  EXPECT_EQ(client.stats().nonfinite_dropped, 10u);
  EXPECT_EQ(client.stats().nonfinite_sent, 0u);
  client.abandon();
}

// The client sends at the multiples of its flush interval on the wall clock (every rank of a host at once): the wait
// ends on the next one, a full interval from one that is exactly now, rounded up to a millisecond, never 0.
TEST(FlushSchedule, WaitsForTheNextMultipleOfTheIntervalOnTheWallClock) {
  constexpr uint64_t kMs = 1000000;
  EXPECT_EQ(ms_to_next_flush(1000 * kMs, 50), 50);
  EXPECT_EQ(ms_to_next_flush(1010 * kMs, 50), 40);
  EXPECT_EQ(ms_to_next_flush(1010 * kMs + 1, 50), 40);  // 39.999999 ms: rounded up
  EXPECT_EQ(ms_to_next_flush(1049 * kMs + 1, 50), 1);
  EXPECT_EQ(ms_to_next_flush(1049 * kMs, 50), 1);
  EXPECT_EQ(ms_to_next_flush(7 * kMs, 1), 1);
  EXPECT_EQ(ms_to_next_flush(123456789, 0), 0);
  // Two ranks that look at the clock at different moments of one interval wake at the same moment.
  const uint64_t a = 5000 * kMs + 3 * kMs;
  const uint64_t b = 5000 * kMs + 41 * kMs;
  EXPECT_EQ(a + static_cast<uint64_t>(ms_to_next_flush(a, 50)) * kMs,
            b + static_cast<uint64_t>(ms_to_next_flush(b, 50)) * kMs);
}

}  // namespace
}  // namespace trainscope::exchange
