// The coordinator's logic: compares every member's fingerprint of every call, tracks progress, and turns
// mismatches, desyncs and vanished ranks into verdicts; collects each rank's first inf/nan for the origin report and
// stops the job on one when a rank asks for it (TRAINSCOPE_ON_NONFINITE=abort). No sockets, no threads, no clock: the
// caller passes the time, so every rule is tested deterministically.
//
// Memory: per communicator one reference fingerprint and an arrival count per call that some members reached and
// others have not (a bounded window; what falls out of it is counted, not kept), plus a small fixed history per
// member. Completed calls are forgotten at once. Calls complete in order because each rank's fingerprints arrive
// in its own call order. Sends and receives wait for their other side in one bounded queue per (sender, receiver)
// pair (max_pending_point_to_point); a matched pair is forgotten at once.
//
// Desyncs of send/recv: the oldest unmatched send or receive of a pair is the call its rank is stuck in. Its other
// side not come desync_timeout_ns after it arrived here (or after the call before it was matched, if later) is a
// warning, repeated every further timeout; the peer that must make the other side having ended the communicator,
// exited or vanished is a certain desync. A pending call whose own rank is gone leaves nobody waiting: nothing is
// said about it.
//
// Thread safety: none; one thread (the server's) owns the core.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/fingerprint.h"
#include "collectors/exchange/wire_protocol.h"
#include "reports/exchange_reports.h"
#include "reports/frame_report.h"

namespace trainscope::exchange {

// A creation whose empty seats no live rank can take is reported this long after its first member came at most (the
// desync timeout if shorter): time for a restarted rank to say hello.
inline constexpr uint64_t kCreationGraceNs = 10'000'000'000ull;

struct CoordinatorOptions {
  VerdictAction on_mismatch = VerdictAction::kAbort;  // TRAINSCOPE_ON_MISMATCH
  VerdictAction on_desync = VerdictAction::kAbort;    // TRAINSCOPE_ON_DESYNC, for certain desyncs and vanished ranks
  uint64_t desync_timeout_ns = 300'000'000'000ull;    // TRAINSCOPE_DESYNC_TIMEOUT: alive-but-silent becomes a warning
                                                      // (a collective, or a send/recv whose other side has not come)
  uint64_t mismatch_grace_ns = 2'000'000'000ull;      // a mismatch or certain-desync report waits this long for
                                                      // members not yet there
  uint64_t scan_interval_ns = 100'000'000ull;         // timeouts are looked for at most this often
  size_t max_outstanding_calls = 1u << 16;            // per communicator: calls some members reached, others not
  size_t max_pending_point_to_point = 4096;           // per (sender, receiver) pair: unmatched sends or receives
  size_t max_comms = 1u << 16;
  int32_t max_comm_ranks = kMaxRanks;
  size_t max_stacks_per_rank = 4096;
  uint32_t max_mismatch_reports_per_comm = 4;      // later ones on the same communicator are counted, not reported
  uint64_t nonfinite_grace_ns = 1'000'000'000ull;  // a stop on inf/nan waits this long for other ranks' firsts
  // The coordinator's own host identity (host_identity.h): a vanished rank whose hello names another one has its
  // flight recorder on that host, and the report says so. Empty: not known, nothing said.
  std::string own_host_id;
};

// The origin of the first non-finite value, as the coordinator knew it when it stopped the job: every rank's first
// frame with inf/nan (reports::format_origin_text / origin_json render it).
struct NonfiniteOriginReport {
  std::vector<reports::FirstNonfinite> firsts;  // by rank
  int32_t requested_by = -1;                    // the first rank that asked for the stop
  uint64_t detected_ns = 0;                     // when that request arrived
};

struct CoreVerdict {
  VerdictKind kind = VerdictKind::kMismatch;
  VerdictAction action = VerdictAction::kAbort;
  uint64_t comm_id = 0;
  uint64_t seq = 0;
  std::variant<reports::MismatchReport, reports::DesyncReport, reports::VanishedReport, NonfiniteOriginReport> report;
};

struct CoreStats {
  uint64_t fingerprints = 0;          // accepted
  uint64_t invalid_fingerprints = 0;  // out-of-range ranks, zero communicator, inconsistent sizes
  uint64_t out_of_order = 0;          // a sequence number not above the member's previous one
  uint64_t untracked_calls = 0;       // calls dropped from a full window (not compared, not desync-checked)
  uint64_t untracked_comms = 0;       // fingerprints of communicators over max_comms
  uint64_t untracked_point_to_point = 0;
  uint64_t lost_counterparts = 0;  // send/recv whose other side was never seen (a rank dropped fingerprints)
  uint64_t suppressed_mismatches = 0;
  uint64_t verdicts = 0;
  uint64_t nonfinite_firsts = 0;   // ranks whose first inf/nan was reported
  uint64_t ignored_nonfinite = 0;  // later reports of a rank that had already reported its first
  size_t outstanding_calls = 0;    // summed over communicators, now
  size_t comms = 0;
};

class CoordinatorCore {
 public:
  explicit CoordinatorCore(CoordinatorOptions options = {});
  ~CoordinatorCore();
  CoordinatorCore(const CoordinatorCore&) = delete;
  CoordinatorCore& operator=(const CoordinatorCore&) = delete;

