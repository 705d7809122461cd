// Text and JSON forms of the coordinator's mismatch, desync and vanished-rank reports, and writing them to disk.
#include "reports/exchange_reports.h"

#include <errno.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/hex_text.h"
#include "base/private_files.h"
#include "base/run_files.h"
#include "reports/recorder_report.h"
#include "reports/stack_text.h"

namespace trainscope::reports {
namespace {

using exchange::Fingerprint;
using recorder::Op;

std::string op_text(uint16_t op) { return recorder::op_name(static_cast<Op>(op)); }

bool reduces(Op op) { return op == Op::kAllReduce || op == Op::kReduce || op == Op::kReduceScatter; }
bool rooted(Op op) {
  return op == Op::kReduce || op == Op::kBroadcast || op == Op::kBcast || op == Op::kGather || op == Op::kScatter;
}

std::string process_label(int32_t global_rank, int32_t comm_rank) {
  if (global_rank >= 0) return "Process " + std::to_string(global_rank);
  return "Process ? (communicator rank " + std::to_string(comm_rank) + ")";
}

// "[1048576] float16 sum", plus the root for rooted collectives and the peer for send/recv.
std::string shape_text(const Fingerprint& f, bool show_op) {
  const auto op = static_cast<Op>(f.op);
  std::string text = "[" + std::to_string(f.count) + "] " + recorder::dtype_name(f.dtype);
  if (reduces(op)) text += " " + recorder::redop_name(f.redop);
  if (rooted(op)) text += " root " + std::to_string(f.peer);
  if (op == Op::kSend) text += " send to rank " + std::to_string(f.peer);
  if (op == Op::kRecv) text += " recv from rank " + std::to_string(f.peer);
  if (show_op) text += " `" + op_text(f.op) + "`";
  return text;
}

// A send/recv desync's member by its global rank ("rank 5") where the report knows it, else "communicator rank 1":
// in a pipeline's sub-communicator the two differ.
std::string p2p_rank_text(const DesyncReport& report, int32_t comm_rank) {
  for (const WaitingRank& w : report.waiting)
    if (w.comm_rank == comm_rank && w.global_rank >= 0) return "rank " + std::to_string(w.global_rank);
  for (const MissingRank& m : report.missing)
    if (m.comm_rank == comm_rank && m.global_rank >= 0) return "rank " + std::to_string(m.global_rank);
  return "communicator rank " + std::to_string(comm_rank);
}

// A send/recv is numbered per peer and direction: "send #7 to rank 1", "recv #7 from rank 0".
std::string p2p_call_text(const DesyncReport& report, uint16_t op, uint64_t seq, int32_t peer_comm_rank) {
  const bool send = static_cast<Op>(op) == Op::kSend;
  return std::string(send ? "send #" : "recv #") + std::to_string(seq) + (send ? " to " : " from ") +
         p2p_rank_text(report, peer_comm_rank);
}

// The communicator rank a send/recv desync's waiting side waits for.
int32_t p2p_other(const DesyncReport& report) {
  return static_cast<Op>(report.op) == Op::kSend ? report.receiver : report.sender;
}

std::string join(const std::vector<std::string>& parts, const char* separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? separator : "") + parts[i];
  return out;
}

using text::hex_address;

nlohmann::json call_json(const Fingerprint& f) {
  return {{"op", op_text(f.op)},
          {"seq", f.seq},
          {"count", f.count},
          {"dtype", recorder::dtype_name(f.dtype)},
          {"redop", recorder::redop_name(f.redop)},
          {"peer", f.peer},
          {"comm_rank", f.comm_rank},
          {"nranks", f.nranks},
          {"start_ns", f.start_ns},
          {"record_index", f.record_index},
          {"caller", hex_address(f.caller)}};
}

// A rank's last launch per stream under its line in a desync report, one line each: "      last launch on stream ...".
std::string launches_text(const std::vector<recorder::StreamLastLaunch>& launches) {
  std::string out;
  for (const recorder::StreamLastLaunch& launch : launches)
    out += "      last launch on " + recorder::stream_last_launch_text(launch) + "\n";
  return out;
}

void add_launches_json(nlohmann::json& entry, bool read, const std::vector<recorder::StreamLastLaunch>& launches) {
  if (!read) return;  // not looked at (another host, no recorder): the key is absent, as in reports before launches
  nlohmann::json list = nlohmann::json::array();
  for (const recorder::StreamLastLaunch& launch : launches) list.push_back(recorder::stream_last_launch_json(launch));
  entry["last_launches"] = std::move(list);
}

std::string since_text(uint64_t since_ns, uint64_t now_ns) {
  if (since_ns == 0) return "since an unknown time";
  std::string text = "since " + recorder::utc_date_time(since_ns);
  if (now_ns > since_ns) text += " (" + recorder::duration_string(now_ns - since_ns) + ")";
  return text;
}

}  // namespace

