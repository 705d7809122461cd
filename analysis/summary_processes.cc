// The summary's lines on the processes and the job: stops, where each process was, how the job ended, unwritten
// reports, NCCL without calls, setup, traces, unreadable files, folders and missing recorders, CUDA errors, launches.
#include "analysis/summary_detail.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>

#include "reports/cuda_error_report.h"
#include "reports/frame_report.h"
#include "reports/json_members.h"

namespace trainscope::reports::summary_detail {

std::string stop_phrase(const recorder::ProcessDetail& d);
bool requested_stop(const recorder::ProcessDetail& d);

void stop_line(const RunSummary& summary, Analysis* a) {
  json items = json::array();
  // (reason, batch) -> ranks, in order of appearance.
  std::vector<std::pair<std::pair<std::string, std::optional<uint64_t>>, std::vector<int32_t>>> groups;
  for (const ReportFiles* r : reports_of(summary, ReportKind::kStop)) {
    std::string reason;
    std::optional<uint64_t> batch;
    std::string message;
    if (r->has_json) {
      reason = string_member(r->json, "reason");
      batch = uint_member(r->json, "batch_number");
      message = string_member(r->json, "message");
    } else if (r->has_text) {
      if (r->text.find(kAbortAfterBatchVariable) != std::string::npos) reason = "abort_after_batch";
      if (r->text.find(kAbortOnNonfiniteVariable) != std::string::npos) reason = "nonfinite";
      batch = batch_in_text(r->text);
    }
    items.push_back({{"file", source_file(*r)},
                     {"rank", rank_json(r->rank)},
                     {"reason", string_or_null(reason)},
                     {"batch_number", optional_json(batch)},
                     {"message", string_or_null(message)}});
    if (reason != "abort_after_batch") a->nothing_wrong = false;  // stopping after batch N is what was asked for
    const auto key = std::make_pair(reason, batch);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == key; });
    if (it == groups.end()) it = groups.insert(groups.end(), {key, {}});
    it->second.push_back(r->rank);
  }
  // The ranks trainscope stopped that left no stop report (a verdict stops every rank; a full disk keeps the report
  // from being written): their recorders say so.
  std::vector<std::pair<std::string, std::vector<ProcessRef>>> recorded;  // "by trainscope (...)" -> processes
  if (summary.processes) {
    for (const recorder::ProcessDetail& d : summary.processes->details) {
      if (d.state != "stopped") continue;
      const bool reported =
          d.who.rank >= 0 && std::find_if(groups.begin(), groups.end(), [&](const auto& g) {
                               return std::find(g.second.begin(), g.second.end(), d.who.rank) != g.second.end();
                             }) != groups.end();
      if (reported) continue;
      const std::string text = stop_phrase(d).substr(std::strlen("stopped "));
      auto it = std::find_if(recorded.begin(), recorded.end(), [&](const auto& g) { return g.first == text; });
      if (it == recorded.end()) it = recorded.insert(recorded.end(), {text, {}});
      it->second.push_back(d.who);
      items.push_back({{"file", nullptr},
                       {"rank", rank_json(d.who.rank)},
                       {"reason", recorder::stop_reason_name(d.stop_reason)},
                       {"batch_number", d.stop_batch_known ? json(d.stop_batch) : json(nullptr)},
                       {"message", text}});
      if (!requested_stop(d)) a->nothing_wrong = false;
    }
  }
  a->fields["stops"] = std::move(items);
  if (groups.empty() && recorded.empty()) {
    a->lines.push_back("stopped: none");
    return;
  }
  std::vector<std::string> parts;
  for (const auto& [key, ranks] : groups) {
    const auto& [reason, batch] = key;
    const std::string n = batch ? std::to_string(*batch) : std::string("?");
    std::string text = ranks_phrase(ranks);
    if (reason == "abort_after_batch") {
      text += " after batch " + n + " (" + kAbortAfterBatchVariable + ")";
    } else if (reason == "nonfinite") {
      text += " on inf/nan in batch " + n + " (" + kAbortOnNonfiniteVariable + ")";
    } else if (reason.empty() && !batch) {
      text += " (reason unknown)";
    } else {
      text += " in batch " + n + (reason.empty() ? "" : " (" + reason + ")");
    }
    parts.push_back(text);
  }
  for (const auto& [text, who] : recorded) parts.push_back(processes_phrase(who) + " " + text);
  a->lines.push_back("stopped: " + join_capped(parts, "; "));
}

