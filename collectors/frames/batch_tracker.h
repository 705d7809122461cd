// Batch tracking without code changes: where a training batch starts, from NCCL calls or NVTX ranges.
//
// TRAINSCOPE_STEP_MARKER chooses the source (parse_step_marker):
//   auto              the period of the job's collective sequence (see "auto" below)
//   nvtx:REGEX        a range push whose name matches REGEX (POSIX extended, matched anywhere in the name, as
//                     grep -E does; the shim checks the same syntax at load) starts a batch
//   collective:REGEX  the first call of a matching NCCL function (op_name, e.g. ncclAllGather) after a call that
//                     did not match starts a batch
//   every:N           every N calls on the first communicator seen (calls 0, N, 2N ... start batches)
// Batch numbers count from 0 as in transformers' DebugUnderflowOverflow. With nvtx/collective markers, calls
// before the first marker belong to batch 0 and the first marker starts batch 0 (a prologue); marker k starts
// batch k. With auto/every, the first call starts batch 0.
//
// Not thread-safe: one thread at a time feeds it, in call order (the frame thread its records; the abort-after-batch
// gate, shim/engine/job_thread/engine_batches.h, the job threads' calls under its lock).
//
// ---- auto ------------------------------------------------------------------------------------------------------
// Every call gives a 64-bit signature (op, communicator, count, dtype). For a candidate period P (1..max_period),
// run[P] is the number of consecutive latest calls with sig[n] == sig[n-P]. The tracker keeps it only for the lags
// that can become confirmed periods, found from where the latest calls occurred before (lag_runs.h): O(1)
// amortised work per call whatever max_period is, on the background thread, nothing on the job's threads.
//   - A period P is *confirmed* when the last `confirmations` x P calls are `confirmations` copies of one block
//     (run[P] >= (confirmations-1) x P) and they span at least min_confirm_calls calls. Among confirmed periods the
//     one with the longest run wins (ties: the smallest), so multiples of the true period never win.
//   - Learning (no period): the first confirmed period is locked. Its batch boundary (the "period's first call") is
//     the start of the repeating span: the first call from which the stream has been P-periodic. A first step that
//     differs (warm-up, DDP's bucket rebuild, initial broadcasts) lies before that span.
//   - Locked: calls are matched against the learnt cycle with a phase pointer; a call equal to the expected one
//     advances, a call equal to the one after it is taken as one missing call, anything else is an extra call
//     (noise) and is absorbed. More than max_noise extra calls in a row, or more than max_noise + P/4 misses in one
//     cycle, unlock (back to learning, the batch number stays until a period is learnt again: a phase change).
//   - While locked, a *longer* confirmed period whose run is longer than the locked one's replaces it. This is how
//     the step period beats the micro-batch period under gradient accumulation (A A A A B, A = micro-batch):
//     the micro-batch period locks first (3 micro-batches), but the step period, once confirmed (3 steps), explains
//     a longer history (its run covers all steps, the micro-batch run restarts at every B) and takes over.
//     Shorter periods never replace a lock directly (noise would otherwise let a sub-period win); they are learnt
//     only after an unlock.
//   - Numbering: before the first lock every call is batch 0. At a lock the number is *recomputed* from the last
//     batch boundary at or before the new span's start: + 1 for the span start itself (unless the calls between
//     that boundary and the span start are fewer than prologue_fraction x P: a short prologue such as an initial
//     broadcast, merged into the batch) + one per further cycle start. Numbers are corrected forward only in the
//     counter: events already returned (and reports made from them) keep the numbers they had. So the first
//     `confirmations` batches are reported late (the lock event says renumbered), and under gradient accumulation
//     the numbers counted on micro-batches before the step period is confirmed are too high until the correction.
//   - Settled calls: a call's number is *settled* when it is fed while a period is locked, or when a later lock
//     numbers it (the calls before the first lock, the calls between a loss and the relock). settled() says how
//     many of the first calls are; batch_of(position) gives the number of one of them as the tracker knows it now
//     (every cycle start of a lock is kept as a boundary, the last kMaxBoundaries of them). A caller that holds
//     what it learnt of unsettled calls can number them once they are settled (collectors/frames/held_frames.h).
//     nvtx, collective and every settle every call as it is fed.
// ---- auto with optimizer kernels ---------------------------------------------------------------------------------
// When the launch collector sees the job's kernels, auto also takes the optimizer's step as the end of a batch
// (on_launch): the first optimizer kernel (multi_tensor_apply with an optimizer functor, fused Adam/AdamW/SGD/LAMB;
// which kernels count is the caller's predicate, collectors/launches/kernel_names.h) after other work ends the
// batch, and the next work that is not the optimizer's (a launch or a call) starts the next one. From the first
// optimizer kernel on, the period of the calls is no longer learnt: every call and launch is settled as it is fed,
// the calls fed before it keep the numbers auto gave them (batch 0 when no period was locked yet: the first step),
// and the optimizer's kernels belong to the batch they end. Optimizer kernels that are not the last work of a step
// (a param group's step between other kernels) end one batch each: the predicate must name step kernels only.
//
// Limits: the phase of a cycle is a guess (the start of the repeating span); a job that starts mid-cycle or whose
// new phase repeats the previous phase's last calls gets a shifted boundary. Periods above max_period (default
// 4096 calls) are never found. A step whose collective sequence varies from step to step (data-dependent
// collectives, MoE routing with changing counts) has no period: use nvtx: or collective: markers.
#pragma once

