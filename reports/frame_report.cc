// Text and JSON forms of the frame reports: detection, trace, aborts, overflow streak, near overflow and origin.
#include "reports/frame_report.h"

#include "base/hex_text.h"
#include "reports/stack_text.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>
#include <utility>

namespace trainscope::reports {
namespace {

using stats::DType;
using stats::TensorStats;

// Width of the two value columns and the space between them: labels and words are right-aligned to it.
constexpr int kValueColumns = 17;

std::string right_aligned(std::string_view word) {
  std::string out;
  if (word.size() < static_cast<std::size_t>(kValueColumns)) out.assign(kValueColumns - word.size(), ' ');
  out += word;
  return out;
}

std::string format_e(double value) { return stats::format_abs_value(value); }

using text::hex_digits;

// A JSON number, or "inf" / "-inf" / "nan" (JSON has no non-finite numbers; nlohmann would write null).
nlohmann::json json_value(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return value;
}

const char* row_kind_name(FrameRowKind kind) {
  switch (kind) {
    case FrameRowKind::kTensor:
      return "tensor";
    case FrameRowKind::kNone:
      return "none";
    case FrameRowKind::kNotATensor:
      return "not_a_tensor";
    case FrameRowKind::kEmpty:
      return "empty";
    case FrameRowKind::kUnreadable:
      return "unreadable";
  }
  return "unknown";
}

nlohmann::json row_json(const FrameRow& row) {
  nlohmann::json out = {{"label", row.label}, {"kind", row_kind_name(row.kind)}};
  if (row.kind == FrameRowKind::kTensor || row.kind == FrameRowKind::kEmpty) {
    out["dtype"] = stats::dtype_name(row.stats.dtype);
    out["count"] = row.stats.count;
  }
  if (row.kind == FrameRowKind::kTensor) {
    const TensorStats& s = row.stats;
    out["abs_min"] = json_value(s.abs_min);
    out["abs_max"] = json_value(s.abs_max);
    out["nan_count"] = s.nan_count;
    out["pos_inf_count"] = s.pos_inf_count;
    out["neg_inf_count"] = s.neg_inf_count;
    out["first_nonfinite"] = s.first_nonfinite;
    if (s.finite_count() != 0) {
      out["finite_abs_min"] = json_value(s.finite_abs_min);
      out["finite_abs_max"] = json_value(s.finite_abs_max);
    }
  }
  return out;
}

// The frames a detection report shows: the newest max_frames, oldest first.
std::pair<std::size_t, std::size_t> shown_range(const DetectionReport& report) {
  const std::size_t shown = std::min(report.frames.size(), report.max_frames);
  return {report.frames.size() - shown, report.frames.size()};
}

std::string join_words(const std::vector<std::string>& parts) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i) out += i + 1 == parts.size() ? " and " : ", ";
    out += parts[i];
  }
  return out;
}

const char* kind_word(NonfiniteKind kind) { return kind == NonfiniteKind::kNan ? "nan" : "inf"; }
const char* where_word(NonfiniteWhere where) { return where == NonfiniteWhere::kInput ? "input" : "output"; }

std::string kinds_text(const std::vector<const FirstNonfinite*>& group) {
  bool inf = false, nan = false;
  for (const FirstNonfinite* f : group) (f->kind == NonfiniteKind::kNan ? nan : inf) = true;
  if (inf && nan) return "inf and nan";
  return nan ? "nan" : "inf";
}

std::string ranks_text(const std::vector<const FirstNonfinite*>& group) {
  std::vector<int32_t> ranks;
  for (const FirstNonfinite* f : group) ranks.push_back(f->rank);
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return (ranks.size() == 1 ? "rank " : "ranks ") + format_rank_list(ranks);
}

bool point_to_point(const FirstNonfinite& f) { return f.peer >= 0 && (f.op == "ncclSend" || f.op == "ncclRecv"); }