// "ncclAllReduce (communicator 3f2a9c, call #5)", "ncclRecv (communicator 3f2a9c, call #10 with peer 0)",
// "ncclCommInitRank".
std::string call_phrase(const recorder::Record& r) {
  const recorder::Op op = static_cast<recorder::Op>(r.op);
  const char* name = recorder::op_name(op);
  std::string text = std::strcmp(name, "unknown") == 0 ? "op#" + std::to_string(r.op) : std::string(name);
  std::vector<std::string> details;
  if (r.comm_id != 0) details.push_back("communicator " + recorder::short_hex_id(r.comm_id));
  if (recorder::is_collective(op) || recorder::is_point_to_point(op)) {
    std::string number = "call #" + std::to_string(r.seq);
    if (recorder::is_point_to_point(op) && r.peer >= 0) number += " with peer " + std::to_string(r.peer);
    details.push_back(number);
  }
  if (!details.empty()) text += " (" + join(details, ", ") + ")";
  return text;
}

// What the summary says about one process, in parts: processes said the same way are one line.
struct ProcessLine {
  std::string end;       // "stopped by trainscope (mismatch, status 86)", "exited with status 3", ...
  std::string call;      // "waiting in ncclAllReduce (...)" / "was waiting in ..." ("" when every call returned)
  std::string more;      // "(and 2 more calls that had not returned)"
  std::string records;   // "records unreadable (all 12 torn)", "3 torn records skipped"
  bool notable = false;  // worth a line (a plain "exited" or "running" with nothing else is not)
  bool clean = true;     // counts for "nothing went wrong"
  uint64_t since_ns = 0;
};

// The end of a process that trainscope stopped, from its recorder: "stopped by trainscope (mismatch, status 86)".
std::string stop_phrase(const recorder::ProcessDetail& d) {
  std::string why = recorder::stop_reason_name(d.stop_reason);
  if (d.stop_reason == static_cast<uint32_t>(recorder::StopReason::kAbortAfterBatch) && d.stop_batch_known)
    why += " " + std::to_string(d.stop_batch);
  if (d.exit_status_known) why += ", status " + std::to_string(d.exit_status);
  return "stopped by trainscope (" + why + ")";
}

bool requested_stop(const recorder::ProcessDetail& d) {
  return d.state == "stopped" && d.stop_reason == static_cast<uint32_t>(recorder::StopReason::kAbortAfterBatch);
}

ProcessLine describe(const recorder::ProcessDetail& d, const std::optional<JobEnd>& job) {
  ProcessLine line;
  if (d.state == "stopped") {
    line.end = stop_phrase(d);
    line.notable = true;
    line.clean = requested_stop(d);  // stopping after batch N is what was asked for
  } else if (d.state == "exited") {
    line.end = "exited";
    if (d.exit_status_known && d.exit_status != 0) {
      line.end = "exited with status " + std::to_string(d.exit_status);
      line.notable = true;
      line.clean = false;
    }
  } else if (d.state == "crashed_or_killed") {
    // The job's only process, whose wait status `trainscope run` has, is named with its signal.
    if (job && job->signaled && job->pid == d.who.pid) {
      line.end = "killed by " + signal_name(job->signal);
    } else {
      line.end = "crashed or killed (no clean exit; its process is gone)";
    }
    line.notable = true;
    line.clean = false;
  } else if (d.state == "running") {
    line.end = "running";
  } else if (d.state == "running_unverified") {
    line.end = "on another host (cannot tell whether it runs)";
  } else {
    line.end = "in an unknown state";
    line.notable = true;
    line.clean = false;
  }
  if (d.pending_calls > 0) {
    line.call = std::string(d.gone ? "was waiting in " : "waiting in ") + call_phrase(d.newest_pending.record);
    line.since_ns = d.newest_pending.record.start_ns;
    if (d.pending_calls > 1) {
      line.more = "(and " + plural(d.pending_calls - 1, "more call", "more calls") + " that had not returned)";
    }
    line.notable = true;
    line.clean &= requested_stop(d);  // a stop the user asked for cuts the call it meets short
  }
  if (d.torn_records > 0) {
    line.records = d.records_held == 0
                       ? "records unreadable (all " + std::to_string(d.torn_records) + " torn)"
                       : plural(d.torn_records, "torn record", "torn records") + " skipped (unreadable)";
    line.notable = true;
    // A stop the user asked for can meet a thread half-way through its record, as it can meet it inside a call.
    line.clean &= requested_stop(d) && d.records_held > 0;
  }
  return line;
}

