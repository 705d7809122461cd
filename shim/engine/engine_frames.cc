// The frame thread (see engine_frames.h).
#include "shim/engine/engine_frames.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/clocks.h"
#include "base/printable.h"
#include "base/private_files.h"
#include "base/run_files.h"
#include "base/thread_class.h"
#include "base/wake_flag.h"
#include "collectors/frames/batch_tracker.h"
#include "collectors/frames/frame_window.h"
#include "collectors/frames/held_nonfinite_stops.h"
#include "reports/exchange_reports.h"
#include "reports/frame_report.h"
#include "reports/recorder_report.h"
#include "shim/engine/engine_exchange.h"
#include "shim/engine/engine_frame_feed.h"
#include "shim/engine/engine_ring.h"
#include "shim/engine/engine_stacks.h"
#include "shim/engine/engine_threads.h"
#include "shim/engine/job_thread/engine_kernel_frames.h"
#include "shim/engine/job_thread/engine_watch.h"
#include "shim/engine/shared/engine_logging.h"

namespace trainscope::engine {
namespace {

// How often the frame thread reads the recorder. Each wakeup costs the job a core for a moment where its ranks fill
// them all (whole_job.sh: 5 ms cost the 4-rank loop 1.26x, 20 ms 1.13x); 20 ms is 4,000 calls at 200,000 a second,
// far inside the ring and the board, and a report a human reads comes no later for it.
constexpr auto kFrameInterval = std::chrono::milliseconds(20);
// Under TRAINSCOPE_ON_NONFINITE=abort the coordinator stops every rank; this rank waits that long for its verdict
// before it stops on its own.
constexpr auto kStopVerdictWait = std::chrono::seconds(4);
// TRAINSCOPE_ABORT_AFTER_BATCH, and the process's end: how long the stopping thread waits for device statistics of the
// calls before (a job that exits with work still queued on its GPU: the last batch's frames are the ones that matter).
constexpr auto kStopFramesWait = std::chrono::seconds(2);
// TRAINSCOPE_THREAD_CLASS=idle: the frame thread runs where the job leaves a core idle; on a node whose cores are all
// busy it may not run for seconds. A guard in the job's class wakes this often and, when no pass has ended for as
// long, makes one itself: frames (and an inf/nan's first report, which the coordinator waits 1 s for) are never
// much later than this. While the frame thread keeps up the guard only wakes, 4 times a second.
constexpr auto kGuardInterval = std::chrono::milliseconds(250);
// At exit, how long the job's thread waits for an idle frame thread to end; past it, the thread is left to end on its
// own (it finds the final pass made) rather than hold the job's exit up.
constexpr auto kIdleExitWait = std::chrono::milliseconds(100);

// What a stop needs, whether or not the frame thread runs (set by start_frames; leaked).
struct StopSetup {
  Config config;
  recorder::FileHeader* recorder = nullptr;
  std::string run_dir;
};
StopSetup* g_stop_setup = nullptr;
std::mutex g_stop_run_dir_mutex;  // guards g_stop_setup->run_dir, which moves with the job key (job_key.h)

std::string stop_run_dir(const StopSetup& setup) {
  std::lock_guard<std::mutex> lock(g_stop_run_dir_mutex);
  return setup.run_dir;
}

// Held by the thread that stops the process, never released: a second stop (another thread) waits for the exit.
std::mutex g_stop_mutex;

int32_t rank_of(const recorder::FileHeader* header) {
  return header != nullptr ? __atomic_load_n(&header->global_rank, __ATOMIC_RELAXED) : -1;
}
int32_t pid_of(const recorder::FileHeader* header) {
  return header != nullptr ? header->pid : static_cast<int32_t>(getpid());
}

// One report as text and JSON in the run directory: true, or false with `failed` naming the file and why.
bool write_report_files(const std::string& run_dir, const std::string& base, const std::string& text,
                        const nlohmann::json& json, reports::UnwrittenReport* failed) {
  const reports::WrittenReport written = reports::replace_report(run_dir, base, text, json);
  if (written.error.empty()) return true;
  *failed = written.unwritten;
  return false;
}

// What a failed write says in the log: "cannot write <path>: why".
std::string unwritten_text(const std::string& run_dir, const reports::UnwrittenReport& failed) {
  return "cannot write " + run_dir + "/" + failed.report + ": " + failed.cause;
}

// The same, saying on failure why (a stop's report is written once: nothing to repeat).
void write_report(const std::string& run_dir, const std::string& base, const std::string& text,
                  const nlohmann::json& json) {
  reports::UnwrittenReport failed;
  if (write_report_files(run_dir, base, text, json, &failed)) return;
  if (g_stop_setup != nullptr)
    recorder::record_unwritten_report(g_stop_setup->recorder, failed.report.c_str(), failed.cause.c_str());
  log(LogLevel::kWarn, ("frames: " + unwritten_text(run_dir, failed)).c_str());
}

// The user asked for the stop: say goodbye to the coordinator (so this is no vanished rank), mark the recorder as
// exited, and leave with kStopExitCode. Only one thread stops the process; any other waits here for its exit.
// The recorder is marked stopped by trainscope (why, in which batch, with which status): the run summary tells this
// stop from a crash.
[[noreturn]] void stop_rank(recorder::FileHeader* header, recorder::StopReason reason, uint64_t batch) {
  g_stop_mutex.lock();
  frames_before_process_end();  // this process ends below: its idle-class thread must not hold the end up
  try {
    stop_exchange(/*stopping_job=*/true);
  } catch (...) {
  }
  recorder::record_stop(header, reason, kStopExitCode, 0, 0, /*has_batch=*/true, batch, /*report_missing=*/false,
                        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                  std::chrono::system_clock::now().time_since_epoch())
                                                  .count()));
  flush_logs();
  _exit(kStopExitCode);
}