const char* laggard_state_text(LaggardState state) {
  switch (state) {
    case LaggardState::kAlive:
      return "alive, not arrived";
    case LaggardState::kFinalized:
      return "finalized the communicator";
    case LaggardState::kDestroyed:
      return "destroyed the communicator";
    case LaggardState::kAborted:
      return "aborted the communicator";
    case LaggardState::kRevoked:
      return "revoked the communicator";
    case LaggardState::kExited:
      return "exited";
    case LaggardState::kVanished:
      return "vanished";
    case LaggardState::kUnknown:
      return "never heard from";
  }
  return "unknown";
}

std::string format_mismatch_text(const MismatchReport& report) {
  bool ops_differ = false;
  for (const CallLine& line : report.calls) {
    if (line.present && line.call.op != report.op) ops_differ = true;
  }
  std::string out =
      "Cannot apply desired operation due to shape mismatches. All shapes across devices must be valid.\n\n";
  const std::string comm = recorder::short_hex_id(report.comm_id);
  if (report.point_to_point) {
    const int32_t sender = report.calls.empty() ? -1 : report.calls[0].comm_rank;
    const int32_t receiver = report.calls.size() < 2 ? -1 : report.calls[1].comm_rank;
    out += "Operation: `ncclSend`/`ncclRecv` (communicator " + comm + ", send #" + std::to_string(report.seq) +
           " from rank " + std::to_string(sender) + " to rank " + std::to_string(receiver) + ")\n";
  } else {
    out += "Operation: `" + op_text(report.op) + "` (communicator " + comm + ", call #" + std::to_string(report.seq) +
           ")\n";
  }
  out += "Input shapes:\n";
  for (const CallLine& line : report.calls) {
    out += "  - " + process_label(line.global_rank, line.comm_rank) + ": ";
    out += line.present ? shape_text(line.call, ops_differ)
                        : "(had not reached call #" + std::to_string(report.seq) + " when this was reported)";
    out += "\n";
  }
  if (!report.differences.empty()) out += "\nDiffers in: " + join(report.differences, ", ") + "\n";
  out += "\nStacks at the call:\n";
  for (const CallLine& line : report.calls) {
    if (!line.present) continue;
    out += "  " + process_label(line.global_rank, line.comm_rank) + ":\n";
    out += format_stack_block(line.stack, line.call.caller, "    ");
  }
  return out;
}

nlohmann::json mismatch_json(const MismatchReport& report) {
  nlohmann::json calls = nlohmann::json::array();
  for (const CallLine& line : report.calls) {
    nlohmann::json entry = {{"process", line.global_rank}, {"comm_rank", line.comm_rank}, {"present", line.present}};
    if (line.present) {
      entry["call"] = call_json(line.call);
      entry["shape"] = {line.call.count};
      add_stack_json(entry, line.stack);
    }
    calls.push_back(std::move(entry));
  }
  return {
      {"kind", "mismatch"},
      {"message", "Cannot apply desired operation due to shape mismatches. All shapes across devices must be valid."},
      {"operation", report.point_to_point ? "ncclSend/ncclRecv" : op_text(report.op)},
      {"communicator", recorder::hex_id(report.comm_id)},
      {"seq", report.seq},
      {"point_to_point", report.point_to_point},
      {"differences", report.differences},
      {"detected_ns", report.detected_ns},
      {"calls", std::move(calls)}};
}

