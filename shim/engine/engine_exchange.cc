// The engine's side of the out-of-band exchange (see engine_exchange.h).
#include "shim/engine/engine_exchange.h"

#include <dlfcn.h>
#include <link.h>
#include <signal.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <unordered_set>
#include <vector>

#include "base/flight_recorder_reader.h"
#include "base/printable.h"
#include "base/run_files.h"
#include "collectors/exchange/coordinator_server.h"
#include "collectors/exchange/exchange_client.h"
#include "collectors/exchange/host_identity.h"
#include "collectors/exchange/job_secret.h"
#include "kernels/cuda_devices.h"
#include "reports/recorder_report.h"
#include "reports/unwritten_report.h"
#include "shim/engine/engine_frames.h"
#include "shim/engine/engine_ring.h"
#include "shim/engine/engine_stacks.h"
#include "shim/engine/engine_threads.h"
#include "shim/engine/shared/engine_logging.h"

namespace trainscope::engine {

namespace {

using exchange::EventKind;
using exchange::Fingerprint;
using recorder::CommEntry;
using recorder::FileHeader;
using recorder::Op;
using recorder::Record;

// Rank 0 hosts the coordinator: at its exit it waits this long at most for the other ranks to say goodbye.
constexpr auto kHostLingerLimit = std::chrono::seconds(5);

bool exchanged(Op op) { return recorder::is_collective(op) || recorder::is_point_to_point(op); }

Fingerprint fingerprint_of(const Record& r, uint64_t index, EventKind kind) {
  Fingerprint f{};
  f.comm_id = r.comm_id;
  f.seq = r.seq;
  f.count = r.count;
  f.record_index = index;
  f.start_ns = r.start_ns;
  f.caller = r.caller;
  f.aux = r.aux;
  f.comm_rank = r.rank;
  f.nranks = r.nranks;
  f.peer = r.peer;
  f.redop = r.redop;
  f.result = kind == EventKind::kReturned ? r.result : recorder::kResultPending;
  f.op = r.op;
  f.dtype = r.dtype;
  f.kind = static_cast<uint8_t>(kind);
  f.flags = r.flags;
  return f;
}

Fingerprint fingerprint_of(const CommEntry& c, EventKind kind, Op op, uint64_t when_ns) {
  Fingerprint f{};
  f.comm_id = c.id;
  f.start_ns = when_ns;
  f.aux = c.parent_id;
  f.comm_rank = c.rank;
  f.nranks = c.nranks;
  f.peer = c.color;
  f.redop = -1;
  f.result = recorder::kResultPending;
  f.op = static_cast<uint16_t>(op);
  f.dtype = -1;
  f.kind = static_cast<uint8_t>(kind);
  return f;
}

Op ending_op(uint16_t state) {
  switch (static_cast<recorder::CommState>(state)) {
    case recorder::CommState::kFinalized:
      return Op::kCommFinalize;
    case recorder::CommState::kDestroyed:
      return Op::kCommDestroy;
    case recorder::CommState::kAborted:
      return Op::kCommAbort;
    case recorder::CommState::kRevoked:
      return Op::kCommRevoke;
    case recorder::CommState::kLive:
      break;
  }
  return Op::kNone;
}

uint64_t wall_clock_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

recorder::StopReason stop_reason_of(exchange::VerdictKind kind) {
  switch (kind) {
    case exchange::VerdictKind::kMismatch:
      return recorder::StopReason::kMismatch;
    case exchange::VerdictKind::kDesync:
      return recorder::StopReason::kDesync;
    case exchange::VerdictKind::kVanished:
      return recorder::StopReason::kVanishedRank;
    case exchange::VerdictKind::kNonfinite:
      return recorder::StopReason::kNonfinite;
  }
  return recorder::StopReason::kNone;
}

exchange::LogSink log_sink() {
  return [](LogLevel level, const std::string& message) {
    // The coordinator hosted here logs each verdict with its report; this rank's own verdict handler logs the
    // report again, so keep only the coordinator's first line.
    const size_t newline = message.find('\n');
    log(level, newline == std::string::npos ? message.c_str() : message.substr(0, newline).c_str());
  };
}

// GPU, driver and versions for the hello, through the driver API when a driver is there (never cudart).
void describe_gpu(int32_t local_rank, exchange::Hello* hello) {
  const stats::CudaDriver driver = stats::query_cuda_driver("libcuda.so.1", local_rank >= 0 ? local_rank : 0);
  if (driver.version > 0)
    hello->driver_version = std::to_string(driver.version / 1000) + "." + std::to_string((driver.version % 1000) / 10);
  if (driver.devices.empty()) return;
  const stats::CudaDevice& gpu = driver.devices.front();
  hello->gpu_name = gpu.name;
  hello->gpu_memory_bytes = gpu.memory_bytes;
  hello->compute_capability_major = gpu.major;
  hello->compute_capability_minor = gpu.minor;
  hello->gpu_bus_id = gpu.bus_id;
}

// The CUDA runtime the job loaded, if it loaded one (we never load it ourselves): its cudaRuntimeGetVersion.
std::string cuda_runtime_version() {
  std::string path;
  dl_iterate_phdr(
      [](struct dl_phdr_info* info, size_t, void* data) {
        const char* name = info->dlpi_name != nullptr ? std::strrchr(info->dlpi_name, '/') : nullptr;
        if (name != nullptr && std::strncmp(name + 1, "libcudart.so", 12) == 0) {
          *static_cast<std::string*>(data) = info->dlpi_name;
          return 1;
        }
        return 0;
      },
      &path);
  if (path.empty()) return "";
  void* cudart = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (cudart == nullptr) return "";
  using VersionFn = int (*)(int*);
  auto get_version = reinterpret_cast<VersionFn>(dlsym(cudart, "cudaRuntimeGetVersion"));
  int version = 0;
  std::string text;
  if (get_version != nullptr && get_version(&version) == 0 && version > 0)
    text = std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
  dlclose(cudart);
  return text;
}

std::string nccl_version_text(int32_t code) {
  if (code <= 0) return "";
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? (code / 100) % 100 : (code / 100) % 10;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

class Exchange {
 public:
  explicit Exchange(const ExchangeSetup& setup, CoordinatorPlan plan)
      : config_(*setup.config), setup_(setup), plan_(std::move(plan)) {
    setup_.config = &config_;
  }

  bool start() {
    if (plan_.host_here) {
      exchange::CoordinatorServerOptions options;
      options.bind_address = plan_.bind_address;
      options.token = plan_.token;
      options.run_dir = setup_.run_dir;
      options.core.on_mismatch = config_.on_mismatch == VerdictPolicy::kAbort ? exchange::VerdictAction::kAbort
                                                                              : exchange::VerdictAction::kWarn;
      options.core.on_desync =
          config_.on_desync == VerdictPolicy::kAbort ? exchange::VerdictAction::kAbort : exchange::VerdictAction::kWarn;
      options.core.desync_timeout_ns = uint64_t{config_.desync_timeout_seconds} * 1000000000ull;
      options.expected_ranks = setup_.world;  // bounds the connections it holds (coordinator_server.h)
      options.log = log_sink();
      // A report the coordinator could not write (a full disk): this process's recorder says so, and why, where the
      // run summary finds it even when no file can be written any more. The recorder keeps one such note: not the
      // manifest's, whose absence the summary shows anyway, so that a verdict's report is the one named.
      options.on_unwritten = [recorder = setup_.recorder](const reports::UnwrittenReport& unwritten) {
        if (recorder != nullptr && unwritten.report != run_files::kManifestFile)
          recorder::record_unwritten_report(recorder, unwritten.report.c_str(), unwritten.cause.c_str());
      };
      server_ = std::make_unique<exchange::CoordinatorServer>(options);
      std::string error;
      bool started = server_->start(&error);
      if (!started && !plan_.fallback_bind_address.empty()) {
        // MASTER_ADDR names this host in a way it cannot bind (a load balancer, a NAT address): listen everywhere.
        // Only the job's own ranks can connect anyway (job_secret.h).
        log(LogLevel::kWarn,
            ("cannot listen at MASTER_ADDR's " + reports::printable(plan_.bind_address) + " (" + error +
             "): the coordinator listens on every interface instead, still admitting only this "
             "job's ranks")
                .c_str());
        options.bind_address = plan_.fallback_bind_address;
        server_ = std::make_unique<exchange::CoordinatorServer>(options);
        error.clear();
        started = server_->start(&error);
      }
      if (!started) {
        log(LogLevel::kWarn, ("cannot host the coordinator at " + reports::printable(plan_.bind_address) + " (" +
                              error + "): this job runs without the cross-rank checks; set TRAINSCOPE_COORDINATOR")
                                 .c_str());
        host_failure_ = "cannot host the coordinator at " + plan_.bind_address + " (" + error + ")";
        recorder::record_exchange_state(setup_.recorder, recorder::ExchangeState::kDidNotRun, host_failure_.c_str());
        server_.reset();
      } else {
        log(LogLevel::kInfo, ("coordinator listening at " + reports::printable(server_->endpoint())).c_str());
      }
    }
    exchange::ExchangeClientOptions options;
    options.endpoint = plan_.endpoint;
    options.hello.token = plan_.token;
    options.hello.global_rank = setup_.launcher_rank;
    options.hello.world_size = setup_.world;
    options.hello.launcher_rank = setup_.launcher_rank;
    options.hello.pid = setup_.pid;
    options.hello.host = setup_.host;
    options.hello.nccl_version = nccl_version_text(setup_.nccl_version);
    options.hello.flight_recorder_path = setup_.recorder_path;
    options.hello.host_id = exchange::host_identity();
    struct utsname names;
    if (uname(&names) == 0) options.hello.kernel_release = names.release;
    describe_gpu(setup_.local_rank, &options.hello);
    options.hello.cuda_runtime_version = cuda_runtime_version();
    options.log = log_sink();
    options.on_verdict = [this](const exchange::Verdict& verdict) { on_verdict(verdict); };
    options.inside_calls = [this] { return inside_calls(); };
    // The recorder is read on the client's thread, just before it sends (no thread of its own: one wakeup less
    // per interval).
    options.before_send = [this] { pump(); };
    client_ = std::make_unique<exchange::ExchangeClient>(std::move(options));
    if (host_failure_.empty())
      recorder::record_exchange_state(setup_.recorder, recorder::ExchangeState::kWaiting,
                                      ("not yet accepted by the coordinator at " + plan_.endpoint).c_str());
    client_->start();
    return true;
  }

  // Normal exit: what is left in the recorder goes out, then the goodbye.
  void stop(bool stopping_job) {
    {
      // The client's thread reads the recorder no more: from here on, this thread does.
      std::lock_guard<std::mutex> lock(pump_mutex_);
      pump_stopped_ = true;
      drain();
    }
    // Records the ring overwrote before this thread read them never reached the coordinator: say how many.
    if (cursor_.dropped() > 0)
      log(LogLevel::kWarn, ("the exchange missed " + std::to_string(cursor_.dropped()) +
                            " calls the flight recorder overwrote before they were read; raise "
                            "TRAINSCOPE_RECORDER_RECORDS")
                               .c_str());
    client_->stop(stopping_job);
    // After the stop, which delivers what was queued: a short job's rank may be accepted only then, and its calls
    // were compared all the same.
    note_if_welcomed(/*reached_is_enough=*/true);
    if (!welcomed_) {
      const exchange::ExchangeClientStats stats = client_->stats();
      const std::string why =
          !host_failure_.empty() ? host_failure_
          : stats.rejected       ? "the coordinator at " + plan_.endpoint + " refused this job's token"
          : stats.impostors > 0
              ? "the listener at " + plan_.endpoint + " is not this job's coordinator (another program holds the port?)"
              : "never reached the coordinator at " + plan_.endpoint;
      recorder::record_exchange_state(setup_.recorder, recorder::ExchangeState::kDidNotRun, why.c_str());
    }
    if (server_) {
      // The coordinator lives in this process: give the other ranks time to finish and say goodbye (or to be
      // judged, if they are stuck waiting for this rank), but never hold a healthy job up for long.
      (void)wait_for_other_ranks(/*own_connections=*/0, /*until_abort=*/true);
      server_->stop();
    }
  }

  // Forked child: the threads are not here, the sockets are the parent's. Leak everything.
  void abandon() {
    (void)client_.release();
    (void)server_.release();
  }

  // This rank's first inf/nan, for the coordinator (any thread; the client's thread sends it). Its call's stack goes
  // out first, so the coordinator can show it in the origin.
  void report_nonfinite(const reports::FirstNonfinite& first, uint32_t stack_id, bool stop_job) {
    if (stack_id != 0) define_stack(stack_id);
    client_->report_nonfinite(first, stop_job, stack_id);
  }

  // Sends a site's stack to the coordinator (the client sends each id once, before anything queued after it).
  void define_stack(uint32_t stack_id) { client_->define_stack(stack_id, call_stack(stack_id)); }

 private:
  // Without a coordinator (none answers: under plain LD_PRELOAD rank 0 hosts it, and a rank 0 that ended before its
  // communicator never did), nobody can tell this rank, waiting in a communicator's creation, that a member will
  // never come: after the desync timeout it says so itself, once, in its log, with what the run directory knows of
  // the other ranks' processes.
  void warn_if_waiting_alone() {
    if (creation_warned_ || creating_.empty() || welcomed_) return;
    const CreatingCall& call = creating_.front();
    const uint64_t now = wall_clock_ns();
    const uint64_t timeout_ns = uint64_t{config_.desync_timeout_seconds} * 1000000000ull;
    if (now < call.start_ns || now - call.start_ns < timeout_ns) return;
    creation_warned_ = true;
    std::string message = "waiting " + std::to_string((now - call.start_ns) / 1000000000ull) + " s in " +
                          recorder::op_name(static_cast<Op>(call.op)) + " for communicator " +
                          recorder::short_hex_id(call.comm_id) + " (rank " + std::to_string(call.rank) + " of " +
                          std::to_string(call.nranks) +
                          "): some of its other ranks have not joined, and no coordinator "
                          "answers at " +
                          plan_.endpoint + " to say which";
    const std::string others = other_ranks_seen_ending();
    message += others.empty() ? "; no other rank's process is seen to have ended in " + setup_.run_dir
                              : "; in " + setup_.run_dir + ": " + others;
    log(LogLevel::kWarn, message.c_str());
    flush_logs();  // on disk before the launcher's deadline kills this rank
  }

  // "rank 0 (pid 812) exited with status 5, rank 2 (pid 815) is gone without a clean exit": what the recorders of
  // this run directory say of the other launcher ranks' processes that have ended. Headers only.
  std::string other_ranks_seen_ending() const {
    std::string text;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(setup_.run_dir, ec)) {
      if (entry.path().extension() != run_files::kRecorderExtension || entry.path().string() == setup_.recorder_path)
        continue;
      recorder::RecorderFile file;
      std::string error;
      recorder::ReadLimits limits;
      limits.max_records = 0;
      limits.follow_links = false;
      if (!recorder::read_recorder_file(entry.path().string(), &file, &error, limits)) continue;
      const FileHeader& h = file.header;
      if (h.launcher_rank < 0 || h.launcher_rank == setup_.launcher_rank) continue;
      std::string how;
      if (h.state == static_cast<uint32_t>(recorder::ProcessState::kExited)) {
        how = (h.end_flags & recorder::kEndExitStatus) != 0 ? "exited with status " + std::to_string(h.exit_status)
                                                            : "exited";
      } else if (std::string(h.host) == setup_.host && kill(h.pid, 0) != 0 && errno == ESRCH) {
        how = "is gone without a clean exit (crashed or killed)";
      } else {
        continue;
      }
      text += (text.empty() ? "" : ", ") + std::string("rank ") + std::to_string(h.launcher_rank) + " (pid " +
              std::to_string(h.pid) + ") " + how;
    }
    return text;
  }

  // The first time the coordinator accepts this rank (or, at the stop, once a handshake with it succeeded: what was
  // queued then reached it), the recorder says its calls are compared.
  void note_if_welcomed(bool reached_is_enough = false) {
    if (welcomed_) return;
    const exchange::ExchangeClientStats stats = client_->stats();
    if (!stats.welcomed && !(reached_is_enough && stats.reached && !stats.rejected)) return;
    welcomed_ = true;
    recorder::record_exchange_state(setup_.recorder, recorder::ExchangeState::kRan, "");
  }

  // On the client's thread, before it sends (ExchangeClientOptions::before_send), until stop() takes over.
  void pump() {
    std::lock_guard<std::mutex> lock(pump_mutex_);
    if (pump_stopped_) return;
    note_if_welcomed();
    drain();
    warn_if_waiting_alone();
  }

  // Reads whatever the job's threads recorded since the last pass. Order matters to the coordinator: a
  // communicator's creation goes before its calls, and its end after every call recorded before the end. Under
  // pump_mutex_.
  void drain() {
    const FileHeader* header = setup_.recorder;
    if (header == nullptr) return;
    const std::vector<uint16_t> states = discover_comms(header);
    const uint64_t next = __atomic_load_n(&header->next, __ATOMIC_ACQUIRE);
    cursor_.poll_until(header, next, [this](uint64_t index, const Record& r) {
      const Op op = static_cast<Op>(r.op);
      if (recorder::is_creation_from_unique_ids(op) && r.comm_id != 0 && r.result == recorder::kResultPending) {
        // Still inside: the coordinator learns that this rank waits for the others (a creation that returned is
        // told by its communicator's entry instead).
        Fingerprint f = fingerprint_of(r, index, EventKind::kCommCreating);
        f.stack_id = has_stack(r.site) ? r.site : 0;
        if (f.stack_id != 0 && defined_stacks_.insert(f.stack_id).second) define_stack(f.stack_id);
        client_->push(f);
        creating_.push_back({index, r.comm_id, r.seq, r.start_ns, r.op, r.rank, r.nranks});
        return;
      }
      if (!exchanged(op) || r.comm_id == 0) return;
      Fingerprint f = fingerprint_of(r, index, EventKind::kCall);
      f.stack_id = has_stack(r.site) ? r.site : 0;
      // The coordinator learns a stack once, before the first fingerprint that uses it; it is symbolised
      // here, on this thread, never on the job's.
      if (f.stack_id != 0 && defined_stacks_.insert(f.stack_id).second) define_stack(f.stack_id);
      client_->push(f);
      if (r.result == recorder::kResultPending) {
        std::lock_guard<std::mutex> lock(pending_mutex_);
        pending_.push_back({index, r.comm_id, r.seq, r.start_ns, r.op});
      }
    });
    // The states were read before `next`: every call recorded before an end is now sent, unless a slot was still
    // being written, in which case the end waits for the next pass.
    if (cursor_.position() == next) push_endings(header, states);
    // Calls that were still running on the last pass: tell the coordinator those that returned.
    std::lock_guard<std::mutex> lock(pending_mutex_);
    size_t kept = 0;
    for (const PendingCall& call : pending_) {
      const int32_t result = live_result(header, call.index);
      if (result == recorder::kResultPending) {
        pending_[kept++] = call;
      } else if (result >= 0) {
        Record r{};
        if (read_live_record(header, call.index, &r))
          client_->push(fingerprint_of(r, call.index, EventKind::kReturned));
      }
    }
    pending_.resize(kept);
    // Creations that were still running: one that returned (a failure too) no longer waits for anybody.
    kept = 0;
    for (const CreatingCall& call : creating_) {
      const int32_t result = live_result(header, call.index);
      if (result == recorder::kResultPending) {
        creating_[kept++] = call;
        continue;
      }
      Record r{};
      if (result >= 0 && read_live_record(header, call.index, &r))
        client_->push(fingerprint_of(r, call.index, EventKind::kReturned));
    }
    creating_.resize(kept);
  }

  // Announces communicators created since the last pass; returns every known communicator's current state.
  std::vector<uint16_t> discover_comms(const FileHeader* header) {
    const uint32_t used = std::min(__atomic_load_n(&header->comms_used, __ATOMIC_ACQUIRE), header->max_comms);
    const CommEntry* comms = comms_of(header);
    for (uint32_t i = static_cast<uint32_t>(comm_entries_.size()); i < used; ++i) {
      if (__atomic_load_n(&comms[i].commit, __ATOMIC_ACQUIRE) != uint64_t{i} + 1) break;  // being written
      CommEntry entry{};
      std::memcpy(&entry, &comms[i], offsetof(CommEntry, ended_ns));
      entry.rank = comms[i].rank;
      entry.nranks = comms[i].nranks;
      entry.color = comms[i].color;
      entry.origin = comms[i].origin;
      comm_entries_.push_back(entry);
      comm_states_.push_back(static_cast<uint16_t>(recorder::CommState::kLive));
      client_->push(fingerprint_of(entry, EventKind::kCommCreated, static_cast<Op>(entry.origin), entry.created_ns));
    }
    std::vector<uint16_t> states(comm_entries_.size());
    for (size_t i = 0; i < states.size(); ++i) states[i] = __atomic_load_n(&comms[i].state, __ATOMIC_ACQUIRE);
    return states;
  }

  void push_endings(const FileHeader* header, const std::vector<uint16_t>& states) {
    const CommEntry* comms = comms_of(header);
    for (size_t i = 0; i < states.size(); ++i) {
      if (states[i] == comm_states_[i] || ending_op(states[i]) == Op::kNone) continue;
      comm_states_[i] = states[i];
      const uint64_t ended = __atomic_load_n(&comms[i].ended_ns, __ATOMIC_RELAXED);
      client_->push(fingerprint_of(comm_entries_[i], EventKind::kCommEnded, ending_op(states[i]), ended));
    }
  }

  std::vector<exchange::HeartbeatCall> inside_calls() {
    std::lock_guard<std::mutex> lock(pending_mutex_);
    std::vector<exchange::HeartbeatCall> calls;
    for (const PendingCall& call : pending_) calls.push_back({call.comm_id, call.seq, call.start_ns, call.op});
    return calls;
  }

  void on_verdict(const exchange::Verdict& verdict) {
    const bool abort = verdict.action == exchange::VerdictAction::kAbort;
    const std::string where = verdict.text_path.empty() ? std::string() : " (report: " + verdict.text_path + ")";
    log(abort ? LogLevel::kError : LogLevel::kWarn,
        (std::string(exchange::verdict_kind_name(verdict.kind)) + where + "\n" + verdict.text).c_str());
    if (!abort) return;
    if (aborting_.exchange(true)) return;
    frames_before_process_end();  // this process ends below: its idle-class thread must not hold the end up
    // A stop on inf/nan is the user's request (TRAINSCOPE_ON_NONFINITE=abort), not a broken job: its own status.
    const bool nonfinite = verdict.kind == exchange::VerdictKind::kNonfinite;
    const int status = nonfinite ? kStopExitCode : kVerdictExitCode;
    if (nonfinite) {
      log(LogLevel::kError, (std::string("stopping this rank (exit status ") + std::to_string(kStopExitCode) +
                             "): inf/nan under TRAINSCOPE_ON_NONFINITE=abort; set TRAINSCOPE_ON_NONFINITE=report to "
                             "report and continue instead")
                                .c_str());
    } else {
      log(LogLevel::kError, (std::string("stopping this rank (exit status ") + std::to_string(kVerdictExitCode) +
                             "): the job cannot go on; set TRAINSCOPE_ON_" +
                             (verdict.kind == exchange::VerdictKind::kMismatch ? "MISMATCH" : "DESYNC") +
                             "=warn to report and continue instead")
                                .c_str());
    }
    // Said in the recorder before anything else can go wrong: the summary tells this stop from a crash, names the
    // verdict, and knows when the coordinator could not write its report.
    recorder::record_stop(setup_.recorder, stop_reason_of(verdict.kind), status, verdict.comm_id, verdict.seq,
                          /*has_batch=*/false, 0, /*report_missing=*/verdict.text_path.empty(), wall_clock_ns());
    flush_logs();
    // The rank hosting the coordinator stays until the others, told of the verdict, have gone (bounded): if it
    // left first, a rank that had not received the verdict yet would wait alone forever. A rank that has not said
    // hello yet is waited for too: its hello gets the verdict.
    if (server_) {
      const OtherRanks left = wait_for_other_ranks(/*own_connections=*/1, /*until_abort=*/false);
      if (left.connected > 0 || left.never_came > 0) {
        log(LogLevel::kWarn,
            ("leaving " + std::to_string(left.connected) + " connected rank(s) and " + std::to_string(left.never_came) +
             " never connected that did not stop within " + std::to_string(kHostLingerLimit.count()) +
             " s of the verdict: the coordinator goes with this rank")
                .c_str());
      } else {
        log(LogLevel::kDebug, "the other ranks have gone: the coordinator stops");
      }
      flush_logs();
      server_->stop();
    }
    _exit(status);
  }

  // The ranks the coordinator hosted here still waits for: connected (besides this rank), or never said hello.
  struct OtherRanks {
    uint64_t connected = 0;
    uint64_t never_came = 0;
  };
  // Before the host stops its coordinator: waits, at most kHostLingerLimit, while other ranks are connected or have
  // not said hello yet (a rank of a short job may not have come yet; a rank that comes after a verdict gets it with
  // its welcome). `own_connections`: this rank's own client, while it is still connected. `until_abort`: a verdict
  // arriving meanwhile ends the wait (its handler waits in its turn). Returns who was still there.
  OtherRanks wait_for_other_ranks(uint64_t own_connections, bool until_abort) {
    const auto deadline = std::chrono::steady_clock::now() + kHostLingerLimit;
    const uint64_t world = setup_.world > 0 ? static_cast<uint64_t>(setup_.world) : 0;
    const auto others = [&] {
      const exchange::CoordinatorServerStats stats = server_->stats();
      return OtherRanks{stats.connections > own_connections ? stats.connections - own_connections : 0,
                        world > stats.hellos ? world - stats.hellos : 0};
    };
    OtherRanks left = others();
    while ((left.connected > 0 || left.never_came > 0) && std::chrono::steady_clock::now() < deadline &&
           !(until_abort && aborting_.load())) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      left = others();
    }
    return left;
  }