json detail_json(const recorder::ProcessDetail& d, const ProcessLine& line) {
  json waiting = nullptr;
  if (d.pending_calls > 0) {
    const recorder::Record& r = d.newest_pending.record;
    const char* name = recorder::op_name(static_cast<recorder::Op>(r.op));
    waiting = {{"op", name},
               {"communicator", r.comm_id != 0 ? json(recorder::hex_id(r.comm_id)) : json(nullptr)},
               {"seq", r.seq},
               {"record", d.newest_pending.index},
               {"since_ns", r.start_ns},
               {"process_gone", d.gone},
               {"calls", d.pending_calls}};
  }
  json stop = nullptr;
  if (d.state == "stopped") {
    stop = {{"reason", recorder::stop_reason_name(d.stop_reason)},
            {"communicator", d.stop_comm_id != 0 ? json(recorder::hex_id(d.stop_comm_id)) : json(nullptr)},
            {"seq", d.stop_seq != 0 ? json(d.stop_seq) : json(nullptr)},
            {"batch_number", d.stop_batch_known ? json(d.stop_batch) : json(nullptr)},
            {"report_missing", d.stop_report_missing}};
  }
  return {{"rank", rank_json(d.who.rank)},
          {"pid", d.who.pid},
          {"file", d.file},
          {"state", d.state},
          {"text", line.end},
          {"exit_status", d.exit_status_known ? json(d.exit_status) : json(nullptr)},
          {"stop", std::move(stop)},
          {"waiting", std::move(waiting)},
          {"records_total", d.records_total},
          {"records_held", d.records_held},
          {"torn_records", d.torn_records},
          {"reports_unwritten", d.reports_unwritten}};
}

constexpr size_t kShownProcessLines = 8;  // process lines shown before "and N more"

void processes_line(const RunSummary& summary, Analysis* a) {
  if (!summary.processes) {
    a->fields["processes"] = nullptr;
    a->lines.push_back("processes: no flight recorder (*.tsrec) in the run directory");
    return;
  }
  const ProcessOverview& p = *summary.processes;
  // The processes that exited by themselves, by status (0 or not said: plain "exited").
  std::map<int32_t, std::vector<ProcessRef>> by_status;
  size_t exited_plainly = p.exited;
  for (const recorder::ProcessDetail& d : p.details) {
    if (d.state == "exited" && d.exit_status_known && d.exit_status != 0) {
      by_status[d.exit_status].push_back(d.who);
      --exited_plainly;
    }
  }
  // One line per way of ending that needs a look; processes that ended the same way share it.
  struct Group {
    ProcessLine line;
    std::vector<ProcessRef> who;
  };
  std::vector<Group> groups;
  json details = json::array();
  bool clean = true;
  for (const recorder::ProcessDetail& d : p.details) {
    const ProcessLine line = describe(d, summary.job);
    details.push_back(detail_json(d, line));
    clean &= line.clean;
    if (!line.notable) continue;
    auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) {
      return std::tie(g.line.end, g.line.call, g.line.more, g.line.records) ==
             std::tie(line.end, line.call, line.more, line.records);
    });
    if (it == groups.end()) it = groups.insert(groups.end(), Group{line, {}});
    it->line.since_ns = std::min(it->line.since_ns, line.since_ns);
    it->who.push_back(d.who);
  }
  json unreadable = json::array();
  for (const recorder::FileError& e : p.errors) {
    const std::string name = e.path.substr(e.path.rfind('/') + 1);
    const std::string what = e.message.starts_with(e.path + ": ") ? e.message.substr(e.path.size() + 2) : e.message;
    unreadable.push_back({{"file", name}, {"error", what}});
  }
  a->fields["processes"] = {{"recorded", p.recorded},
                            {"unreadable", p.unreadable},
                            {"exited", p.exited},
                            {"stopped", refs_json(p.stopped)},
                            {"running", p.running},
                            {"running_unverified", p.running_unverified},
                            {"unknown_state", p.unknown_state},
                            {"crashed_or_killed", refs_json(p.crashed)},
                            {"did_not_return", refs_json(p.did_not_return)},
                            {"pending", refs_json(p.pending)},
                            {"details", std::move(details)},
                            {"unreadable_files", unreadable}};
  // A call cut short by a stop the user asked for (TRAINSCOPE_ABORT_AFTER_BATCH) is what a stop does.
  const bool unexplained_calls =
      std::any_of(p.did_not_return.begin(), p.did_not_return.end(), [&](const ProcessRef& r) {
        return std::none_of(p.details.begin(), p.details.end(), [&](const recorder::ProcessDetail& d) {
          return d.who.pid == r.pid && d.who.rank == r.rank && requested_stop(d);
        });
      });
  if (!clean || !p.crashed.empty() || unexplained_calls || !p.pending.empty() || p.unreadable != 0)
    a->nothing_wrong = false;
  std::string line = "processes: " + std::to_string(p.recorded) + " recorded";
  if (p.unreadable != 0) line += ", " + plural(p.unreadable, "recorder file", "recorder files") + " unreadable";
  std::vector<std::string> states;
  if (exited_plainly != 0) states.push_back(std::to_string(exited_plainly) + " exited");
  for (const auto& [status, who] : by_status) {
    states.push_back(std::to_string(who.size()) + " exited with status " + std::to_string(status) + " (" +
                     processes_phrase(who) + ")");
  }
  if (!p.stopped.empty())
    states.push_back(std::to_string(p.stopped.size()) + " stopped by trainscope (" + processes_phrase(p.stopped) + ")");
  if (!p.crashed.empty())
    states.push_back(std::to_string(p.crashed.size()) + " crashed or killed (" + processes_phrase(p.crashed) + ")");
  if (p.running != 0) states.push_back(std::to_string(p.running) + " running");
  if (p.running_unverified != 0)
    states.push_back(std::to_string(p.running_unverified) + " on other hosts, state unknown");
  if (p.unknown_state != 0) states.push_back(std::to_string(p.unknown_state) + " in an unknown state");
  if (!states.empty()) line += ": " + join(states, ", ");
  std::vector<std::string> calls;
  if (!p.did_not_return.empty()) {
    calls.push_back((p.did_not_return.size() == 1 ? "a call never returned on " : "calls never returned on ") +
                    processes_phrase(p.did_not_return));
  }
  if (!p.pending.empty()) calls.push_back("calls still pending on " + processes_phrase(p.pending));
  if (calls.empty() && p.recorded != 0) calls.push_back("every call returned");
  if (!calls.empty()) line += "; " + join(calls, "; ");
  a->lines.push_back(line);

  // Then each way of ending that needs a look, and each recorder that could not be read: indented under it.
  std::vector<std::string> sub;
  for (const Group& g : groups) {
    std::vector<std::string> parts = {g.line.end};
    if (!g.line.call.empty()) {
      std::string call = g.line.call + " since " + recorder::utc_time_of_day(g.line.since_ns) + " UTC";
      if (!g.line.more.empty()) call += " " + g.line.more;
      parts.push_back(call);
    }
    if (!g.line.records.empty()) parts.push_back(g.line.records);
    sub.push_back("  " + processes_phrase(g.who) + ": " + join(parts, "; "));
  }
  for (const json& u : unreadable)
    sub.push_back("  " + u["file"].get<std::string>() + ": unreadable (" + u["error"].get<std::string>() + ")");
  if (sub.size() > kShownProcessLines + 1) {
    const size_t more = sub.size() - kShownProcessLines;
    sub.resize(kShownProcessLines);
    sub.push_back("  and " + std::to_string(more) + " more (trainscope report lists every process)");
  }
  for (std::string& s : sub) a->lines.push_back(std::move(s));
}