std::string mismatch_base_name(const MismatchReport& report) {
  return run_files::call_prefix(run_files::info_of(run_files::ReportKind::kMismatch)) +
         (report.point_to_point ? run_files::kPointToPoint : "") + recorder::short_hex_id(report.comm_id) + "-" +
         std::to_string(report.seq);
}

std::string format_desync_text(const DesyncReport& report) {
  const std::string stuck_for = recorder::duration_string(
      report.detected_ns > report.stuck_since_ns ? report.detected_ns - report.stuck_since_ns : 0);
  const std::string again = report.repeat > 1 ? " (reported again: still stuck)" : "";
  const std::string alive = "a long checkpoint save or evaluation on some ranks looks like this too.\n";
  std::string out = "Desync on communicator " + recorder::short_hex_id(report.comm_id);
  if (report.creation) {
    out += " at its creation (`" + op_text(report.op) + "`, " + std::to_string(report.missing.size()) + " of its " +
           std::to_string(report.waiting.size() + report.missing.size()) + " ranks missing): ";
    if (report.certain) {
      out += "the missing ranks can never join it (their processes are gone).\n";
    } else {
      out += "the missing ranks have not joined it after " + stuck_for + again +
             ". They may be alive and slow to "
             "start; " +
             alive;
    }
  } else if (report.point_to_point) {
    const bool send_waits = static_cast<Op>(report.op) == Op::kSend;
    out += " at send #" + std::to_string(report.seq) + " from " + p2p_rank_text(report, report.sender) + " to " +
           p2p_rank_text(report, report.receiver) +
           " (`ncclSend`/`ncclRecv`): " + p2p_rank_text(report, send_waits ? report.sender : report.receiver) +
           " waits in " + p2p_call_text(report, report.op, report.seq, p2p_other(report)) + "; " +
           p2p_rank_text(report, p2p_other(report));
    const char* side = send_waits ? "receive" : "send";
    if (report.certain) {
      out += " can never make that " + std::string(side) + ".\n";
    } else {
      out += " has not made that " + std::string(side) + " after " + stuck_for + again + ". It is alive; " + alive;
    }
  } else {
    out += " at call #" + std::to_string(report.seq) + " (`" + op_text(report.op) + "`): ";
    if (report.certain) {
      out += "some members can never reach this call.\n";
    } else {
      out += "some members have not reached this call after " + stuck_for + again + ". They are alive; " + alive;
    }
  }
  // "Process 3 (communicator rank 1", "Process ? (communicator rank 1": the caller closes the parenthesis.
  const auto label = [](int32_t global_rank, int32_t comm_rank) {
    return std::string("Process ") + (global_rank >= 0 ? std::to_string(global_rank) : "?") + " (communicator rank " +
           std::to_string(comm_rank);
  };
  out += "Waiting in the communicator:\n";
  for (const WaitingRank& w : report.waiting) {
    out += "  - " + label(w.global_rank, w.comm_rank) + "): " +
           (report.creation         ? std::string("creating it in")
            : report.point_to_point ? p2p_call_text(report, w.op, w.seq, p2p_other(report))
                                    : "call #" + std::to_string(w.seq)) +
           " `" + op_text(w.op) + "` " + since_text(w.since_ns, report.detected_ns) + "\n";
    out += launches_text(w.launches);
  }
  out += "Not arrived:\n";
  for (const MissingRank& m : report.missing) {
    out += "  - " + label(m.global_rank, m.comm_rank);
    if (!m.host.empty()) out += ", host " + m.host + ", pid " + std::to_string(m.pid);
    out += "): ";
    if (m.has_last_call) {
      out += "last call " +
             (m.last_peer >= 0 ? p2p_call_text(report, m.last_op, m.last_seq, m.last_peer)
                               : "#" + std::to_string(m.last_seq)) +
             " `" + op_text(m.last_op) + "` at " + recorder::utc_date_time(m.last_call_ns);
      if (m.last_call_from_recorder)
        out += m.last_call_returned ? " (from its flight recorder: it returned; the coordinator had not heard of it)"
                                    : " (from its flight recorder: it is still inside it; the coordinator had not "
                                      "heard of it)";
    } else {
      out += report.creation ? "never joined it" : "no call on this communicator seen";
    }
    out += "; " + std::string(laggard_state_text(m.state)) + "; process " +
           (m.process_gone ? "gone" : "still running") + "\n";
    if (!m.flight_recorder_elsewhere.empty())
      out += "    flight recorder on " + m.flight_recorder_elsewhere +
             ", not on the coordinator's host: its last calls there are unknown here\n";
    out += launches_text(m.launches);
  }
  if (!report.note.empty()) out += "Note: " + report.note + "\n";
  if (!report.waiting.empty()) {
    out += "\nStacks at the waiting calls:\n";
    for (const WaitingRank& w : report.waiting) {
      out += "  " + process_label(w.global_rank, w.comm_rank) + ":\n";
      out += format_stack_block(w.stack, w.caller, "    ");
    }
  }
  // Only the missing ranks whose last call's stack is known: "no stack" says nothing a reader can use here.
  bool any_missing_stack = false;
  for (const MissingRank& m : report.missing) any_missing_stack |= m.has_last_call && !m.last_stack.empty();
  if (any_missing_stack) {
    out += "\nStacks at the last calls of the ranks that did not arrive:\n";
    for (const MissingRank& m : report.missing) {
      if (!m.has_last_call || m.last_stack.empty()) continue;
      out += "  " + process_label(m.global_rank, m.comm_rank) + ":\n";
      out += format_stack_block(m.last_stack, 0, "    ");
    }
  }
  return out;
}

