// The run as Chrome trace-event JSON (run_timeline.h): tracks per rank, a slice per recorded call, instants for the
// reports' verdicts. Two passes over the records: the first finds the run's start and end and each process's tracks,
// the second writes the events a batch at a time.
#include "analysis/run_timeline.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <map>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/private_files.h"
#include "collectors/launches/kernel_names.h"
#include "reports/cuda_launches.h"
#include "reports/json_members.h"
#include "reports/recorder_report.h"

namespace trainscope::reports {

namespace {

using nlohmann::json;
using recorder::Op;
using recorder::Record;
using recorder::RecordedCall;
using recorder::RecorderFile;

constexpr int64_t kUnknownRankPidBase = 1000000;  // pid of a process whose rank is not known: this + its pid
constexpr int64_t kProcessTrack = 0;
constexpr size_t kBatchBytes = 64 * 1024;
constexpr const char* kPendingResult = "pending (never returned)";
// A call that never returned is drawn at least this long (2% of the run before it when that is more).
constexpr uint64_t kMinimumPendingNs = 1000000;

// A communicator named in a report: its 16 hex digits, its hex number, or its leading 6 digits.
bool comm_matches(uint64_t id, const std::string& text) {
  if (text.empty() || id == 0) return false;
  if (text == recorder::short_hex_id(id)) return true;
  errno = 0;
  char* end = nullptr;
  const unsigned long long parsed = std::strtoull(text.c_str(), &end, 16);
  return errno == 0 && end != nullptr && *end == '\0' && parsed == id;
}

// One process's tracks: "process" (tid 0), its communicators, its streams.
struct Tracks {
  std::vector<std::pair<uint64_t, std::string>> comms;                     // id, name (tid: comm_tid)
  std::vector<std::pair<std::pair<uint64_t, uint64_t>, int64_t>> streams;  // (stream, context), tid
  std::map<uint64_t, int64_t> comm_tid;
  std::map<std::pair<uint64_t, uint64_t>, int64_t> stream_tid;
  int64_t next_tid = 1;

  void add_comm(uint64_t id, int32_t rank, int32_t nranks) {
    if (id == 0 || comm_tid.count(id) != 0) return;
    std::string name = "comm " + recorder::short_hex_id(id);
    if (rank >= 0 && nranks > 0) name += " (rank " + std::to_string(rank) + " of " + std::to_string(nranks) + ")";
    comm_tid[id] = next_tid++;
    comms.emplace_back(id, std::move(name));
  }
  void add_stream(uint64_t stream, uint64_t context) {
    const auto key = std::make_pair(stream, context);
    if (stream_tid.count(key) != 0) return;
    stream_tid[key] = next_tid;
    streams.emplace_back(key, next_tid++);
  }
  int64_t comm(uint64_t id) const {
    const auto it = comm_tid.find(id);
    return it != comm_tid.end() ? it->second : kProcessTrack;
  }
  int64_t stream(uint64_t stream, uint64_t context) const {
    const auto it = stream_tid.find({stream, context});
    return it != stream_tid.end() ? it->second : kProcessTrack;
  }
};

bool on_stream_track(const RecorderFile& file, const Record& r) {
  const Op op = static_cast<Op>(r.op);
  if (op == Op::kKernelLaunch || op == Op::kGraphLaunch) return true;
  if (op == Op::kStreamSync) return recorder::sync_scope(file, r) == recorder::SyncScope::kStream;
  return op == Op::kCudaError && r.stream != 0;
}

Tracks tracks_of(const RecorderFile& file) {
  Tracks t;
  for (const recorder::CommEntry& c : file.comms) t.add_comm(c.id, c.rank, c.nranks);
  for (const recorder::StreamEntry& s : file.streams) t.add_stream(s.stream, s.context);
  for (const RecordedCall& call : file.records) {
    const Record& r = call.record;
    if (recorder::is_cuda_record(static_cast<Op>(r.op))) {
      if (on_stream_track(file, r)) t.add_stream(r.stream, r.aux);
    } else {
      t.add_comm(r.comm_id, r.rank, r.nranks);
    }
  }
  return t;
}

// An instant event, made before any event is written.
struct Instant {
  int64_t pid = 0;
  int64_t tid = kProcessTrack;
  const char* category = "verdict";
  std::string name;
  uint64_t ns = 0;
  json args = json::object();
};

// The run's rank -> file, and the lookups the reports' instants need.
class Run {
 public:
  explicit Run(const recorder::RunDirectory& run) : run_(run) {
    std::vector<int32_t> ranks;
    for (const RecorderFile& file : run.files) {
      tracks_.push_back(tracks_of(file));
      // The rank; a process of a rank another one already has (a restarted rank) is told apart as an unknown one is.
      const int32_t rank = file.global_rank();
      const bool first = rank >= 0 && std::find(ranks.begin(), ranks.end(), rank) == ranks.end();
      pids_.push_back(first ? rank : kUnknownRankPidBase + file.pid());
      if (first) ranks.push_back(rank);
    }
  }
  int64_t pid(size_t position) const { return pids_[position]; }
  const RecorderFile* file_of_rank(int32_t rank, size_t* position) const {
    for (size_t i = 0; i < run_.files.size(); ++i) {
      if (run_.files[i].global_rank() == rank) {
        *position = i;
        return &run_.files[i];
      }
    }
    return nullptr;
  }
  const Tracks& tracks(size_t position) const { return tracks_[position]; }
  // The newest record of a call on `comm` numbered `seq` (a collective or a send/receive).
  static const RecordedCall* find_call(const RecorderFile& file, const std::string& comm, uint64_t seq) {
    for (auto it = file.records.rbegin(); it != file.records.rend(); ++it) {
      const Record& r = it->record;
      const Op op = static_cast<Op>(r.op);
      if (r.seq == seq && (recorder::is_collective(op) || recorder::is_point_to_point(op)) &&
          comm_matches(r.comm_id, comm))
        return &*it;
    }
    return nullptr;
  }