// How the job `trainscope run` started ended.
void job_line(const RunSummary& summary, bool only_requested_stops, Analysis* a) {
  if (!summary.job) {
    a->fields["job"] = nullptr;
    return;
  }
  const JobEnd& job = *summary.job;
  json field = job_end_json(job);
  field.erase("kind");
  a->fields["job"] = std::move(field);
  if (job.signaled) {
    a->nothing_wrong = false;
    a->lines.push_back("job: killed by " + signal_name(job.signal));
    return;
  }
  const int status = job.exit_status;
  std::string line = "job: exited with status " + std::to_string(status);
  constexpr int kVerdictStatus = 86;  // the engine's kVerdictExitCode and kStopExitCode
  constexpr int kStopStatus = 87;
  if (status == kVerdictStatus) {
    line += " (trainscope stopped it: a mismatch, desync or vanished rank)";
  } else if (status == kStopStatus) {
    line += " (trainscope stopped it: inf/nan abort or TRAINSCOPE_ABORT_AFTER_BATCH)";
  } else if (status > 128 && status <= 128 + 64) {
    line += " (128 + " + std::to_string(status - 128) + ": a process was killed by " + signal_name(status - 128) +
            ", as launchers and shells report it)";
  }
  if (status != 0 && !(status == kStopStatus && only_requested_stops)) a->nothing_wrong = false;
  a->lines.push_back(line);
}

