// The kinds of file a run directory holds and how each is named: written once here for every writer (the shim, the
// engine, the coordinator, `trainscope run`) and for the reader (analysis/run_scan.cc), so that a name cannot be
// written one way and looked for another.
//
// Header-only and constexpr: the preloaded shim (libc only) uses the names; the std::string helpers at the bottom are
// for the engine, the reports and the command.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace trainscope::run_files {

// Files that are not reports.
inline constexpr const char* kRecorderExtension = ".tsrec";           // a process's flight recorder
inline constexpr const char* kLogExtension = ".log";                  // a process's log
inline constexpr const char* kManifestFile = "manifest.json";         // the coordinator's view of the ranks
inline constexpr const char* kJobEndFile = "job-exit.json";           // how the job `trainscope run` started ended
inline constexpr const char* kNoCallsSuffix = ".no-nccl-calls.json";  // a process that loaded NCCL and never called it
inline constexpr const char* kTraceStem = "trace";  // trace-rank<R>.txt / .jsonl (TRAINSCOPE_TRACE_BATCHES)

// The reports, in the order the full reports are shown. Each is a pair <base name>.txt and <base name>.json.
enum class ReportKind : uint8_t {
  kOrigin = 0,
  kMismatch,
  kDesync,
  kVanished,
  kNonfinite,
  kOverflowStreak,
  kNearOverflow,
  kStop,
  kCudaError,    // a process's first CUDA error (reports/cuda_error_report.h)
  kStepSkipped,  // the batches whose optimizer step a loss scaler skipped (inf/nan gradients)
};

// How a kind's base name is made.
enum class ReportNaming : uint8_t {
  kFixed,         // "<stem>" (then "<stem>-2", ... when taken)
  kPerCall,       // "<stem>-<communicator>-<seq>" ("mismatch-p2p-..." for point-to-point mismatches: kPointToPoint)
  kPerRank,       // "<stem>-rank<R>"
  kPerRankOrPid,  // "<stem>-rank<R>", or "<stem>-pid<P>" for a process whose rank is not known
};

struct ReportKindInfo {
  ReportKind kind;
  const char* stem;       // of the base name
  const char* name;       // in the summary and its JSON ("near_overflow")
  const char* json_kind;  // the report JSON's "kind"
  const char* rank_key;   // the JSON key holding the rank of a per-rank report; nullptr: not per rank
  ReportNaming naming;
};

inline constexpr ReportKindInfo kReportKinds[] = {
    {ReportKind::kOrigin, "origin", "origin", "nonfinite_origin", nullptr, ReportNaming::kFixed},
    {ReportKind::kMismatch, "mismatch", "mismatch", "mismatch", nullptr, ReportNaming::kPerCall},
    {ReportKind::kDesync, "desync", "desync", "desync", nullptr, ReportNaming::kPerCall},
    {ReportKind::kVanished, "vanished", "vanished", "vanished", "process", ReportNaming::kPerRank},
    {ReportKind::kNonfinite, "nonfinite", "nonfinite", "inf_nan_detected", "rank", ReportNaming::kPerRankOrPid},
    {ReportKind::kOverflowStreak, "overflow-streak", "overflow_streak", "overflow_streak", "rank",
     ReportNaming::kPerRankOrPid},
    {ReportKind::kNearOverflow, "near-overflow", "near_overflow", "near_overflow", "rank", ReportNaming::kPerRankOrPid},
    {ReportKind::kStop, "stop", "stop", "stop", "rank", ReportNaming::kPerRankOrPid},
    {ReportKind::kCudaError, "cuda-error", "cuda_error", "cuda_error", "process", ReportNaming::kPerRankOrPid},
    {ReportKind::kStepSkipped, "step-skipped", "step_skipped", "step_skipped", "rank", ReportNaming::kPerRankOrPid},
};

constexpr const ReportKindInfo& info_of(ReportKind kind) { return kReportKinds[static_cast<size_t>(kind)]; }

constexpr bool kinds_in_enum_order() {
  for (size_t i = 0; i < std::size(kReportKinds); ++i)
    if (static_cast<size_t>(kReportKinds[i].kind) != i) return false;
  return true;
}
static_assert(kinds_in_enum_order(), "kReportKinds is indexed by ReportKind");

// "nonfinite-rank3", or "nonfinite-pid4711" while the process's rank is not known (a one-process job started without a
// launcher): two such processes in one run directory keep files of their own. Traces are named so too.
inline std::string per_process_name(std::string_view stem, int32_t rank, int32_t pid) {
  return std::string(stem) + (rank >= 0 ? "-rank" + std::to_string(rank) : "-pid" + std::to_string(pid));
}
inline std::string per_process_name(ReportKind kind, int32_t rank, int32_t pid) {
  return per_process_name(info_of(kind).stem, rank, pid);
}

// The prefixes a reader matches base names with: "nonfinite-rank", "nonfinite-pid", "mismatch-", "origin".
inline std::string rank_prefix(const ReportKindInfo& info) { return std::string(info.stem) + "-rank"; }
inline std::string pid_prefix(const ReportKindInfo& info) { return std::string(info.stem) + "-pid"; }
inline std::string call_prefix(const ReportKindInfo& info) { return std::string(info.stem) + "-"; }
inline constexpr const char* kPointToPoint = "p2p-";  // after a mismatch's call prefix: "mismatch-p2p-3f2a9c-5"

}  // namespace trainscope::run_files