  // An instant on `rank`'s track of `comm` (its process track when it has none there), at `ns` when known, else at
  // the start of the rank's call `seq` on `comm`, else at `fallback_ns` (args.time_of says which, but for `ns`);
  // false when no time is known.
  bool place(int32_t rank, const std::string& comm, std::optional<uint64_t> seq, std::optional<uint64_t> ns,
             uint64_t fallback_ns, Instant* out, const char* fallback_what = "not known: placed at the end") const {
    out->pid = rank;
    size_t position = 0;
    const RecorderFile* file = file_of_rank(rank, &position);
    const RecordedCall* call = file != nullptr && seq ? find_call(*file, comm, *seq) : nullptr;
    if (file != nullptr) {
      for (const auto& [id, name] : tracks(position).comms) {
        if (comm_matches(id, comm)) out->tid = tracks(position).comm(id);
      }
    }
    if (ns && *ns != 0) {
      out->ns = *ns;
    } else if (call != nullptr) {
      out->ns = call->record.start_ns;
      out->args["time_of"] = "the call's record";
    } else if (fallback_ns != 0) {
      out->ns = fallback_ns;
      out->args["time_of"] = fallback_what;
    } else {
      return false;
    }
    if (call != nullptr) out->args["record"] = call->index;
    return true;
  }

 private:
  const recorder::RunDirectory& run_;
  std::vector<Tracks> tracks_;
  std::vector<int64_t> pids_;  // each file's process in the trace
};

// The instants of the reports (verdicts, first inf/nan, CUDA errors, stops), one member per kind of report.
struct ReportInstants {
  const Run& run;
  uint64_t end_ns;
  std::vector<Instant> out;
  std::vector<int64_t> stop_reported;  // ranks whose stop report made an instant