class FrameThread {
 public:
  explicit FrameThread(const FramesSetup& setup)
      : config_(*setup.config),
        header_(setup.recorder),
        run_dir_(setup.run_dir),
        feed_(
            feed_options(config_), [this](const frames::FrameUpdate& u, const frames::Frame* f) { apply(u, f); },
            [](bool warn, const std::string& text) { log(warn ? LogLevel::kWarn : LogLevel::kDebug, text.c_str()); }) {}

  // Returns once the thread runs: a fork() right after the engine's start (a Python job forking its workers after
  // its first NCCL call) must not copy a thread still in its start-up, where the C library or a sanitizer
  // allocates, into a child that would inherit the allocator's lock held.
  // Both threads say they run before they enter their loops (the frame thread enters the idle class after that,
  // so that the job's thread never waits here for an idle-class thread).
  void start() {
    thread_ = std::thread([this] { loop(); });
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait(lock, [this] { return running_; });
    if (config_.thread_class != ThreadClass::kIdle) return;
    guard_ = std::thread([this] { guard_loop(); });
    wake_.wait(lock, [this] { return guard_running_; });
  }

  // The run's files move into its own folder once the job key is known (job_key.h); reports follow them.
  void set_run_dir(std::string dir) {
    std::lock_guard<std::mutex> lock(run_dir_mutex_);
    run_dir_ = std::move(dir);
  }