  struct PendingCall {
    uint64_t index;
    uint64_t comm_id;
    uint64_t seq;
    uint64_t start_ns;
    uint16_t op;
  };
  struct CreatingCall {
    uint64_t index;
    uint64_t comm_id;
    uint64_t seq;
    uint64_t start_ns;
    uint16_t op;
    int32_t rank;
    int32_t nranks;
  };

  Config config_;
  ExchangeSetup setup_;
  CoordinatorPlan plan_;
  std::unique_ptr<exchange::CoordinatorServer> server_;
  std::unique_ptr<exchange::ExchangeClient> client_;
  // The client's thread pumps the recorder into the exchange until stop() sets pump_stopped_ and drains the rest:
  // what pump_mutex_ guards (the cursor, the stacks defined, the creations, welcomed_) is theirs in turn.
  std::mutex pump_mutex_;
  bool pump_stopped_ = false;
  RingCursor cursor_;
  std::unordered_set<uint32_t> defined_stacks_;
  std::vector<uint16_t> comm_states_;
  std::vector<CommEntry> comm_entries_;
  std::mutex pending_mutex_;  // the pump writes, the client's heartbeat reads
  std::vector<PendingCall> pending_;
  std::atomic<bool> aborting_{false};
  std::string host_failure_;  // why this rank could not host the coordinator ("" when it hosts it, or need not)
  bool welcomed_ = false;     // the pump's (and, once it has stopped, stop()'s)
  std::vector<CreatingCall> creating_;  // communicator creations still running when drained (the pump's)
  bool creation_warned_ = false;
};

// Leaked on purpose: a verdict may arrive while the process exits, and a forked child must never run its
// destructor.
Exchange* g_exchange = nullptr;
// Set once g_exchange is started, cleared when it stops or is abandoned: other threads (the engine's inf/nan
// reporting) read this, never g_exchange's assignment itself.
std::atomic<bool> g_exchange_running{false};

bool valid_port(const char* text, int* port) {
  if (text == nullptr || *text == '\0') return false;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value <= 0 || value > 65535) return false;
  *port = static_cast<int>(value);
  return true;
}

}  // namespace

