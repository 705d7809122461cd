// The frame machinery over the flight recorder (see engine_frame_feed.h).
#include "shim/engine/engine_frame_feed.h"

#include <algorithm>
#include <cstring>
#include <string_view>
#include <utility>

#include "reports/frame_report.h"
#include "reports/recorder_report.h"

namespace trainscope::engine {
namespace {

using recorder::Op;
using recorder::Record;
using State = WatchedBuffer::State;

bool is_launch(Op op) { return op == Op::kKernelLaunch || op == Op::kGraphLaunch; }
// Records whose watch is handed to the board after they were appended whole (a launch's, a module's): the frame
// thread waits a bounded time for them instead of taking a returned call without a watch for one never watched.
bool handed_over_after_append(Op op) { return is_launch(op) || op == Op::kModuleForward; }

// "comm 3f2a9c all-reduce #812", "comm 3f2a9c send #5 to rank 2": the communicator, the operation, the call.
// "comm aada17 all-reduce #29", "comm aada17 send #5 to rank 1". Once per watched call on the frame thread, so
// written by hand into one buffer: snprintf and the temporaries of concatenation were a tenth of a frame's cost.
void write_frame_name(const Record& r, std::string* name) {
  const Op op = static_cast<Op>(r.op);
  char text[96];
  size_t n = 0;
  const auto put = [&](std::string_view part) {
    const size_t k = std::min(part.size(), sizeof(text) - n);
    std::memcpy(text + n, part.data(), k);
    n += k;
  };
  const auto put_int = [&](int64_t value) {
    if (value < 0) put("-");
    uint64_t magnitude = value < 0 ? 0 - static_cast<uint64_t>(value) : static_cast<uint64_t>(value);
    char digits[20];
    size_t d = 0;
    do {
      digits[d++] = static_cast<char>('0' + magnitude % 10);
      magnitude /= 10;
    } while (magnitude != 0);
    while (d > 0 && n < sizeof(text)) text[n++] = digits[--d];
  };
  put("comm ");
  if (r.comm_id == 0) {
    put("-");
  } else {
    for (int shift = 60; shift >= 40; shift -= 4)
      put(std::string_view(&"0123456789abcdef"[(r.comm_id >> shift) & 0xf], 1));
  }
  put(" ");
  put(reports::collective_phrase(recorder::op_name(op)));
  put(" #");
  put_int(static_cast<int64_t>(r.seq));
  if (op == Op::kSend || op == Op::kRecv) {
    put(op == Op::kSend ? " to rank " : " from rank ");
    put_int(r.peer);
  }
  name->assign(text, n);  // into the recycled frame's buffer: no allocation once the window is full
}

// A device result that has arrived (or failed) is moved into its buffer; false while the GPU is not done.
bool ready(WatchedBuffer& buffer) {
  if (buffer.state != State::kGpuPending) return true;
  if (!buffer.pending) return false;  // a launch's buffer: its batch is the launch's (ready(WatchedLaunchBuffers&))
  if (buffer.pending->ready()) {
    buffer.stats = buffer.pending->results().at(0);
    buffer.state = State::kReady;
    buffer.pending.reset();
    return true;
  }
  if (!buffer.pending->error().empty()) {
    buffer.state = State::kSkipped;
    buffer.skipped_why = buffer.pending->error();
    buffer.pending.reset();
    return true;
  }
  return false;
}

bool ready(WatchedLaunchBuffers& launch) {
  if (!launch.device) return true;
  const bool done = launch.device->ready();
  if (!done && launch.device->error().empty()) return false;
  for (size_t i = 0; i < launch.device_rows.size(); ++i) {
    WatchedBuffer& buffer = launch.buffers.at(launch.device_rows[i]);
    if (done && i < launch.device->results().size()) {
      buffer.stats = launch.device->results()[i];
      buffer.state = State::kReady;
    } else {
      buffer.state = State::kSkipped;
      buffer.skipped_why = done ? "no result" : launch.device->error();
    }
  }
  launch.device.reset();
  return true;
}

bool ready(WatchedCall& call) {
  if (call.launch) return ready(*call.launch);
  return ready(call.input) && ready(call.output);
}

bool waits_on_device(const WatchedCall& call) {
  if (call.launch) return call.launch->device != nullptr;
  return call.input.state == State::kGpuPending || call.output.state == State::kGpuPending;
}

bool add_row(const WatchedBuffer& buffer, const std::string& label, frames::Frame* frame) {
  switch (buffer.state) {
    case State::kAbsent:
      frame->rows.push_back(reports::FrameRow::none(label));
      return true;
    case State::kReady:
      frame->rows.push_back(reports::FrameRow::tensor(label, buffer.stats));
      return true;
    case State::kNotATensor:
      frame->rows.push_back(reports::FrameRow::not_a_tensor(label));
      return true;
    case State::kUnreadable:
      frame->rows.push_back(reports::FrameRow::unreadable(label));
      return true;
    case State::kGpuPending:
    case State::kSkipped:
      break;
  }
  return false;
}

frames::Frame make_collective_frame(const WatchedCall& call, uint64_t batch, frames::Frame frame) {
  const Record& r = call.record;
  write_frame_name(r, &frame.name);
  frame.kind = recorder::op_name(static_cast<Op>(r.op));
  frame.rows.reserve(2);
  frame.batch = batch;
  frame.comm_id = r.comm_id;
  frame.call_number = r.seq;
  if (recorder::is_point_to_point(static_cast<Op>(r.op))) {
    frame.comm_rank = r.rank;
    frame.peer = r.peer;
  }
  // The call site: its id when the shim gave it one (the native return address and the Python stack), else the
  // native return address.
  const uint64_t caller = r.site != 0 ? r.site : r.caller;
  frame.site = batch::call_signature({r.op, r.comm_id, r.count, r.dtype}) ^ (caller * 0x9E3779B97F4A7C15ull) ^
               (static_cast<uint64_t>(static_cast<uint32_t>(r.peer)) << 17);
  frame.stack_id = r.site;
  // A send has no output and a receive no input: no row, rather than a "None" that says nothing.
  const Op op = static_cast<Op>(r.op);
  const bool input = op != Op::kRecv && add_row(call.input, "input[0]", &frame);
  const bool output = op != Op::kSend && add_row(call.output, "output", &frame);
  if (!input && !output) frame.rows.clear();
  return frame;
}

// A kernel launch's frame: the kernel's short name as header, its buffers by parameter, and what the JSON twin says
// of the launch. Its origin is the kernel and the launch's record index (a launch has no call site).
frames::Frame make_launch_frame(const WatchedLaunchBuffers& launch, const Record& r, uint64_t index, uint64_t batch) {
  frames::Frame frame;
  frame.name = launch.short_name;
  frame.kind = "kernel";
  frame.batch = batch;
  frame.call_number = index;
  // Near overflow is said once per kernel (CUfunction), as once per call site for a collective.
  frame.site =
      (r.caller != 0 ? r.caller : std::hash<std::string>{}(launch.name)) * 0xD6E8FEB86659FD93ull ^ 0x6b65726eull;
  reports::FrameLaunch info;
  info.kernel = launch.name;
  const recorder::Dim3 grid = recorder::unpack_grid(r.count);
  const recorder::Dim3 block = recorder::unpack_block(r.sendbuff);
  info.grid[0] = grid.x;
  info.grid[1] = grid.y;
  info.grid[2] = grid.z;
  info.block[0] = block.x;
  info.block[1] = block.y;
  info.block[2] = block.z;
  info.shared_bytes = static_cast<uint32_t>(r.recvbuff);
  info.stream = r.stream;
  info.record_index = index;
  info.note = launch.note;
  frame.launch = std::move(info);
  for (size_t i = 0; i < launch.buffers.size() && i < launch.labels.size(); ++i)
    add_row(launch.buffers[i], launch.labels[i], &frame);
  return frame;
}

// A module's frame (TRAINSCOPE_WATCH=modules): its qualified name and class as header, as DUO writes it, and its rows
// in the hooks' order. Near overflow is said once per module (the record's caller is a hash of its name and class).
frames::Frame make_module_frame(const WatchedLaunchBuffers& module, const Record& r, uint64_t batch) {
  frames::Frame frame;
  frame.name = module.short_name;
  frame.kind = module.name;
  // A module's gradients (TRAINSCOPE_WATCH=modules,backward): DUO's header, marked after the class.
  if (r.aux == recorder::kModuleRecordBackward) frame.kind += " (backward)";
  frame.module = true;
  frame.batch = batch;
  frame.call_number = r.seq;
  frame.site = r.caller;
  frame.rows.reserve(module.buffers.size());
  for (size_t i = 0; i < module.buffers.size() && i < module.labels.size(); ++i)
    add_row(module.buffers[i], module.labels[i], &frame);
  return frame;
}

}  // namespace

frames::Frame make_frame(const WatchedCall& call, const Record& record, uint64_t index, uint64_t batch,
                         frames::Frame reuse) {
  if (call.launch && static_cast<Op>(record.op) == Op::kModuleForward)
    return make_module_frame(*call.launch, record, batch);
  if (call.launch) return make_launch_frame(*call.launch, record, index, batch);
  return make_collective_frame(call, batch, frames::recycled(std::move(reuse)));
}

reports::DetectionReport detection_report(const frames::Detection& detection, int32_t rank, uint32_t max_frames) {
  reports::DetectionReport report;
  report.rank = rank;
  report.batch_number = detection.batch;
  report.max_frames = max_frames;
  for (const frames::Frame& f : detection.frames) report.frames.push_back(f);
  if (!detection.frames.empty()) {
    const frames::Frame& last = detection.frames.back();
    report.first_nonfinite_frame = reports::frame_title(last);
  }
  return report;
}

reports::FirstNonfinite first_nonfinite(const frames::Detection& detection, int32_t rank) {
  reports::FirstNonfinite first;
  first.rank = rank;
  first.batch_number = detection.batch;
  if (detection.frames.empty()) return first;
  const frames::Frame& last = detection.frames.back();
  const reports::FrameRow* row = last.first_nonfinite_row();
  first.op = last.module   ? std::string(reports::kModuleOpPrefix) + reports::module_title(last.name, last.kind)
             : last.launch ? last.name
                           : last.kind;
  // A backward frame's grad_output is what its module's backward received, grad_input what it produced.
  const bool received =
      row != nullptr && (row->label.rfind("input", 0) == 0 || row->label.rfind("grad_output", 0) == 0);
  first.where = received ? reports::NonfiniteWhere::kInput : reports::NonfiniteWhere::kOutput;
  first.kind = row != nullptr && row->stats.nan_count > 0 ? reports::NonfiniteKind::kNan : reports::NonfiniteKind::kInf;
  first.comm_id = last.comm_id;
  first.call_number = last.call_number;
  first.comm_rank = last.comm_rank;
  first.peer = last.peer;
  return first;
}

FrameFeed::FrameFeed(FrameFeedOptions options, Sink sink, Note note)
    : options_(std::move(options)),
      sink_(std::move(sink)),
      note_(std::move(note)),
      tracker_(options_.marker),
      window_(options_.window) {}

bool FrameFeed::pass(const recorder::FileHeader* header) {
  header_ = header;
  const uint64_t dropped = cursor_.dropped();
  cursor_.poll(header_, [this](uint64_t index, const Record& r) { on_record(index, r); });
  drain_backlog();
  if (cursor_.dropped() != dropped) {
    // Records lapped before this thread read them: their watched calls will never be asked for.
    uint64_t wanted = cursor_.position();
    for (const Pending& p : backlog_) {
      if (!p.batch_start) {
        wanted = std::min(wanted, p.index);
        break;
      }
    }
    watch_board().discard_complete_before(wanted);
  }
  return (taken_ != nullptr && waits_on_device(*taken_)) || launch_missing_;
}

uint64_t FrameFeed::frames_waiting() const {
  uint64_t waiting = 0;
  for (const Pending& p : backlog_) waiting += p.batch_start || p.event() ? 0 : 1;
  return waiting;
}

void FrameFeed::on_record(uint64_t index, const Record& r) {
  const Op op = static_cast<Op>(r.op);
  const uint64_t position = tracker_.position();
  if (op == Op::kModuleForward) {
    on_module(index, r, position);
    return;
  }
  const bool launch = is_launch(op);
  batch::BatchEvent event;
  if (op == Op::kStepMarker) {
    event = tracker_.on_marker();
  } else if ((recorder::is_collective(op) || recorder::is_point_to_point(op)) && r.comm_id != 0) {
    event = tracker_.on_collective({r.op, r.comm_id, r.count, r.dtype});
  } else if (launch) {
    // A launch into a capturing stream runs later, in its graph, and a failed one never ran: neither is work of this
    // moment (the batch gate, fed by the collector's launch handler, skips them too; a failed watched launch still
    // takes its skipped buffers off the board below). A graph launch may hold the optimizer, but which of its
    // kernels do is not known: it counts as other work.
    const bool ran = (r.flags & recorder::kFlagCapturing) == 0 && r.result == 0;
    if (ran && options_.is_optimizer_kernel && tracker_.marker().kind == batch::MarkerKind::kAuto) {
      event = tracker_.on_launch(op == Op::kKernelLaunch && options_.is_optimizer_kernel(r.caller));
    }
  } else {
    return;
  }
  // Under auto, before the period is learnt, a call's number is a guess: with trace batches its frame waits for
  // the number (HeldFrames); the batch start of call 0 (batch 0, where the window starts) is all that is dropped.
  // A launch belongs to the batch of the call before it: its number is known when every call fed so far has one.
  const bool settled = !options_.hold_unsettled || op == Op::kStepMarker ||
                       (launch ? tracker_.settled() == tracker_.position() : position < tracker_.settled());
  if (options_.hold_unsettled && tracker_.settled() != settled_seen_) settle();
  if (event.new_batch && settled && !module_batches_) backlog_.push_back({true, event.batch, 0, position, true, {}});
  if (event.renumbered)
    note_(false, "frames: batch period of " + std::to_string(tracker_.period()) + " calls learnt; this is batch " +
                     std::to_string(event.batch));
  if (event.period_lost) note_(false, "frames: the batch period stopped matching; relearning it");
  if (event.optimizer_steps)
    note_(false, "frames: optimizer kernels seen; batches end at each optimizer step from batch " +
                     std::to_string(tracker_.current_batch()) + " on");
  if ((r.flags & recorder::kFlagWatched) == 0) return;
  const uint64_t batch = module_batches_ ? module_batch_ : tracker_.current_batch();
  if (launch) {
    // Held by the position of the call before it (its batch is that call's, until a later boundary).
    backlog_.push_back({false, batch, index, position > 0 ? position - 1 : 0, settled || module_batches_, r});
  } else {
    backlog_.push_back({false, batch, index, position, settled || module_batches_, {}});
  }
}

// A module forward (TRAINSCOPE_WATCH=modules). Under auto the modules count the batches from the first one on, as
// DUO counts them: the forward of a root module ends its batch (the next frame is the next batch's first), and the
// collectives and launches belong to the batch the modules are in.
void FrameFeed::on_module(uint64_t index, const Record& r, uint64_t position) {
  if (!module_batches_ && tracker_.marker().kind == batch::MarkerKind::kAuto) {
    module_batches_ = true;
    module_batch_ = tracker_.current_batch();
  }
  // A frame beside the model (a loss module's) is of the batch in progress: it begins none.
  const bool forward = r.aux == recorder::kModuleRecordForward || r.aux == recorder::kModuleRecordRoot;
  if (module_batches_ && module_batch_ended_ && forward) {
    module_batch_ended_ = false;
    ++module_batch_;
    backlog_.push_back({true, module_batch_, 0, position, true, {}});
  }
  const uint64_t batch = module_batches_ ? module_batch_ : tracker_.current_batch();
  if (r.aux == recorder::kModuleRecordLossScaler) {
    Pending scaler{false, batch, index, position, true, r};
    scaler.loss_scaler = true;
    backlog_.push_back(scaler);
    return;
  }
  if (r.aux == recorder::kModuleRecordStepSkipped || r.aux == recorder::kModuleRecordStepApplied) {
    // A step read late (a fused optimizer's, from a GPU's found-inf) is put back in its step's batch; a batch of
    // TRAINSCOPE_STEP_MARKER's is not counted in module forwards: there it is the batch it was read in.
    const uint64_t ago = module_batches_ ? std::min<uint64_t>(r.count, batch) : 0;
    Pending step{false, batch - ago, index, position, true, r};
    step.step_skipped = r.aux == recorder::kModuleRecordStepSkipped;
    step.step_applied = !step.step_skipped;
    backlog_.push_back(step);
    return;
  }
  if ((r.flags & recorder::kFlagWatched) != 0) backlog_.push_back({false, batch, index, position, true, r});
  if (module_batches_ && r.aux == recorder::kModuleRecordRoot) module_batch_ended_ = true;
}

// The tracker settled more calls: the waiting ones among them get their numbers as it knows them now (their
// pending entries, then the frames already held). Unsettled entries are the newest, so both walks go backwards.
void FrameFeed::settle() {
  settled_seen_ = tracker_.settled();
  for (auto it = backlog_.rbegin(); it != backlog_.rend() && !it->settled; ++it) {
    if (it->position >= settled_seen_) continue;
    it->batch = tracker_.batch_of(it->position);
    it->settled = true;
  }
  held_.settle(tracker_);
}

// Held frames whose numbers are settled (and, past the bound, the oldest others) go to the window, in order.
void FrameFeed::release_held() {
  if (held_.empty()) return;
  for (frames::Frame& frame : held_.release()) add_to_window(std::move(frame));
  warn_provisional();
}

void FrameFeed::release_all_held() {
  for (frames::Frame& frame : held_.release_all()) add_to_window(std::move(frame));
  warn_provisional();
}

void FrameFeed::warn_provisional() {
  if (held_.provisional() == warned_provisional_) return;
  if (warned_provisional_ == 0)
    note_(true, "frames: TRAINSCOPE_STEP_MARKER=auto had learnt no batch period within " +
                    std::to_string(frames::HeldFrames::kDefaultMaxHeld) +
                    " frames (or by the end): those frames are traced and checked as batch " +
                    std::to_string(tracker_.current_batch()) + "; name the step with nvtx: or collective:");
  warned_provisional_ = held_.provisional();
}

// A watched launch not on the board: its record is appended whole, then the launching thread hands the launch to
// the watcher. Waits a bounded time for it (a thread that died in between never will); true once it gives up.
bool FrameFeed::launch_never_watched() {
  const auto now = std::chrono::steady_clock::now();
  if (!launch_missing_) {
    launch_missing_ = true;
    launch_missing_since_ = now;
  }
  if (now - launch_missing_since_ < options_.launch_watch_wait) return false;
  launch_missing_ = false;
  ++launches_unwatched_;
  return true;
}

// Frames enter the window in record order: the front waits until its statistics are there.
void FrameFeed::drain_backlog() {
  release_held();  // numbered since the last pass
  while (!backlog_.empty()) {
    Pending& front = backlog_.front();
    if (front.batch_start) {
      release_held();  // settled by now: the batch start is
      next_frame_starts_batch_ = true;
      apply(window_.on_batch_start(front.batch), nullptr);
      backlog_.pop_front();
      continue;
    }
    if (front.event()) {
      release_held();  // the frames before it first
      frames::FrameUpdate update;
      if (front.step_skipped) update.step_skipped_batch = front.batch;
      if (front.step_applied) update.step_applied_batch = front.batch;
      update.loss_scaler = front.loss_scaler;
      apply(update, nullptr);
      backlog_.pop_front();
      continue;
    }
    if (!taken_) {
      const bool launch = handed_over_after_append(static_cast<Op>(front.record.op));
      // Read before the board: the engine's watch of a call begins before the real call, so a call that had
      // returned when the board did not hold it never had a watch (the engine could not allocate one, or the record
      // was lapped): skip it rather than wait for it forever.
      const bool returned = !launch && live_result(header_, front.index) != recorder::kResultPending;
      bool present = false;
      taken_ = watch_board().take_if_complete(front.index, &present);
      if (!taken_ && !present &&
          (returned || watch_board().refused(front.index) || (launch && launch_never_watched()))) {
        backlog_.pop_front();
        continue;
      }
      if (!taken_) return;  // not begun or not complete yet (the call runs, or its group has not ended)
      launch_missing_ = false;
    }
    if (!ready(*taken_)) return;
    frames::Frame frame = make_frame(*taken_, front.record, front.index, front.batch, window_.take_spare());
    const bool settled = front.settled;
    const uint64_t position = front.position;
    taken_.reset();  // back to the board
    backlog_.pop_front();
    if (frame.rows.empty()) continue;  // nothing could be taken: no frame
    if (held_.must_hold(settled)) {
      held_.hold(std::move(frame), position, settled);
      release_held();
      continue;
    }
    add_to_window(std::move(frame));
  }
}

// The window keeps the frame (moved, not copied: once per watched call); what the update reports of it is read there.
void FrameFeed::add_to_window(frames::Frame frame) {
  // DUO's dump shows where a batch starts among its frames: the first module frame of each batch carries the line.
  if (frame.module && next_frame_starts_batch_) frame.starts_batch = frame.batch;
  next_frame_starts_batch_ = false;
  const frames::FrameUpdate update = window_.add_frame(std::move(frame));
  apply(update, &window_.newest());
}

}  // namespace trainscope::engine
