// commcheck's rendezvous between threads of this process: the id reaches every rank, a rank that never came or
// cannot take part is named to all, and no wait outlives its deadline.
#include "tools/commcheck_rendezvous.h"

#include "support/subprocess.h"

#include <gtest/gtest.h>

#include <future>
#include <vector>

namespace {

using namespace trainscope::tools::commcheck;

using trainscope::testing::free_loopback_port;

RendezvousRequest request(int rank, int world, int port, int seconds) {
  RendezvousRequest r;
  r.rank = rank;
  r.world = world;
  r.local_rank = rank;
  r.host = "h";
  r.address = "127.0.0.1";
  r.port = port;
  r.join_deadline = Clock::now() + std::chrono::seconds(seconds);
  r.answer_deadline = r.join_deadline + std::chrono::seconds(1);
  for (size_t i = 0; i < r.unique_id.size(); ++i) r.unique_id[i] = static_cast<unsigned char>(i * 7 + 3);
  return r;
}

std::vector<RendezvousResult> meet(const std::vector<RendezvousRequest>& requests) {
  std::vector<std::future<RendezvousResult>> running;
  for (const RendezvousRequest& r : requests) running.push_back(std::async(std::launch::async, rendezvous, r));
  std::vector<RendezvousResult> results;
  for (auto& f : running) results.push_back(f.get());
  return results;
}

TEST(CommcheckRendezvous, EveryRankGetsRankZerosId) {
  const int port = free_loopback_port();
  std::vector<RendezvousRequest> requests;
  for (int rank = 3; rank >= 0; --rank) requests.push_back(request(rank, 4, port, 20));  // rank 0 comes last
  for (int rank = 1; rank < 4; ++rank) requests[static_cast<size_t>(rank)].unique_id.fill(0);
  const std::vector<RendezvousResult> results = meet(requests);
  for (const RendezvousResult& r : results) {
    EXPECT_TRUE(r.ok) << r.error;
    EXPECT_EQ(requests.back().unique_id, r.unique_id);
  }
}

TEST(CommcheckRendezvous, ARankThatNeverCameIsNamedToEveryRankByTheDeadline) {
  const int port = free_loopback_port();
  const auto start = Clock::now();
  const std::vector<RendezvousResult> results =
      meet({request(0, 4, port, 2), request(1, 4, port, 2), request(3, 4, port, 2)});
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  for (const RendezvousResult& r : results) {
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(std::vector<int32_t>{2}, r.missing);
    EXPECT_NE(std::string::npos, r.error.find("rank 2 never joined the rendezvous at 127.0.0.1:" +
                                              std::to_string(port) + " in time (3 of 4 ranks came)"))
        << r.error;
  }
}

TEST(CommcheckRendezvous, ARankThatCannotTakePartIsNamedToAll) {
  const int port = free_loopback_port();
  RendezvousRequest broken = request(1, 3, port, 20);
  broken.own_error = "cannot load libnccl.so.2 (not found)";
  const std::vector<RendezvousResult> results = meet({request(0, 3, port, 20), broken, request(2, 3, port, 20)});
  for (const RendezvousResult& r : results) {
    EXPECT_FALSE(r.ok);
    EXPECT_TRUE(r.missing.empty());
    EXPECT_NE(std::string::npos, r.error.find("rank 1 (h-1) cannot take part: cannot load libnccl.so.2 (not found)"))
        << r.error;
  }
}

TEST(CommcheckRendezvous, DisagreeingWorldSizesAreNamed) {
  const int port = free_loopback_port();
  const std::vector<RendezvousResult> results = meet({request(0, 2, port, 2), request(1, 3, port, 2)});
  EXPECT_FALSE(results[0].ok);
  EXPECT_NE(std::string::npos, results[0].error.find("says the world has 3 ranks, rank 0 says 2")) << results[0].error;
  EXPECT_FALSE(results[1].ok);
  EXPECT_NE(std::string::npos, results[1].error.find("says the world has 3 ranks, rank 0 says 2")) << results[1].error;
}

TEST(CommcheckRendezvous, NoRankZeroIsSaidWithinTheDeadline) {
  const auto start = Clock::now();
  const RendezvousResult r = rendezvous(request(1, 2, free_loopback_port(), 1));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(4));
  EXPECT_FALSE(r.ok);
  EXPECT_NE(std::string::npos, r.error.find("could not reach rank 0's rendezvous at 127.0.0.1:")) << r.error;
}

TEST(CommcheckArguments, EndpointsAndTimeouts) {
  std::string host;
  int port = 0;
  std::string reason;
  ASSERT_TRUE(parse_endpoint("node1:29504", &host, &port, &reason));
  EXPECT_EQ("node1", host);
  EXPECT_EQ(29504, port);
  ASSERT_TRUE(parse_endpoint("[::1]:7", &host, &port, &reason));
  EXPECT_EQ("::1", host);
  EXPECT_FALSE(parse_endpoint("node1", &host, &port, &reason));
  EXPECT_FALSE(parse_endpoint("node1:70000", &host, &port, &reason));
  EXPECT_FALSE(parse_endpoint("::1:7", &host, &port, &reason));
  int seconds = 0;
  ASSERT_TRUE(parse_timeout_seconds("60", 3600, &seconds));
  EXPECT_EQ(60, seconds);
  ASSERT_TRUE(parse_timeout_seconds("90s", 3600, &seconds));
  EXPECT_EQ(90, seconds);
  ASSERT_TRUE(parse_timeout_seconds("2m", 3600, &seconds));
  EXPECT_EQ(120, seconds);
  for (const char* bad : {"", "0", "-5", "abc", "5x", "61m", "1.5", "s"})
    EXPECT_FALSE(parse_timeout_seconds(bad, 3600, &seconds)) << bad;
}

}  // namespace