CoordinatorPlan plan_coordinator(const Config& config, int32_t launcher_rank, int32_t world, const char* master_addr,
                                 const char* master_port) {
  CoordinatorPlan plan;
  // Without a token of its own the job's secret comes from the job key (job_secret.h), once it is known.
  if (config.token[0] != '\0') plan.token = config.token;
  switch (config.coordinator_mode) {
    case CoordinatorMode::kOff:
      plan.why_disabled = "TRAINSCOPE_COORDINATOR=off";
      return plan;
    case CoordinatorMode::kAddress:
      plan.enabled = true;
      plan.endpoint = "tcp://" + std::string(config.coordinator_host) + ":" + std::to_string(config.coordinator_port);
      return plan;
    case CoordinatorMode::kAuto:
      break;
  }
  int port = 0;
  if (world <= 1 || launcher_rank < 0) {
    plan.why_disabled = "a single process (no launcher rank and world size)";
    return plan;
  }
  if (master_addr == nullptr || *master_addr == '\0' || !valid_port(master_port, &port)) {
    plan.why_disabled = "cross-rank checks are off for this " + std::to_string(world) +
                        "-rank job, so a mismatch hangs unreported: there is no MASTER_ADDR/MASTER_PORT to find the "
                        "coordinator at; set TRAINSCOPE_COORDINATOR=HOST:PORT (a `trainscope coordinator`), or run the "
                        "job with `trainscope run`";
    plan.worth_a_warning = true;
    return plan;
  }
  const int coordinator_port =
      port + kCoordinatorPortOffset <= 65535 ? port + kCoordinatorPortOffset : port - kCoordinatorPortOffset;
  const std::string host = std::strchr(master_addr, ':') != nullptr && master_addr[0] != '['
                               ? "[" + std::string(master_addr) + "]"  // a bare IPv6 address
                               : std::string(master_addr);
  plan.enabled = true;
  plan.endpoint = "tcp://" + host + ":" + std::to_string(coordinator_port);
  if (launcher_rank == 0) {
    plan.host_here = true;
    // Where the ranks reach it, and nowhere else: MASTER_ADDR is this host's address the job gave its ranks.
    plan.bind_address = plan.endpoint;
    plan.fallback_bind_address = "tcp://*:" + std::to_string(coordinator_port);
  }
  return plan;
}