// A watched kernel launch's frame (TRAINSCOPE_WATCH=kernels:REGEX): no communicator, the kernel's short name as op and
// its record index as call number. A launch is its rank's own: no other rank shares it.
bool kernel_launch(const FirstNonfinite& f) { return f.comm_id == 0 && collective_phrase(f.op) == f.op; }

// A torch.nn.Module's frame (TRAINSCOPE_WATCH=modules): a rank's own work as a kernel launch is, its op
// "module <qualified name> <class>" and its call number the rank's module frame number.
bool module_frame(const FirstNonfinite& f) { return f.comm_id == 0 && f.op.starts_with(kModuleOpPrefix); }

// "rank 3" when the coordinator knew the peer's global rank, else its rank in the communicator.
std::string peer_text(const FirstNonfinite& f) {
  return f.peer_rank >= 0 ? "rank " + std::to_string(f.peer_rank) : "communicator rank " + std::to_string(f.peer);
}

// "all-reduce call #812 in batch 12"; a send/recv is numbered per peer and direction: "send #5 to rank 3 in batch 12".
std::string call_text(const FirstNonfinite& f) {
  if (module_frame(f)) {
    return f.op + " (module frame #" + std::to_string(f.call_number) + ") in batch " + std::to_string(f.batch_number);
  }
  if (kernel_launch(f)) {
    return "kernel " + f.op + " (launch record #" + std::to_string(f.call_number) + ") in batch " +
           std::to_string(f.batch_number);
  }
  if (point_to_point(f)) {
    return collective_phrase(f.op) + " #" + std::to_string(f.call_number) + (f.op == "ncclSend" ? " to " : " from ") +
           peer_text(f) + " in batch " + std::to_string(f.batch_number);
  }
  return collective_phrase(f.op) + " call #" + std::to_string(f.call_number) + " in batch " +
         std::to_string(f.batch_number);
}

bool same_call(const FirstNonfinite& a, const FirstNonfinite& b) {
  if (a.batch_number != b.batch_number || a.comm_id != b.comm_id || a.call_number != b.call_number) return false;
  if (kernel_launch(a) || kernel_launch(b)) return a.rank == b.rank && a.op == b.op;
  // Sends and receives with one number are as many calls as there are pairs.
  if (point_to_point(a) || point_to_point(b)) return a.op == b.op && a.comm_rank == b.comm_rank && a.peer == b.peer;
  return true;
}

// `recv` is the receive that matches the send `send` (the n-th send from a to b meets b's n-th receive from a).
bool matching_receive(const FirstNonfinite& send, const FirstNonfinite& recv) {
  return send.op == "ncclSend" && recv.op == "ncclRecv" && point_to_point(send) && point_to_point(recv) &&
         send.comm_id == recv.comm_id && send.call_number == recv.call_number && send.peer == recv.comm_rank &&
         send.comm_rank == recv.peer;
}

// The origin analysis shared by the text and the JSON.
struct Origin {
  const FirstNonfinite* call = nullptr;                    // the call where the value first appeared
  std::vector<const FirstNonfinite*> senders;              // had it in that call's input
  std::vector<const FirstNonfinite*> receivers;            // first saw it in that call's output
  std::vector<std::vector<const FirstNonfinite*>> others;  // first saw it elsewhere, grouped
};