  // A mismatch or a desync: one instant on each rank the report names.
  void add_verdict(const ReportFiles& report, const std::string& file) {
    const json& j = report.json;
    if (!report.has_json) return;
    const bool mismatch = report.kind == ReportKind::kMismatch;
    const std::string comm = string_member(j, "communicator");
    const std::optional<uint64_t> seq = uint_member(j, "seq");
    std::string name = std::string(mismatch ? "mismatch: " : "desync: ") + string_member(j, "operation") + " call #" +
                       std::to_string(seq.value_or(0)) + " on comm " +
                       recorder::short_hex_id(std::strtoull(comm.c_str(), nullptr, 16));
    std::vector<int32_t> ranks;
    for (const char* list : {"calls", "waiting", "missing"}) {
      const auto it = j.find(list);
      if (it == j.end() || !it->is_array()) continue;
      for (const json& entry : *it) {
        if (const int32_t rank = rank_member(entry, "process"); rank >= 0) ranks.push_back(rank);
      }
    }
    for (const int32_t rank : ranks) {
      Instant i;
      i.name = name;
      i.args = {{"report", file}, {"communicator", comm}, {"seq", seq.value_or(0)}};
      if (mismatch && j.contains("differences")) i.args["differences"] = j["differences"];
      if (!run.place(rank, comm, seq, uint_member(j, "detected_ns"), end_ns, &i)) continue;
      out.push_back(std::move(i));
    }
  }

  void add_vanished(const ReportFiles& report, const std::string& file) {
    const json& j = report.json;
    if (!report.has_json) return;
    Instant i;
    const json* last = object_member(j, "last_call");
    i.name = "vanished: rank " + std::to_string(report.rank);
    i.args = {{"report", file}, {"host", string_member(j, "host")}};
    if (report.rank >= 0 &&
        run.place(report.rank, string_member(j, "last_call_communicator"),
                  last != nullptr ? uint_member(*last, "seq") : std::nullopt, uint_member(j, "time_ns"), end_ns, &i))
      out.push_back(std::move(i));
  }

  void add_nonfinite(const ReportFiles& report, const std::string& file) {
    const json& j = report.json;
    if (report.rank < 0) return;
    Instant i;
    i.category = "nonfinite";
    const std::optional<uint64_t> batch = uint_member(j, "batch_number");
    i.name = "first inf/nan" + (batch ? " (batch " + std::to_string(*batch) + ")" : std::string());
    i.args = {{"report", file}};
    if (batch) i.args["batch_number"] = *batch;
    // The first frame holding the value: a collective's ("comm 3f2a9c all-reduce #812") or a launch's.
    std::string comm;
    std::optional<uint64_t> seq;
    std::optional<uint64_t> launch_ns;
    size_t position = 0;
    const RecorderFile* rank_file = run.file_of_rank(report.rank, &position);
    const auto frames = j.is_object() ? j.find("frames") : j.end();
    if (report.has_json && frames != j.end() && frames->is_array()) {
      for (const json& frame : *frames) {
        const auto has_nonfinite = frame.is_object() ? frame.find("has_nonfinite") : frame.end();
        if (has_nonfinite == frame.end() || *has_nonfinite != true) continue;
        const std::string frame_name = string_member(frame, "name");
        i.args["frame"] = frame_name;
        if (const json* launch = object_member(frame, "launch")) {
          const std::optional<uint64_t> index = uint_member(*launch, "record_index");
          const RecordedCall* call = rank_file != nullptr && index ? rank_file->at_index(*index) : nullptr;
          if (call != nullptr) {
            launch_ns = call->record.start_ns;
            i.args["record"] = call->index;
          }
        } else if (frame_name.rfind("comm ", 0) == 0) {
          comm = frame_name.substr(5, frame_name.find(' ', 5) - 5);
          const size_t hash = frame_name.find('#');
          if (hash != std::string::npos) seq = std::strtoull(frame_name.c_str() + hash + 1, nullptr, 10);
        }
        break;
      }
    }
    // Else when the process stopped (an abort on inf/nan stops it right after), else at the end.
    const bool exited = rank_file != nullptr && rank_file->header.exit_ns != 0;
    if (run.place(report.rank, comm, seq, launch_ns, exited ? rank_file->header.exit_ns : end_ns, &i,
                  exited ? "not known: placed at the process's exit" : "not known: placed at the end"))
      out.push_back(std::move(i));
  }

  void add_cuda_error(const ReportFiles& report, const std::string& file) {
    const json& j = report.json;
    if (!report.has_json || report.rank < 0) return;
    // A recorder that still holds the error's record shows it there.
    size_t position = 0;
    const RecorderFile* rank_file = run.file_of_rank(report.rank, &position);
    if (rank_file != nullptr && rank_file->first_error() != nullptr) return;
    Instant i;
    i.category = "cuda_error";
    i.name = "first CUDA error";
    i.args = {{"report", file}, {"summary", string_member(j, "summary")}};
    if (run.place(report.rank, "", std::nullopt, uint_member(j, "time_ns"), end_ns, &i)) out.push_back(std::move(i));
  }

