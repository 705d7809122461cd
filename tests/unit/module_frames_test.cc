// Module frames (TRAINSCOPE_WATCH=modules), the engine's side, without Python: frames packed as the hooks pack them
// (shim/module_frame_abi.h) go onto the watch board through watch_module_frame, their records into a flight
// recorder, and the frame feed reads it as the frame thread does. The Python side and the equality with transformers'
// DebugUnderflowOverflow are tested on real models (tests/integration/module_frames_test.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/flight_recorder_writer.h"
#include "kernels/stats.h"
#include "reports/frame_report.h"
#include "shim/engine/engine_frame_feed.h"
#include "shim/engine/job_thread/engine_module_frames.h"
#include "shim/engine/job_thread/engine_watch.h"
#include "shim/module_frame_abi.h"
#include "support/launch_recorder.h"
#include "support/subprocess.h"

namespace trainscope::engine {
namespace {

using recorder::Op;
constexpr float kInf = std::numeric_limits<float>::infinity();

// ---- Frames through the feed -----------------------------------------------------------------------------------

// One row as the hooks pack it.
struct Row {
  std::string label;
  ModuleRowKind kind = ModuleRowKind::kTensor;
  const std::vector<float>* tensor = nullptr;
};

class ModuleFramesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(recorder_.opened());
    FrameFeedOptions feed;
    std::string error;
    ASSERT_TRUE(batch::parse_step_marker("auto", &feed.marker, &error)) << error;
    feed_ = std::make_unique<FrameFeed>(
        std::move(feed),
        [this](const frames::FrameUpdate& update, const frames::Frame* frame) {
          if (frame != nullptr) frames_.push_back(*frame);
          if (update.detection) detection_ = update.detection;
          if (update.step_skipped_batch) skipped_.push_back(*update.step_skipped_batch);
        },
        [](bool, const std::string&) {});
  }

  void TearDown() override {
    for (uint64_t index = 0; index < writer_.header()->next; ++index) {
      bool present = false;
      watch_board().take_if_complete(index, &present);
    }
  }

  // A module forward's record and frame, as shim/module_frames.cc makes them. Returns watch_module_frame's answer.
  std::string module(const std::string& name, const std::string& kind, const std::vector<Row>& rows, bool root,
                     std::optional<std::vector<int64_t>> words_override = std::nullopt) {
    std::vector<int64_t> words = {kModuleFrameVersion,
                                  backward_next_ ? kModuleFrameBackward
                                  : root         ? kModuleFrameRoot
                                                 : 0,
                                  static_cast<int64_t>(rows.size())};
    std::string labels;
    for (const Row& row : rows) {
      labels += row.label;
      labels += '\0';
      if (row.kind != ModuleRowKind::kTensor) {
        words.insert(words.end(), {static_cast<int64_t>(row.kind), -1, 0, 0, 0, -1, 0});
        continue;
      }
      const auto n = static_cast<int64_t>(row.tensor->size());
      words.insert(words.end(),
                   {0, static_cast<int64_t>(stats::DType::kFloat32),
                    static_cast<int64_t>(reinterpret_cast<uintptr_t>(row.tensor->data())), n, 1, -1, 0, n, 1});
    }
    if (words_override) words = *words_override;
    recorder::Record r{};
    r.op = static_cast<uint16_t>(Op::kModuleForward);
    r.seq = ++frames_made_;
    r.count = rows.size();
    r.aux = backward_next_ ? recorder::kModuleRecordBackward : root ? recorder::kModuleRecordRoot : 0;
    backward_next_ = false;
    r.caller = std::hash<std::string>{}(name + " " + kind);
    r.flags = recorder::kFlagWatched;
    const recorder::Pending pending = writer_.append(r, 0, 1000);
    return watch_module_frame(r, pending.commit - 1, name.c_str(), kind.c_str(), labels.data(), labels.size(),
                              words.data(), words.size());
  }

  // One forward of a two-module model: its layer, then the root (the model) ending the batch.
  void forward(const std::vector<float>& layer_output) {
    EXPECT_EQ(module("layer", "Linear",
                     {{"weight", ModuleRowKind::kTensor, &weight_},
                      {"input[0]", ModuleRowKind::kTensor, &input_},
                      {"output", ModuleRowKind::kTensor, &layer_output}},
                     false),
              "");
    EXPECT_EQ(module("", "Model",
                     {{"input[0]", ModuleRowKind::kTensor, &input_},
                      {"input[1]", ModuleRowKind::kNone},
                      {"output", ModuleRowKind::kNotATensor}},
                     true),
              "");
  }

  // A module's backward frame (TRAINSCOPE_WATCH=modules,backward).
  std::string backward(const std::string& name, const std::string& kind, const std::vector<Row>& rows) {
    backward_next_ = true;
    return module(name, kind, rows, false);
  }