// Reports that could not be written: the coordinator's (`trainscope run` heard it say so, or rank 0's recorder
// holds what the coordinator it hosted said), each rank's own, and the verdicts that came without their report.
void unwritten_line(const RunSummary& summary, Analysis* a) {
  std::vector<UnwrittenReport> items = summary.unwritten;
  std::vector<ProcessRef> missing_verdict_report;
  if (summary.processes) {
    for (const recorder::ProcessDetail& d : summary.processes->details) {
      if (d.stop_report_missing) missing_verdict_report.push_back(d.who);
      if (d.reports_unwritten == 0) continue;
      UnwrittenReport u;
      u.report = d.unwritten_report.empty() ? std::string("a report") : d.unwritten_report;
      u.cause = d.unwritten_cause;
      u.by = d.who.rank >= 0 ? "rank " + std::to_string(d.who.rank) : "pid " + std::to_string(d.who.pid);
      if (d.reports_unwritten > 1) u.by += ", and " + std::to_string(d.reports_unwritten - 1) + " more";
      items.push_back(std::move(u));
    }
  }
  // A verdict that came without its report, with nothing here to say why: the coordinator's log does.
  if (items.empty() && !missing_verdict_report.empty()) {
    items.push_back({"the report of the verdict that stopped " + processes_phrase(missing_verdict_report), "",
                     "the coordinator; its log says why"});
  }
  // The same file failing for several processes (rank 0's coordinator and trainscope run's) is named once.
  std::vector<UnwrittenReport> unique;
  for (UnwrittenReport& u : items) {
    auto it = std::find_if(unique.begin(), unique.end(),
                           [&](const UnwrittenReport& v) { return v.report == u.report && v.cause == u.cause; });
    if (it == unique.end()) unique.push_back(std::move(u));
  }
  json field = json::array();
  std::vector<std::string> parts;
  for (const UnwrittenReport& u : unique) {
    field.push_back({{"report", u.report}, {"cause", string_or_null(u.cause)}, {"by", u.by}});
    parts.push_back(u.report + ": " + (u.cause.empty() ? std::string("cause not known") : u.cause) + " (" + u.by + ")");
  }
  a->fields["unwritten"] = std::move(field);
  if (parts.empty()) return;
  a->nothing_wrong = false;
  a->lines.push_back("could not write " + join_capped(parts, "; "));
}

// "pid 812 (python3.11 on node7)"
std::string note_process(const NcclWithoutCalls& n) {
  std::string text = (n.rank >= 0 ? "rank " + std::to_string(n.rank) + " pid " : "pid ") + std::to_string(n.pid);
  const std::string exe = n.exe.empty() ? std::string() : fs::path(n.exe).filename().string();
  if (!exe.empty() || !n.host.empty())
    text += " (" + exe + (exe.empty() || n.host.empty() ? "" : " on ") + n.host + ")";
  return text;
}

// Processes that loaded NCCL and made no communicator. A rank's own process that did so hides its NCCL from us
// (linked statically): that run is not clean. A launcher (no rank) or a helper of a rank that did make one (a
// data-loader worker that imported the framework) is expected, and only listed. So is a process that never loaded
// the CUDA driver: it ran on the CPU (torch with gloo), where no NCCL runs, linked statically or not. And a job
// `trainscope run` started in which no process recorded a communicator at all is said to be so.
void nccl_calls_line(const RunSummary& summary, Analysis* a) {
  const bool none_recorded = summary.recorders_with_communicators == 0;
  std::vector<const NcclWithoutCalls*> unexplained, helpers, on_the_cpu;
  for (const NcclWithoutCalls& n : summary.nccl_without_calls) {
    const bool rank_used_nccl =
        n.rank >= 0 && std::find(summary.ranks_with_communicators.begin(), summary.ranks_with_communicators.end(),
                                 n.rank) != summary.ranks_with_communicators.end();
    if (rank_used_nccl || (n.rank < 0 && !none_recorded)) {
      helpers.push_back(&n);
    } else if (n.cuda_driver == false) {
      on_the_cpu.push_back(&n);
    } else {
      unexplained.push_back(&n);
    }
  }
  json notes = json::array();
  for (const NcclWithoutCalls& n : summary.nccl_without_calls) {
    const bool helper = std::find(helpers.begin(), helpers.end(), &n) != helpers.end();
    notes.push_back({{"file", n.file},
                     {"rank", rank_json(n.rank)},
                     {"pid", n.pid},
                     {"host", n.host},
                     {"exe", n.exe},
                     {"nccl", n.nccl},
                     {"calls", n.calls},
                     {"cuda_driver", n.cuda_driver ? json(*n.cuda_driver) : json(nullptr)},
                     {"helper", helper}});
  }
  const bool nothing_seen = summary.job_started && none_recorded && summary.nccl_without_calls.empty();
  a->fields["nccl_without_calls"] = {{"processes", std::move(notes)},
                                     {"unexplained", unexplained.size()},
                                     {"on_the_cpu", on_the_cpu.size()},
                                     {"no_nccl_call_in_job", nothing_seen || (none_recorded && !unexplained.empty())}};
  std::vector<std::string> parts;
  // A process whose recorder holds NCCL calls (ncclGetUniqueId) reached our hooks: its NCCL is not hidden from us, it
  // just made no communicator (a rank that ended, or failed, before creating one).
  std::vector<std::string> silent, ended_early;
  for (const NcclWithoutCalls* n : unexplained)
    (n->calls > 0 ? ended_early : silent)
        .push_back(note_process(*n) + (n->calls > 0 ? ", " + plural(n->calls, "call", "calls") : std::string()));
  if (!silent.empty()) {
    parts.push_back(plural(silent.size(), "process", "processes") +
                    " loaded libnccl but no NCCL call was seen: NCCL may be linked statically into the job (" +
                    join_capped(silent, ", ") + "; " + unexplained.front()->nccl + ")");
  }
  if (!ended_early.empty()) {
    parts.push_back(plural(ended_early.size(), "process", "processes") +
                    " called NCCL but made no communicator: it ended before creating one (" +
                    join_capped(ended_early, ", ") + ")");
  }
  if (!unexplained.empty()) a->nothing_wrong = false;
  if (nothing_seen) {
    parts.push_back(
        "no process of this job recorded an NCCL call: NCCL may be linked statically into the job "
        "(trainscope sees calls into a shared libnccl only), or the job never reached NCCL");
    a->nothing_wrong = false;
  }
  if (!on_the_cpu.empty()) {
    std::vector<std::string> who;
    for (const NcclWithoutCalls* n : on_the_cpu) who.push_back(note_process(*n));
    parts.push_back(plural(on_the_cpu.size(), "process", "processes") +
                    " loaded libnccl but never the CUDA driver, so ran no NCCL: a job on the CPU, whose collectives "
                    "(gloo, MPI) trainscope does not watch (" +
                    join_capped(who, ", ") + ")");
  }
  if (!helpers.empty()) {
    std::vector<std::string> who;
    for (const NcclWithoutCalls* n : helpers) who.push_back(note_process(*n));
    parts.push_back(plural(helpers.size(), "other process", "other processes") +
                    " loaded libnccl without calling it, as launchers and data-loader workers do (" +
                    join_capped(who, ", ") + ")");
  }
  if (!parts.empty()) a->lines.push_back("NCCL calls: " + join(parts, "; "));
}