  void add_stop(const ReportFiles& report, const std::string& file) {
    const json& j = report.json;
    if (report.rank < 0) return;
    Instant i;
    i.category = "stop";
    const std::string reason = string_member(j, "reason");
    i.name = "stopped" + (reason.empty() ? std::string() : " (" + reason + ")");
    i.args = {{"report", file}, {"message", string_member(j, "message")}};
    if (const std::optional<uint64_t> batch = uint_member(j, "batch_number")) i.args["batch_number"] = *batch;
    size_t position = 0;
    const RecorderFile* rank_file = run.file_of_rank(report.rank, &position);
    const uint64_t exit_ns = rank_file != nullptr ? rank_file->header.exit_ns : 0;
    if (run.place(report.rank, "", std::nullopt, exit_ns, end_ns, &i)) {
      out.push_back(std::move(i));
      stop_reported.push_back(report.rank);
    }
  }

  // Where an inf/nan came from: an instant on each rank that sent it.
  void add_origin(const ReportFiles& report, const std::string& file) {
    const json& j = report.json;
    const json* origin = report.has_json ? object_member(j, "origin") : nullptr;
    if (origin == nullptr) return;
    const std::string comm = string_member(*origin, "communicator");
    const std::optional<uint64_t> seq = uint_member(*origin, "call_number");
    const auto senders = origin->find("senders");
    if (senders == origin->end() || !senders->is_array()) return;
    for (const json& sender : *senders) {
      if (!sender.is_number_integer() || sender.get<int64_t>() < 0 || sender.get<int64_t>() > INT32_MAX) continue;
      Instant i;
      i.category = "nonfinite";
      i.name = "inf/nan origin: " + string_member(*origin, "op") + " call #" + std::to_string(seq.value_or(0));
      i.args = {{"report", file}, {"communicator", comm}};
      if (run.place(static_cast<int32_t>(sender.get<int64_t>()), comm, seq, std::nullopt, 0, &i))
        out.push_back(std::move(i));
    }
  }

  // Processes their recorder says trainscope stopped, without a stop report of their rank.
  void add_unreported_stops(const recorder::RunDirectory& dir) {
    for (size_t position = 0; position < dir.files.size(); ++position) {
      const recorder::FileHeader& h = dir.files[position].header;
      if ((h.end_flags & recorder::kEndStopped) == 0 || h.exit_ns == 0) continue;
      if (std::find(stop_reported.begin(), stop_reported.end(), run.pid(position)) != stop_reported.end()) continue;
      Instant i;
      i.pid = run.pid(position);
      i.category = "stop";
      i.name = "stopped";
      i.ns = h.exit_ns;
      i.args = {{"message", recorder::stop_text(h)}};
      out.push_back(std::move(i));
    }
  }