  // GradScaler skipped the step: an event record, not watched, as shim/module_frames.cc appends it.
  // batches_ago: a fused optimizer's skip, read from a GPU's found-inf after later batches began.
  void step_skipped(uint64_t batches_ago = 0) {
    recorder::Record r{};
    r.op = static_cast<uint16_t>(Op::kModuleForward);
    r.seq = ++frames_made_;
    r.aux = recorder::kModuleRecordStepSkipped;
    r.count = batches_ago;
    writer_.append(r, 0, 1000);
  }

  void pass() { feed_->pass(writer_.header()); }

  trainscope::testing::TempDir dir_;
  trainscope::testing::LaunchRecorder recorder_{dir_.path() + "/rank0.tsrec", 0, 4096};
  recorder::Writer& writer_ = recorder_.writer();
  std::unique_ptr<FrameFeed> feed_;
  std::vector<frames::Frame> frames_;
  std::optional<frames::Detection> detection_;
  std::vector<uint64_t> skipped_;
  uint64_t frames_made_ = 0;
  bool backward_next_ = false;
  std::vector<float> weight_ = {0.5f, -2.0f};
  std::vector<float> input_ = {1.0f, -3.0f, 0.25f};
  std::vector<float> finite_ = {4.0f, -0.125f};
  std::vector<float> overflowed_ = {4.0f, -kInf};
};

TEST_F(ModuleFramesTest, TheRootsForwardEndsEachBatchAndTheInfIsReportedInDuosFormat) {
  forward(finite_);
  forward(finite_);
  forward(overflowed_);
  pass();
  ASSERT_EQ(frames_.size(), 6u);
  EXPECT_EQ(frames_[0].name, "layer");
  EXPECT_EQ(frames_[0].kind, "Linear");
  EXPECT_TRUE(frames_[0].module);
  EXPECT_EQ(frames_[1].name, "");
  EXPECT_EQ(frames_[1].kind, "Model");
  for (size_t i = 0; i < frames_.size(); ++i) {
    EXPECT_EQ(frames_[i].batch, i / 2) << i;
    // DUO's batch line goes with each batch's first frame.
    EXPECT_EQ(frames_[i].starts_batch, i % 2 == 0 ? std::optional<uint64_t>(i / 2) : std::nullopt) << i;
  }
  ASSERT_TRUE(detection_.has_value());
  EXPECT_EQ(detection_->batch, 2u);
  const std::string text = reports::format_detection_text(detection_report(*detection_, 0, 21));
  EXPECT_EQ(text,
            "\nDetected inf/nan during batch_number=2\n"
            "Last 5 forward frames:\n"
            "abs min  abs max  metadata\n"
            "\n\n                  *** Starting batch number=0 ***\n"
            "abs min  abs max  metadata\n"
            "                  layer Linear\n"
            "5.00e-01 2.00e+00 weight\n"
            "2.50e-01 3.00e+00 input[0]\n"
            "1.25e-01 4.00e+00 output\n"
            "                   Model\n"
            "2.50e-01 3.00e+00 input[0]\n"
            "             None input[1]\n"
            "     not a tensor output\n"
            "\n\n                  *** Starting batch number=1 ***\n"
            "abs min  abs max  metadata\n"
            "                  layer Linear\n"
            "5.00e-01 2.00e+00 weight\n"
            "2.50e-01 3.00e+00 input[0]\n"
            "1.25e-01 4.00e+00 output\n"
            "                   Model\n"
            "2.50e-01 3.00e+00 input[0]\n"
            "             None input[1]\n"
            "     not a tensor output\n"
            "\n\n                  *** Starting batch number=2 ***\n"
            "abs min  abs max  metadata\n"
            "                  layer Linear\n"
            "5.00e-01 2.00e+00 weight\n"
            "2.50e-01 3.00e+00 input[0]\n"
            "4.00e+00      inf output\n");
  // The origin names the module by its name and class.
  EXPECT_EQ(first_nonfinite(*detection_, 0).op, "module layer Linear");
}

TEST_F(ModuleFramesTest, BackwardFramesBelongToTheBatchOfTheirForwardAndAreMarkedInTheHeader) {
  // Batch 0 and 1: forward, then the gradients (the layer's backward runs after the root's forward ended the batch).
  for (int step = 0; step < 2; ++step) {
    forward(finite_);
    EXPECT_EQ(backward("layer", "Linear",
                       {{"grad_output", ModuleRowKind::kTensor, &finite_},
                        {"grad_input[0]", ModuleRowKind::kTensor, step == 1 ? &overflowed_ : &input_}}),
              "");
    if (step == 1) step_skipped();
  }
  forward(finite_);  // batch 2 starts with its first forward, not at batch 1's root
  pass();
  ASSERT_EQ(frames_.size(), 8u);
  EXPECT_EQ(frames_[2].kind, "Linear (backward)");
  EXPECT_EQ(frames_[2].name, "layer");
  EXPECT_EQ(frames_[2].batch, 0u);
  EXPECT_FALSE(frames_[2].starts_batch.has_value());
  EXPECT_EQ(frames_[3].batch, 1u);
  EXPECT_EQ(frames_[3].starts_batch, std::optional<uint64_t>(1));
  EXPECT_EQ(frames_[5].batch, 1u);
  EXPECT_EQ(frames_[6].batch, 2u);
  EXPECT_EQ(frames_[6].starts_batch, std::optional<uint64_t>(2));
  ASSERT_TRUE(detection_.has_value());
  EXPECT_EQ(detection_->batch, 1u);
  const std::string text = reports::format_detection_text(detection_report(*detection_, 0, 21));
  EXPECT_NE(text.find("                  layer Linear (backward)\n"
                      "1.25e-01 4.00e+00 grad_output\n"
                      "4.00e+00      inf grad_input[0]\n"),
            std::string::npos)
      << text;
  // Its backward made the inf (grad_input), and the report names the module's gradients.
  const reports::FirstNonfinite first = first_nonfinite(*detection_, 0);
  EXPECT_EQ(first.op, "module layer Linear (backward)");
  EXPECT_EQ(first.where, reports::NonfiniteWhere::kOutput);
  EXPECT_EQ(detection_report(*detection_, 0, 21).first_nonfinite_frame, "layer Linear (backward)");
  // The skipped step is batch 1's, after its frames.
  EXPECT_EQ(skipped_, std::vector<uint64_t>{1});
}