void setup_line(const RunSummary& summary, Analysis* a) {
  if (!summary.manifest_exists || !summary.has_manifest) {
    a->fields["setup"] = nullptr;
    a->lines.push_back(summary.manifest_exists ? "setup: manifest.json could not be read" : "setup: no manifest.json");
    return;
  }
  const std::optional<uint64_t> world = uint_member(summary.manifest, "world_size");
  std::vector<std::string> warnings;
  const json* w = member(summary.manifest, "warnings");
  if (w != nullptr && w->is_array()) {
    for (const json& e : *w)
      if (e.is_string()) warnings.push_back(e.get<std::string>());
  }
  a->fields["setup"] = {{"world_size", optional_json(world)}, {"warnings", warnings}};
  std::string line = "setup: ";
  if (world) line += "world size " + std::to_string(*world) + (warnings.empty() ? ", " : "; ");
  line +=
      warnings.empty() ? "no warnings" : plural(warnings.size(), "warning", "warnings") + ": " + join(warnings, "; ");
  a->lines.push_back(line);
}

void traces_line(const RunSummary& summary, Analysis* a) {
  json items = json::array();
  std::vector<std::pair<std::string, std::vector<int32_t>>> groups;  // batches text -> ranks
  for (const TraceFile& t : summary.traces) {
    items.push_back({{"file", t.file},
                     {"rank", rank_json(t.rank)},
                     {"batches", t.batches_known ? json(t.batches) : json(nullptr)},
                     {"nonfinite_batches", t.batches_known ? json(t.nonfinite_batches) : json(nullptr)}});
    const std::string key = t.batches_known ? batches_phrase(t.batches) : std::string();
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == key; });
    if (it == groups.end()) it = groups.insert(groups.end(), {key, {}});
    it->second.push_back(t.rank);
  }
  a->fields["traces"] = std::move(items);
  if (groups.empty()) return;
  std::vector<std::string> parts;
  for (const auto& [batches, ranks] : groups)
    parts.push_back(batches.empty() ? ranks_phrase(ranks) : batches + " on " + ranks_phrase(ranks));
  // Detection is off in traced batches: an inf the trace shows is reported nowhere else, and is no clean run.
  std::vector<std::pair<std::string, std::vector<int32_t>>> nonfinite;  // batches text -> ranks
  for (const TraceFile& t : summary.traces) {
    if (t.nonfinite_batches.empty()) continue;
    const std::string key = "traced " + batches_phrase(t.nonfinite_batches);
    auto it = std::find_if(nonfinite.begin(), nonfinite.end(), [&](const auto& g) { return g.first == key; });
    if (it == nonfinite.end()) it = nonfinite.insert(nonfinite.end(), {key, {}});
    it->second.push_back(t.rank);
  }
  std::vector<std::string> seen;
  for (const auto& [batches, ranks] : nonfinite) seen.push_back(batches + " on " + ranks_phrase(ranks));
  std::string line = "traces: " + join_capped(parts, "; ");
  if (!seen.empty()) {
    line += "; inf/nan in " + join_capped(seen, "; ") + " (detection is off in traced batches)";
    a->nothing_wrong = false;
  }
  a->lines.push_back(line);
}