  // A rank named by a report but without a recorder here is still marked, in a process of its number, and said to be.
  void note_ranks_without_recorder() {
    for (Instant& i : out) {
      size_t position = 0;
      if (i.pid >= 0 && i.pid < kUnknownRankPidBase &&
          run.file_of_rank(static_cast<int32_t>(i.pid), &position) == nullptr)
        i.args["note"] = "no flight recorder of this rank in the run directory";
    }
  }
};

// Every report's instants in the reports' order, then the stops that no report tells of.
std::vector<Instant> report_instants(const Run& run, const recorder::RunDirectory& dir, const RunSummary& summary,
                                     uint64_t end_ns) {
  ReportInstants instants{run, end_ns, {}, {}};
  for (const ReportFiles& report : summary.reports) {
    const std::string file = report.has_json ? report.json_file() : report.text_file();
    switch (report.kind) {
      case ReportKind::kMismatch:
      case ReportKind::kDesync:
        instants.add_verdict(report, file);
        break;
      case ReportKind::kVanished:
        instants.add_vanished(report, file);
        break;
      case ReportKind::kNonfinite:
        instants.add_nonfinite(report, file);
        break;
      case ReportKind::kCudaError:
        instants.add_cuda_error(report, file);
        break;
      case ReportKind::kStop:
        instants.add_stop(report, file);
        break;
      case ReportKind::kOrigin:
        instants.add_origin(report, file);
        break;
      case ReportKind::kOverflowStreak:
      case ReportKind::kNearOverflow:
      case ReportKind::kStepSkipped:
        break;
    }
  }
  instants.add_unreported_stops(dir);
  instants.note_ranks_without_recorder();
  return std::move(instants.out);
}

// The trace's first and last instants, ns since the epoch.
struct Span {
  uint64_t start = 0;
  uint64_t end = 0;
  void add(uint64_t ns) {
    if (ns == 0) return;
    if (start == 0 || ns < start) start = ns;
    end = std::max(end, ns);
  }
};

// Writes the events, each one JSON object on a line, a batch at a time.
class EventWriter {
 public:
  EventWriter(const std::function<void(std::string_view)>& sink, uint64_t start_ns) : sink_(sink), start_(start_ns) {
    buffer_.reserve(kBatchBytes + 4096);
  }
  void event(const json& e) {
    buffer_ += first_ ? "\n" : ",\n";
    first_ = false;
    buffer_ += e.dump(-1, ' ', false, json::error_handler_t::replace);
    if (buffer_.size() >= kBatchBytes) flush();
  }
  void flush() {
    if (!buffer_.empty()) sink_(buffer_);
    buffer_.clear();
  }
  // Microseconds since the trace's start.
  double us(uint64_t ns) const { return ns > start_ ? static_cast<double>(ns - start_) / 1000.0 : 0.0; }
  json meta(const char* name, int64_t pid, int64_t tid, json args) const {
    return {{"ph", "M"}, {"name", name}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}};
  }

