// Frame model and every DebugUnderflowOverflow-family report (detection, trace, aborts, overflow streak, near
// overflow, origin) as text in the seed's exact format, with JSON twins.
//
// Pure formatting: the engine fills these plain structs (a watched NCCL call becomes a Frame whose rows are its
// buffers' statistics); nothing here knows about NCCL, CUDA or the coordinator, so the formats are tested alone.
//
// Text formats (DESIGN.md "Reports — exact formats", from transformers' debug_utils.py):
//   frame header  "                  <name> <kind>"           (17 spaces, a space, name, a space, kind)
//   tensor row    "%8.2e %8.2e <label>"                      ("     inf" / "     nan" for non-finite values)
//   missing       "             None <label>"                (f"{'None':>17} {label}")
//   not a tensor  "     not a tensor <label>"                (f"{'not a tensor':>17} {label}")
//   empty tensor  "            empty <label>"                (f"{'empty':>17} {label}"; see FrameRowKind)
// Every function returning text returns whole lines, each ending in '\n'.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/call_stack.h"
#include "kernels/stats.h"

namespace trainscope::reports {

// The column header printed before frames: "abs min  abs max  metadata".
inline constexpr const char* kFrameColumnHeader = "abs min  abs max  metadata";
// Frames a detection report keeps by default (transformers' max_frames_to_save).
inline constexpr std::size_t kDefaultMaxFrames = 21;
// Fraction of a type's largest finite value at which the near-overflow warning fires by default.
inline constexpr double kDefaultNearOverflowFraction = 0.9;
// The variables named by the abort messages.
inline constexpr const char* kAbortAfterBatchVariable = "TRAINSCOPE_ABORT_AFTER_BATCH";
inline constexpr const char* kAbortOnNonfiniteVariable = "TRAINSCOPE_ON_NONFINITE=abort";

// ---- Frame model -------------------------------------------------------------------------------------------------

enum class FrameRowKind : std::uint8_t {
  kTensor = 0,      // stats are valid; a tensor with stats.count == 0 prints as kEmpty
  kNone = 1,        // the tensor is missing (Python's None): "None"
  kNotATensor = 2,  // something that is not a tensor: "not a tensor"
  // An empty tensor (zero elements). It has no abs min/max: its statistics hold the empty interval (+inf, -inf),
  // and printing those would read "     inf     -inf", a false overflow alarm in a report whose very purpose is to
  // point at infinities. Like None, there is no value to show, so it gets the same right-aligned word treatment:
  // f"{'empty':>17} {label}" — distinct from None because the buffer exists (it is just zero-sized).
  kEmpty = 3,
  // A tensor whose elements trainscope cannot read (a module's int16, complex or sparse tensor): "unreadable".
  kUnreadable = 4,
};

struct FrameRow {
  std::string label;  // "input[0]", "output", "weight", "output[1]", ...
  FrameRowKind kind = FrameRowKind::kTensor;
  stats::TensorStats stats{};  // kTensor / kEmpty only (dtype inside)

  static FrameRow tensor(std::string label, const stats::TensorStats& stats);  // kEmpty when stats.count == 0
  static FrameRow none(std::string label);
  static FrameRow not_a_tensor(std::string label);
  static FrameRow empty(std::string label, stats::DType dtype);
  static FrameRow unreadable(std::string label);

