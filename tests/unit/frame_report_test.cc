// Golden tests of the frame reports: the seed's DebugUnderflowOverflow example character by character, trace mode,
// aborts, overflow streak, near overflow, origin, and their JSON twins.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "reports/frame_report.h"

#include "collectors/frames/frame_window.h"

namespace trainscope::reports {
namespace {

using stats::DType;
using stats::TensorStats;

constexpr double kFrameInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

TensorStats make_stats(double abs_min, double abs_max, DType dtype = DType::kFloat16) {
  TensorStats s;
  s.dtype = dtype;
  s.count = 1024;
  s.abs_min = abs_min;
  s.abs_max = abs_max;
  s.finite_abs_min = abs_min;
  s.finite_abs_max = abs_max;
  if (std::isnan(abs_max)) {
    s.nan_count = 1;
    s.first_nonfinite = 7;
    s.finite_abs_max = 1.0;
    s.finite_abs_min = 0.0;
  } else if (std::isinf(abs_max)) {
    s.pos_inf_count = 1;
    s.first_nonfinite = 3;
    s.finite_abs_max = 6.0e4;
  }
  return s;
}

FrameRow row(const char* label, double abs_min, double abs_max) {
  return FrameRow::tensor(label, make_stats(abs_min, abs_max));
}

Frame frame(const char* name, const char* kind, std::vector<FrameRow> rows) {
  return Frame{name, kind, std::move(rows)};
}

// The frames of the seed's example (fp16 google/mt5-small), oldest first; the seed elides 12 frames as "[...]".
std::vector<Frame> seed_frames_before_elision() {
  return {frame("encoder.block.1.layer.1.DenseReluDense.dropout", "Dropout",
                {row("input[0]", 0.00e+00, 2.57e+02), row("output", 0.00e+00, 2.85e+02)})};
}

std::vector<Frame> seed_frames_after_elision() {
  return {
      frame("encoder.block.2.layer.0", "T5LayerSelfAttention",
            {row("input[0]", 6.78e-04, 3.15e+03), row("output[0]", 2.65e-04, 3.42e+03), FrameRow::none("output[1]"),
             row("output[2]", 2.25e-01, 1.00e+04)}),
      frame(
          "encoder.block.2.layer.1.layer_norm", "T5LayerNorm",
          {row("weight", 8.69e-02, 4.18e-01), row("input[0]", 2.65e-04, 3.42e+03), row("output", 1.79e-06, 4.65e+00)}),
      frame(
          "encoder.block.2.layer.1.DenseReluDense.wi_0", "Linear",
          {row("weight", 2.17e-07, 4.50e+00), row("input[0]", 1.79e-06, 4.65e+00), row("output", 2.68e-06, 3.70e+01)}),
      frame(
          "encoder.block.2.layer.1.DenseReluDense.wi_1", "Linear",
          {row("weight", 8.08e-07, 2.66e+01), row("input[0]", 1.79e-06, 4.65e+00), row("output", 1.27e-04, 2.37e+02)}),
      frame("encoder.block.2.layer.1.DenseReluDense.dropout", "Dropout",
            {row("input[0]", 0.00e+00, 8.76e+03), row("output", 0.00e+00, 9.74e+03)}),
      frame(
          "encoder.block.2.layer.1.DenseReluDense.wo", "Linear",
          {row("weight", 1.01e-06, 6.44e+00), row("input[0]", 0.00e+00, 9.74e+03), row("output", 3.18e-04, 6.27e+04)}),
      frame("encoder.block.2.layer.1.DenseReluDense", "T5DenseGatedGeluDense",
            {row("input[0]", 1.79e-06, 4.65e+00), row("output", 3.18e-04, 6.27e+04)}),
      frame("encoder.block.2.layer.1.dropout", "Dropout",
            {row("input[0]", 3.18e-04, 6.27e+04), row("output", 0.00e+00, kFrameInf)}),
  };
}

Frame filler(int i) { return frame(("elided." + std::to_string(i)).c_str(), "Filler", {row("output", 1.0, 2.0)}); }

// Replaces the text of the elided frames with the seed's "[...]" line.
std::string elide(std::string text, const std::vector<Frame>& elided) {
  std::string block;
  for (const Frame& f : elided) block += format_frame(f);
  const std::size_t at = text.find(block);
  EXPECT_NE(at, std::string::npos);
  if (at != std::string::npos) text.replace(at, block.size(), "[...]\n");
  return text;
}

// Copied from the seed (first section, the fp16 google/mt5-small example), preceded by the report's blank line.
const char* const kSeedDetection =
    "\n"
    "Detected inf/nan during batch_number=0\n"
    "Last 21 forward frames:\n"
    "abs min  abs max  metadata\n"
    "                  encoder.block.1.layer.1.DenseReluDense.dropout Dropout\n"
    "0.00e+00 2.57e+02 input[0]\n"
    "0.00e+00 2.85e+02 output\n"
    "[...]\n"
    "                  encoder.block.2.layer.0 T5LayerSelfAttention\n"
    "6.78e-04 3.15e+03 input[0]\n"
    "2.65e-04 3.42e+03 output[0]\n"
    "             None output[1]\n"
    "2.25e-01 1.00e+04 output[2]\n"
    "                  encoder.block.2.layer.1.layer_norm T5LayerNorm\n"
    "8.69e-02 4.18e-01 weight\n"
    "2.65e-04 3.42e+03 input[0]\n"
    "1.79e-06 4.65e+00 output\n"
    "                  encoder.block.2.layer.1.DenseReluDense.wi_0 Linear\n"
    "2.17e-07 4.50e+00 weight\n"
    "1.79e-06 4.65e+00 input[0]\n"
    "2.68e-06 3.70e+01 output\n"
    "                  encoder.block.2.layer.1.DenseReluDense.wi_1 Linear\n"
    "8.08e-07 2.66e+01 weight\n"
    "1.79e-06 4.65e+00 input[0]\n"
    "1.27e-04 2.37e+02 output\n"
    "                  encoder.block.2.layer.1.DenseReluDense.dropout Dropout\n"
    "0.00e+00 8.76e+03 input[0]\n"
    "0.00e+00 9.74e+03 output\n"
    "                  encoder.block.2.layer.1.DenseReluDense.wo Linear\n"
    "1.01e-06 6.44e+00 weight\n"
    "0.00e+00 9.74e+03 input[0]\n"
    "3.18e-04 6.27e+04 output\n"
    "                  encoder.block.2.layer.1.DenseReluDense T5DenseGatedGeluDense\n"
    "1.79e-06 4.65e+00 input[0]\n"
    "3.18e-04 6.27e+04 output\n"
    "                  encoder.block.2.layer.1.dropout Dropout\n"
    "3.18e-04 6.27e+04 input[0]\n"
    "0.00e+00      inf output\n";

// Copied from the seed (trace mode, trace_batch_nums=[1, 3]).
const char* const kSeedTrace =
    "\n"
    "                  *** Starting batch number=1 ***\n"
    "abs min  abs max  metadata\n"
    "                  shared Embedding\n"
    "1.01e-06 7.92e+02 weight\n"
    "0.00e+00 2.47e+04 input[0]\n"
    "5.36e-05 7.92e+02 output\n"
    "[...]\n"
    "                  decoder.dropout Dropout\n"
    "1.60e-07 2.27e+01 input[0]\n"
    "0.00e+00 2.52e+01 output\n"
    "                  decoder T5Stack\n"
    "     not a tensor output\n"
    "                  lm_head Linear\n"
    "1.01e-06 7.92e+02 weight\n"
    "0.00e+00 1.11e+00 input[0]\n"
    "6.06e-02 8.39e+01 output\n"
    "                   T5ForConditionalGeneration\n"
    "     not a tensor output\n"
    "\n"
    "                  *** Starting batch number=3 ***\n"
    "abs min  abs max  metadata\n"
    "                  shared Embedding\n"
    "1.01e-06 7.92e+02 weight\n"
    "0.00e+00 2.78e+04 input[0]\n"
    "5.36e-05 7.92e+02 output\n"
    "[...]\n";

TEST(FrameReportTest, SeedDetectionExampleCharacterByCharacter) {
  // 4 older frames that the 21-frame limit drops, then the seed's 21 frames (1 + 12 elided + 8), through the
  // frame window the engine uses: its detection carries the last 21 frames.
  frames::FrameWindow window;
  EXPECT_EQ(window.options().max_frames, 21u);
  const auto add = [&window](const Frame& f) {
    frames::Frame framed;
    static_cast<Frame&>(framed) = f;
    return window.add_frame(framed);
  };
  for (int i = 0; i < 4; ++i) add(filler(100 + i));
  for (Frame& f : seed_frames_before_elision()) add(f);
  std::vector<Frame> elided;
  for (int i = 0; i < 12; ++i) elided.push_back(filler(i));
  for (Frame& f : elided) add(f);
  std::vector<Frame> last = seed_frames_after_elision();
  for (size_t i = 0; i + 1 < last.size(); ++i) EXPECT_FALSE(add(last[i]).detection) << i;
  const frames::FrameUpdate update = add(last.back());  // the seed's Dropout frame holding inf
  ASSERT_TRUE(update.detection);
  ASSERT_EQ(update.detection->frames.size(), 21u);

  DetectionReport report;
  report.rank = 0;
  report.batch_number = update.detection->batch;
  report.frames.assign(update.detection->frames.begin(), update.detection->frames.end());
  EXPECT_EQ(elide(format_detection_text(report), elided), kSeedDetection);

  // The report itself applies the limit too: all 25 frames in, the same 21 out.
  DetectionReport all = report;
  all.frames.clear();
  for (int i = 0; i < 4; ++i) all.frames.push_back(filler(100 + i));
  for (const Frame& f : report.frames) all.frames.push_back(f);
  EXPECT_EQ(format_detection_text(all), format_detection_text(report));
  EXPECT_EQ(detection_json(all)["frames_dropped"], 4);
}

TEST(FrameReportTest, SeedTraceExampleCharacterByCharacter) {
  std::string text = format_trace_batch_start(1);
  text += format_trace_frame(frame(
      "shared", "Embedding",
      {row("weight", 1.01e-06, 7.92e+02), row("input[0]", 0.00e+00, 2.47e+04), row("output", 5.36e-05, 7.92e+02)}));
  text += "[...]\n";
  text += format_trace_frame(
      frame("decoder.dropout", "Dropout", {row("input[0]", 1.60e-07, 2.27e+01), row("output", 0.00e+00, 2.52e+01)}));
  text += format_trace_frame(frame("decoder", "T5Stack", {FrameRow::not_a_tensor("output")}));
  text += format_trace_frame(frame(
      "lm_head", "Linear",
      {row("weight", 1.01e-06, 7.92e+02), row("input[0]", 0.00e+00, 1.11e+00), row("output", 6.06e-02, 8.39e+01)}));
  text += format_trace_frame(frame("", "T5ForConditionalGeneration", {FrameRow::not_a_tensor("output")}));
  text += format_trace_batch_start(3);
  text += format_trace_frame(frame(
      "shared", "Embedding",
      {row("weight", 1.01e-06, 7.92e+02), row("input[0]", 0.00e+00, 2.78e+04), row("output", 5.36e-05, 7.92e+02)}));
  text += "[...]\n";
  EXPECT_EQ(text, kSeedTrace);
}

TEST(FrameReportTest, RowFormats) {
  EXPECT_EQ(format_frame_row(row("output", 0.0, kFrameInf)), "0.00e+00      inf output\n");
  EXPECT_EQ(format_frame_row(row("output", kNan, kNan)), "     nan      nan output\n");
  EXPECT_EQ(format_frame_row(FrameRow::none("output[1]")), "             None output[1]\n");
  EXPECT_EQ(format_frame_row(FrameRow::not_a_tensor("output")), "     not a tensor output\n");
  // An empty tensor: a word in the value columns, never the empty interval's "inf -inf".
  TensorStats empty;
  empty.dtype = DType::kFloat16;
  empty.count = 0;
  empty.abs_min = kFrameInf;
  empty.abs_max = -kFrameInf;
  const FrameRow from_stats = FrameRow::tensor("input[0]", empty);
  EXPECT_EQ(from_stats.kind, FrameRowKind::kEmpty);
  EXPECT_EQ(format_frame_row(from_stats), "            empty input[0]\n");
  EXPECT_EQ(format_frame_row(FrameRow::empty("input[0]", DType::kBfloat16)), "            empty input[0]\n");
  EXPECT_FALSE(from_stats.has_nonfinite());
  EXPECT_EQ(format_frame_header(frame("comm 3f2a9c ncclAllReduce #812", "ncclAllReduce", {})),
            "                  comm 3f2a9c ncclAllReduce #812 ncclAllReduce\n");
}

TEST(FrameReportTest, NcclFrameWithNanAndFirstNonfiniteRow) {
  const Frame f = frame("comm 3f2a9c ncclAllReduce #812", "ncclAllReduce",
                        {row("input[0]", 1.0e-03, 2.0e+01), row("output", kNan, kNan)});
  EXPECT_TRUE(f.has_nonfinite());
  ASSERT_NE(f.first_nonfinite_row(), nullptr);
  EXPECT_EQ(f.first_nonfinite_row()->label, "output");
  DetectionReport report;
  report.batch_number = 12;
  report.frames = {f};
  EXPECT_EQ(format_detection_text(report),
            "\n"
            "Detected inf/nan during batch_number=12\n"
            "Last 1 forward frames:\n"
            "abs min  abs max  metadata\n"
            "                  comm 3f2a9c ncclAllReduce #812 ncclAllReduce\n"
            "1.00e-03 2.00e+01 input[0]\n"
            "     nan      nan output\n");
}

exchange::CallStack frame_python_stack() {
  exchange::CallStack stack;
  stack.python = {{"train.py", 88, "backward"}, {"train.py", 120, "main"}};
  stack.native = {"ncclAllReduce at nccl.cc:1"};
  return stack;
}

TEST(FrameReportTest, DetectionShowsTheStackOfTheFirstFrameAfterTheSeedsBlock) {
  DetectionReport report;
  report.batch_number = 12;
  report.frames = {frame("comm 3f2a9c ncclAllReduce #811", "ncclAllReduce", {row("output", 1.0e-03, 2.0e+01)}),
                   frame("comm 3f2a9c ncclAllReduce #812", "ncclAllReduce", {row("output", kNan, kNan)})};
  const std::string seed_block = format_detection_text(report);
  report.first_nonfinite_frame = "comm 3f2a9c ncclAllReduce #812";
  EXPECT_EQ(format_detection_text(report), seed_block) << "no stack known: the seed's text alone";
  report.first_nonfinite_stack = frame_python_stack();
  EXPECT_EQ(format_detection_text(report),
            "\n"
            "Detected inf/nan during batch_number=12\n"
            "Last 2 forward frames:\n"
            "abs min  abs max  metadata\n"
            "                  comm 3f2a9c ncclAllReduce #811 ncclAllReduce\n"
            "1.00e-03 2.00e+01 output\n"
            "                  comm 3f2a9c ncclAllReduce #812 ncclAllReduce\n"
            "     nan      nan output\n"
            "\n"
            "Stack of the first frame with inf/nan (comm 3f2a9c ncclAllReduce #812):\n"
            "  File \"train.py\", line 88, in backward\n"
            "  File \"train.py\", line 120, in main\n"
            "  #0 ncclAllReduce at nccl.cc:1\n");
  EXPECT_EQ(format_detection_text(report).substr(0, seed_block.size()), seed_block);
  const nlohmann::json j = detection_json(report);
  EXPECT_EQ(j["first_nonfinite_frame"], "comm 3f2a9c ncclAllReduce #812");
  EXPECT_EQ(j["stack"], nlohmann::json::array({"ncclAllReduce at nccl.cc:1"}));
  EXPECT_EQ(j["python_stack"][0], nlohmann::json::parse(R"({"file": "train.py", "line": 88, "function": "backward"})"));
  EXPECT_EQ(j["python_stack_note"], "");
  // Python could not be read: the note stands where the frames would.
  report.first_nonfinite_stack = exchange::CallStack{};
  report.first_nonfinite_stack.python_note = "Python 3.14 is not supported by this trainscope (3.9 to 3.13)";
  EXPECT_EQ(format_detection_text(report),
            seed_block +
                "\nStack of the first frame with inf/nan (comm 3f2a9c ncclAllReduce #812):\n"
                "  (Python stack not captured: Python 3.14 is not supported by this trainscope (3.9 to 3.13))\n");
  EXPECT_EQ(detection_json(report)["python_stack_note"],
            "Python 3.14 is not supported by this trainscope (3.9 to 3.13)");
}

TEST(FrameReportTest, EmptyFramesAndLimits) {
  DetectionReport report;
  report.batch_number = 5;
  EXPECT_EQ(format_detection_text(report),
            "\nDetected inf/nan during batch_number=5\nLast 0 forward frames:\nabs min  abs max  metadata\n");
  report.frames = {filler(1), filler(2), filler(3)};
  report.max_frames = 2;
  EXPECT_EQ(format_detection_text(report),
            "\nDetected inf/nan during batch_number=5\nLast 2 forward frames:\n"
            "abs min  abs max  metadata\n" +
                format_frame(filler(2)) + format_frame(filler(3)));
  report.max_frames = 0;
  EXPECT_NE(format_detection_text(report).find("Last 0 forward frames:\n"), std::string::npos);
}

TEST(FrameReportTest, DetectionJson) {
  DetectionReport report;
  report.rank = 3;
  report.batch_number = 12;
  TensorStats empty;
  empty.count = 0;
  report.frames = {frame("comm 3f2a9c ncclAllReduce #812", "ncclAllReduce",
                         {row("input[0]", 3.18e-04, 6.27e+04), row("output", 0.0, kFrameInf),
                          FrameRow::none("output[1]"), FrameRow::tensor("output[2]", empty)})};
  const nlohmann::json j = detection_json(report);
  EXPECT_EQ(j["kind"], "inf_nan_detected");
  EXPECT_EQ(j["rank"], 3);
  EXPECT_EQ(j["batch_number"], 12);
  EXPECT_EQ(j["frames_dropped"], 0);
  ASSERT_EQ(j["frames"].size(), 1u);
  const nlohmann::json& f = j["frames"][0];
  EXPECT_EQ(f["name"], "comm 3f2a9c ncclAllReduce #812");
  EXPECT_EQ(f["kind"], "ncclAllReduce");
  EXPECT_EQ(f["has_nonfinite"], true);
  EXPECT_EQ(f["rows"][0]["dtype"], "fp16");
  EXPECT_DOUBLE_EQ(f["rows"][0]["abs_max"].get<double>(), 6.27e+04);
  EXPECT_EQ(f["rows"][1]["abs_max"], "inf");
  EXPECT_EQ(f["rows"][1]["pos_inf_count"], 1);
  EXPECT_EQ(f["rows"][2], (nlohmann::json{{"label", "output[1]"}, {"kind", "none"}}));
  EXPECT_EQ(f["rows"][3]["kind"], "empty");
  EXPECT_EQ(f["rows"][3]["count"], 0);
  EXPECT_FALSE(f["rows"][3].contains("abs_max"));
  // NaN is spelled, never null.
  report.frames = {frame("x", "y", {row("output", kNan, kNan)})};
  EXPECT_EQ(detection_json(report)["frames"][0]["rows"][0]["abs_min"], "nan");
}

TEST(FrameReportTest, AbortMessages) {
  EXPECT_EQ(format_abort_after_batch(3), "trainscope: stopping after batch_number=3 (TRAINSCOPE_ABORT_AFTER_BATCH)\n");
  EXPECT_EQ(format_nonfinite_abort(12, "comm 3f2a9c ncclAllReduce #812", "output"),
            "trainscope: stopping: inf/nan detected during batch_number=12 in comm 3f2a9c ncclAllReduce #812 output "
            "(TRAINSCOPE_ON_NONFINITE=abort)\n");
  EXPECT_EQ(format_nonfinite_abort(12, "", ""),
            "trainscope: stopping: inf/nan detected during batch_number=12 (TRAINSCOPE_ON_NONFINITE=abort)\n");
}

TEST(FrameReportTest, OverflowStreak) {
  OverflowStreakReport report;
  report.rank = 0;
  report.batches = {{27, "comm 3f2a9c ncclAllReduce #812", "output"},
                    {28, "comm 3f2a9c ncclAllReduce #845", "output"},
                    {29, "comm 3f2a9c ncclAllReduce #878", "input[0]"}};
  EXPECT_EQ(format_overflow_streak_text(report),
            "trainscope: OVERFLOW! non-finite values in 3 consecutive batches (batch_number=27 to 29) on rank 0:\n"
            "  batch_number=27: first in comm 3f2a9c ncclAllReduce #812 output\n"
            "  batch_number=28: first in comm 3f2a9c ncclAllReduce #845 output\n"
            "  batch_number=29: first in comm 3f2a9c ncclAllReduce #878 input[0]\n"
            "The loss scaler is not getting past the overflow (DeepSpeed logs \"OVERFLOW! ... Attempted loss scale: 1, "
            "reducing to 1\"). Remedies:\n"
            "  - use bf16 instead of fp16 if your hardware supports it (TPU, Ampere GPUs or newer), or fp32;\n"
            "  - with DeepSpeed fp16, raise \"initial_scale_power\" in the config (32 usually works);\n"
            "  - switch the overflowing part to fp32 a few steps before the values grow too large (or disable mixed "
            "precision there).\n");
  const nlohmann::json j = overflow_streak_json(report);
  EXPECT_EQ(j["kind"], "overflow_streak");
  EXPECT_EQ(j["consecutive_batches"], 3);
  EXPECT_EQ(j["batches"][2]["batch_number"], 29);
  EXPECT_EQ(j["batches"][2]["first_frame"], "comm 3f2a9c ncclAllReduce #878");
  EXPECT_EQ(j["batches"][2]["first_label"], "input[0]");
  EXPECT_EQ(j["remedies"].size(), 3u);

  OverflowStreakReport single;
  single.batches = {{4, "comm 01 ncclBroadcast #2", ""}};
  const std::string prefix =
      "trainscope: OVERFLOW! non-finite values in 1 consecutive batch (batch_number=4):\n"
      "  batch_number=4: first in comm 01 ncclBroadcast #2\n"
      "The loss scaler";
  EXPECT_EQ(format_overflow_streak_text(single).substr(0, prefix.size()), prefix);
}

TEST(FrameReportTest, NearOverflow) {
  const NearOverflow near =
      check_near_overflow(make_stats(3.18e-04, 6.27e+04), "comm 3f2a9c ncclAllReduce #812", "output");
  EXPECT_TRUE(near.near);
  EXPECT_NEAR(near.fraction, 6.27e4 / 65504.0, 1e-12);
  EXPECT_EQ(near.text,
            "near overflow: comm 3f2a9c ncclAllReduce #812 output abs max 6.27e+04 is 96% of float16's largest finite "
            "value 6.55e+04\n");
  EXPECT_FALSE(check_near_overflow(make_stats(0, 5.0e4), "f", "output").near);  // 76%
  EXPECT_TRUE(check_near_overflow(make_stats(0, 5.0e4), "f", "output", 0.75).near);
  EXPECT_TRUE(check_near_overflow(make_stats(0, 416, DType::kFloat8E4M3), "f", "output").near);   // 93%
  EXPECT_FALSE(check_near_overflow(make_stats(0, 400, DType::kFloat8E4M3), "f", "output").near);  // 89%
  EXPECT_TRUE(check_near_overflow(make_stats(0, 57344, DType::kFloat8E5M2), "f", "o")
                  .text.find("is 100% of "
                             "float8_e5m2's") != std::string::npos);
  EXPECT_TRUE(check_near_overflow(make_stats(0, 3.2e38, DType::kBfloat16), "f", "o").near);
  EXPECT_FALSE(check_near_overflow(make_stats(0, 3.0e38, DType::kFloat32), "f", "o").near);
  EXPECT_FALSE(check_near_overflow(make_stats(0, 1e9, DType::kInt32), "f", "o").near);
  EXPECT_DOUBLE_EQ(largest_finite_value(DType::kFloat16), 65504.0);
  EXPECT_DOUBLE_EQ(largest_finite_value(DType::kFloat8E4M3), 448.0);
  EXPECT_DOUBLE_EQ(largest_finite_value(DType::kFloat8E5M2), 57344.0);
  EXPECT_NEAR(largest_finite_value(DType::kBfloat16), 3.39e38, 0.01e38);
  // The finite abs max counts: an inf elsewhere in the tensor does not hide a near-overflow finite value.
  TensorStats with_inf = make_stats(0, kFrameInf);  // finite_abs_max 6.0e4
  EXPECT_TRUE(check_near_overflow(with_inf, "f", "o").near);
  TensorStats all_inf = with_inf;
  all_inf.count = 1;
  EXPECT_FALSE(check_near_overflow(all_inf, "f", "o").near);  // no finite element
  TensorStats empty;
  EXPECT_FALSE(check_near_overflow(empty, "f", "o").near);
}

FirstNonfinite first_seen(int32_t rank, NonfiniteWhere where, NonfiniteKind kind = NonfiniteKind::kInf,
                          uint64_t call = 812, uint64_t batch = 12, const char* op = "ncclAllReduce") {
  return FirstNonfinite{rank, batch, 0x3f2a9c, call, op, where, kind};
}

TEST(FrameReportTest, RankLists) {
  EXPECT_EQ(format_rank_list({0, 1, 2, 4, 5, 6, 7}), "0\u20132 and 4\u20137");
  EXPECT_EQ(format_rank_list({5}), "5");
  EXPECT_EQ(format_rank_list({1, 0}), "0 and 1");
  EXPECT_EQ(format_rank_list({0, 1, 2, 5, 9, 10, 11, 12}), "0\u20132, 5 and 9\u201312");
  EXPECT_EQ(format_rank_list({3, 3, 4}), "3 and 4");
  EXPECT_EQ(format_rank_list({}), "");
  EXPECT_EQ(collective_phrase("ncclAllReduce"), "all-reduce");
  EXPECT_EQ(collective_phrase("ncclReduceScatter"), "reduce-scatter");
  EXPECT_EQ(collective_phrase("myKernel"), "myKernel");
}

// A watched kernel's frame: the kernel's short name as op, its launch's record index as call number, no communicator.
FirstNonfinite kernel_first(int32_t rank, NonfiniteWhere where, uint64_t record_index, const char* kernel,
                            uint64_t batch = 12) {
  return FirstNonfinite{rank, batch, 0, record_index, kernel, where, NonfiniteKind::kInf};
}

TEST(FrameReportTest, OriginInAKernelComesBeforeTheCollectivesThatCarriedIt) {
  // Rank 2's layer_norm wrote the inf; the all-reduce brought it to the others, whose first frame is that call's
  // output (a smaller call number than the kernel's record index, which says nothing across kinds).
  std::vector<FirstNonfinite> firsts;
  for (int32_t rank = 0; rank < 4; ++rank) {
    firsts.push_back(rank == 2 ? kernel_first(2, NonfiniteWhere::kOutput, 90211, "layer_norm_kernel")
                               : first_seen(rank, NonfiniteWhere::kOutput));
  }
  EXPECT_EQ(format_origin_text(firsts),
            "rank 2 first saw inf in the output of kernel layer_norm_kernel (launch record #90211) in batch 12\n"
            "ranks 0, 1 and 3 first saw inf in the output of all-reduce call #812 in batch 12\n");
  const nlohmann::json j = origin_json(firsts);
  EXPECT_EQ(j["origin"]["op"], "layer_norm_kernel");
  EXPECT_EQ(j["origin"]["kernel"], true);
  EXPECT_EQ(j["origin"]["produced_by_collective"], false);
  EXPECT_EQ(j["origin"]["call_number"], 90211);
  EXPECT_EQ(j["origin"]["communicator"], "0");

  // Kernels only: two ranks' kernels are two launches (a launch is its rank's own), the earlier record first; an
  // input of a kernel is no send.
  const std::vector<FirstNonfinite> kernels = {kernel_first(1, NonfiniteWhere::kInput, 5002, "softmax_kernel"),
                                               kernel_first(0, NonfiniteWhere::kOutput, 5000, "gemm_kernel"),
                                               kernel_first(3, NonfiniteWhere::kOutput, 5000, "gemm_kernel", 13)};
  EXPECT_EQ(format_origin_text(kernels),
            "rank 0 first saw inf in the output of kernel gemm_kernel (launch record #5000) in batch 12\n"
            "rank 1 first saw inf in the input of kernel softmax_kernel (launch record #5002) in batch 12\n"
            "rank 3 first saw inf in the output of kernel gemm_kernel (launch record #5000) in batch 13\n");
}

TEST(FrameReportTest, OriginInAModuleNamesItAndTheRanksThatSawItOnlyLater) {
  // Rank 1's module made the inf in batch 2; rank 0 got it through a gradient all-reduce trainscope does not see (gloo)
  // and saw it in its own modules in batch 3; rank 2 in the same batch, in a later frame (ranks running one model make
  // the same frames in the same order: their numbers compare).
  const std::vector<FirstNonfinite> firsts = {
      kernel_first(0, NonfiniteWhere::kOutput, 31, "module encoder.0.fc Linear", 3),
      kernel_first(1, NonfiniteWhere::kOutput, 24, "module encoder.1.fc Linear", 2),
      kernel_first(2, NonfiniteWhere::kInput, 30, "module head Linear (backward)", 2)};
  EXPECT_EQ(format_origin_text(firsts),
            "rank 1 first saw inf in the output of module encoder.1.fc Linear (module frame #24) in batch 2\n"
            "rank 2 first saw inf in the input of module head Linear (backward) (module frame #30) in batch 2\n"
            "rank 0 first saw inf in the output of module encoder.0.fc Linear (module frame #31) in batch 3, after "
            "rank 1\n");
}

TEST(FrameReportTest, AModuleIsTitledByItsNameAndClassAndTheRootByItsClass) {
  EXPECT_EQ(module_title("encoder.block.1.layer.1.DenseReluDense.wo", "Linear"),
            "encoder.block.1.layer.1.DenseReluDense.wo Linear");
  EXPECT_EQ(module_title("", "T5ForConditionalGeneration (backward)"), "T5ForConditionalGeneration (backward)");
}

TEST(FrameReportTest, OriginIssueExample) {
  std::vector<FirstNonfinite> firsts;
  for (int32_t rank = 7; rank >= 0; --rank)
    firsts.push_back(first_seen(rank, rank == 3 ? NonfiniteWhere::kInput : NonfiniteWhere::kOutput));
  EXPECT_EQ(format_origin_text(firsts),
            "rank 3 sent inf in all-reduce call #812 in batch 12; ranks 0\u20132 and 4\u20137 first saw it in that "
            "call's output\n");
  const nlohmann::json j = origin_json(firsts);
  EXPECT_EQ(j["kind"], "nonfinite_origin");
  EXPECT_EQ(j["origin"]["call_number"], 812);
  EXPECT_EQ(j["origin"]["communicator"], "3f2a9c");
  EXPECT_EQ(j["origin"]["op"], "ncclAllReduce");
  EXPECT_EQ(j["origin"]["produced_by_collective"], false);
  EXPECT_EQ(j["origin"]["senders"], nlohmann::json::array({3}));
  EXPECT_EQ(j["origin"]["receivers"], nlohmann::json::array({0, 1, 2, 4, 5, 6, 7}));
  ASSERT_EQ(j["firsts"].size(), 8u);
  EXPECT_EQ(j["firsts"][3]["where"], "input");
  EXPECT_EQ(j["firsts"][0]["where"], "output");
  EXPECT_EQ(j["text"], format_origin_text(firsts));
}

TEST(FrameReportTest, OriginEarlierBatchWinsAndOthersAreListed) {
  std::vector<FirstNonfinite> firsts = {
      first_seen(0, NonfiniteWhere::kOutput, NonfiniteKind::kNan, 40, 11),
      first_seen(1, NonfiniteWhere::kInput, NonfiniteKind::kNan, 40, 11),
      first_seen(2, NonfiniteWhere::kInput, NonfiniteKind::kInf, 40, 11),
      first_seen(3, NonfiniteWhere::kOutput, NonfiniteKind::kNan, 41, 11, "ncclBroadcast"),
      first_seen(4, NonfiniteWhere::kInput, NonfiniteKind::kInf, 812, 12),  // later batch: not the origin
      first_seen(5, NonfiniteWhere::kInput, NonfiniteKind::kInf, 812, 12),
  };
  EXPECT_EQ(format_origin_text(firsts),
            "ranks 1 and 2 sent inf and nan in all-reduce call #40 in batch 11; rank 0 first saw it in that call's "
            "output\n"
            "rank 3 first saw nan in the output of broadcast call #41 in batch 11\n"
            "ranks 4 and 5 sent inf in all-reduce call #812 in batch 12\n");
}

// A send/recv first: comm ranks equal the global ranks here, as in a one-communicator pipeline.
FirstNonfinite p2p_seen(int32_t rank, const char* op, int32_t peer, NonfiniteWhere where, uint64_t number,
                        uint64_t batch = 12) {
  FirstNonfinite f = first_seen(rank, where, NonfiniteKind::kInf, number, batch, op);
  f.comm_rank = rank;
  f.peer = peer;
  f.peer_rank = peer;
  return f;
}

TEST(FrameReportTest, OriginAcrossAPipelinePairsTheSendWithItsReceive) {
  // Stage 2 produced the inf and sent it on to stage 3, which saw it in the matching recv (counting its batches a
  // step behind); stage 1 received it later on the way back. Rank 0 sent its own send #5 (to rank 1) with an inf
  // too: the same number on another pair is another call.
  std::vector<FirstNonfinite> firsts = {
      p2p_seen(3, "ncclRecv", 2, NonfiniteWhere::kOutput, 5, 11),
      p2p_seen(2, "ncclSend", 3, NonfiniteWhere::kInput, 5),
      p2p_seen(1, "ncclRecv", 2, NonfiniteWhere::kOutput, 6, 13),
      p2p_seen(0, "ncclSend", 1, NonfiniteWhere::kInput, 5, 14),
  };
  EXPECT_EQ(format_origin_text(firsts),
            "rank 2 sent inf in send #5 to rank 3 in batch 12; rank 3 first saw it in the matching recv's output\n"
            "rank 1 first saw inf in the output of recv #6 from rank 2 in batch 13\n"
            "rank 0 sent inf in send #5 to rank 1 in batch 14\n");
  const nlohmann::json j = origin_json(firsts);
  EXPECT_EQ(j["origin"]["senders"], nlohmann::json::array({2}));
  EXPECT_EQ(j["origin"]["receivers"], nlohmann::json::array({3}));
  EXPECT_EQ(j["firsts"][2]["peer"], 3);
  EXPECT_EQ(j["firsts"][2]["peer_communicator_rank"], 3);
  EXPECT_FALSE(origin_json({first_seen(0, NonfiniteWhere::kInput)})["firsts"][0].contains("peer"));
  // A peer the coordinator could not place is named by its communicator rank.
  firsts[1].peer_rank = -1;
  EXPECT_EQ(format_origin_text({firsts[1]}), "rank 2 sent inf in send #5 to communicator rank 3 in batch 12\n");
}

TEST(FrameReportTest, OriginProducedByTheCollective) {
  // Every input finite, every output inf: the fp16 sum itself overflowed.
  std::vector<FirstNonfinite> firsts;
  for (int32_t rank = 0; rank < 4; ++rank) firsts.push_back(first_seen(rank, NonfiniteWhere::kOutput));
  EXPECT_EQ(format_origin_text(firsts),
            "no rank sent inf/nan in all-reduce call #812 in batch 12: its inputs were finite, and ranks 0\u20133 "
            "first saw inf in its output\n");
  EXPECT_EQ(origin_json(firsts)["origin"]["produced_by_collective"], true);
  EXPECT_EQ(origin_json(firsts)["origin"]["senders"], nlohmann::json::array());
}

TEST(FrameReportTest, OriginShowsTheStackOfTheCallItCameFrom) {
  std::vector<FirstNonfinite> firsts;
  for (int32_t rank = 0; rank < 4; ++rank)
    firsts.push_back(first_seen(rank, rank == 2 ? NonfiniteWhere::kInput : NonfiniteWhere::kOutput));
  firsts.push_back(first_seen(4, NonfiniteWhere::kOutput, NonfiniteKind::kInf, 813));  // another call
  firsts[4].stack.python = {{"other.py", 1, "elsewhere"}};
  const std::string without = format_origin_text(firsts);
  EXPECT_EQ(without.find("Stack of the call"), std::string::npos) << "rank 4's call is not the origin: " << without;
  EXPECT_TRUE(origin_json(firsts)["origin"]["stack_rank"].is_null());
  EXPECT_EQ(origin_json(firsts)["origin"]["python_stack"], nlohmann::json::array());
  // A receiver of the same call knows its stack: shown under its rank while the origin's own is not known.
  firsts[0].stack.native = {"receiver's frame"};
  EXPECT_EQ(format_origin_text(firsts),
            without +
                "\n"
                "Stack of the call it came from (rank 0, all-reduce call #812 in batch 12):\n"
                "  #0 receiver's frame\n");
  EXPECT_EQ(origin_json(firsts)["origin"]["stack_rank"], 0);
  // The origin's own rank first.
  firsts[2].stack = frame_python_stack();
  const std::string text = format_origin_text(firsts);
  EXPECT_EQ(text,
            "rank 2 sent inf in all-reduce call #812 in batch 12; ranks 0, 1 and 3 first saw it in that call's "
            "output\n"
            "rank 4 first saw inf in the output of all-reduce call #813 in batch 12\n"
            "\n"
            "Stack of the call it came from (rank 2, all-reduce call #812 in batch 12):\n"
            "  File \"train.py\", line 88, in backward\n"
            "  File \"train.py\", line 120, in main\n"
            "  #0 ncclAllReduce at nccl.cc:1\n");
  const nlohmann::json j = origin_json(firsts);
  EXPECT_EQ(j["text"], text);
  EXPECT_EQ(j["origin"]["stack_rank"], 2);
  EXPECT_EQ(j["origin"]["stack"], nlohmann::json::array({"ncclAllReduce at nccl.cc:1"}));
  EXPECT_EQ(j["origin"]["python_stack"][1]["function"], "main");
  EXPECT_EQ(j["origin"]["python_stack_note"], "");
}

TEST(FrameReportTest, OriginOfASendShowsTheSendersStackNotTheReceivers) {
  std::vector<FirstNonfinite> firsts = {
      p2p_seen(3, "ncclRecv", 2, NonfiniteWhere::kOutput, 5, 11),
      p2p_seen(2, "ncclSend", 3, NonfiniteWhere::kInput, 5),
  };
  firsts[0].stack.native = {"recv_activations at pipeline.cc:88"};
  EXPECT_EQ(format_origin_text(firsts).find("Stack of the call"), std::string::npos) << format_origin_text(firsts);
  firsts[1].stack.python = {{"pipeline.py", 41, "send_activations"}};
  EXPECT_EQ(format_origin_text(firsts),
            "rank 2 sent inf in send #5 to rank 3 in batch 12; rank 3 first saw it in the matching recv's output\n"
            "\n"
            "Stack of the call it came from (rank 2, send #5 to rank 3 in batch 12):\n"
            "  File \"pipeline.py\", line 41, in send_activations\n");
}

TEST(FrameReportTest, OriginEmpty) {
  EXPECT_EQ(format_origin_text({}), "");
  const nlohmann::json j = origin_json({});
  EXPECT_TRUE(j["origin"].is_null());
  EXPECT_TRUE(j["firsts"].empty());
}

}  // namespace
}  // namespace trainscope::reports
