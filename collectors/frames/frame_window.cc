// Per-rank frame window: detection, streaks, near-overflow, trace batches, abort-after-batch (see frame_window.h).
#include "collectors/frames/frame_window.h"

#include <utility>

namespace trainscope::frames {

Frame recycled(Frame frame) {
  std::string name = std::move(frame.name);
  std::vector<FrameRow> rows = std::move(frame.rows);
  name.clear();
  rows.clear();
  Frame fresh;
  fresh.name = std::move(name);
  fresh.rows = std::move(rows);
  return fresh;
}

FrameWindow::FrameWindow(FrameWindowOptions options) : options_(std::move(options)) {
  if (options_.max_frames == 0) options_.max_frames = 1;
}

void FrameWindow::change_batch(std::uint64_t batch, FrameUpdate* update) {
  if (batch == batch_) return;
  // Close the current batch for the streak.
  if (!traced(batch_)) {
    if (batch_first_nonfinite_) {
      streak_.push_back({batch_, std::move(*batch_first_nonfinite_)});
      if (streak_.size() > options_.streak_batches) streak_.erase(streak_.begin());
    } else {
      streak_.clear();
      streak_reported_ = false;
    }
  }
  if (batch != batch_ + 1 || traced(batch)) {  // a gap, a renumbering or a traced batch breaks the streak
    streak_.clear();
    streak_reported_ = false;
  }
  batch_first_nonfinite_.reset();
  batch_traced_started_ = false;
  update->batch_began = batch;
  if (options_.abort_after_batch && !aborted_ && batch > *options_.abort_after_batch) {
    aborted_ = true;
    update->abort_now = true;
  }
  batch_ = batch;
}

FrameUpdate FrameWindow::on_batch_start(std::uint64_t batch) {
  FrameUpdate update;
  change_batch(batch, &update);
  return update;
}

FrameUpdate FrameWindow::add_frame(Frame frame) {
  FrameUpdate update;
  if (frame.batch != batch_) change_batch(frame.batch, &update);
  // The frame moves into the window last (one copy less per call on the frame thread); what is looked at before
  // sees the window as it will be with this frame at its end.
  auto keep = [this](Frame kept) {
    window_.push_back(std::move(kept));
    while (window_.size() > options_.max_frames) {
      spare_ = std::move(window_.front());
      window_.pop_front();
    }
  };

  if (traced(frame.batch)) {
    keep(frame);
    update.trace_batch_start = !batch_traced_started_;
    batch_traced_started_ = true;
    update.trace_frame = std::move(frame);
    return update;
  }

  for (const FrameRow& row : frame.rows) {
    const bool reported =
        frame.site != 0 ? near_reported_sites_.count(frame.site) != 0 : near_reported_.count(frame.name) != 0;
    if (row.kind != RowKind::kTensor || reported) continue;
    const stats::DType type = row.stats.dtype;
    const double limit = reports::largest_finite_value(type);
    if (limit <= 0 || options_.near_overflow_fraction <= 0 || row.stats.finite_count() == 0) continue;
    if (row.stats.finite_abs_max >= options_.near_overflow_fraction * limit) {
      if (frame.site != 0) {
        near_reported_sites_.insert(frame.site);
      } else {
        near_reported_.insert(frame.name);
      }
      update.near_overflow.push_back({frame.name, row.label, frame.batch, row.stats.finite_abs_max, limit, type});
    }
  }

  if (frame.has_nonfinite()) {
    if (!detected_) {
      detected_ = true;
      // The last max_frames frames with this one: the window's newest, then this frame.
      const std::size_t older = std::min<std::size_t>(window_.size(), options_.max_frames - 1);
      Detection detection{frame.batch,
                          std::vector<Frame>(window_.end() - static_cast<std::ptrdiff_t>(older), window_.end())};
      detection.frames.push_back(frame);
      update.detection = std::move(detection);
    }
    if (!batch_first_nonfinite_) {
      const FrameRow* row = frame.first_nonfinite_row();
      update.nonfinite_batch =
          NonfiniteBatch{frame.batch, reports::frame_title(frame), row != nullptr ? row->label : ""};
      batch_first_nonfinite_ = frame;
      if (options_.streak_batches > 0 && !streak_reported_ && streak_.size() + 1 >= options_.streak_batches) {
        streak_reported_ = true;
        PersistentOverflow persistent;
        persistent.batches = streak_;
        persistent.batches.push_back({frame.batch, frame});
        update.persistent = std::move(persistent);
      }
    }
  }
  keep(std::move(frame));
  return update;
}

}  // namespace trainscope::frames