namespace {

// The exchange waits for the job key when the job has no TRAINSCOPE_TOKEN (job_key.h): its setup and plan until then.
// Leaked, like g_exchange: the shim stops the engine from its ELF destructor, after exit() has run the destructors of
// the engine's static objects, so a static unique_ptr here would be freed twice (issue 19: a process that made an NCCL
// call but no world communicator died at exit with "double free" instead of its own status).
struct PendingExchange {
  std::mutex mutex;
  std::unique_ptr<ExchangeSetup> setup;
  CoordinatorPlan plan;
};
PendingExchange* const g_pending = new PendingExchange;

void start_with_plan(const ExchangeSetup& setup, const CoordinatorPlan& plan) {
  try {
    auto exchange = std::make_unique<Exchange>(setup, plan);
    exchange->start();
    g_exchange = exchange.release();
    g_exchange_running.store(true, std::memory_order_release);
  } catch (const std::exception& e) {
    log(LogLevel::kWarn, (std::string("cross-rank checks off: ") + e.what()).c_str());
  }
}

}  // namespace

void start_exchange(const ExchangeSetup& setup) {
  if (setup.config == nullptr || g_exchange != nullptr) return;
  if (setup.forked_child) {
    // Its environment says it is its parent's rank: joining would claim the parent's seat (and rank 0's child would
    // try to host a second coordinator on its port). The parent's warnings about the exchange were said already.
    log(LogLevel::kDebug, "cross-rank checks off in this forked child: its parent is the job's rank");
    recorder::record_exchange_state(setup.recorder, recorder::ExchangeState::kNotNeeded,
                                    "a forked child: its parent is the job's rank in the cross-rank checks");
    return;
  }
  const CoordinatorPlan plan = plan_coordinator(*setup.config, setup.launcher_rank, setup.world,
                                                std::getenv("MASTER_ADDR"), std::getenv("MASTER_PORT"));
  if (!plan.enabled) {
    log(plan.worth_a_warning ? LogLevel::kWarn : LogLevel::kDebug,
        (plan.worth_a_warning ? plan.why_disabled : "cross-rank checks off: " + plan.why_disabled).c_str());
    recorder::record_exchange_state(
        setup.recorder,
        plan.worth_a_warning ? recorder::ExchangeState::kDidNotRun : recorder::ExchangeState::kNotNeeded,
        plan.worth_a_warning ? "no MASTER_ADDR/MASTER_PORT to find the coordinator at, and no TRAINSCOPE_COORDINATOR"
                             : plan.why_disabled.c_str());
    return;
  }
  if (setup.launcher_rank < 0 || setup.world <= 0) {
    log(LogLevel::kWarn, ("cross-rank checks off: the coordinator at " + reports::printable(plan.endpoint) +
                          " needs each rank's launcher rank and world size (RANK/WORLD_SIZE, OMPI_COMM_WORLD_*, "
                          "PMI_*, SLURM_PROCID/SLURM_NTASKS)")
                             .c_str());
    recorder::record_exchange_state(setup.recorder, recorder::ExchangeState::kDidNotRun,
                                    "no launcher rank and world size in the environment to join the coordinator with");
    return;
  }
  if (setup.recorder == nullptr) {
    // Why (no run directory, no recorder) is the shim's one warning; this only adds what it means here.
    log(LogLevel::kDebug, "cross-rank checks off: this process has no flight recorder to read its calls from");
    return;
  }
  if (plan.token.empty()) {
    std::lock_guard<std::mutex> lock(g_pending->mutex);
    g_pending->setup = std::make_unique<ExchangeSetup>(setup);
    g_pending->plan = plan;
    recorder::record_exchange_state(setup.recorder, recorder::ExchangeState::kWaiting,
                                    ("waiting for a communicator that spans all " + std::to_string(setup.world) +
                                     " ranks (the job's secret comes from its unique id)")
                                        .c_str());
    log(LogLevel::kDebug,
        "cross-rank checks start with the first communicator that spans every rank (the job's "
        "secret comes from its unique id)");
    return;
  }
  start_with_plan(setup, plan);
}