TEST_F(ModuleFramesTest, AStepSkipReadBatchesLaterIsPutBackInItsStepsBatch) {
  forward(finite_);  // batch 0
  forward(finite_);  // batch 1: its step is skipped, read two batches later
  forward(finite_);  // batch 2
  forward(finite_);  // batch 3
  step_skipped(2);
  step_skipped(0);  // batch 3's own, read at once
  step_skipped(9);  // more batches ago than there were: the first one
  pass();
  EXPECT_EQ(skipped_, (std::vector<uint64_t>{1, 3, 0}));
}

TEST_F(ModuleFramesTest, AGradientThatArrivesNonFiniteIsWhatTheModulesBackwardReceived) {
  forward(finite_);
  EXPECT_EQ(backward("layer", "Linear", {{"grad_output", ModuleRowKind::kTensor, &overflowed_}}), "");
  pass();
  ASSERT_TRUE(detection_.has_value());
  EXPECT_EQ(first_nonfinite(*detection_, 0).where, reports::NonfiniteWhere::kInput);
}

TEST_F(ModuleFramesTest, ATensorOfATypeTheStatisticsDoNotReadGetsARowThatSaysSo) {
  // The hooks send int16, complex, sparse or meta tensors as unreadable; a type number the library does not know is.
  EXPECT_EQ(module("layer", "Linear",
                   {{"input[0]", ModuleRowKind::kUnreadable},
                    {"input[1]", ModuleRowKind::kNotATensor},
                    {"output", ModuleRowKind::kTensor, &overflowed_}},
                   false),
            "");
  pass();
  ASSERT_TRUE(detection_.has_value());
  const std::string text = reports::format_detection_text(detection_report(*detection_, 0, 21));
  EXPECT_NE(text.find("                  layer Linear\n"
                      "       unreadable input[0]\n"
                      "     not a tensor input[1]\n"
                      "4.00e+00      inf output\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(reports::frame_json(frames_.at(0))["rows"][0]["kind"], "unreadable");
}

TEST_F(ModuleFramesTest, ARootWithoutRowsStillEndsItsBatch) {
  // modules:REGEX that matches the layer only: the hooks still send the root, without rows.
  for (int step = 0; step < 3; ++step) {
    EXPECT_EQ(
        module("layer", "Linear", {{"output", ModuleRowKind::kTensor, step == 2 ? &overflowed_ : &finite_}}, false),
        "");
    EXPECT_EQ(module("", "Model", {}, true), "");
  }
  pass();
  ASSERT_EQ(frames_.size(), 3u);
  EXPECT_EQ(frames_[2].batch, 2u);
  ASSERT_TRUE(detection_.has_value());
  EXPECT_EQ(detection_->batch, 2u);
}

TEST_F(ModuleFramesTest, AMalformedFrameIsRefusedWithItsReasonAndLeavesNoFrameWaiting) {
  EXPECT_EQ(module("layer", "Linear", {}, false, std::vector<int64_t>{99, 0, 0}),
            "the frame's version or row count is not the library's");
  EXPECT_EQ(module("layer", "Linear", {{"output", ModuleRowKind::kTensor, &finite_}}, false,
                   std::vector<int64_t>{kModuleFrameVersion, 0, 1, 0, 1}),
            "the frame's words end inside row 0");
  EXPECT_EQ(module("layer", "Linear", {{"output", ModuleRowKind::kTensor, &finite_}}, false,
                   std::vector<int64_t>{kModuleFrameVersion, 0, 1, 0, 1, 0, 2, 65, -1, 0}),
            "row 0 has a wrong number of dimensions");
  forward(overflowed_);
  pass();
  // The refused ones made no frame and did not hold the later ones back.
  ASSERT_EQ(frames_.size(), 2u);
  EXPECT_EQ(frames_[0].name, "layer");
  EXPECT_EQ(watch_board().size(), 0u);
}

}  // namespace
}  // namespace trainscope::engine