Origin analyse(const std::vector<FirstNonfinite>& firsts) {
  Origin origin;
  if (firsts.empty()) return origin;
  std::vector<const FirstNonfinite*> sorted;
  for (const FirstNonfinite& f : firsts) sorted.push_back(&f);
  // Earliest batch first; within it, a kernel that held the value (a rank's own work, before any collective could
  // bring it: a rank reports its first frame only) before any collective, kernels by record index (ranks running one
  // program launch the same kernels at about the same index); then a rank that had the value in its input (it
  // produced it) before one that received it; then by call number and rank.
  std::sort(sorted.begin(), sorted.end(), [](const FirstNonfinite* a, const FirstNonfinite* b) {
    const bool a_kernel = kernel_launch(*a);
    const bool b_kernel = kernel_launch(*b);
    const NonfiniteWhere a_where = a_kernel ? NonfiniteWhere::kInput : a->where;
    const NonfiniteWhere b_where = b_kernel ? NonfiniteWhere::kInput : b->where;
    return std::make_tuple(a->batch_number, !a_kernel, a_where, a->call_number, a->comm_id, a->rank) <
           std::make_tuple(b->batch_number, !b_kernel, b_where, b->call_number, b->comm_id, b->rank);
  });
  origin.call = sorted.front();
  // A receive's value came from its send: when the sender reported that send, it is the origin, even if the stages
  // count their batches apart (a pipeline's next stage may be a step behind or ahead).
  if (origin.call->where == NonfiniteWhere::kOutput && point_to_point(*origin.call)) {
    for (const FirstNonfinite* f : sorted) {
      if (f->where == NonfiniteWhere::kInput && matching_receive(*f, *origin.call)) {
        origin.call = f;
        break;
      }
    }
  }
  std::map<std::tuple<uint64_t, uint64_t, uint64_t, std::string, NonfiniteWhere, NonfiniteKind, int32_t>, std::size_t>
      index;
  for (const FirstNonfinite* f : sorted) {
    if (same_call(*f, *origin.call)) {
      (f->where == NonfiniteWhere::kInput ? origin.senders : origin.receivers).push_back(f);
      continue;
    }
    // A send's value arrives in its receiver's matching recv (a pipeline's next stage), whatever batch it counts.
    if (origin.call->where == NonfiniteWhere::kInput && f->where == NonfiniteWhere::kOutput &&
        matching_receive(*origin.call, *f)) {
      origin.receivers.push_back(f);
      continue;
    }
    // A send/recv group shares its peer too ("recv #5 from rank 2" is one line for every rank it names).
    const auto key = std::make_tuple(f->batch_number, f->call_number, f->comm_id, f->op, f->where, f->kind, f->peer);
    const auto [it, added] = index.emplace(key, origin.others.size());
    if (added) origin.others.emplace_back();
    origin.others[it->second].push_back(f);
  }
  std::sort(origin.others.begin(), origin.others.end(), [](const auto& a, const auto& b) {
    const FirstNonfinite& x = *a.front();
    const FirstNonfinite& y = *b.front();
    return std::make_tuple(x.batch_number, x.call_number, x.comm_id, x.where, x.kind) <
           std::make_tuple(y.batch_number, y.call_number, y.comm_id, y.where, y.kind);
  });
  return origin;
}

// The first whose stack the origin report shows: the origin call's own rank, else another rank in that same call (the
// value came through it too); nullptr when none of them has a known stack.
const FirstNonfinite* stack_source(const Origin& origin) {
  if (!origin.call) return nullptr;
  if (!origin.call->stack.empty()) return origin.call;
  for (const auto* group : {&origin.senders, &origin.receivers}) {
    for (const FirstNonfinite* f : *group)
      if (!f->stack.empty() && same_call(*f, *origin.call)) return f;
  }
  return nullptr;
}

nlohmann::json first_json(const FirstNonfinite& f) {
  nlohmann::json out = {{"rank", f.rank},
                        {"batch_number", f.batch_number},
                        {"communicator", hex_digits(f.comm_id)},
                        {"call_number", f.call_number},
                        {"op", f.op},
                        {"where", where_word(f.where)},
                        {"kind", kind_word(f.kind)}};
  if (point_to_point(f)) {
    out["communicator_rank"] = f.comm_rank;
    out["peer_communicator_rank"] = f.peer;
    out["peer"] = f.peer_rank >= 0 ? nlohmann::json(f.peer_rank) : nlohmann::json(nullptr);
  }
  return out;
}

nlohmann::json ranks_json(const std::vector<const FirstNonfinite*>& group) {
  nlohmann::json out = nlohmann::json::array();
  for (const FirstNonfinite* f : group) out.push_back(f->rank);
  return out;
}

}  // namespace

