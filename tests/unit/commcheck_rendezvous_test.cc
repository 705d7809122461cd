// commcheck's rendezvous between threads of this process: the id reaches every rank, a rank that never came or
// cannot take part is named to all, every wait ends at its deadline naming what it waited for (ctest bounds the tests).
#include "tools/commcheck_rendezvous.h"

#include "support/subprocess.h"

#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <memory>
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
  // The connections stay open for the failure relay: rank 0 holds one to each rank, each rank one to rank 0.
  ASSERT_EQ(3u, results.back().links.size());
  for (size_t i = 0; i + 1 < results.size(); ++i) {
    ASSERT_EQ(1u, results[i].links.size());
    EXPECT_EQ(0, results[i].links[0].rank);
    EXPECT_EQ("rank 0 (h-0)", results[i].links[0].label);
  }
  for (const RendezvousResult& r : results)
    for (const Link& link : r.links) close(link.fd);
}

// Rank 0 and two ranks joined by socket pairs, as the rendezvous leaves them.
struct RelayedRanks {
  std::vector<std::promise<std::string>> said{3};     // what each rank's relay said broke
  std::vector<std::unique_ptr<FailureRelay>> relays;  // after `said`: their threads end before it goes

  RelayedRanks() {
    int to1[2];
    int to2[2];
    socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, to1);
    socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, to2);
    relays.push_back(std::make_unique<FailureRelay>(
        0, "rank 0 (h-0)", std::vector<Link>{{1, to1[0], "rank 1 (h-1)", ""}, {2, to2[0], "rank 2 (h-2)", ""}}));
    relays.push_back(
        std::make_unique<FailureRelay>(1, "rank 1 (h-1)", std::vector<Link>{{0, to1[1], "rank 0 (h-0)", ""}}));
    relays.push_back(
        std::make_unique<FailureRelay>(2, "rank 2 (h-2)", std::vector<Link>{{0, to2[1], "rank 0 (h-0)", ""}}));
    for (size_t i = 0; i < 3; ++i) relays[i]->start([this, i](const std::string& what) { said[i].set_value(what); });
  }
  std::string heard(size_t rank) {
    auto future = said[rank].get_future();
    return future.wait_for(std::chrono::seconds(5)) == std::future_status::ready ? future.get() : "(nothing)";
  }
};

TEST(CommcheckRelay, ARanksFailureReachesEveryOtherRank) {
  RelayedRanks ranks;
  ranks.relays[2]->report_failure("ncclCommInitRank returned 1 (unhandled cuda error)");
  const std::string what = "rank 2 (h-2): ncclCommInitRank returned 1 (unhandled cuda error)";
  EXPECT_EQ(what, ranks.heard(0));
  EXPECT_EQ(what, ranks.heard(1));
}

TEST(CommcheckRelay, AConnectionThatEndsWithoutDoneIsARankThatDied) {
  RelayedRanks ranks;
  ranks.relays[1]->finish();  // rank 1 passed: its end closes after DONE, which is no failure
  ranks.relays[2].reset();    // rank 2's process ends: its end closes without DONE
  const std::string what = "rank 2 (h-2) ended before the check finished (its process crashed or was killed)";
  EXPECT_EQ(what, ranks.heard(0));
}

TEST(CommcheckRelay, RankZerosFailureReachesEveryRankAndDoneIsQuiet) {
  RelayedRanks ranks;
  ranks.relays[0]->report_failure("ncclAllReduce returned a wrong sum");
  EXPECT_EQ("rank 0 (h-0): ncclAllReduce returned a wrong sum", ranks.heard(1));
  EXPECT_EQ("rank 0 (h-0): ncclAllReduce returned a wrong sum", ranks.heard(2));
}

// A rank that reported its own failure says only that: rank 0, told, ends at once (here: shuts its end down from its
// relay's callback, as its _exit would), and that close is not taken for news of another rank's failure.
TEST(CommcheckRelay, ARankThatReportedItsFailureHearsNothingMore) {
  int pair[2];
  ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair));
  std::promise<std::string> rank0_heard;
  std::atomic<int> rank1_heard{0};
  auto rank1 = std::make_unique<FailureRelay>(1, "rank 1 (h-1)", std::vector<Link>{{0, pair[1], "rank 0 (h-0)", ""}});
  auto rank0 = std::make_unique<FailureRelay>(0, "rank 0 (h-0)", std::vector<Link>{{1, pair[0], "rank 1 (h-1)", ""}});
  rank1->start([&](const std::string&) { rank1_heard.fetch_add(1); });
  rank0->start([&](const std::string& what) {
    shutdown(pair[0], SHUT_RDWR);
    rank0_heard.set_value(what);
  });
  rank1->report_failure("ncclAllReduce returned a wrong sum");
  auto heard = rank0_heard.get_future();
  ASSERT_EQ(std::future_status::ready, heard.wait_for(std::chrono::seconds(5)));
  EXPECT_EQ("rank 1 (h-1): ncclAllReduce returned a wrong sum", heard.get());
  rank0.reset();
  rank1.reset();
  EXPECT_EQ(0, rank1_heard.load());
}

TEST(CommcheckRendezvous, ARankThatNeverCameIsNamedToEveryRankByTheDeadline) {
  const int port = free_loopback_port();
  const std::vector<RendezvousResult> results =
      meet({request(0, 4, port, 2), request(1, 4, port, 2), request(3, 4, port, 2)});
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

// Two requests that both say rank 0 (as under a launcher that gave RANK=0 twice): whichever holds the port, both say
// so, naming both, and neither says rank 1 never joined nor blames another program for the port.
TEST(CommcheckRendezvous, TwoRankZerosAreNamedByBoth) {
  const int port = free_loopback_port();
  RendezvousRequest first = request(0, 2, port, 20);
  RendezvousRequest second = request(0, 2, port, 20);
  second.local_rank = 1;
  first.pid = 101;
  second.pid = 202;
  const std::vector<RendezvousResult> results = meet({first, second});
  ASSERT_EQ(results[0].error, results[1].error);
  const std::string& error = results[0].error;
  const std::string at = "127.0.0.1:" + std::to_string(port);
  EXPECT_TRUE(error == "two processes call themselves rank 0: h-0 (pid 101), which holds the rendezvous at " + at +
                           ", and h-1 (pid 202): check the launcher's RANK for every process" ||
              error == "two processes call themselves rank 0: h-1 (pid 202), which holds the rendezvous at " + at +
                           ", and h-0 (pid 101): check the launcher's RANK for every process")
      << error;
  for (const RendezvousResult& r : results) {
    EXPECT_FALSE(r.ok);
    EXPECT_TRUE(r.missing.empty());
    EXPECT_TRUE(r.links.empty());
  }
}

TEST(CommcheckRendezvous, NoRankZeroIsSaidWithinTheDeadline) {
  const RendezvousResult r = rendezvous(request(1, 2, free_loopback_port(), 1));
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