nlohmann::json desync_json(const DesyncReport& report) {
  nlohmann::json waiting = nlohmann::json::array();
  for (const WaitingRank& w : report.waiting) {
    nlohmann::json entry = {{"process", w.global_rank},
                            {"comm_rank", w.comm_rank},
                            {"seq", w.seq},
                            {"op", op_text(w.op)},
                            {"since_ns", w.since_ns}};
    if (report.point_to_point) entry["peer"] = p2p_other(report);
    add_stack_json(entry, w.stack);
    entry["caller"] = hex_address(w.caller);
    add_launches_json(entry, w.launches_read, w.launches);
    waiting.push_back(std::move(entry));
  }
  nlohmann::json missing = nlohmann::json::array();
  for (const MissingRank& m : report.missing) {
    nlohmann::json entry = {{"process", m.global_rank},
                            {"comm_rank", m.comm_rank},
                            {"host", m.host},
                            {"pid", m.pid},
                            {"state", laggard_state_text(m.state)},
                            {"process_gone", m.process_gone}};
    if (!m.flight_recorder_elsewhere.empty()) entry["flight_recorder_elsewhere"] = m.flight_recorder_elsewhere;
    if (m.has_last_call) {
      entry["last_call"] = {{"seq", m.last_seq}, {"op", op_text(m.last_op)}, {"start_ns", m.last_call_ns}};
      if (m.last_call_from_recorder) {
        entry["last_call"]["from_flight_recorder"] = true;
        entry["last_call"]["returned"] = m.last_call_returned;
      }
      if (m.last_peer >= 0) entry["last_call"]["peer"] = m.last_peer;
      add_stack_json(entry["last_call"], m.last_stack);
    } else {
      entry["last_call"] = nullptr;
    }
    add_launches_json(entry, m.launches_read, m.launches);
    missing.push_back(std::move(entry));
  }
  const auto rank_or_null = [&](int32_t rank) { return report.point_to_point ? nlohmann::json(rank) : nullptr; };
  return {{"kind", "desync"},
          {"communicator", recorder::hex_id(report.comm_id)},
          {"seq", report.seq},
          {"operation", report.point_to_point ? "ncclSend/ncclRecv" : op_text(report.op)},
          {"point_to_point", report.point_to_point},
          {"creation", report.creation},
          {"sender", rank_or_null(report.sender)},
          {"receiver", rank_or_null(report.receiver)},
          {"certain", report.certain},
          {"repeat", report.repeat},
          {"detected_ns", report.detected_ns},
          {"stuck_since_ns", report.stuck_since_ns},
          {"waiting", std::move(waiting)},
          {"missing", std::move(missing)},
          {"note", report.note}};
}