  // The token has been checked by the caller; it is not kept.
  void on_hello(const Hello& hello, uint64_t now_ns);
  // `rank` is the authenticated sender; fingerprints of one rank must come in the order the rank sent them.
  void on_fingerprints(int32_t rank, std::span<const Fingerprint> fingerprints, uint64_t dropped_total,
                       uint64_t now_ns);
  // Keeps at most max_stacks_per_rank stacks per rank (later new ids are dropped; a known id is replaced).
  void on_stack(const StackDefinition& stack);
  void on_heartbeat(const Heartbeat& heartbeat, uint64_t now_ns);
  // stopping_job: the rank stops the job on the user's request; from then on desyncs and vanished ranks are expected.
  void on_goodbye(int32_t rank, uint64_t now_ns, bool stopping_job = false);
  // clean: the connection closed after a goodbye (same as on_goodbye); otherwise the rank vanished. Its verdict
  // comes from the next tick(): ranks of one host that vanish before it are one verdict, which names the host lost
  // when every rank known on that host is among them.
  void on_disconnect(int32_t rank, bool clean, uint64_t now_ns);
  // The key of the host a rank said hello from (its host name and boot id; namespaced "hosts" of one machine differ
  // by name), empty when it said none.
  std::string host_key(int32_t rank) const;
  // A rank's first frame with inf/nan (`message.rank` is the authenticated sender). Only the first report of each
  // rank is kept. Its call's stack (message.stack_id) is attached once the rank defined it: a definition that comes
  // after the first changes nonfinite_generation(), so the origin report is rewritten with the stack. With stop_job,
  // tick() returns one kNonfinite abort verdict for the job once nonfinite_grace_ns has passed (sooner when every rank
  // of the world has reported), so the other ranks' firsts make it into the report.
  void on_nonfinite(const NonfiniteMessage& message, uint64_t now_ns);

  // Looks for timeouts (at most every scan_interval_ns) and returns every verdict reached since the last call.
  std::vector<CoreVerdict> tick(uint64_t now_ns);

  // The job manifest from the hellos: ranks, their GPUs and software, and the warnings below.
  nlohmann::json manifest() const;
  // Heterogeneous GPUs (models, memory sizes), differing NCCL / CUDA runtime / driver versions, kernels < 5.5.
  std::vector<std::string> manifest_warnings() const;
  // Every rank's first inf/nan so far, by rank; and a counter that moves whenever that set changes (0: none yet), so
  // the caller rewrites the origin report only when there is something new.
  std::vector<reports::FirstNonfinite> nonfinite_firsts() const;
  uint64_t nonfinite_generation() const { return nonfinite_generation_; }

  size_t hellos() const;
  int32_t world_size() const;  // largest world size a hello announced, -1 if none
  // The hello of global rank `rank` (its token cleared), or nullptr when it never said one.
  const Hello* hello_of(int32_t rank) const;
  // The stack a rank defined under `stack_id`; empty when it is 0 or not (yet) defined.
  CallStack stack_of(int32_t global_rank, uint32_t stack_id) const;

  CoreStats stats() const;

 private:
  struct Member;
  struct Entry;
  struct Comm;
  struct PairQueue;
  struct RankInfo;