  void stop() {
    before_process_end();
    stopping_.raise();
    if (guard_.joinable() && guard_.get_id() != std::this_thread::get_id()) guard_.join();
    if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) {
      if (loop_ended_.wait_for(kIdleExitWait)) {
        thread_.join();
      } else {
        thread_.detach();  // this object is never freed (g_frames)
      }
    }
    uint64_t guard_passes = 0;
    uint64_t frames_waiting = 0;
    {
      std::lock_guard<std::mutex> lock(pass_mutex_);
      frames_waiting = settle_locked();
      final_pass_made_ = true;  // a frame thread left behind passes no more
      guard_passes = guard_passes_;
    }
    warn_frames_waiting(frames_waiting);
    if (guard_passes > 0)
      log(LogLevel::kInfo, ("frames: the idle-class frame thread fell behind (the cores were busy); " +
                            std::to_string(guard_passes) + " passes were made in the job's class instead")
                               .c_str());
    if (feed_.launches_unwatched() > 0)
      log(LogLevel::kWarn, ("frames: " + std::to_string(feed_.launches_unwatched()) +
                            " watched kernel launches never handed their buffers over (no frame)")
                               .c_str());
    const WatchCounters& c = watch_board().counters();
    const uint64_t skipped = c.skipped_capturing.load() + c.skipped_other.load() + c.dropped_backlog.load();
    if (skipped > 0 || feed_.dropped() > 0) {
      log(LogLevel::kWarn,
          ("frames: " + std::to_string(c.watched.load()) + " calls and launches watched; " +
           std::to_string(c.skipped_capturing.load()) + " buffers skipped in CUDA graph capture, " +
           std::to_string(c.skipped_other.load()) + " skipped otherwise (" + std::to_string(c.unconfirmed.load()) +
           " of " + std::to_string(c.parked.load()) +
           " non-blocking calls never confirmed by ncclCommGetAsyncError), " +
           std::to_string(c.dropped_backlog.load()) + " dropped (the frame thread fell behind), " +
           std::to_string(feed_.dropped()) + " calls overwritten in the flight recorder before they were read")
              .c_str());
    }
  }

  // The process is about to end: an idle-class frame thread goes back to the normal class where the process may
  // (base/thread_class.h), so that neither its last wait nor its own exit waits for an idle core.
  void before_process_end() {
    const pid_t tid = tid_.exchange(0, std::memory_order_acq_rel);
    if (tid > 0) (void)leave_idle_class(tid);
  }

  // Forked child: the parent's threads are not here. Their ids are the parent's, so none may be touched from here
  // (before_process_end would move a thread of another process).
  void abandon() {
    tid_.store(0, std::memory_order_release);
    if (thread_.joinable()) thread_.detach();
    if (guard_.joinable()) guard_.detach();
  }

  // fork(): the parent waits for the frame thread's pass to end and keeps it from starting another until the fork
  // is done, so that the child is never copied while this thread holds an allocator's lock (ASan's and other
  // allocators without fork handlers would leave it held in the child, whose first new thread then hangs).
  void hold_for_fork() { pass_mutex_.lock(); }
  void release_after_fork() { pass_mutex_.unlock(); }

  // TRAINSCOPE_ABORT_AFTER_BATCH, on the stopping thread: everything recorded before the stop goes through the
  // window (traces, reports), waiting up to kStopFramesWait for statistics still computed on a device.
  void settle_for_stop() {
    uint64_t frames_waiting = 0;
    {
      std::lock_guard<std::mutex> lock(pass_mutex_);
      frames_waiting = settle_locked();
    }
    warn_frames_waiting(frames_waiting);
  }

 private:
  static batch::StepMarker marker_of(const Config& config) {
    batch::StepMarker marker;
    std::string error;
    if (!batch::parse_step_marker(config.step_marker, &marker, &error)) {
      // The shim checked the value at load with the same rules; this cannot happen, but never guess quietly.
      log(LogLevel::kError, ("frames: " + error + "; counting batches with auto").c_str());
      marker = batch::StepMarker{};
    }
    return marker;
  }

  static FrameFeedOptions feed_options(const Config& config) {
    FrameFeedOptions options;
    options.marker = marker_of(config);
    options.window.max_frames = config.max_frames;
    options.window.streak_batches = config.overflow_streak;
    options.window.near_overflow_fraction = config.near_overflow;
    // TRAINSCOPE_ABORT_AFTER_BATCH is not the window's: the job's thread stops at the boundary (engine_batches.h).
    if (config.trace_batch_range_count > 0) {
      options.window.trace_batch = [config](uint64_t batch) { return config_traces_batch(config, batch); };
    }
    options.hold_unsettled = options.marker.kind == batch::MarkerKind::kAuto && config.trace_batch_range_count > 0;
    // The CUPTI adapter sets the predicate once its launch collector exists, which may be after this thread starts.
    options.is_optimizer_kernel = [](uint64_t function_handle) { return is_optimizer_kernel(function_handle); };
    return options;
  }

  void loop() {
    name_this_thread("ts-frames");
    {
      std::lock_guard<std::mutex> lock(mutex_);
      running_ = true;
    }
    wake_.notify_all();
    if (config_.thread_class == ThreadClass::kIdle) {
      const int refused = enter_idle_class();
      if (refused == 0) tid_.store(this_thread_id(), std::memory_order_release);  // only once it is idle: see stop()
      if (refused != 0) {
        // Under the pass's lock, as every allocation of this thread: a fork() waits for it (hold_for_fork).
        std::lock_guard<std::mutex> lock(pass_mutex_);
        log(LogLevel::kInfo,
            (std::string("frames: the frame thread stays in the job's scheduling class (SCHED_IDLE: ") +
             std::strerror(refused) + ")")
                .c_str());
      }
    }
    // From here on it shares nothing with the job's threads that they could wait on but the pass itself: it sleeps
    // on futexes (base/wake_flag.h), and the guard only tries the pass.
    while (!stopping_.raised()) {
      pass();
      if (stopping_.wait_for(kFrameInterval)) break;
    }
    loop_ended_.raise();
  }

  // In the job's class, beside an idle-class frame thread: a pass when none has ended for kGuardInterval. A frame
  // thread preempted in the middle of its pass holds the pass; the guard tries again at its next wakeup.
  void guard_loop() {
    name_this_thread("ts-frames-late");
    {
      std::lock_guard<std::mutex> lock(mutex_);
      guard_running_ = true;
    }
    wake_.notify_all();
    while (!stopping_.wait_for(kGuardInterval)) {
      const uint64_t since = clocks::monotonic_ns() - last_pass_end_ns_.load(std::memory_order_relaxed);
      if (since < static_cast<uint64_t>(std::chrono::nanoseconds(kGuardInterval).count())) continue;
      std::unique_lock<std::mutex> pass(pass_mutex_, std::try_to_lock);
      if (pass.owns_lock() && !final_pass_made_) {
        pass_locked();
        ++guard_passes_;
      }
    }
  }

  // Returns whether the front frame waits for statistics (computed on a device, or a launch's not handed over yet).
  bool pass() {
    std::lock_guard<std::mutex> lock(pass_mutex_);
    return pass_locked();
  }

  // Under pass_mutex_.
  bool pass_locked() {
    if (final_pass_made_) return false;
    const bool waits = feed_.pass(header_);
    last_pass_end_ns_.store(clocks::monotonic_ns(), std::memory_order_relaxed);
    return waits;
  }

  // The end (the process's, or a stop's), under pass_mutex_: passes until no frame waits for statistics still
  // computed on a device, at most kStopFramesWait, then every held frame goes to the window (the batch period was
  // never learnt, or relearnt: their provisional numbers). Returns the watched calls still without a frame.
  uint64_t settle_locked() {
    const auto deadline = std::chrono::steady_clock::now() + kStopFramesWait;
    while (pass_locked() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    feed_.release_all_held();
    return feed_.frames_waiting();
  }

  static void warn_frames_waiting(uint64_t frames_waiting) {
    if (frames_waiting == 0) return;
    log(LogLevel::kWarn, ("frames: " + std::to_string(frames_waiting) +
                          " watched calls got no frame: their statistics, or an earlier call's, were still not there " +
                          std::to_string(std::chrono::duration_cast<std::chrono::seconds>(kStopFramesWait).count()) +
                          " s after the process began to end")
                             .c_str());
  }

  int32_t rank() const { return rank_of(header_); }
  int32_t pid() const { return pid_of(header_); }

  std::string run_dir() {
    std::lock_guard<std::mutex> lock(run_dir_mutex_);
    return run_dir_;
  }

  // A report file that could not be written: logged, and noted in the recorder (a full disk leaves the log unwritten
  // too; the recorder's header is already on disk), where the run summary names it and why.
  void unwritten(const std::string& file, int error) {
    const char* cause = error != 0 ? std::strerror(error) : "";
    log(LogLevel::kWarn,
        ("frames: cannot write " + reports::printable(run_dir_ + "/" + file) + (error != 0 ? ": " : "") + cause)
            .c_str());
    recorder::record_unwritten_report(header_, file.c_str(), cause);
  }

  void write(const std::string& base, const std::string& text, const nlohmann::json& json) {
    reports::UnwrittenReport failed;
    if (!write_report_files(run_dir(), base, text, json, &failed)) warn_write_failure(failed);
  }

  // A report that cannot be written is said once per file: a trace written frame by frame must not flood the log.
  // The recorder notes it too (a full disk leaves the log unwritten; the recorder's header is already on disk), where
  // the run summary names the file and why.
  void warn_write_failure(const reports::UnwrittenReport& failed) {
    recorder::record_unwritten_report(header_, failed.report.c_str(), failed.cause.c_str());
    if (!write_failures_.insert(failed.report).second) return;
    log(LogLevel::kWarn, ("frames: " + unwritten_text(run_dir(), failed)).c_str());
  }

  void apply(const frames::FrameUpdate& update, const frames::Frame* frame) {
    if (update.loss_scaler) loss_scaler_ = true;
    if (update.batch_began && holds_stops()) {
      if (const auto applied = held_stops_.batch_began(*update.batch_began))
        stop_on_nonfinite(applied->batch, applied->frame_name, applied->label,
                          "; the loss scaler did not skip the optimizer step after it");
    }
    if (update.step_applied_batch) held_stops_.step_applied(*update.step_applied_batch);
    if (update.trace_frame) trace(*update.trace_frame, update.trace_batch_start);
    for (const frames::NearOverflow& near : update.near_overflow) near_overflow(near, frame);
    if (update.detection) detected(*update.detection);
    if (update.nonfinite_batch && holds_stops()) held_stops_.hold(*update.nonfinite_batch);
    if (update.persistent) persistent(*update.persistent);
    if (update.step_skipped_batch) step_skipped(*update.step_skipped_batch);
  }

  // TRAINSCOPE_ON_NONFINITE=abort with a loss scaler in the process: a batch's inf/nan stops the job only once its
  // step was not skipped (collectors/frames/held_nonfinite_stops.h).
  bool holds_stops() const { return loss_scaler_ && config_.on_nonfinite == NonfinitePolicy::kAbort; }

  // A loss scaler skipped a batch's optimizer step (TRAINSCOPE_WATCH=modules: the hooks saw AMP's GradScaler or
  // DeepSpeed do it): the inf/nan of that batch's gradients is what the scaler looks for, and the job goes on.
  void step_skipped(uint64_t batch) {
    held_stops_.step_skipped(batch);
    skipped_batches_.push_back(batch);
    const std::string who = rank() >= 0 ? "rank " + std::to_string(rank()) : std::string("this process");
    const std::string line = who + ": the loss scaler skipped the optimizer step of batch " + std::to_string(batch) +
                             " (its gradients held inf/nan, so the weights were not changed): "
                             "expected with loss scaling, not a failure\n";
    skipped_text_ += line;
    write(run_files::per_process_name(run_files::ReportKind::kStepSkipped, rank(), pid()), skipped_text_,
          {{"kind", "step_skipped"}, {"rank", rank()}, {"by", "loss scaler"}, {"batches", skipped_batches_}});
    log(LogLevel::kWarn, line.substr(0, line.size() - 1).c_str());
  }

  void trace(const frames::Frame& frame, bool batch_start) {
    std::string text;
    if (batch_start) text += reports::format_trace_batch_start(frame.batch);
    text += reports::format_trace_frame(frame);
    const std::string base = run_files::per_process_name(run_files::kTraceStem, rank(), pid());
    nlohmann::json line = {{"batch_number", frame.batch}, {"name", frame.name}, {"kind", frame.kind}};
    nlohmann::json rows = nlohmann::json::array();
    for (const reports::FrameRow& row : frame.rows) rows.push_back(reports::format_frame_row(row));
    line["rows"] = rows;
    // The rows' numbers too (abs min/max, inf/nan counts: frame_json's rows), for the page's plots.
    const nlohmann::json numbers = reports::frame_json(frame);
    line["stats"] = numbers["rows"];
    if (frame.launch) line["launch"] = numbers["launch"];  // kernel, grid, block, stream
    std::string file = base + ".txt";
    int error = reports::append_file(run_dir() + "/" + file, text);
    if (error == 0) {
      file = base + ".jsonl";
      error = reports::append_file(run_dir() + "/" + file,
                                   line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    }
    if (error != 0) warn_write_failure({file, files::error_text(error), ""});
    log(LogLevel::kInfo, text.substr(0, text.size() - 1).c_str());
  }

  void near_overflow(const frames::NearOverflow& near, const frames::Frame* frame) {
    stats::TensorStats stats{};
    if (frame != nullptr) {
      for (const reports::FrameRow& row : frame->rows) {
        if (row.label == near.label) stats = row.stats;
      }
    }
    const reports::NearOverflow checked = reports::check_near_overflow(stats, near.frame_name, near.label, 0);
    const std::string line =
        checked.text.empty() ? "near overflow: " + near.frame_name + " " + near.label + "\n" : checked.text;
    near_text_ += line;
    near_json_.push_back({{"frame", near.frame_name},
                          {"label", near.label},
                          {"batch_number", near.batch},
                          {"abs_max", near.abs_max},
                          {"limit", near.limit},
                          {"fraction", near.limit > 0 ? near.abs_max / near.limit : 0.0},
                          {"dtype", reports::long_dtype_name(near.dtype)}});
    write(run_files::per_process_name(run_files::ReportKind::kNearOverflow, rank(), pid()), near_text_,
          {{"kind", "near_overflow"}, {"rank", rank()}, {"warnings", near_json_}});
    log(LogLevel::kWarn, line.substr(0, line.size() - 1).c_str());
  }

  void detected(const frames::Detection& detection) {
    reports::DetectionReport report = detection_report(detection, rank(), config_.max_frames);
    // The first frame holding the value is the newest: where in the job's code that call was made.
    const frames::Frame& last = detection.frames.back();
    const uint32_t stack_id = has_stack(last.stack_id) ? last.stack_id : 0;
    if (stack_id != 0) report.first_nonfinite_stack = call_stack(stack_id);
    const std::string text = reports::format_detection_text(report);
    write(run_files::per_process_name(run_files::ReportKind::kNonfinite, report.rank, pid()), text,
          reports::detection_json(report));
    log(LogLevel::kError, text.c_str());

    // What the coordinator needs for the origin: the detecting frame, and whether this rank sent the value.
    const reports::FrameRow* row = last.first_nonfinite_row();
    const reports::FirstNonfinite first = first_nonfinite(detection, report.rank);
    const bool stop = config_.on_nonfinite == NonfinitePolicy::kAbort && !holds_stops();
    first_ = first;
    first_stack_id_ = stack_id;
    report_first_nonfinite(first, stack_id, stop);
    if (stop) stop_on_nonfinite(detection.batch, reports::frame_title(last), row != nullptr ? row->label : "", "");
  }

  // Stops the job (TRAINSCOPE_ON_NONFINITE=abort): the stop report, then the coordinator's verdict stops every rank;
  // without one this rank stops on its own. Never returns.
  [[noreturn]] void stop_on_nonfinite(uint64_t batch, const std::string& frame_name, const std::string& label,
                                      std::string_view why) {
    const std::string message = reports::format_nonfinite_abort(batch, frame_name, label, why);
    write(run_files::per_process_name(run_files::ReportKind::kStop, rank(), pid()), message,
          {{"kind", "stop"},
           {"rank", rank()},
           {"reason", "nonfinite"},
           {"batch_number", batch},
           {"message", message.substr(0, message.size() - 1)}});
    log(LogLevel::kError, message.substr(0, message.size() - 1).c_str());
    // A held stop asks now: the coordinator took this rank's first inf/nan without a stop at its detection.
    if (holds_stops() && first_) report_first_nonfinite(*first_, first_stack_id_, true);
    // The coordinator stops every rank, this one too, once the others' first frames had a moment to arrive: its
    // verdict ends the process while this thread waits. Without one, this rank stops on its own.
    if (exchange_running()) std::this_thread::sleep_for(kStopVerdictWait);
    stop_rank(header_, recorder::StopReason::kNonfinite, batch);
  }

  void persistent(const frames::PersistentOverflow& overflow) {
    reports::OverflowStreakReport report;
    report.rank = rank();
    for (const frames::StreakBatch& b : overflow.batches) {
      const reports::FrameRow* row = b.first_nonfinite.first_nonfinite_row();
      report.batches.push_back({b.batch, reports::frame_title(b.first_nonfinite), row != nullptr ? row->label : ""});
    }
    const std::string text = reports::format_overflow_streak_text(report);
    write(run_files::per_process_name(run_files::ReportKind::kOverflowStreak, report.rank, pid()), text,
          reports::overflow_streak_json(report));
    log(LogLevel::kError, text.substr(0, text.size() - 1).c_str());
    if (holds_stops() && !report.batches.empty()) {
      const auto& newest = report.batches.back();
      stop_on_nonfinite(newest.batch_number, newest.first_frame, newest.first_label,
                        "; the loss scaler did not get past inf/nan in " + std::to_string(report.batches.size()) +
                            " batches in a row");
    }
  }

  Config config_;
  recorder::FileHeader* header_;
  std::mutex run_dir_mutex_;
  std::string run_dir_;
  FrameFeed feed_;  // its sink (apply) runs in pass() only, once everything here is constructed
  std::string near_text_;
  nlohmann::json near_json_ = nlohmann::json::array();
  std::string skipped_text_;
  std::vector<uint64_t> skipped_batches_;
  bool loss_scaler_ = false;  // a loss scaler is enabled in this process (the module hooks said so)
  frames::HeldNonfiniteStops held_stops_;
  std::optional<reports::FirstNonfinite> first_;  // this rank's first inf/nan, for a held stop's request
  uint32_t first_stack_id_ = 0;
  std::unordered_set<std::string> write_failures_;  // "cannot write <path>" already said
  std::mutex mutex_;
  std::condition_variable wake_;
  bool running_ = false;        // under mutex_: loop() has begun
  bool guard_running_ = false;  // under mutex_: guard_loop() has begun
  WakeFlag stopping_;
  WakeFlag loop_ended_;
  std::mutex pass_mutex_;                      // the threads and stop() all pass
  bool final_pass_made_ = false;               // under pass_mutex_: stop() made the last pass
  uint64_t guard_passes_ = 0;                  // under pass_mutex_
  std::atomic<uint64_t> last_pass_end_ns_{0};  // monotonic
  std::atomic<pid_t> tid_{0};                  // the frame thread's, while it may be in the idle class
  std::thread thread_;
  std::thread guard_;
};

FrameThread* g_frames = nullptr;  // leaked on purpose, as the exchange

// Range names repeat (a handful of distinct ones per step): each is matched once.
class StepMarkerMatcher {
 public:
  explicit StepMarkerMatcher(const std::string& pattern) : regex_(pattern) {}
  bool matches(const char* name) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = cache_.find(name);
    if (it != cache_.end()) return it->second;
    const bool matched = regex_.search(name);
    if (cache_.size() < kMaxCachedNames) cache_.emplace(name, matched);
    return matched;
  }

 private:
  static constexpr size_t kMaxCachedNames = 4096;  // names with step numbers in them must not grow it without end
  batch::MarkerRegex regex_;
  std::mutex mutex_;
  std::unordered_map<std::string, bool> cache_;
};

