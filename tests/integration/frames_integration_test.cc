// End-to-end tests of the frame reports: 4-rank "training" jobs (train_program) on the CPU stand-in NCCL under the
// shim, where one rank puts inf or NaN into what it sends. Each step all-reduces an fp32 bucket (call 3k+1), then
// in one group all-reduces an fp16 bucket and broadcasts from rank 0 (calls 3k+2, 3k+3), so batch b's fp32
// all-reduce is call #3b+1. Every wait is bounded (ts-launch's deadline, eventually()'s attempt count).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "base/flight_recorder_reader.h"
#include "integration_helpers.h"
#include "support/subprocess.h"

namespace trainscope {
namespace {

using testing::ProcessOptions;
using testing::ProcessResult;
using testing::TempDir;

constexpr int kStopExit = 87;

std::vector<std::string> train(const std::vector<std::string>& args, int ranks = 4) {
  std::vector<std::string> argv = {TS_LAUNCH, "-n", std::to_string(ranks),   "--timeout",
                                   "60",      "--", program("train_program")};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

std::string file(const TempDir& dir, const std::string& name) {
  const std::string path = run_dir(dir) + "/" + name;
  return std::filesystem::exists(path) ? testing::read_file(path) : std::string();
}

// The origin file is rewritten as ranks' first frames (and their calls' stacks) reach the coordinator: wait until its
// analysis says what is expected and the stack of the call the value came from follows it (bounded), and return the
// analysis then. These are C programs: the stack is native frames only.
std::string origin_when_complete(const TempDir& dir, const std::string& expected) {
  const std::string stack_heading = "\nStack of the call it came from (";
  std::string text;
  eventually([&] {
    text = file(dir, "origin.txt");
    return text.substr(0, text.find(stack_heading)) == expected && text.find(stack_heading) != std::string::npos;
  });
  const size_t stack = text.find(stack_heading);
  EXPECT_NE(stack, std::string::npos) << text;
  if (stack != std::string::npos) {
    EXPECT_NE(text.find("):\n  #0 ", stack), std::string::npos) << text;
    EXPECT_EQ(text.find("  File \"", stack), std::string::npos) << "no Python frame in a C program: " << text;
  }
  return text.substr(0, stack);
}

// A nonfinite-rank<R>.txt: the seed's block (the callers check it to the character), then the stack of the first frame
// with inf/nan (a C program: native frames only). Returns the seed's block.
std::string seed_block_of(const std::string& text) {
  const std::string stack_heading = "\nStack of the first frame with inf/nan (";
  const size_t stack = text.find(stack_heading);
  EXPECT_NE(stack, std::string::npos) << text;
  if (stack != std::string::npos) {
    EXPECT_NE(text.find("):\n  #0 ", stack), std::string::npos) << text;
    EXPECT_EQ(text.find("  File \"", stack), std::string::npos) << "no Python frame in a C program: " << text;
  }
  return text.substr(0, stack);
}

// The frames of a clean step of train_program on 4 ranks, as the report prints them once without_comm_ids() has
// dropped the communicator ids (fp32 gradients 1e-3..1e-1 summed over 4 ranks; fp16 ones max-reduced; 0.5 broadcast
// from rank 0).
std::string clean_step_frames(int rank, int step) {
  const std::string header = "                  comm ";
  const int first = 3 * step + 1;
  return header + "all-reduce #" + std::to_string(first) +
         " ncclAllReduce\n1.00e-03 1.00e-01 input[0]\n4.00e-03 4.00e-01 output\n" + header + "all-reduce #" +
         std::to_string(first + 1) + " ncclAllReduce\n1.00e+00 1.00e+00 input[0]\n1.00e+00 1.00e+00 output\n" + header +
         "broadcast #" + std::to_string(first + 2) + " ncclBroadcast\n" +
         (rank == 0 ? "5.00e-01 5.00e-01 input[0]\n" : "             None input[0]\n") + "5.00e-01 5.00e-01 output\n";
}

// "comm 3f2a9c all-reduce" -> "comm all-reduce": the communicator id differs from run to run.
std::string without_comm_ids(const std::string& text) {
  std::string out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t found = text.find("comm ", pos);
    if (found == std::string::npos) {
      out += text.substr(pos);
      break;
    }
    out += text.substr(pos, found - pos) + "comm ";
    pos = found + 5;
    if (text.size() >= pos + 7 && text[pos + 6] == ' ' &&
        text.substr(pos, 6).find_first_not_of("0123456789abcdef") == std::string::npos)
      pos += 7;
  }
  return out;
}

// nonfinite-rank<R>.txt of train_program with inf injected on rank 2 at step 3: the seed's report, the last frames
// oldest first (10 watched calls so far), the detecting call.
std::string inf_at_batch_three_report(int rank) {
  std::string expected =
      "\nDetected inf/nan during batch_number=3\nLast 10 forward frames:\nabs min  abs max  metadata\n";
  for (int step = 0; step < 3; ++step) expected += clean_step_frames(rank, step);
  expected += "                  comm all-reduce #10 ncclAllReduce\n";
  expected += rank == 2 ? "1.00e-03      inf input[0]\n" : "1.00e-03 1.00e-01 input[0]\n";
  expected += "4.00e-03      inf output\n";
  return expected;
}

struct MarkerCase {
  const char* name;
  const char* marker;
  bool nvtx;
};

class InfAtBatchThree : public ::testing::TestWithParam<MarkerCase> {};

TEST_P(InfAtBatchThree, EveryRankReportsBatchThreeAndTheOriginNamesTheSender) {
  const MarkerCase& c = GetParam();
  TempDir dir;
  ProcessOptions options = job_options(dir);
  options.env["TRAINSCOPE_STEP_MARKER"] = c.marker;
  std::vector<std::string> args = {"--steps", "8", "--inject", "inf", "--rank", "2", "--step", "3"};
  if (c.nvtx) {
    args.push_back("--nvtx");
    options.env["NVTX_INJECTION64_PATH"] = TS_SHIM;
  }
  const ProcessResult job = testing::run_process(train(args), options);
  ASSERT_EQ(job.exit_code, 0) << job.err;  // report mode: the job goes on
  for (int rank = 0; rank < 4; ++rank) {
    const std::string text = file(dir, "nonfinite-rank" + std::to_string(rank) + ".txt");
    ASSERT_FALSE(text.empty()) << "rank " << rank << "\n" << job.err;
    EXPECT_TRUE(std::filesystem::exists(run_dir(dir) + "/nonfinite-rank" + std::to_string(rank) + ".json"));
    EXPECT_EQ(seed_block_of(without_comm_ids(text)), inf_at_batch_three_report(rank)) << "rank " << rank;
  }
  const std::string origin =
      "rank 2 sent inf in all-reduce call #10 in batch 3; ranks 0, 1 and 3 first saw it in that call's output\n";
  EXPECT_EQ(origin_when_complete(dir, origin), origin);
  EXPECT_NE(job.err.find("Detected inf/nan during batch_number=3"), std::string::npos) << "the main rank prints it";
}

INSTANTIATE_TEST_SUITE_P(StepMarkers, InfAtBatchThree,
                         ::testing::Values(MarkerCase{"auto", "auto", false}, MarkerCase{"every", "every:3", false},
                                           MarkerCase{"collective", "collective:^ncclAllReduce$", false},
                                           MarkerCase{"nvtx", "nvtx:^train_step$", true}),
                         [](const ::testing::TestParamInfo<MarkerCase>& param) { return param.param.name; });

// Non-blocking communicator (config.blocking = 0): every call and group end returns ncclInProgress before the stand-in
// moved any data, which it does in the job's ncclCommGetAsyncError. The outputs must be taken after that, so the
// reports are exactly those of the blocking run (not the receive buffers as they were before the calls).
TEST(Frames, NonBlockingCommunicatorReportsTheSameFramesAsABlockingOne) {
  TempDir dir;
  ProcessOptions options = job_options(dir);
  options.env["TRAINSCOPE_STEP_MARKER"] = "every:3";
  const ProcessResult job = testing::run_process(
      train({"--steps", "8", "--nonblocking", "--inject", "inf", "--rank", "2", "--step", "3"}), options);
  ASSERT_EQ(job.exit_code, 0) << job.err;
  for (int rank = 0; rank < 4; ++rank) {
    const std::string text = file(dir, "nonfinite-rank" + std::to_string(rank) + ".txt");
    EXPECT_EQ(seed_block_of(without_comm_ids(text)), inf_at_batch_three_report(rank)) << "rank " << rank << "\n"
                                                                                      << job.err;
  }
  const std::string origin =
      "rank 2 sent inf in all-reduce call #10 in batch 3; ranks 0, 1 and 3 first saw it in that call's output\n";
  EXPECT_EQ(origin_when_complete(dir, origin), origin);
}

// A job that never polls ncclCommGetAsyncError (against NCCL's rules): no output can be trusted, so every output is
// skipped — at the communicator's next call, and at ncclCommDestroy for the last group — and the frames go on: the
// input rows are reported, and the frames of the job's last batch still reach the trace.
TEST(Frames, NeverPolledNonBlockingCallsHaveTheirOutputsSkippedAndFramesGoOn) {
  TempDir dir;
  ProcessOptions options = job_options(dir);
  options.env["TRAINSCOPE_STEP_MARKER"] = "every:3";
  options.env["TRAINSCOPE_TRACE_BATCHES"] = "7";
  const ProcessResult job = testing::run_process(
      train({"--steps", "8", "--nonblocking", "--no-poll", "--inject", "inf", "--rank", "2", "--step", "3"}), options);
  ASSERT_EQ(job.exit_code, 0) << job.err;
  // Step `step`'s frames with their input rows only.
  auto input_rows = [](int rank, int step) {
    std::string frames = clean_step_frames(rank, step);
    std::string out;
    size_t pos = 0;
    while (pos < frames.size()) {
      const size_t end = frames.find('\n', pos) + 1;
      const std::string line = frames.substr(pos, end - pos);
      if (line.find(" output\n") == std::string::npos) out += line;
      pos = end;
    }
    return out;
  };
  std::string expected =
      "\nDetected inf/nan during batch_number=3\nLast 10 forward frames:\nabs min  abs max  metadata\n";
  for (int step = 0; step < 3; ++step) expected += input_rows(2, step);
  expected += "                  comm all-reduce #10 ncclAllReduce\n1.00e-03      inf input[0]\n";
  EXPECT_EQ(seed_block_of(without_comm_ids(file(dir, "nonfinite-rank2.txt"))), expected) << job.err;
  for (int rank : {0, 1, 3})
    EXPECT_EQ(file(dir, "nonfinite-rank" + std::to_string(rank) + ".txt"), "")
        << "rank " << rank << " saw no output, so it saw no inf";
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_EQ(without_comm_ids(file(dir, "trace-rank" + std::to_string(rank) + ".txt")),
              "\n                  *** Starting batch number=7 ***\nabs min  abs max  metadata\n" + input_rows(rank, 7))
        << "rank " << rank;
}

TEST(Frames, NanIsReportedAsNanWithItsOrigin) {
  TempDir dir;
  ProcessOptions options = job_options(dir);
  options.env["TRAINSCOPE_STEP_MARKER"] = "every:3";
  const ProcessResult job =
      testing::run_process(train({"--steps", "6", "--inject", "nan", "--rank", "1", "--step", "2"}), options);
  ASSERT_EQ(job.exit_code, 0) << job.err;
  const std::string rank1 = file(dir, "nonfinite-rank1.txt");
  EXPECT_NE(rank1.find("Detected inf/nan during batch_number=2"), std::string::npos) << rank1;
  EXPECT_NE(rank1.find("     nan      nan input[0]\n     nan      nan output\n"), std::string::npos) << rank1;
  const std::string origin =
      "rank 1 sent nan in all-reduce call #7 in batch 2; ranks 0, 2 and 3 first saw it in that call's output\n";
  EXPECT_EQ(origin_when_complete(dir, origin), origin);
}

TEST(Frames, AbortModeStopsTheJobAfterTheReportsAreWritten) {
  TempDir dir;
  ProcessOptions options = job_options(dir);
  options.env["TRAINSCOPE_ON_NONFINITE"] = "abort";
  options.env["TRAINSCOPE_STEP_MARKER"] = "every:3";
  const ProcessResult job =
      testing::run_process(train({"--steps", "200000", "--inject", "inf", "--rank", "3", "--step", "1"}), options);
  EXPECT_EQ(job.exit_code, kStopExit) << job.err;
  EXPECT_EQ(job.out.find("200000 steps done"), std::string::npos) << "the job was stopped";
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_NE(file(dir, "nonfinite-rank" + std::to_string(rank) + ".txt").find("batch_number=1"), std::string::npos)
        << rank;
  EXPECT_NE(file(dir, "origin.txt").find("rank 3 sent inf in all-reduce call #4 in batch 1"), std::string::npos);
  EXPECT_NE(job.err.find("trainscope: stopping: inf/nan detected during batch_number=1"), std::string::npos) << job.err;
  EXPECT_EQ(report(dir, "vanished-"), "") << "stopped ranks are no vanished ranks";
}

TEST(Frames, TraceBatchesPrintEveryFrameAndDetectionIsOffInThem) {
  TempDir dir;
  ProcessOptions options = job_options(dir);
  options.env["TRAINSCOPE_TRACE_BATCHES"] = "1,3";
  options.env["TRAINSCOPE_STEP_MARKER"] = "every:3";
  const ProcessResult job =
      testing::run_process(train({"--steps", "5", "--inject", "inf", "--rank", "0", "--step", "3"}), options);
  ASSERT_EQ(job.exit_code, 0) << job.err;
  const std::string trace = without_comm_ids(file(dir, "trace-rank0.txt"));
  const std::string start1 = "\n                  *** Starting batch number=1 ***\nabs min  abs max  metadata\n";
  const std::string start3 = "\n                  *** Starting batch number=3 ***\nabs min  abs max  metadata\n";
  std::string batch3 = clean_step_frames(0, 3);
  batch3.replace(batch3.find("1.00e-03 1.00e-01 input[0]\n4.00e-03 4.00e-01"),
                 std::string("1.00e-03 1.00e-01 input[0]\n4.00e-03 4.00e-01").size(),
                 "1.00e-03      inf input[0]\n4.00e-03      inf");
  EXPECT_EQ(trace, start1 + clean_step_frames(0, 1) + start3 + batch3);
  EXPECT_EQ(file(dir, "nonfinite-rank0.txt"), "") << "the inf in traced batch 3 is not a detection";
  EXPECT_FALSE(file(dir, "trace-rank0.jsonl").empty());
}

// The default marker (auto) learns the period of 3 calls with step 2's last call, after batch 1 has run: its frames
// wait for their numbers, and batch 1 is traced then, before batch 3 (live), in the same blocks. The inf that rank 0
// sends in batch 1 is no detection: the batch is traced.
TEST(Frames, AutoTracesBatchesThatRanBeforeThePeriodWasLearnt) {
  TempDir dir;
  ProcessOptions options = job_options(dir);
  options.env["TRAINSCOPE_TRACE_BATCHES"] = "1,3";
  const ProcessResult job =
      testing::run_process(train({"--steps", "6", "--inject", "inf", "--rank", "0", "--step", "1"}), options);
  ASSERT_EQ(job.exit_code, 0) << job.err;
  const std::string start1 = "\n                  *** Starting batch number=1 ***\nabs min  abs max  metadata\n";
  const std::string start3 = "\n                  *** Starting batch number=3 ***\nabs min  abs max  metadata\n";
  for (int rank = 0; rank < 4; ++rank) {
    std::string batch1 = clean_step_frames(rank, 1);
    batch1.replace(batch1.find("1.00e-03 1.00e-01 input[0]\n4.00e-03 4.00e-01 output\n"),
                   std::string("1.00e-03 1.00e-01 input[0]\n4.00e-03 4.00e-01 output\n").size(),
                   rank == 0 ? "1.00e-03      inf input[0]\n4.00e-03      inf output\n"
                             : "1.00e-03 1.00e-01 input[0]\n4.00e-03      inf output\n");
    const std::string name = "trace-rank" + std::to_string(rank);
    EXPECT_EQ(without_comm_ids(file(dir, name + ".txt")), start1 + batch1 + start3 + clean_step_frames(rank, 3))
        << rank;
    std::vector<std::string> batches;
    for (const std::string& line : testing::split_lines(file(dir, name + ".jsonl")))
      batches.push_back(line.substr(0, line.find(',')));
    EXPECT_EQ(batches, (std::vector<std::string>{"{\"batch_number\":1", "{\"batch_number\":1", "{\"batch_number\":1",
                                                 "{\"batch_number\":3", "{\"batch_number\":3", "{\"batch_number\":3"}))
        << rank;
    EXPECT_EQ(file(dir, "nonfinite-rank" + std::to_string(rank) + ".txt"), "")
        << "the inf in traced batch 1 is not a detection";
  }
}

// TRAINSCOPE_ABORT_AFTER_BATCH=3 on 30 steps that take no time (nothing but the calls): each rank stops on its own
// thread at the boundary, so no call of batch 4 returns. With auto the period is learnt in batch 2, so batch 4's
// first call is known as such; every:3, collective: and nvtx: know it at once. The call, or (nvtx) the range push,
// that starts batch 4 is where the rank stops: for a call, its record is in the recorder and never returned. The
// traces of batches 1 and 3 are on disk before the exit.
class AbortAfterBatchThree : public ::testing::TestWithParam<MarkerCase> {};

TEST_P(AbortAfterBatchThree, NoCallOfBatchFourReturnsAndTheTracesAreWritten) {
  const MarkerCase& c = GetParam();
  TempDir dir;
  ProcessOptions options = job_options(dir);
  options.env["TRAINSCOPE_STEP_MARKER"] = c.marker;
  options.env["TRAINSCOPE_ABORT_AFTER_BATCH"] = "3";
  options.env["TRAINSCOPE_TRACE_BATCHES"] = "1,3";
  std::vector<std::string> args = {"--steps", "30"};
  if (c.nvtx) {
    args.push_back("--nvtx");
    options.env["NVTX_INJECTION64_PATH"] = TS_SHIM;
  }
  const ProcessResult job = testing::run_process(train(args), options);
  EXPECT_EQ(job.exit_code, kStopExit) << job.err;
  EXPECT_EQ(job.out.find("30 steps done"), std::string::npos) << job.out;
  recorder::RunDirectory run;
  std::string error;
  ASSERT_TRUE(recorder::read_run_directory(run_dir(dir), &run, &error)) << error;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(file(dir, "stop-rank" + std::to_string(rank) + ".txt"),
              "trainscope: stopping after batch_number=3 (TRAINSCOPE_ABORT_AFTER_BATCH)\n")
        << rank;
    const recorder::RecorderFile* rec = nullptr;
    for (const auto& f : run.files)
      if (f.header.launcher_rank == rank) rec = &f;
    ASSERT_NE(rec, nullptr) << rank;
    EXPECT_EQ(rec->header.state, static_cast<uint32_t>(recorder::ProcessState::kExited));
    // Batch b is calls #3b+1..#3b+3: the calls that returned are exactly batches 0-3's.
    std::vector<uint64_t> returned;
    std::vector<uint64_t> pending;
    for (const auto& call : rec->records) {
      const auto op = static_cast<recorder::Op>(call.record.op);
      if (!recorder::is_collective(op) && !recorder::is_point_to_point(op)) continue;
      (call.pending() ? pending : returned).push_back(call.record.seq);
    }
    std::vector<uint64_t> batches_0_to_3;
    for (uint64_t seq = 1; seq <= 12; ++seq) batches_0_to_3.push_back(seq);
    EXPECT_EQ(returned, batches_0_to_3) << rank;
    EXPECT_EQ(pending, c.nvtx ? std::vector<uint64_t>{} : std::vector<uint64_t>{13}) << rank;
  }
  const std::string trace = without_comm_ids(file(dir, "trace-rank0.txt"));
  std::string expected;
  for (int batch : {1, 3}) {
    expected += "\n                  *** Starting batch number=" + std::to_string(batch) +
                " ***\nabs min  abs max  metadata\n" + clean_step_frames(0, batch);
  }
  EXPECT_EQ(trace, expected);
  EXPECT_EQ(report(dir, "vanished-"), "");
  EXPECT_EQ(report(dir, "desync-"), "");
}

INSTANTIATE_TEST_SUITE_P(StepMarkers, AbortAfterBatchThree,
                         ::testing::Values(MarkerCase{"auto", "auto", false}, MarkerCase{"every", "every:3", false},
                                           MarkerCase{"collective", "collective:^ncclAllReduce$", false},
                                           MarkerCase{"nvtx", "nvtx:^train_step$", true}),
                         [](const ::testing::TestParamInfo<MarkerCase>& param) { return param.param.name; });

// TRAINSCOPE_ABORT_AFTER_BATCH=0 under auto: batch 0 ends (call #4) before the period is learnt (call #9, the
// broadcast of step 2), so the rank stops as soon as it is learnt, at call #9: calls of batches 1 and 2 have run.
TEST(Frames, AutoStopsAtTheCallThatLearnsThePeriodWhenTheLastBatchEndedBefore) {
  TempDir dir;
  ProcessOptions options = job_options(dir);
  options.env["TRAINSCOPE_ABORT_AFTER_BATCH"] = "0";
  const ProcessResult job = testing::run_process(train({"--steps", "30"}), options);
  EXPECT_EQ(job.exit_code, kStopExit) << job.err;
  recorder::RunDirectory run;
  std::string error;
  ASSERT_TRUE(recorder::read_run_directory(run_dir(dir), &run, &error)) << error;
  ASSERT_EQ(run.files.size(), 4u);
  for (const recorder::RecorderFile& rec : run.files) {
    std::vector<uint64_t> returned;
    std::vector<uint64_t> pending;
    for (const auto& call : rec.records) {
      const auto op = static_cast<recorder::Op>(call.record.op);
      if (recorder::is_collective(op)) (call.pending() ? pending : returned).push_back(call.record.seq);
    }
    EXPECT_EQ(returned, (std::vector<uint64_t>{1, 2, 3, 4, 5, 6, 7, 8})) << rec.path;
    EXPECT_EQ(pending, std::vector<uint64_t>{9}) << rec.path;
    EXPECT_EQ(file(dir, "stop-rank" + std::to_string(rec.global_rank()) + ".txt"),
              "trainscope: stopping after batch_number=0 (TRAINSCOPE_ABORT_AFTER_BATCH)\n");
  }
}

TEST(Frames, AbortAfterBatchStopsEveryRankOnceTheBatchHasEnded) {
  TempDir dir;
  ProcessOptions options = job_options(dir);
  options.env["TRAINSCOPE_ABORT_AFTER_BATCH"] = "2";
  options.env["TRAINSCOPE_STEP_MARKER"] = "every:3";
  const ProcessResult job = testing::run_process(train({"--steps", "1000"}), options);
  EXPECT_EQ(job.exit_code, kStopExit) << job.err;
  EXPECT_EQ(job.out.find("1000 steps done"), std::string::npos);
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_EQ(file(dir, "stop-rank" + std::to_string(rank) + ".txt"),
              "trainscope: stopping after batch_number=2 (TRAINSCOPE_ABORT_AFTER_BATCH)\n")
        << rank;
  EXPECT_EQ(report(dir, "vanished-"), "");
  EXPECT_EQ(report(dir, "desync-"), "");
}

TEST(Frames, InfInFiveBatchesInARowIsAPersistentOverflow) {
  TempDir dir;
  ProcessOptions options = job_options(dir);
  options.env["TRAINSCOPE_STEP_MARKER"] = "every:3";
  const ProcessResult job = testing::run_process(
      train({"--steps", "10", "--inject", "inf", "--rank", "1", "--step", "2", "--streak", "5"}), options);
  ASSERT_EQ(job.exit_code, 0) << job.err;
  const std::string text = without_comm_ids(file(dir, "overflow-streak-rank1.txt"));
  EXPECT_EQ(text.substr(0, text.find("The loss scaler")),
            "trainscope: OVERFLOW! non-finite values in 5 consecutive batches (batch_number=2 to 6) on rank 1:\n"
            "  batch_number=2: first in comm all-reduce #7 input[0]\n"
            "  batch_number=3: first in comm all-reduce #10 input[0]\n"
            "  batch_number=4: first in comm all-reduce #13 input[0]\n"
            "  batch_number=5: first in comm all-reduce #16 input[0]\n"
            "  batch_number=6: first in comm all-reduce #19 input[0]\n")
      << text;
  EXPECT_NE(text.find("initial_scale_power"), std::string::npos);
  EXPECT_NE(file(dir, "overflow-streak-rank0.txt").find("first in comm"), std::string::npos)
      << "rank 0 received the inf in the same batches";
}

TEST(Frames, NearOverflowWarnsOncePerFrameBeforeItBecomesInf) {
  TempDir dir;
  ProcessOptions options = job_options(dir);
  const ProcessResult job = testing::run_process(
      train({"--steps", "6", "--inject", "big", "--rank", "2", "--step", "1", "--streak", "3"}), options);
  ASSERT_EQ(job.exit_code, 0) << job.err;
  const std::string text = without_comm_ids(file(dir, "near-overflow-rank2.txt"));
  EXPECT_EQ(text,
            "near overflow: comm all-reduce #5 input[0] abs max 6.27e+04 is 96% of float16's largest finite value "
            "6.55e+04\n")
      << "one warning per frame name, the first row that is near";
  EXPECT_NE(file(dir, "near-overflow-rank0.txt").find("all-reduce #5 output abs max 6.27e+04"), std::string::npos);
  EXPECT_EQ(report(dir, "nonfinite-"), "") << "6.27e+04 is finite";
}

TEST(Frames, SamplingWatchesEveryKthCallAndOnlyLargeEnoughOnes) {
  {
    TempDir dir;
    ProcessOptions options = job_options(dir);
    options.env["TRAINSCOPE_WATCH_EVERY"] = "3";  // calls 1, 4, 7, ...: the fp32 all-reduce of every step
    options.env["TRAINSCOPE_STEP_MARKER"] = "every:3";
    const ProcessResult job =
        testing::run_process(train({"--steps", "6", "--inject", "inf", "--rank", "0", "--step", "4"}), options);
    ASSERT_EQ(job.exit_code, 0) << job.err;
    const std::string text = file(dir, "nonfinite-rank0.txt");
    EXPECT_NE(text.find("batch_number=4\nLast 5 forward frames:"), std::string::npos) << text;
    EXPECT_EQ(text.find("broadcast"), std::string::npos) << text;
  }
  {
    TempDir dir;
    ProcessOptions options = job_options(dir);
    options.env["TRAINSCOPE_WATCH_MIN_BYTES"] = "1M";  // more than any buffer of the job
    const ProcessResult job =
        testing::run_process(train({"--steps", "6", "--inject", "inf", "--rank", "0", "--step", "4"}), options);
    ASSERT_EQ(job.exit_code, 0) << job.err;
    EXPECT_EQ(report(dir, "nonfinite-"), "") << "nothing was watched";
  }
  {
    TempDir dir;
    ProcessOptions options = job_options(dir);
    options.env["TRAINSCOPE_WATCH"] = "off";
    const ProcessResult job =
        testing::run_process(train({"--steps", "6", "--inject", "inf", "--rank", "0", "--step", "4"}), options);
    ASSERT_EQ(job.exit_code, 0) << job.err;
    EXPECT_EQ(report(dir, "nonfinite-"), "");
  }
}

TEST(Frames, CleanTrainingJobWritesNoFrameReport) {
  TempDir dir;
  const ProcessResult job = testing::run_process(train({"--steps", "400"}), job_options(dir));
  ASSERT_EQ(job.exit_code, 0) << job.err;
  for (const char* kind : {"nonfinite-", "overflow-streak-", "near-overflow-", "stop-", "origin"})
    EXPECT_EQ(report(dir, kind), "") << kind;
  EXPECT_EQ(job.err.find("warn"), std::string::npos) << job.err;
}

TEST(Frames, TrainscopeRunMakesNvtxRangesStepMarkersAndSummarisesTheOrigin) {
  TempDir dir;
  ProcessOptions options = job_options(dir);
  options.env["LD_PRELOAD"] = sanitized() ? std::optional<std::string>(TS_SANITIZER_RUNTIME) : std::nullopt;
  options.env["TRAINSCOPE_RUN_ID"] = std::nullopt;
  options.env["TRAINSCOPE_STEP_MARKER"] = "nvtx:^train_step$";
  std::vector<std::string> argv = {TS_TOOL, "run", "--dir", dir.path() + "/runs", "--library", TS_SHIM, "--"};
  for (const auto& arg : train({"--steps", "6", "--nvtx", "--inject", "inf", "--rank", "1", "--step", "4"}))
    argv.push_back(arg);
  const ProcessResult run = testing::run_process(argv, options);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("\n  inf/nan origin: rank 1 sent inf in all-reduce call #13 in batch 4; ranks 0, 2 and 3 "
                         "first saw it in that call's output\n"),
            std::string::npos)
      << run.err;
}