#include <regex.h>

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "collectors/frames/lag_runs.h"

namespace trainscope::batch {

enum class MarkerKind { kAuto, kNvtx, kCollective, kEvery };

// A compiled POSIX extended regular expression (regcomp), searched anywhere in a string.
class MarkerRegex {
 public:
  explicit MarkerRegex(const std::string& pattern);
  ~MarkerRegex();
  MarkerRegex(const MarkerRegex&) = delete;
  MarkerRegex& operator=(const MarkerRegex&) = delete;
  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }  // regerror's text when !ok()
  bool search(const char* text) const;

 private:
  regex_t regex_{};
  bool ok_ = false;
  std::string error_;
};

struct StepMarker {
  MarkerKind kind = MarkerKind::kAuto;
  std::string pattern;      // nvtx / collective: the regex source
  std::uint64_t every = 0;  // every: N
};

// The accepted forms, for error messages: "auto|nvtx:REGEX|collective:REGEX|every:N".
const char* step_marker_forms();

// Parses TRAINSCOPE_STEP_MARKER. On failure returns false and sets *error to a one-line message naming the value
// and the accepted forms (an invalid regex gives the regex library's error).
bool parse_step_marker(const std::string& text, StepMarker* marker, std::string* error);

// One NCCL call as the tracker needs it (from a recorder::Record).
struct CallInfo {
  std::uint16_t op = 0;  // recorder::Op
  std::uint64_t comm_id = 0;
  std::uint64_t count = 0;
  std::int32_t dtype = -1;  // ncclDataType_t or -1
};

// The auto signature of a call: a 64-bit hash of op, communicator, count and dtype.
std::uint64_t call_signature(const CallInfo& call);

// What one fed call or range changed.
struct BatchEvent {
  bool new_batch = false;        // this call / range starts batch `batch`
  bool renumbered = false;       // auto: a period was (re)learnt and the current number was recomputed
  bool period_lost = false;      // auto: the locked period stopped matching (numbering frozen until relearnt)
  bool optimizer_steps = false;  // auto: the first optimizer kernel: batches end at optimizer steps from now on
  std::uint64_t batch = 0;       // the current batch after this call
};

struct AutoOptions {
  std::uint32_t max_period = 4096;
  std::uint32_t confirmations = 3;      // copies of the cycle needed to lock (>= 2)
  std::uint32_t min_confirm_calls = 8;  // and at least this many calls in the repeating span
  std::uint32_t max_noise = 3;          // extra calls in a row absorbed while locked
  double prologue_fraction = 0.5;       // see "Numbering" above
};