  bool is_tensor() const { return kind == FrameRowKind::kTensor; }
  bool has_nonfinite() const { return is_tensor() && stats.has_nonfinite(); }
};

// One observed call: for a watched NCCL call, name "comm 3f2a9c ncclAllReduce #812" and kind "ncclAllReduce".
// What a kernel launch's frame (TRAINSCOPE_WATCH=kernels:REGEX) says of the launch beyond its header: the JSON twin's
// "launch" object, as a collective's name says its communicator and call number.
struct FrameLaunch {
  std::string kernel;  // the demangled name
  uint32_t grid[3] = {0, 0, 0};
  uint32_t block[3] = {0, 0, 0};
  uint32_t shared_bytes = 0;  // dynamic shared memory
  uint64_t stream = 0;        // CUstream (0: the legacy default stream)
  uint64_t record_index = 0;  // the launch's record in the flight recorder
  std::string note;           // why some parameters have no row ("" when none)
};

struct Frame {
  std::string name;
  std::string kind;
  std::vector<FrameRow> rows;
  std::optional<FrameLaunch> launch{};  // a kernel launch's frame; absent for a collective's
  // The first frame of batch N in DUO's module frames: the detection text puts DUO's batch lines before it
  // ("\n\n" + 17 spaces + " *** Starting batch number=N ***" and the column header), as DUO's dump shows them.
  std::optional<std::uint64_t> starts_batch{};
  bool module =
      false;  // a torch.nn.Module's frame (TRAINSCOPE_WATCH=modules): name is its qualified name, kind its class

