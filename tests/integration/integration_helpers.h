// Shared by the integration tests: where the programs are, the environment of a job under the shim, the reports
// a job left in its run directory.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/subprocess.h"

namespace trainscope {

// The exit status of a rank that a verdict stopped (TRAINSCOPE_ON_MISMATCH=abort, TRAINSCOPE_ON_DESYNC=abort).
constexpr int kVerdictExit = 86;

inline std::string program(const std::string& name) { return std::string(TS_PROGRAM_DIR) + "/" + name; }
inline bool sanitized() { return std::strlen(TS_SANITIZER) > 0; }

// LD_PRELOAD for the shim; a sanitizer's runtime must come first in the list.
inline std::string shim_preload() {
  return sanitized() ? std::string(TS_SANITIZER_RUNTIME) + ":" + TS_SHIM : std::string(TS_SHIM);
}

inline testing::ProcessOptions job_options(const testing::TempDir& dir) {
  testing::ProcessOptions options;
  options.env["LD_LIBRARY_PATH"] = std::string(TS_FAKE_NCCL_DIR);
  options.env["TRAINSCOPE_DIR"] = dir.path() + "/runs";
  options.env["TRAINSCOPE_RUN_ID"] = "job";
  options.env["LD_PRELOAD"] = shim_preload();
  for (const char* name : {"RANK",
                           "WORLD_SIZE",
                           "LOCAL_RANK",
                           "MASTER_ADDR",
                           "MASTER_PORT",
                           "TORCHELASTIC_RUN_ID",
                           "TRAINSCOPE_LOG_RANKS",
                           "TRAINSCOPE_LOG_LEVEL",
                           "TRAINSCOPE_COORDINATOR",
                           "TRAINSCOPE_TOKEN",
                           "TRAINSCOPE_ON_MISMATCH",
                           "TRAINSCOPE_ON_DESYNC",
                           "TRAINSCOPE_WATCH",
                           "TRAINSCOPE_WATCH_EVERY",
                           "TRAINSCOPE_WATCH_MIN_BYTES",
                           "TRAINSCOPE_MAX_FRAMES",
                           "TRAINSCOPE_STEP_MARKER",
                           "TRAINSCOPE_ON_NONFINITE",
                           "TRAINSCOPE_OVERFLOW_STREAK",
                           "TRAINSCOPE_NEAR_OVERFLOW",
                           "TRAINSCOPE_TRACE_BATCHES",
                           "TRAINSCOPE_ABORT_AFTER_BATCH",
                           "NVTX_INJECTION64_PATH"})
    options.env[name] = std::nullopt;
  if (sanitized()) options.env["ASAN_OPTIONS"] = "detect_leaks=0:verify_asan_link_order=0";
  options.timeout_seconds = 120;
  return options;
}

// A one-rank job on the stand-in driver, CUPTI and NCCL; no coordinator (one rank has nobody to compare with).
inline testing::ProcessOptions cuda_job_options(const testing::TempDir& dir) {
  testing::ProcessOptions options = job_options(dir);
  options.env["LD_LIBRARY_PATH"] = std::string(TS_FAKE_CUDA_DIR) + ":" + TS_FAKE_NCCL_DIR;
  options.env["RANK"] = "0";
  options.env["WORLD_SIZE"] = "1";
  options.env["TRAINSCOPE_COORDINATOR"] = "off";
  options.env["CUDA_INJECTION64_PATH"] = std::nullopt;
  options.env["TRAINSCOPE_LAUNCHES"] = std::nullopt;
  options.env["TRAINSCOPE_KERNEL_DTYPE"] = std::nullopt;
  options.timeout_seconds = 60;
  return options;
}

inline std::string run_dir(const testing::TempDir& dir) { return dir.path() + "/runs/job"; }

// How many times `part` occurs in `text` (overlaps counted).
inline size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// A text's lines in order, for output whose lines interleave in no fixed order (ranks sharing a stdout).
inline std::vector<std::string> sorted_lines(const std::string& text) {
  std::vector<std::string> lines = testing::split_lines(text);
  std::sort(lines.begin(), lines.end());
  return lines;
}

// The text of the one report whose name starts with `prefix`, or "" if there is none.
inline std::string report(const testing::TempDir& dir, const std::string& prefix, int* count = nullptr) {
  std::string text;
  int found = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(run_dir(dir), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && entry.path().extension() == ".txt") {
      ++found;
      text = testing::read_file(entry.path());
      EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(entry.path()).replace_extension(".json")))
          << "no JSON twin of " << name;
    }
  }
  if (count != nullptr) *count = found;
  return text;
}

// Polls `done` up to `attempts` times, 10 ms apart: for files another process writes.
template <typename Fn>
inline bool eventually(Fn done, int attempts = 3000) {
  for (int i = 0; i < attempts; ++i) {
    if (done()) return true;
    usleep(10000);
  }
  return done();
}

}  // namespace trainscope