class BatchTracker {
 public:
  // `marker` must come from parse_step_marker (a regex that fails to compile here makes the tracker inert).
  explicit BatchTracker(const StepMarker& marker, const AutoOptions& options = {});

  // Every NCCL collective / point-to-point call, in record order.
  BatchEvent on_collective(const CallInfo& call);
  // Every NVTX range push (any thread), in order with the calls.
  BatchEvent on_range_push(std::string_view name);
  // A range push already known to match the nvtx: pattern (the shim records only those, as kStepMarker).
  BatchEvent on_marker();
  // auto: a kernel launch of the job, in record order with the calls; `optimizer`: an optimizer step kernel (see
  // "auto with optimizer kernels" above). Other markers ignore launches.
  BatchEvent on_launch(bool optimizer);
  // auto: batches end at optimizer steps (an optimizer kernel was seen).
  bool optimizer_steps() const { return optimizer_steps_; }

  std::uint64_t current_batch() const { return batch_; }
  // auto: the locked period in calls, 0 while learning.
  std::uint32_t period() const { return locked_period_; }
  const StepMarker& marker() const { return marker_; }

  // Calls fed to on_collective so far: the next call's position (positions count from 0).
  std::uint64_t position() const { return calls_; }
  // Calls 0 .. settled() - 1 have settled numbers (see "Settled calls" above); always position() except under auto.
  std::uint64_t settled() const { return settled_; }
  // The batch of the call at `position` (< settled()) as known now. auto only: under the other markers a call's
  // number is the current_batch() it was fed in, and this returns current_batch(). A position older than the
  // oldest kept boundary gets that boundary's number.
  std::uint64_t batch_of(std::uint64_t position) const;
  static constexpr std::size_t kMaxBoundaries = 4096;  // auto: batch starts remembered for batch_of
  // auto: the steps the period learner took so far (LagRuns::work), for the test that they do not grow with
  // max_period.
  std::uint64_t auto_work() const { return runs_ ? runs_->work() : 0; }

 private:
  static std::array<int8_t, 32> make_unknown_matches() {
    std::array<int8_t, 32> a{};
    a.fill(-1);
    return a;
  }
  BatchEvent auto_step(std::uint64_t sig, std::uint64_t n);
  bool lock(std::uint32_t period, std::uint64_t position);  // true when `position` starts a batch
  void add_boundary(std::uint64_t position, std::uint64_t batch);
  BatchEvent start_batch(std::uint64_t batch);

  StepMarker marker_;
  AutoOptions options_;
  std::unique_ptr<MarkerRegex> regex_;
  std::array<int8_t, 32> op_matches_ = make_unknown_matches();  // collective: per recorder::Op, -1 not yet known
  std::uint64_t batch_ = 0;
  std::uint64_t markers_seen_ = 0;

  // auto with optimizer kernels:
  bool optimizer_steps_ = false;
  bool in_optimizer_run_ = false;  // the latest launch was an optimizer kernel
  bool batch_ended_ = false;       // an optimizer run ended the batch: the next other work starts the next one
  BatchEvent after_optimizer_step(BatchEvent event, std::uint64_t first_position);

  // collective:
  bool previous_matched_ = false;
  // every:
  bool have_first_comm_ = false;
  std::uint64_t first_comm_ = 0;
  std::uint64_t first_comm_calls_ = 0;

  std::uint64_t calls_ = 0;    // calls fed (on_collective)
  std::uint64_t settled_ = 0;  // calls with settled numbers

  // auto:
  std::unique_ptr<LagRuns> runs_;  // the runs of the lags that can be confirmed periods
  std::uint32_t locked_period_ = 0;
  std::vector<std::uint64_t> cycle_;  // the locked cycle, cycle_[0] = the batch's first call
  std::uint32_t phase_ = 0;           // index in cycle_ of the next expected call
  std::uint32_t consecutive_misses_ = 0;
  std::uint32_t cycle_misses_ = 0;
  struct Boundary {
    std::uint64_t position;
    std::uint64_t batch;
  };
  std::deque<Boundary> boundaries_;  // batch starts (position of the first call), oldest first, bounded
};

}  // namespace trainscope::batch