  RankInfo& rank_info(int32_t rank);
  Comm* comm_for(const Fingerprint& f, int32_t global_rank);
  void on_collective(Comm& comm, const Fingerprint& f, uint64_t now_ns);
  void on_point_to_point(Comm& comm, const Fingerprint& f, uint64_t now_ns);
  void on_comm_ended(Comm& comm, const Fingerprint& f, uint64_t now_ns);
  void member_gone(int32_t rank, uint64_t now_ns);
  void check_certain_desync(Comm& comm, uint64_t now_ns);
  void check_certain_point_to_point(Comm& comm, int32_t gone_comm_rank, uint64_t now_ns);
  void check_certain_pair(Comm& comm, PairQueue& queue, uint64_t now_ns);
  void complete_front(Comm& comm, uint64_t now_ns);
  void drop_front(Comm& comm, uint64_t now_ns);
  void start_mismatch(Comm& comm, Entry& entry, uint64_t seq, std::vector<std::string> differences, uint64_t now_ns);
  void emit_mismatch(Comm& comm, Entry& entry);
  void scan_timeouts(uint64_t now_ns);
  void scan_creation(Comm& comm, uint64_t now_ns);
  bool rank_gone(int32_t rank) const;
  reports::DesyncReport creation_desync_report(const Comm& comm, const std::vector<int32_t>& empty_seats,
                                               const std::set<int32_t>& present, bool certain, uint64_t now_ns) const;
  void scan_collective_timeout(Comm& comm, uint64_t now_ns);
  void scan_pair_timeouts(Comm& comm, uint64_t now_ns);
  reports::DesyncReport desync_report(const Comm& comm, uint64_t seq, bool certain, uint64_t now_ns) const;
  reports::DesyncReport pair_desync_report(const Comm& comm, const PairQueue& queue, bool certain,
                                           uint64_t now_ns) const;
  reports::MissingRank missing_rank(const Comm& comm, size_t comm_rank) const;
  // What is known of global rank `rank`'s process (host, pid, gone); a state alive, or unknown for a rank that said
  // hello, becomes how its process went (vanished, exited).
  void describe_process(int32_t rank, reports::MissingRank* missing) const;
  bool has_live_comm(int32_t rank) const;
  void check_nonfinite_stop(uint64_t now_ns);
  void resolve_peer_ranks();
  // Queues a verdict for tick() and counts it.
  void emit_verdict(VerdictKind kind, VerdictAction action, uint64_t comm_id, uint64_t seq,
                    decltype(CoreVerdict::report) report);

  CoordinatorOptions options_;
  std::unordered_map<int32_t, std::unique_ptr<RankInfo>> ranks_;
  std::unordered_map<uint64_t, std::unique_ptr<Comm>> comms_;
  std::vector<CoreVerdict> ready_;
  std::vector<std::pair<uint64_t, uint64_t>> mismatches_waiting_;  // (comm id, seq) in their grace period
  std::vector<uint64_t> desyncs_waiting_;                          // comm ids whose certain desync waits
  // Vanished ranks whose verdict the next tick() gives, with the action it takes (in the order they vanished).
  std::vector<std::pair<reports::VanishedReport, VerdictAction>> vanished_waiting_;
  void emit_vanished(uint64_t now_ns);
  bool job_stopping_ = false;  // an abort verdict went out: the ranks' exits are expected, not vanishings
  std::map<int32_t, reports::FirstNonfinite> nonfinite_firsts_;  // by global rank, the first report only
  std::map<int32_t, uint32_t> nonfinite_stack_ids_;  // the stack id each first named, while its stack is not known
  uint64_t nonfinite_generation_ = 0;
  size_t unresolved_peers_ = 0;  // send/recv firsts whose peer's global rank is not known yet
  bool nonfinite_stop_requested_ = false;
  int32_t nonfinite_stop_rank_ = -1;
  uint64_t nonfinite_stop_since_ns_ = 0;
  bool nonfinite_stop_sent_ = false;  // one inf/nan stop per job
  uint64_t next_scan_ns_ = 0;
  CoreStats stats_;
};

// "0-3,5,7-8" from a sorted list of ranks.
std::string rank_ranges(const std::vector<int32_t>& sorted_ranks);

// True when `release` ("5.4.0-150-generic") names a Linux kernel older than major.minor.
bool kernel_older_than(const std::string& release, int major, int minor);

}  // namespace trainscope::exchange