StepMarkerMatcher* g_marker_matcher = nullptr;  // leaked: job threads may match while the process exits

}  // namespace

bool step_marker_matches(const char* name) { return g_marker_matcher != nullptr && g_marker_matcher->matches(name); }

void set_frames_run_dir(const std::string& run_dir) {
  if (g_frames != nullptr) g_frames->set_run_dir(run_dir);
  if (g_stop_setup != nullptr) {
    std::lock_guard<std::mutex> lock(g_stop_run_dir_mutex);
    g_stop_setup->run_dir = run_dir;
  }
}

void stop_after_batch(uint64_t batch) {
  const StopSetup* setup = g_stop_setup;
  try {
    if (g_frames != nullptr) g_frames->settle_for_stop();
    if (setup != nullptr) {
      const int32_t rank = rank_of(setup->recorder);
      const std::string message = reports::format_abort_after_batch(batch);
      write_report(stop_run_dir(*setup),
                   run_files::per_process_name(run_files::ReportKind::kStop, rank, pid_of(setup->recorder)), message,
                   {{"kind", "stop"},
                    {"rank", rank},
                    {"reason", "abort_after_batch"},
                    {"batch_number", batch},
                    {"message", message.substr(0, message.size() - 1)}});
      log(LogLevel::kError, message.substr(0, message.size() - 1).c_str());
    }
  } catch (...) {
    // Out of memory for a report: the stop still happens.
  }
  stop_rank(setup != nullptr ? setup->recorder : nullptr, recorder::StopReason::kAbortAfterBatch, batch);
}