 private:
  const std::function<void(std::string_view)>& sink_;
  uint64_t start_;
  std::string buffer_;
  bool first_ = true;
};

const char* rooted_key(Op op) {
  switch (op) {
    case Op::kReduce:
    case Op::kBroadcast:
    case Op::kBcast:
    case Op::kGather:
    case Op::kScatter:
      return "root";
    case Op::kSend:
    case Op::kRecv:
      return "peer";
    default:
      return nullptr;
  }
}

json slice(const EventWriter& w, const char* category, std::string name, const RecordedCall& call, int64_t pid,
           int64_t tid, uint64_t end_ns) {
  const Record& r = call.record;
  const uint64_t stop = call.pending() ? end_ns : r.end_ns;
  return {{"ph", "X"},
          {"cat", category},
          {"name", std::move(name)},
          {"ts", w.us(r.start_ns)},
          {"dur", stop > r.start_ns ? static_cast<double>(stop - r.start_ns) / 1000.0 : 0.0},
          {"pid", pid},
          {"tid", tid}};
}

void write_process(EventWriter& w, const RecorderFile& file, int64_t pid, const Tracks& tracks, uint64_t end_ns) {
  std::string name = file.global_rank() >= 0 ? "rank " + std::to_string(file.global_rank()) : "rank ?";
  name += " (pid " + std::to_string(file.pid()) + ", host " + std::string(file.header.host) + ")";
  w.event(w.meta("process_name", pid, 0, {{"name", name}}));
  w.event(w.meta("process_sort_index", pid, 0, {{"sort_index", pid}}));
  w.event(w.meta("thread_name", pid, kProcessTrack, {{"name", "process"}}));
  w.event(w.meta("thread_sort_index", pid, kProcessTrack, {{"sort_index", kProcessTrack}}));
  for (const auto& [id, comm_name] : tracks.comms) {
    const int64_t tid = tracks.comm(id);
    w.event(w.meta("thread_name", pid, tid, {{"name", comm_name}}));
    w.event(w.meta("thread_sort_index", pid, tid, {{"sort_index", tid}}));
  }
  for (const auto& [key, tid] : tracks.streams) {
    w.event(w.meta("thread_name", pid, tid, {{"name", "stream " + recorder::stream_text(key.first)}}));
    w.event(w.meta("thread_sort_index", pid, tid, {{"sort_index", tid}}));
  }

  for (const RecordedCall& call : file.records) {
    const Record& r = call.record;
    const Op op = static_cast<Op>(r.op);
    const recorder::CudaDomain domain = op == Op::kCudaError || op == Op::kStreamSync
                                            ? static_cast<recorder::CudaDomain>(r.redop & 0xff)
                                            : recorder::launch_domain(r.redop);
    if (recorder::is_launch(r)) {
      const std::string kernel = recorder::launch_kernel_name(file, r);
      const bool named = file.name(static_cast<uint32_t>(r.peer))[0] != '\0';
      json e = slice(w, "launch", named ? launches::kernel_short_name(kernel) : kernel, call, pid,
                     tracks.stream(r.stream, r.aux), end_ns);
      json args = {{"kernel", kernel},
                   {"api", recorder::launch_api_text(r.redop)},
                   {"result", call.pending() ? kPendingResult : recorder::cuda_result_name(domain, r.result)},
                   {"finished", recorder::launch_progress_text(file.launch_progress(r))},
                   {"record", call.index}};
      if (op == Op::kKernelLaunch) {  // a graph's launch has no dimensions of its own
        args["grid"] = recorder::dim3_text(recorder::unpack_grid(r.count));
        args["block"] = recorder::dim3_text(recorder::unpack_block(r.sendbuff));
        args["shared"] = r.recvbuff;
      }
      if ((r.flags & recorder::kFlagCapturing) != 0) args["capturing"] = "recorded into a CUDA graph, not run";
      e["args"] = std::move(args);
      w.event(e);
    } else if (op == Op::kStreamSync) {
      const std::string api = file.name(static_cast<uint32_t>(r.peer));
      const int64_t tid = on_stream_track(file, r) ? tracks.stream(r.stream, r.aux) : kProcessTrack;
      json e = slice(w, "sync", api.empty() ? "synchronisation" : api, call, pid, tid, end_ns);
      e["args"] = {{"api", api},
                   {"result", call.pending() ? kPendingResult : recorder::cuda_result_name(domain, r.result)},
                   {"record", call.index}};
      w.event(e);
    } else if (op == Op::kCudaError) {
      const std::string api = file.name(static_cast<uint32_t>(r.peer));
      const int64_t tid = on_stream_track(file, r) ? tracks.stream(r.stream, r.aux) : kProcessTrack;
      w.event(
          {{"ph", "i"},
           {"s", "p"},
           {"cat", "cuda_error"},
           {"name", "CUDA error: " + (api.empty() ? std::string("a CUDA call") : api) + " returned " +
                        recorder::cuda_result_name(domain, r.result)},
           {"ts", w.us(r.start_ns)},
           {"pid", pid},
           {"tid", tid},
           {"args", {{"api", api}, {"result", recorder::cuda_result_text(domain, r.result)}, {"record", call.index}}}});
    } else if (op == Op::kStepMarker) {
      w.event({{"ph", "i"},
               {"s", "p"},
               {"cat", "step"},
               {"name", "step marker"},
               {"ts", w.us(r.start_ns)},
               {"pid", pid},
               {"tid", kProcessTrack},
               {"args", {{"record", call.index}}}});
    } else {
      const bool communicator_call = recorder::is_collective(op) || recorder::is_point_to_point(op);
      json e = slice(w, "nccl", recorder::op_name(op), call, pid, tracks.comm(r.comm_id), end_ns);
      json args = {{"op", recorder::op_name(op)},
                   {"comm", r.comm_id != 0 ? recorder::hex_id(r.comm_id) : std::string("-")},
                   {"seq", r.seq},
                   {"result", call.pending() ? kPendingResult : recorder::result_name(r.result)},
                   {"record", call.index}};
      if (communicator_call) {
        args["count"] = r.count;
        args["type"] = recorder::dtype_name(r.dtype);
        if (r.redop != recorder::kUnknown) args["redop"] = recorder::redop_name(r.redop);  // reductions only
        if (const char* key = rooted_key(op)) args[key] = r.peer;
      }
      if (r.group != 0) args["group"] = r.group;
      if (const std::string python = recorder::python_location(file.site(r.site)); !python.empty())
        args["python"] = python;
      e["args"] = std::move(args);
      w.event(e);
    }
  }
}

}  // namespace