// ---- Frame model -------------------------------------------------------------------------------------------------

FrameRow FrameRow::tensor(std::string label, const TensorStats& stats) {
  FrameRow row;
  row.label = std::move(label);
  row.kind = stats.count == 0 ? FrameRowKind::kEmpty : FrameRowKind::kTensor;
  row.stats = stats;
  return row;
}

FrameRow FrameRow::none(std::string label) {
  FrameRow row;
  row.label = std::move(label);
  row.kind = FrameRowKind::kNone;
  return row;
}

FrameRow FrameRow::not_a_tensor(std::string label) {
  FrameRow row;
  row.label = std::move(label);
  row.kind = FrameRowKind::kNotATensor;
  return row;
}

FrameRow FrameRow::unreadable(std::string label) {
  FrameRow row;
  row.label = std::move(label);
  row.kind = FrameRowKind::kUnreadable;
  return row;
}

FrameRow FrameRow::empty(std::string label, DType dtype) {
  FrameRow row;
  row.label = std::move(label);
  row.kind = FrameRowKind::kEmpty;
  row.stats.dtype = dtype;
  return row;
}

std::string module_title(std::string_view name, std::string_view kind) {
  return name.empty() ? std::string(kind) : std::string(name) + ' ' + std::string(kind);
}

std::string frame_title(const Frame& frame) { return frame.module ? module_title(frame.name, frame.kind) : frame.name; }

bool Frame::has_nonfinite() const { return first_nonfinite_row() != nullptr; }

const FrameRow* Frame::first_nonfinite_row() const {
  for (const FrameRow& row : rows)
    if (row.has_nonfinite()) return &row;
  return nullptr;
}

// ---- Frame text --------------------------------------------------------------------------------------------------

std::string format_frame_header(const Frame& frame) {
  return std::string(kValueColumns, ' ') + ' ' + frame.name + ' ' + frame.kind + '\n';
}

std::string format_frame_row(const FrameRow& row) {
  switch (row.kind) {
    case FrameRowKind::kTensor:
      return stats::format_stats_row(row.stats, row.label) + '\n';
    case FrameRowKind::kNone:
      return right_aligned("None") + ' ' + row.label + '\n';
    case FrameRowKind::kNotATensor:
      return right_aligned("not a tensor") + ' ' + row.label + '\n';
    case FrameRowKind::kEmpty:
      return right_aligned("empty") + ' ' + row.label + '\n';
    case FrameRowKind::kUnreadable:
      return right_aligned("unreadable") + ' ' + row.label + '\n';
  }
  return right_aligned("?") + ' ' + row.label + '\n';
}

nlohmann::json frame_json(const Frame& frame) {
  nlohmann::json rows = nlohmann::json::array();
  for (const FrameRow& row : frame.rows) rows.push_back(row_json(row));
  nlohmann::json out = {
      {"name", frame.name}, {"kind", frame.kind}, {"has_nonfinite", frame.has_nonfinite()}, {"rows", rows}};
  if (frame.module) out["module"] = true;  // name is the module's qualified name, kind its class
  if (frame.launch) {
    const FrameLaunch& l = *frame.launch;
    out["launch"] = {{"kernel", l.kernel},
                     {"grid", {l.grid[0], l.grid[1], l.grid[2]}},
                     {"block", {l.block[0], l.block[1], l.block[2]}},
                     {"shared_bytes", l.shared_bytes},
                     {"stream", text::hex_address(l.stream)},
                     {"record_index", l.record_index}};
    if (!l.note.empty()) out["launch"]["note"] = l.note;
  }
  return out;
}

std::string format_frame(const Frame& frame) {
  std::string out = format_frame_header(frame);
  for (const FrameRow& row : frame.rows) out += format_frame_row(row);
  return out;
}

// ---- Detection report --------------------------------------------------------------------------------------------