void start_frames(const FramesSetup& setup) {
  if (setup.config == nullptr || g_frames != nullptr) return;
  if (g_stop_setup == nullptr) g_stop_setup = new StopSetup{*setup.config, setup.recorder, setup.run_dir};
  if (setup.config->step_marker_form == StepMarkerForm::kNvtx && g_marker_matcher == nullptr) {
    batch::StepMarker marker;
    if (batch::parse_step_marker(setup.config->step_marker, &marker, nullptr))
      g_marker_matcher = new StepMarkerMatcher(marker.pattern);
    const char* tool = std::getenv("NVTX_INJECTION64_PATH");
    const char* base = tool != nullptr ? std::strrchr(tool, '/') : nullptr;
    if (tool == nullptr || std::strcmp(base != nullptr ? base + 1 : tool, "libtrainscope.so") != 0) {
      log(LogLevel::kWarn, (std::string("TRAINSCOPE_STEP_MARKER=") + setup.config->step_marker +
                            " needs trainscope as the NVTX tool, but NVTX_INJECTION64_PATH is " +
                            (tool != nullptr ? "'" + reports::printable(tool) + "'" : std::string("not set")) +
                            ": no batch will start at an NVTX range (use trainscope run, or unset it)")
                               .c_str());
    }
  }
  // Without watching there is no frame; TRAINSCOPE_ABORT_AFTER_BATCH counts batches on the job's thread.
  if (!config_watches_anything(*setup.config)) return;
  if (setup.recorder == nullptr) {
    // Why (no run directory, no recorder) is the shim's one warning; this only adds what it means here.
    log(LogLevel::kDebug, "frames off: this process has no flight recorder to read its calls from");
    return;
  }
  try {
    auto frames = std::make_unique<FrameThread>(setup);
    frames->start();
    g_frames = frames.release();
    // Kernel frames: the launch collector finds the watcher once the frame thread that takes its frames runs.
    if (setup.config->watch_kernels[0] != '\0') start_kernel_frames();
  } catch (const std::exception& e) {
    log(LogLevel::kWarn, (std::string("frames off: ") + e.what()).c_str());
  }
}

void stop_frames() {
  if (g_frames == nullptr) return;
  try {
    g_frames->stop();
  } catch (...) {
    // Exit paths never throw into the job.
  }
}

void frames_before_process_end() {
  if (g_frames != nullptr) g_frames->before_process_end();
}

void frames_fork_prepare() {
  if (g_frames != nullptr) g_frames->hold_for_fork();
}

void frames_fork_parent() {
  if (g_frames != nullptr) g_frames->release_after_fork();
}

void abandon_frames() {
  // The matcher's lock may have been held by another thread at the fork: the child starts with none.
  g_marker_matcher = nullptr;
  g_stop_setup = nullptr;  // the child's engine start sets its own
  abandon_watch_board();
  if (g_frames == nullptr) return;
  g_frames->abandon();
  g_frames = nullptr;
}

}  // namespace trainscope::engine