void job_key_known(const JobKeyArgs& args) {
  if (args.moved != 0) {
    set_frames_run_dir(args.run_dir != nullptr ? args.run_dir : "");
    log(LogLevel::kInfo,
        ("recording to " + reports::printable(args.run_dir != nullptr ? args.run_dir : "") + " (this run's own folder)")
            .c_str());
  }
  std::unique_ptr<ExchangeSetup> setup;
  CoordinatorPlan plan;
  {
    std::lock_guard<std::mutex> lock(g_pending->mutex);
    if (!g_pending->setup || g_exchange != nullptr) return;
    setup = std::move(g_pending->setup);
    plan = g_pending->plan;
  }
  plan.token = exchange::token_from_job_key(std::span<const uint8_t>(args.key, args.key_len));
  if (args.run_dir != nullptr) setup->run_dir = args.run_dir;
  if (args.recorder_path != nullptr) setup->recorder_path = args.recorder_path;
  start_with_plan(*setup, plan);
}

void stop_exchange(bool stopping_job) {
  {
    std::lock_guard<std::mutex> lock(g_pending->mutex);
    if (g_pending->setup) {
      const ExchangeSetup& setup = *g_pending->setup;
      const uint32_t comms =
          setup.recorder != nullptr ? __atomic_load_n(&setup.recorder->comms_used, __ATOMIC_ACQUIRE) : 0;
      const std::string why = "no communicator spanned all " + std::to_string(setup.world) +
                              " ranks of the launcher, so the ranks had no shared secret";
      if (comms > 0)
        log(LogLevel::kWarn, ("cross-rank checks never ran: " + why +
                              "; set TRAINSCOPE_TOKEN to one secret on every rank (or use trainscope run)")
                                 .c_str());
      // A process that made no communicator had nothing to compare (a launcher, or a rank that ended first: its own
      // end says so); one that made communicators ran unchecked.
      recorder::record_exchange_state(
          setup.recorder, comms > 0 ? recorder::ExchangeState::kDidNotRun : recorder::ExchangeState::kNotNeeded,
          comms > 0 ? (why + "; set TRAINSCOPE_TOKEN").c_str() : "it made no communicator");
      g_pending->setup.reset();
    }
  }
  if (g_exchange == nullptr) return;
  g_exchange_running.store(false, std::memory_order_release);
  try {
    g_exchange->stop(stopping_job);
  } catch (...) {
    // Exit paths never throw into the job.
  }
}

void abandon_exchange() {
  g_exchange_running.store(false, std::memory_order_release);
  if (g_exchange == nullptr) return;
  g_exchange->abandon();
  g_exchange = nullptr;
}

bool exchange_running() { return g_exchange_running.load(std::memory_order_acquire); }

void report_first_nonfinite(const reports::FirstNonfinite& first, uint32_t stack_id, bool stop_job) {
  if (!exchange_running()) return;
  try {
    g_exchange->report_nonfinite(first, stack_id, stop_job);
  } catch (...) {
    // An allocation failure loses the report, never the job.
  }
}

}  // namespace trainscope::engine