std::string format_detection_text(const DetectionReport& report) {
  const auto [first, end] = shown_range(report);
  std::string out = "\nDetected inf/nan during batch_number=" + std::to_string(report.batch_number) + "\n";
  out += "Last " + std::to_string(end - first) + " forward frames:\n";
  out += kFrameColumnHeader;
  out += '\n';
  for (std::size_t i = first; i < end; ++i) {
    const Frame& frame = report.frames[i];
    if (frame.starts_batch)
      out += "\n\n" + std::string(kValueColumns, ' ') +
             " *** Starting batch number=" + std::to_string(*frame.starts_batch) + " ***\n" + kFrameColumnHeader + "\n";
    out += format_frame(frame);
  }
  if (!report.first_nonfinite_stack.empty()) {
    out += "\nStack of the first frame with inf/nan (" + report.first_nonfinite_frame + "):\n";
    out += format_stack_block(report.first_nonfinite_stack, 0, "  ");
  }
  return out;
}

nlohmann::json detection_json(const DetectionReport& report) {
  const auto [first, end] = shown_range(report);
  nlohmann::json frames = nlohmann::json::array();
  for (std::size_t i = first; i < end; ++i) frames.push_back(frame_json(report.frames[i]));
  nlohmann::json out = {
      {"kind", "inf_nan_detected"}, {"rank", report.rank}, {"batch_number", report.batch_number},
      {"frames_dropped", first},    {"frames", frames},    {"first_nonfinite_frame", report.first_nonfinite_frame}};
  add_stack_json(out, report.first_nonfinite_stack);
  return out;
}

// ---- Trace mode --------------------------------------------------------------------------------------------------

std::string format_trace_batch_start(uint64_t batch_number) {
  return "\n" + std::string(kValueColumns, ' ') + " *** Starting batch number=" + std::to_string(batch_number) +
         " ***\n" + kFrameColumnHeader + "\n";
}

std::string format_trace_frame(const Frame& frame) { return format_frame(frame); }

// ---- Abort messages ----------------------------------------------------------------------------------------------

std::string format_abort_after_batch(uint64_t batch_number) {
  return "trainscope: stopping after batch_number=" + std::to_string(batch_number) + " (" + kAbortAfterBatchVariable +
         ")\n";
}

std::string format_nonfinite_abort(uint64_t batch_number, std::string_view frame_name, std::string_view label,
                                   std::string_view why) {
  std::string out = "trainscope: stopping: inf/nan detected during batch_number=" + std::to_string(batch_number);
  if (!frame_name.empty()) {
    out += " in ";
    out += frame_name;
    if (!label.empty()) {
      out += ' ';
      out += label;
    }
  }
  out += why;
  return out + " (" + kAbortOnNonfiniteVariable + ")\n";
}

// ---- Persistent overflow -----------------------------------------------------------------------------------------

std::string format_overflow_streak_text(const OverflowStreakReport& report) {
  const auto& batches = report.batches;
  std::string out = "trainscope: OVERFLOW! non-finite values in " + std::to_string(batches.size()) +
                    " consecutive batch" + (batches.size() == 1 ? "" : "es");
  if (!batches.empty()) {
    out += " (batch_number=" + std::to_string(batches.front().batch_number);
    if (batches.size() > 1) out += " to " + std::to_string(batches.back().batch_number);
    out += ")";
  }
  if (report.rank >= 0) out += " on rank " + std::to_string(report.rank);
  out += ":\n";
  for (const OverflowBatch& batch : batches) {
    out += "  batch_number=" + std::to_string(batch.batch_number) + ": first in " + batch.first_frame;
    if (!batch.first_label.empty()) out += " " + batch.first_label;
    out += '\n';
  }
  out +=
      "The loss scaler is not getting past the overflow (DeepSpeed logs \"OVERFLOW! ... Attempted loss scale: 1, "
      "reducing to 1\"). Remedies:\n"
      "  - use bf16 instead of fp16 if your hardware supports it (TPU, Ampere GPUs or newer), or fp32;\n"
      "  - with DeepSpeed fp16, raise \"initial_scale_power\" in the config (32 usually works);\n"
      "  - switch the overflowing part to fp32 a few steps before the values grow too large (or disable mixed "
      "precision there).\n";
  return out;
}