void unreadable_line(const RunSummary& summary, Analysis* a) {
  json items = json::array();
  std::vector<std::string> parts;
  for (const UnreadableFile& u : summary.unreadable) {
    items.push_back({{"file", u.file}, {"error", u.error}});
    parts.push_back(u.file + " (" + u.error + ")");
  }
  a->fields["unreadable"] = std::move(items);
  if (parts.empty()) return;
  a->nothing_wrong = false;
  a->lines.push_back("could not read: " + join(parts, "; "));
}

// A run read from several folders: which folder held which ranks, so that a wrong or stale copy shows.
void folders_line(const RunSummary& summary, Analysis* a) {
  if (summary.folders.empty()) {
    a->fields["folders"] = nullptr;
    return;
  }
  json items = json::array();
  std::vector<std::string> parts;
  for (const RunSummary::Folder& f : summary.folders) {
    std::vector<std::string> held;
    if (!f.ranks.empty()) held.push_back(ranks_phrase(f.ranks));
    if (f.recorders > f.ranks.size())
      held.push_back(plural(f.recorders - f.ranks.size(), "recorder", "recorders") + " without a launcher rank");
    if (f.reports > 0) held.push_back(plural(f.reports, "report", "reports"));
    if (held.empty()) held.push_back("nothing of the run");
    parts.push_back(f.path + " (" + join(held, ", ") + ")");
    items.push_back({{"path", f.path},
                     {"ranks", f.ranks},
                     {"recorders", f.recorders},
                     {"reports", f.reports},
                     {"run_ids", f.run_ids}});
  }
  std::set<std::string> run_ids;
  for (const RunSummary::Folder& f : summary.folders) run_ids.insert(f.run_ids.begin(), f.run_ids.end());
  std::string line =
      "run folders: " + std::to_string(summary.folders.size()) + " read as one run: " + join(parts, "; ");
  // Copies of one run share its run id: folders of different runs read together would mislead every line above.
  if (run_ids.size() > 1) {
    line += "; their recorders name different runs (" +
            join(std::vector<std::string>(run_ids.begin(), run_ids.end()), ", ") + "): are these copies of one run?";
  }
  a->fields["folders"] = std::move(items);
  a->lines.push_back(line);
}

// Ranks of the launcher's world with no flight recorder among the folders read: on a job of several hosts, a host
// whose copy of the run folder is missing. Named with their hosts where the manifest knows them.
void missing_recorders_line(const RunSummary& summary, Analysis* a) {
  if (summary.missing_ranks.empty()) {
    a->fields["missing_recorders"] = nullptr;
    return;
  }
  std::map<std::string, std::vector<int32_t>> by_host;
  std::set<int32_t> placed;
  const json* ranks = summary.has_manifest ? member(summary.manifest, "ranks") : nullptr;
  if (ranks != nullptr && ranks->is_array()) {
    const std::set<int32_t> missing(summary.missing_ranks.begin(), summary.missing_ranks.end());
    for (const json& r : *ranks) {
      const std::optional<uint64_t> rank = uint_member(r, "launcher_rank");
      const std::string host = string_member(r, "host");
      if (!rank || host.empty() || !missing.contains(static_cast<int32_t>(*rank))) continue;
      if (placed.insert(static_cast<int32_t>(*rank)).second) by_host[host].push_back(static_cast<int32_t>(*rank));
    }
  }
  std::vector<std::string> hosts;
  json hosts_json = json::object();
  for (const auto& [host, host_ranks] : by_host) {
    hosts.push_back(ranks_phrase(host_ranks) + " on " + host);
    hosts_json[host] = host_ranks;
  }
  a->fields["missing_recorders"] = {
      {"world_size", summary.launcher_world}, {"ranks", summary.missing_ranks}, {"hosts", hosts_json}};
  const bool several = summary.folders.size() > 1;
  // An unreadable recorder may be one of theirs: its rank cannot be told, so only a readable one is said missing.
  const size_t unreadable = summary.processes ? summary.processes->unreadable : 0;
  std::string line = "missing recorders: " + ranks_phrase(summary.missing_ranks) + " of a world of " +
                     std::to_string(summary.launcher_world) + " left no " + (unreadable > 0 ? "readable " : "") +
                     "flight recorder in " + (several ? "the folders read" : "this folder");
  if (!hosts.empty()) line += " (" + join(hosts, "; ") + ", by the manifest)";
  if (unreadable > 0) line += " (" + plural(unreadable, "recorder file", "recorder files") + " unreadable)";
  line +=
      ": on a job of several hosts, copy each host's run folder back and read them together: trainscope report "
      "DIR1 DIR2 ...";
  a->lines.push_back(line);
}

