// The run as a timeline: the Chrome trace-event JSON that Perfetto (ui.perfetto.dev) and chrome://tracing open.
//
// One process per rank (pid: the global rank; a process whose rank is not known, or a second process of a rank -- a
// restarted one -- gets 1000000 + its pid), named "rank R (pid P, host H)"; in it one track (tid) per communicator,
// named "comm 3f2a9c (rank r of n)", one per CUDA stream the launch collector saw, named "stream 0x7f3a5c001200",
// and one "process" track for what belongs to no communicator or stream (init, group calls, CUDA errors without a
// stream). Times are microseconds from the run's first record (otherData.start_time_ns is that instant, ns since the
// epoch, UTC).
//
// Events, all standard trace-event phases:
//   {"ph":"M", "name":"process_name"|"thread_name"|"process_sort_index"|"thread_sort_index", "pid", "tid", "args"}
//   {"ph":"X", "cat":"nccl", "name":"ncclAllReduce", "ts", "dur", "pid", "tid",
//    "args":{"op", "comm", "seq", "count", "type", "redop", "peer"|"root", "result", "record", "python"?}}
//        a call that never returned: dur reaches the end of the trace, args.result "pending (never returned)"; when
//        nothing is known after such calls (every rank hung in its last one), the end is put a little after the last
//        of them (2% of the run before it, at least 1 ms) so that they are drawn: otherData.end_after_last_record
//   {"ph":"X", "cat":"launch", "name":<kernel short name>, ..., "args":{"kernel", "grid", "block", "shared", "api",
//    "result", "finished", "record", "capturing"?}}      (the launch API call's own time span, on its stream's track;
//    a graph's launch has no grid, block or shared)
//   {"ph":"X", "cat":"sync", "name":<API function>, ..., "args":{"api", "result", "record"}}   (a synchronisation: on
//    its stream's track, on "process" for a device-, context- or event-wide one)
//   {"ph":"i", "s":"g"|"p", "cat":"verdict"|"nonfinite"|"cuda_error"|"stop"|"step", "name", "ts", "pid", "tid",
//    "args"}
//        verdicts (mismatch, desync, vanished rank) and the first inf/nan of each rank (and the inf/nan origin), the
//        first CUDA error, stops, step markers (TRAINSCOPE_STEP_MARKER=nvtx:...). "tid" is the track it concerns (the
//        verdict's communicator, the error's stream); args.time_of says where a time came from when no report said it
// Nothing is trusted: strings from the files are carried JSON-escaped (invalid UTF-8 replaced).
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "analysis/run_summary.h"
#include "base/flight_recorder_reader.h"

namespace trainscope::reports {

// Writes the trace as one JSON object ({"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}), handed
// to `sink` a batch of events at a time: a run of millions of calls is never held whole.
void write_run_timeline(const recorder::RunDirectory& run, const RunSummary& summary,
                        const std::function<void(std::string_view)>& sink);

// Writes it to `path` (created private, replaced if it exists). False, with `error` naming the file and why, when
// it cannot be written.
bool write_run_timeline_file(const recorder::RunDirectory& run, const RunSummary& summary, const std::string& path,
                             std::string* error);

}  // namespace trainscope::reports