nlohmann::json overflow_streak_json(const OverflowStreakReport& report) {
  nlohmann::json batches = nlohmann::json::array();
  for (const OverflowBatch& batch : report.batches)
    batches.push_back(
        {{"batch_number", batch.batch_number}, {"first_frame", batch.first_frame}, {"first_label", batch.first_label}});
  return {{"kind", "overflow_streak"},
          {"rank", report.rank},
          {"consecutive_batches", report.batches.size()},
          {"batches", batches},
          {"remedies",
           {"use bf16 instead of fp16 if the hardware supports it (TPU, Ampere GPUs or newer), or fp32",
            "with DeepSpeed fp16, raise initial_scale_power (32 usually works)",
            "switch the overflowing part to fp32 (or disable mixed precision there)"}}};
}

// ---- Near overflow -----------------------------------------------------------------------------------------------

double largest_finite_value(DType dtype) {
  switch (dtype) {
    case DType::kFloat64:
      return 1.7976931348623157e308;
    case DType::kFloat32:
      return 3.4028234663852886e38;
    case DType::kFloat16:
      return 65504.0;
    case DType::kBfloat16:
      return 3.3895313892515355e38;
    case DType::kFloat8E4M3:
      return 448.0;
    case DType::kFloat8E5M2:
      return 57344.0;
    default:
      return 0;
  }
}

const char* long_dtype_name(DType dtype) { return stats::torch_dtype_name(dtype); }

NearOverflow check_near_overflow(const TensorStats& stats, std::string_view frame_name, std::string_view label,
                                 double threshold) {
  NearOverflow result;
  const double largest = largest_finite_value(stats.dtype);
  if (largest <= 0 || stats.count == 0 || stats.finite_count() == 0) return result;
  result.fraction = stats.finite_abs_max / largest;
  if (!(result.fraction >= threshold)) return result;
  result.near = true;
  char percent[32];
  std::snprintf(percent, sizeof percent, "%.0f%%", result.fraction * 100.0);
  result.text = "near overflow: ";
  result.text += frame_name;
  if (!label.empty()) {
    result.text += ' ';
    result.text += label;
  }
  result.text += " abs max " + format_e(stats.finite_abs_max) + " is " + percent + " of " +
                 long_dtype_name(stats.dtype) + "'s largest finite value " + format_e(largest) + "\n";
  return result;
}

// ---- Origin report -----------------------------------------------------------------------------------------------

std::string collective_phrase(std::string_view nccl_op) {
  static const std::pair<std::string_view, std::string_view> kPhrases[] = {
      {"ncclAllReduce", "all-reduce"},
      {"ncclReduce", "reduce"},
      {"ncclBroadcast", "broadcast"},
      {"ncclBcast", "broadcast"},
      {"ncclAllGather", "all-gather"},
      {"ncclReduceScatter", "reduce-scatter"},
      {"ncclAlltoAll", "all-to-all"},
      {"ncclGather", "gather"},
      {"ncclScatter", "scatter"},
      {"ncclSend", "send"},
      {"ncclRecv", "recv"},
  };
  for (const auto& [name, phrase] : kPhrases)
    if (name == nccl_op) return std::string(phrase);
  return std::string(nccl_op);
}

std::string format_rank_list(std::vector<int32_t> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (j - i >= 2) {
      parts.push_back(std::to_string(ranks[i]) + "\u2013" + std::to_string(ranks[j]));
    } else {
      for (std::size_t k = i; k <= j; ++k) parts.push_back(std::to_string(ranks[k]));
    }
    i = j + 1;
  }
  return join_words(parts);
}

const FirstNonfinite* origin_call(const std::vector<FirstNonfinite>& firsts) { return analyse(firsts).call; }