std::string desync_base_name(const DesyncReport& report) {
  std::string name = run_files::call_prefix(run_files::info_of(run_files::ReportKind::kDesync)) +
                     recorder::short_hex_id(report.comm_id) + "-";
  if (report.creation) {
    name += "creation";
  } else {
    if (report.point_to_point)
      name += "send-" + std::to_string(report.sender) + "-" + std::to_string(report.receiver) + "-";
    name += std::to_string(report.seq);
  }
  if (report.repeat > 1) name += "-" + std::to_string(report.repeat);
  return name;
}

std::string format_vanished_text(const VanishedReport& report) {
  std::string out = "Rank " + std::to_string(report.global_rank) +
                    " vanished: its connection to the coordinator dropped without a goodbye.\n";
  if (!report.host_ranks_lost.empty()) {
    out += "Host lost: " + (report.host.empty() ? std::string("unknown") : report.host) + ", ranks ";
    for (size_t i = 0; i < report.host_ranks_lost.size(); ++i) {
      if (i > 0) out += i + 1 == report.host_ranks_lost.size() ? " and " : ", ";
      out += std::to_string(report.host_ranks_lost[i]);
    }
    out += " vanished together\n";
  }
  out += "Host: " + (report.host.empty() ? std::string("unknown") : report.host) + ", pid " +
         std::to_string(report.pid) + "\n";
  out += "Time: " + recorder::utc_date_time(report.time_ns) + "\n";
  if (report.has_last_call) {
    const Fingerprint& f = report.last_call;
    out += "Last call: `" + op_text(f.op) + "` (communicator " + recorder::short_hex_id(f.comm_id) + ", call #" +
           std::to_string(f.seq) + ") " + shape_text(f, false) + " at " + recorder::utc_date_time(f.start_ns) + "\n";
    if (!report.last_stack.empty()) out += "Stack at the last call:\n" + format_stack_block(report.last_stack, 0, "  ");
  } else {
    out += "Last call: none seen\n";
  }
  if (!report.flight_recorder_elsewhere.empty()) {
    out += "Flight recorder: " +
           (report.flight_recorder_path.empty() ? std::string("unknown") : report.flight_recorder_path) + " on " +
           report.flight_recorder_elsewhere +
           " (not on the coordinator's host: copy that host's run directory, then trainscope report <run directory>)\n";
  } else {
    out += "Flight recorder: " +
           (report.flight_recorder_path.empty() ? std::string("unknown") : report.flight_recorder_path) +
           " (its last calls survive the process: trainscope report <run directory>)\n";
  }
  return out;
}

nlohmann::json vanished_json(const VanishedReport& report) {
  nlohmann::json last_call = nullptr;
  if (report.has_last_call) {
    last_call = call_json(report.last_call);
    add_stack_json(last_call, report.last_stack);
  }
  return {{"kind", "vanished"},
          {"process", report.global_rank},
          {"host", report.host},
          {"pid", report.pid},
          {"time_ns", report.time_ns},
          {"last_call", std::move(last_call)},
          {"last_call_communicator", report.has_last_call ? recorder::hex_id(report.last_call.comm_id) : ""},
          {"flight_recorder", report.flight_recorder_path},
          {"flight_recorder_elsewhere", report.flight_recorder_elsewhere.empty()
                                            ? nlohmann::json(nullptr)
                                            : nlohmann::json(report.flight_recorder_elsewhere)},
          {"host_ranks_lost", report.host_ranks_lost}};
}

std::string vanished_base_name(const VanishedReport& report) {
  return run_files::rank_prefix(run_files::info_of(run_files::ReportKind::kVanished)) +
         std::to_string(report.global_rank);
}

}  // namespace trainscope::reports