// Every stop was one the user asked for (TRAINSCOPE_ABORT_AFTER_BATCH), and there was one: a job status of 87 is
// then what was asked for.
bool only_requested_stops(const RunSummary& summary) {
  bool any = false;
  for (const ReportFiles* r : reports_of(summary, ReportKind::kStop)) {
    if (!r->has_json || string_member(r->json, "reason") != "abort_after_batch") return false;
    any = true;
  }
  if (summary.processes) {
    for (const recorder::ProcessDetail& d : summary.processes->details) {
      if (d.state != "stopped") continue;
      if (!requested_stop(d)) return false;
      any = true;
    }
  }
  return any;
}

// "rank 3: first CUDA error: <what, when, after which kernel>", one line per process that had one: from its recorder,
// else (its recorder gone or unreadable) from its cuda-error report's JSON "summary" or its text's first line.
void cuda_error_lines(const RunSummary& summary, Analysis* a) {
  std::vector<std::pair<int32_t, std::string>> errors;  // rank, what
  json items = json::array();
  std::set<int32_t> ranks_said;
  if (summary.processes) {
    for (const recorder::ProcessDetail& d : summary.processes->details) {
      if (d.first_cuda_error.empty()) continue;
      errors.emplace_back(d.who.rank, d.first_cuda_error);
      ranks_said.insert(d.who.rank);
      items.push_back({{"rank", rank_json(d.who.rank)},
                       {"pid", d.who.pid},
                       {"file", nullptr},
                       {"cuda_errors", d.cuda_errors},
                       {"first", d.first_cuda_error}});
    }
  }
  for (const ReportFiles* r : reports_of(summary, ReportKind::kCudaError)) {
    if (r->rank >= 0 && ranks_said.count(r->rank) != 0) continue;
    std::string what = r->has_json ? string_member(r->json, "summary") : std::string();
    if (what.empty() && r->has_text) {
      const std::vector<std::string> lines = non_empty_lines(r->text);
      if (!lines.empty()) what = lines.front();
    }
    if (what.empty()) what = "see " + source_file(*r);
    errors.emplace_back(r->rank, what);
    items.push_back(
        {{"rank", rank_json(r->rank)},
         {"pid", r->has_json ? json(int_member(r->json, "pid").value_or(0)) : json(nullptr)},
         {"file", source_file(*r)},
         {"cuda_errors", r->has_json ? json(uint_member(r->json, "cuda_errors").value_or(0)) : json(nullptr)},
         {"first", what}});
  }
  a->fields["cuda_errors"] = std::move(items);
  if (errors.empty()) return;
  a->nothing_wrong = false;
  // By rank, unknown ranks last.
  std::stable_sort(errors.begin(), errors.end(), [](const auto& x, const auto& y) {
    return std::make_pair(x.first < 0, x.first) < std::make_pair(y.first < 0, y.first);
  });
  a->lines.push_back("first CUDA errors: " + std::to_string(errors.size()));
  size_t shown = 0;
  for (const auto& [rank, what] : errors) {
    if (shown++ == kShownProcessLines) {
      a->lines.push_back("  and " + std::to_string(errors.size() - kShownProcessLines) + " more");
      break;
    }
    a->lines.push_back("  " + rank_word(rank) + ": first CUDA error: " + what);
  }
}

// What each process's launch collector could do, processes alike on one part: "launches: callbacks and kernel
// completion on ranks 0–3; unavailable on rank 4: CUPTI is in use by another tool". Only when one of them ran or said
// why it could not.
void launches_line(const RunSummary& summary, Analysis* a) {
  if (!summary.processes) {
    a->fields["launches"] = json::array();
    return;
  }
  std::vector<std::pair<std::string, std::vector<ProcessRef>>> modes;  // text -> processes, in order of appearance
  bool any = false;
  json items = json::array();
  for (const recorder::ProcessDetail& d : summary.processes->details) {
    any |= d.launch_mode != static_cast<uint32_t>(recorder::LaunchMode::kNone) || !d.launch_note.empty();
    const std::string text = launch_mode_text(d.launch_mode, d.launch_note);
    auto it = std::find_if(modes.begin(), modes.end(), [&](const auto& m) { return m.first == text; });
    if (it == modes.end()) it = modes.insert(modes.end(), {text, {}});
    it->second.push_back(d.who);
    items.push_back({{"rank", rank_json(d.who.rank)},
                     {"pid", d.who.pid},
                     {"mode", recorder::launch_mode_name(d.launch_mode)},
                     {"note", string_or_null(d.launch_note)}});
  }
  a->fields["launches"] = std::move(items);
  if (!any) return;
  std::vector<std::string> parts;
  for (const auto& [text, who] : modes) {
    // "unavailable: <why>" reads "unavailable on rank 4: <why>".
    const size_t colon = text.find(": ");
    parts.push_back(colon == std::string::npos
                        ? text + " on " + processes_phrase(who)
                        : text.substr(0, colon) + " on " + processes_phrase(who) + text.substr(colon));
  }
  a->lines.push_back("launches: " + join_capped(parts, "; "));
}

}  // namespace trainscope::reports::summary_detail