// A pipeline: stage 1 sends an inf on at step 2; stage 2 receives it and passes it on to stage 3. The origin pairs
// stage 1's send with stage 2's matching recv, and names the peers by rank.
TEST(Frames, OriginAcrossAPipelinePairsTheSendWithItsReceive) {
  TempDir dir;
  ProcessOptions options = job_options(dir);
  options.env["TRAINSCOPE_STEP_MARKER"] = "nvtx:^train_step$";
  const ProcessResult job =
      testing::run_process({TS_LAUNCH, "-n", "4", "--timeout", "60", "--", program("pipeline_program"), "--inject",
                            "inf", "--rank", "1", "--step", "2"},
                           options);
  ASSERT_EQ(job.exit_code, 0) << job.err;
  const std::string origin =
      "rank 1 sent inf in send #3 to rank 2 in batch 2; rank 2 first saw it in the matching recv's output\n"
      "rank 3 first saw inf in the output of recv #3 from rank 2 in batch 2\n";
  EXPECT_EQ(origin_when_complete(dir, origin), origin) << job.err;
  EXPECT_NE(file(dir, "nonfinite-rank1.txt").find("Detected inf/nan during batch_number=2"), std::string::npos);
  EXPECT_NE(file(dir, "nonfinite-rank2.txt").find("     inf output\n"), std::string::npos)
      << file(dir, "nonfinite-rank2.txt");
  EXPECT_EQ(file(dir, "nonfinite-rank0.txt"), "") << "stage 0 never had it";
}

TEST(Frames, BadStepMarkerStopsTheJobBeforeItRunsWithAClearError) {
  TempDir dir;
  ProcessOptions options = job_options(dir);
  options.env["TRAINSCOPE_STEP_MARKER"] = "nvtx:step(";
  const ProcessResult job = testing::run_process({program("train_program"), "--steps", "1"}, options);
  EXPECT_EQ(job.exit_code, 2);
  EXPECT_NE(job.err.find("trainscope: invalid TRAINSCOPE_STEP_MARKER='nvtx:step(': accepted"), std::string::npos)
      << job.err;
}

}  // namespace
}  // namespace trainscope