std::string format_origin_text(const std::vector<FirstNonfinite>& firsts) {
  const Origin origin = analyse(firsts);
  if (!origin.call) return "";
  const std::string call = call_text(*origin.call);
  std::string out;
  if (kernel_launch(*origin.call)) {
    // The value was in a kernel's buffer before any collective of that rank held it: nothing was sent.
    const FirstNonfinite& k = *origin.call;
    out = ranks_text({&k}) + " first saw " + kind_word(k.kind) + " in the " + where_word(k.where) + " of " + call;
  } else if (!origin.senders.empty()) {
    out = ranks_text(origin.senders) + " sent " + kinds_text(origin.senders) + " in " + call;
    if (!origin.receivers.empty()) {
      out += "; " + ranks_text(origin.receivers) +
             (point_to_point(*origin.call) ? " first saw it in the matching recv's output"
                                           : " first saw it in that call's output");
    }
  } else {
    // Every input of the call was finite: the collective itself produced the value (an fp16 sum that overflows).
    out = "no rank sent inf/nan in " + call + ": its inputs were finite, and " + ranks_text(origin.receivers) +
          " first saw " + kinds_text(origin.receivers) + " in its output";
  }
  out += '\n';
  for (const auto& group : origin.others) {
    const FirstNonfinite& f = *group.front();
    if (kernel_launch(f)) {
      // A module's frame of a later batch: the value reached this rank after the origin's (through the gradients'
      // all-reduce of a backend trainscope does not watch, gloo or MPI, or a collective not watched).
      const bool later = module_frame(f) && f.batch_number > origin.call->batch_number;
      out += ranks_text(group) + " first saw " + kind_word(f.kind) + " in the " + where_word(f.where) + " of " +
             call_text(f) + (later ? ", after " + ranks_text({origin.call}) : std::string()) + '\n';
    } else if (f.where == NonfiniteWhere::kInput) {
      out += ranks_text(group) + " sent " + kind_word(f.kind) + " in " + call_text(f) + '\n';
    } else {
      out += ranks_text(group) + " first saw " + kind_word(f.kind) + " in the output of " + call_text(f) + '\n';
    }
  }
  if (const FirstNonfinite* source = stack_source(origin)) {
    out += "\nStack of the call it came from (rank " + std::to_string(source->rank) + ", " + call + "):\n";
    out += format_stack_block(source->stack, 0, "  ");
  }
  return out;
}

nlohmann::json origin_json(const std::vector<FirstNonfinite>& firsts) {
  const Origin origin = analyse(firsts);
  nlohmann::json out = {{"kind", "nonfinite_origin"}};
  if (!origin.call) {
    out["origin"] = nullptr;
    out["firsts"] = nlohmann::json::array();
    return out;
  }
  const FirstNonfinite& c = *origin.call;
  out["origin"] = {{"batch_number", c.batch_number},
                   {"communicator", hex_digits(c.comm_id)},
                   {"call_number", c.call_number},
                   {"op", c.op},
                   {"kernel", kernel_launch(c)},
                   {"produced_by_collective", !kernel_launch(c) && origin.senders.empty()},
                   {"senders", ranks_json(origin.senders)},
                   {"receivers", ranks_json(origin.receivers)}};
  // The stack the text shows, and whose it is (null, and empty lists, when none is known).
  const FirstNonfinite* source = stack_source(origin);
  out["origin"]["stack_rank"] = source != nullptr ? nlohmann::json(source->rank) : nlohmann::json(nullptr);
  add_stack_json(out["origin"], source != nullptr ? source->stack : exchange::CallStack{});
  nlohmann::json all = nlohmann::json::array();
  std::vector<FirstNonfinite> sorted = firsts;
  std::sort(sorted.begin(), sorted.end(),
            [](const FirstNonfinite& a, const FirstNonfinite& b) { return a.rank < b.rank; });
  for (const FirstNonfinite& f : sorted) all.push_back(first_json(f));
  out["firsts"] = all;
  out["text"] = format_origin_text(firsts);
  return out;
}

}  // namespace trainscope::reports