void write_run_timeline(const recorder::RunDirectory& run, const RunSummary& summary,
                        const std::function<void(std::string_view)>& sink) {
  // First pass: the span of the records (a call that never returned reaches the end), then of the instants.
  Span span;
  uint64_t last_pending_ns = 0;
  for (const RecorderFile& file : run.files) {
    for (const RecordedCall& call : file.records) {
      span.add(call.record.start_ns);
      if (!call.pending()) span.add(call.record.end_ns);
      if (call.pending()) last_pending_ns = std::max(last_pending_ns, call.record.start_ns);
    }
    span.add(file.header.exit_ns);
  }
  // Nothing after the calls that never returned (every rank hung in its last one): they would end where they start,
  // and no viewer draws a slice of no width. The end is placed a little after them instead, and said to be.
  bool padded = false;
  if (last_pending_ns != 0) {
    const uint64_t pad = std::max(kMinimumPendingNs, (last_pending_ns - span.start) / 50);
    if (span.end < last_pending_ns + pad) {
      span.end = last_pending_ns + pad;
      padded = true;
    }
  }
  const Run lookup(run);
  std::vector<Instant> instants = report_instants(lookup, run, summary, span.end);
  const uint64_t padded_end = span.end;
  for (const Instant& i : instants) span.add(i.ns);
  padded = padded && span.end == padded_end;
  if (span.start == 0) {
    for (const RecorderFile& file : run.files) span.add(file.header.start_ns);
  }

  sink("{\"traceEvents\": [");
  EventWriter w(sink, span.start);
  for (size_t i = 0; i < run.files.size(); ++i)
    write_process(w, run.files[i], lookup.pid(i), lookup.tracks(i), span.end);
  for (Instant& i : instants) {
    json e = {{"ph", "i"},        {"s", "p"},     {"cat", i.category}, {"name", std::move(i.name)},
              {"ts", w.us(i.ns)}, {"pid", i.pid}, {"tid", i.tid},      {"args", std::move(i.args)}};
    w.event(e);
  }
  w.flush();
  json errors = json::array();
  for (const recorder::FileError& e : run.errors) errors.push_back({{"file", e.path}, {"error", e.message}});
  const json other = {{"generator", "trainscope report --trace"},
                      {"run", summary.name},
                      {"run_dir", run.path},
                      {"start_time_ns", span.start},
                      {"start_time", span.start != 0 ? recorder::utc_date_time(span.start) : std::string()},
                      {"end_time_ns", span.end},
                      {"end_after_last_record", padded},
                      {"processes", run.files.size()},
                      {"unreadable_recorders", std::move(errors)}};
  sink("\n], \"displayTimeUnit\": \"ms\", \"otherData\": " +
       other.dump(-1, ' ', false, json::error_handler_t::replace) + "}\n");
}

namespace {

struct FileSink {
  const recorder::RunDirectory* run;
  const RunSummary* summary;
  int error = 0;
  std::string failure;  // what went wrong making the trace (an exception), when nothing was wrong with the file
};

// The timeline into the temporary replace_file_with() made: an exception never crosses it (the temporary would stay).
int write_timeline_to(int fd, void* context) {
  FileSink* out = static_cast<FileSink*>(context);
  try {
    write_run_timeline(*out->run, *out->summary, [&](std::string_view piece) {
      if (out->error == 0) out->error = files::write_all(fd, piece.data(), piece.size());
    });
  } catch (const std::bad_alloc&) {
    if (out->error == 0) out->error = ENOMEM;
  } catch (const std::exception& e) {
    if (out->error == 0) {
      out->error = EINVAL;
      out->failure = e.what();
    }
  }
  return out->error;
}

}  // namespace

bool write_run_timeline_file(const recorder::RunDirectory& run, const RunSummary& summary, const std::string& path,
                             std::string* error) {
  FileSink out{&run, &summary, 0, {}};
  const int failed = files::replace_file_with(path.c_str(), write_timeline_to, &out);
  if (failed == 0) return true;
  *error = "cannot write the timeline to " + path + ": " +
           (out.failure.empty() ? std::string(files::error_text(failed)) : "an internal error: " + out.failure);
  return false;
}

}  // namespace trainscope::reports