  bool has_nonfinite() const;
  // The first row holding a NaN or an infinity; nullptr when none does.
  const FrameRow* first_nonfinite_row() const;
};

// ---- Frame text --------------------------------------------------------------------------------------------------

std::string format_frame_header(const Frame& frame);  // "                  <name> <kind>\n"
std::string format_frame_row(const FrameRow& row);    // one row line, '\n'-terminated
std::string format_frame(const Frame& frame);         // header then rows
// A frame as the JSON twins show it: name, kind, has_nonfinite, rows, and "launch" for a kernel launch's frame.
nlohmann::json frame_json(const Frame& frame);

// ---- Detection report --------------------------------------------------------------------------------------------

struct DetectionReport {
  int32_t rank = -1;  // global rank (JSON only: the text is the seed's, per rank)
  uint64_t batch_number = 0;
  std::vector<Frame> frames;  // oldest first; only the last max_frames are reported
  std::size_t max_frames = kDefaultMaxFrames;
  std::string first_nonfinite_frame{};          // name of the first frame holding inf/nan ("" when not known)
  exchange::CallStack first_nonfinite_stack{};  // the stack of that frame's call; empty when not known
};

// "\nDetected inf/nan during batch_number=N\nLast K forward frames:\nabs min  abs max  metadata\n<frames>",
// K = the number of frames shown (min(frames, max_frames)), the newest ones: the seed's text to the character. Then,
// when first_nonfinite_stack is known: "\nStack of the first frame with inf/nan (<frame name>):\n" and the stack
// (reports/stack_text.h) indented by two spaces.
std::string format_detection_text(const DetectionReport& report);
nlohmann::json detection_json(const DetectionReport& report);

// ---- Trace mode --------------------------------------------------------------------------------------------------

// "\n" + 17 spaces + " *** Starting batch number=N ***\n" + the column header line.
std::string format_trace_batch_start(uint64_t batch_number);
// One frame as it completes (the same text as format_frame).
std::string format_trace_frame(const Frame& frame);

// ---- Abort messages ----------------------------------------------------------------------------------------------

// "trainscope: stopping after batch_number=N (TRAINSCOPE_ABORT_AFTER_BATCH)\n"
std::string format_abort_after_batch(uint64_t batch_number);
// "trainscope: stopping: inf/nan detected during batch_number=N in <frame name> <row label><why>
// (TRAINSCOPE_ON_NONFINITE=abort)\n"; the row part is left out when `label` is empty. `why`, under a loss scaler:
// "; the loss scaler did not skip that batch's optimizer step".
std::string format_nonfinite_abort(uint64_t batch_number, std::string_view frame_name, std::string_view label,
                                   std::string_view why = {});

// ---- Persistent overflow (DeepSpeed's "OVERFLOW! ... Attempted loss scale: 1, reducing to 1") --------------------

struct OverflowBatch {
  uint64_t batch_number = 0;
  std::string first_frame;  // name of the batch's first frame with a non-finite value
  std::string first_label;  // its first non-finite row ("output"); may be empty
};

struct OverflowStreakReport {
  int32_t rank = -1;                   // -1: not shown
  std::vector<OverflowBatch> batches;  // the consecutive batches, oldest first
};

std::string format_overflow_streak_text(const OverflowStreakReport& report);
nlohmann::json overflow_streak_json(const OverflowStreakReport& report);

// ---- Near overflow -----------------------------------------------------------------------------------------------

// Largest finite value of a floating type (fp16 65504, bf16 3.39e38, e4m3fn 448, e5m2 57344, fp32, fp64); 0 for
// integer types (they cannot overflow to inf).
double largest_finite_value(stats::DType dtype);
// PyTorch-style type name used in the warning: "float16", "bfloat16", "float8_e4m3fn", ...
const char* long_dtype_name(stats::DType dtype);

struct NearOverflow {
  bool near = false;
  double fraction = 0;  // finite abs max / largest finite value
  std::string text;     // "near overflow: <frame> <label> abs max 6.27e+04 is 96% of float16's largest finite
                        // value 6.55e+04\n"; empty when !near
};

// Whether the finite abs max of a floating tensor reaches `threshold` of its type's largest finite value.
NearOverflow check_near_overflow(const stats::TensorStats& stats, std::string_view frame_name, std::string_view label,
                                 double threshold = kDefaultNearOverflowFraction);

// ---- Origin report (coordinator side) ----------------------------------------------------------------------------

enum class NonfiniteWhere : std::uint8_t { kInput = 0, kOutput = 1 };
enum class NonfiniteKind : std::uint8_t { kInf = 0, kNan = 1 };

// One rank's first frame with a non-finite value.
// The op of a module frame's FirstNonfinite: "module " + module_title.
inline constexpr std::string_view kModuleOpPrefix = "module ";
// A module frame as its header names it: "<qualified name> <class>", the root (no name) by its class alone.
std::string module_title(std::string_view name, std::string_view kind);
// A frame as the reports name it: a module by module_title ("head.proj Linear (backward)"), any other by its name.
std::string frame_title(const Frame& frame);

struct FirstNonfinite {
  int32_t rank = -1;
  uint64_t batch_number = 0;
  uint64_t comm_id = 0;
  uint64_t call_number = 0;
  std::string op;  // NCCL function ("ncclAllReduce"); printed as "all-reduce"
  NonfiniteWhere where = NonfiniteWhere::kOutput;
  NonfiniteKind kind = NonfiniteKind::kInf;
  // A send/recv: this rank's and the peer's communicator ranks (numbers are per peer and direction), and the peer's
  // global rank when the coordinator knows it; -1 otherwise.
  int32_t comm_rank = -1;
  int32_t peer = -1;
  int32_t peer_rank = -1;
  exchange::CallStack stack{};  // of the call where this rank first saw the value; empty when not known (yet)
};

// "ncclAllReduce" -> "all-reduce", "ncclReduceScatter" -> "reduce-scatter", ...; unknown names unchanged.
std::string collective_phrase(std::string_view nccl_op);
// {0,1,2,4,5,6,7} -> "0–2 and 4–7" (en dash); runs of three or more become ranges.
std::string format_rank_list(std::vector<int32_t> ranks);

// "rank 3 sent inf in all-reduce call #812 in batch 12; ranks 0–2 and 4–7 first saw it in that call's output\n",
// then one line per other group of ranks that first saw a value elsewhere. Empty input: "" (nothing to report).
// When the stack of the call the value came from is known (of the origin's rank, else of another rank in that same
// call): "\nStack of the call it came from (rank 3, all-reduce call #812 in batch 12):\n" and the stack
// (reports/stack_text.h) indented by two spaces.
std::string format_origin_text(const std::vector<FirstNonfinite>& firsts);
// The call the value came from, as the text names it (an element of `firsts`; nullptr when it is empty).
const FirstNonfinite* origin_call(const std::vector<FirstNonfinite>& firsts);
nlohmann::json origin_json(const std::vector<FirstNonfinite>& firsts);

}  // namespace trainscope::reports
