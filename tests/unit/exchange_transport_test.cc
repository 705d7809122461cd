// The coordinator server and the rank client over real ZeroMQ sockets (loopback TCP and ipc:// in a temporary
// directory): token check, malformed messages, a mismatch round trip, a vanished rank, and a client that starts
// before its coordinator. Every wait polls a condition under a deadline; nothing asserts on timing.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "collectors/coordinator_server.h"
#include "collectors/exchange_client.h"
#include "tests/support/subprocess.h"

namespace trainscope::exchange {
namespace {

using recorder::Op;
constexpr char kToken[] = "job-token-0123456789";
constexpr uint64_t kComm = 0x3f2a9c0011223344ull;

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
  bool contains(const std::string& part) {
    std::lock_guard<std::mutex> lock(lock_);
    for (const auto& line : lines_) {
      if (line.find(part) != std::string::npos) return true;
    }
    return false;
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
  f.comm_id = kComm;
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

  testing::TempDir dir_;
  LogCapture server_log_;
};

TEST_F(TransportTest, WrongTokenIsRejected) {
  CoordinatorServer server(server_options("tcp://127.0.0.1:*"));
  std::string error;
  ASSERT_TRUE(server.start(&error)) << error;
  LogCapture client_log;
  ExchangeClient client(client_options(server.endpoint(), 0, nullptr, &client_log, "not-the-token"));
  client.start();
  ASSERT_TRUE(wait_until([&] { return client.stats().rejected; }));
  EXPECT_FALSE(client.stats().welcomed);
  EXPECT_TRUE(client_log.contains("refused"));
  EXPECT_TRUE(wait_until([&] { return server.stats().rejected_tokens >= 1; }));
  EXPECT_TRUE(server_log_.contains("wrong job token"));
  EXPECT_EQ(server.stats().hellos, 0u);
}

TEST_F(TransportTest, MalformedMessagesAreDroppedAndLogged) {
  CoordinatorServer server(server_options("tcp://127.0.0.1:*"));
  std::string error;
  ASSERT_TRUE(server.start(&error)) << error;
  zmq::context_t context(1);
  zmq::socket_t raw(context, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 0);
  raw.connect(server.endpoint());
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
  rank1.define_stack(5, {"train_step at train.py:42"});
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

}  // namespace
}  // namespace trainscope::exchange
