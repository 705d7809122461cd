// Runs the real `trainscope stats` on dumps written here and checks its row, counts, JSON and error exits.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/subprocess.h"

namespace {

using trainscope::testing::ProcessResult;
using trainscope::testing::run_process;
using trainscope::testing::TempDir;

void write_bytes(const std::string& path, const void* data, std::size_t size) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
}

template <typename T>
void write_values(const std::string& path, const std::vector<T>& values) {
  write_bytes(path, values.data(), values.size() * sizeof(T));
}

ProcessResult stats(std::vector<std::string> args) {
  args.insert(args.begin(), "stats");
  args.insert(args.begin(), TRAINSCOPE_TOOL_PATH);
  trainscope::testing::ProcessOptions options;
  options.timeout_seconds = 30;
  return run_process(args, options);
}

TEST(CmdStats, PrintsTheFrameReportRowThenTheCounts) {
  TempDir dir;
  const std::string file = dir.path() + "/t.f32";
  write_values<float>(file, {1.5f, -2.0f, 0.25f, -1e-3f});
  const ProcessResult r = stats({file, "--dtype", "fp32"});
  ASSERT_EQ(0, r.exit_code) << r.err;
  const auto lines = trainscope::testing::split_lines(r.out);
  ASSERT_GE(lines.size(), 5u) << r.out;
  EXPECT_EQ("1.00e-03 2.00e+00 " + file, lines[0]);
  EXPECT_EQ("elements: 4 fp32", lines[1]);
  EXPECT_EQ("nan: 0  +inf: 0  -inf: 0  first non-finite: none", lines[2]);
  EXPECT_EQ("finite abs min: 1.00e-03  finite abs max: 2.00e+00", lines[3]);
  EXPECT_EQ(0u, lines[4].rfind("checksum: 0x", 0)) << lines[4];
}

TEST(CmdStats, NanAndInfPrintLikePrintf) {
  TempDir dir;
  const std::string file = dir.path() + "/t.f64";
  const double inf = std::numeric_limits<double>::infinity();
  write_values<double>(file, {3.0, -inf, std::numeric_limits<double>::quiet_NaN(), 4.0});
  ProcessResult r = stats({file, "--dtype", "double"});
  ASSERT_EQ(0, r.exit_code) << r.err;
  auto lines = trainscope::testing::split_lines(r.out);
  ASSERT_GE(lines.size(), 3u);
  EXPECT_EQ("     nan      nan " + file, lines[0]);
  EXPECT_EQ("nan: 1  +inf: 0  -inf: 1  first non-finite: 1", lines[2]);

  // Without the NaN: abs max is inf.
  r = stats({file, "--dtype", "fp64", "--count", "2"});
  ASSERT_EQ(0, r.exit_code) << r.err;
  lines = trainscope::testing::split_lines(r.out);
  EXPECT_EQ("3.00e+00      inf " + file, lines[0]);
}

TEST(CmdStats, JsonHasTheDocumentedKeys) {
  TempDir dir;
  const std::string file = dir.path() + "/t.bf16";
  // bfloat16: 1.0, -inf, 0.5, NaN, 8.0
  const std::vector<std::uint16_t> values = {0x3f80, 0xff80, 0x3f00, 0x7fc1, 0x4100};
  write_values(file, values);
  const ProcessResult r = stats({file, "--dtype", "torch.bfloat16", "--json"});
  ASSERT_EQ(0, r.exit_code) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ("nan", j["abs_min"]);
  EXPECT_EQ("nan", j["abs_max"]);
  EXPECT_EQ(0.5, j["finite_abs_min"]);
  EXPECT_EQ(8.0, j["finite_abs_max"]);
  EXPECT_EQ(1, j["nan"]);
  EXPECT_EQ(0, j["pos_inf"]);
  EXPECT_EQ(1, j["neg_inf"]);
  EXPECT_EQ(1, j["first_nonfinite"]);
  EXPECT_EQ(5, j["count"]);
  EXPECT_EQ("bf16", j["dtype"]);
  EXPECT_TRUE(j["checksum"].is_string());

  const ProcessResult finite = stats({file, "--dtype", "bf16", "--count", "1", "--json"});
  ASSERT_EQ(0, finite.exit_code) << finite.err;
  const nlohmann::json f = nlohmann::json::parse(finite.out);
  EXPECT_TRUE(f["first_nonfinite"].is_null());
  EXPECT_EQ(1.0, f["abs_min"]);
  EXPECT_EQ(1.0, f["abs_max"]);
}

TEST(CmdStats, OffsetAndCountSelectARangeAtAnyAlignment) {
  TempDir dir;
  const std::string file = dir.path() + "/mixed";
  // Three junk bytes, then int32 values -7, 3, 100.
  std::vector<unsigned char> bytes = {0xff, 0xff, 0xff};
  for (std::int32_t v : {-7, 3, 100}) {
    unsigned char b[4];
    std::memcpy(b, &v, 4);
    bytes.insert(bytes.end(), b, b + 4);
  }
  write_bytes(file, bytes.data(), bytes.size());
  const ProcessResult r = stats({file, "--dtype", "int32", "--offset", "3", "--json"});
  ASSERT_EQ(0, r.exit_code) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(3.0, j["abs_min"]);
  EXPECT_EQ(100.0, j["abs_max"]);
  EXPECT_EQ(3, j["count"]);
  EXPECT_EQ(0, j["nan"]);

  const ProcessResult two = stats({file, "--dtype", "ncclInt32", "--offset", "3", "--count", "2", "--json"});
  ASSERT_EQ(0, two.exit_code) << two.err;
  EXPECT_EQ(7.0, nlohmann::json::parse(two.out)["abs_max"]);
}

TEST(CmdStats, EveryFp8AndIntegerSpellingWorks) {
  TempDir dir;
  const std::string file = dir.path() + "/bytes";
  const std::vector<std::uint8_t> values = {0x00, 0x7e, 0x38, 0xfe};
  write_values(file, values);
  const ProcessResult e4m3 = stats({file, "--dtype", "float8_e4m3fn", "--json"});
  ASSERT_EQ(0, e4m3.exit_code) << e4m3.err;
  EXPECT_EQ(0.0, nlohmann::json::parse(e4m3.out)["abs_min"]);
  EXPECT_EQ(448.0, nlohmann::json::parse(e4m3.out)["abs_max"]);
  const ProcessResult e5m2 = stats({file, "--dtype", "e5m2", "--json"});
  ASSERT_EQ(0, e5m2.exit_code) << e5m2.err;
  EXPECT_EQ(2, nlohmann::json::parse(e5m2.out)["nan"]);  // 0x7e and 0xfe are NaNs in e5m2
  const ProcessResult u8 = stats({file, "--dtype", "uint8", "--json"});
  ASSERT_EQ(0, u8.exit_code) << u8.err;
  EXPECT_EQ(254.0, nlohmann::json::parse(u8.out)["abs_max"]);
}

TEST(CmdStats, EmptyFileIsAnEmptyTensor) {
  TempDir dir;
  const std::string file = dir.path() + "/empty";
  write_bytes(file, "", 0);
  const ProcessResult r = stats({file, "--dtype", "fp16", "--json"});
  ASSERT_EQ(0, r.exit_code) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(0, j["count"]);
  // No element, no magnitude: every key is there, with null.
  for (const char* key : {"abs_min", "abs_max", "finite_abs_min", "finite_abs_max", "first_nonfinite"}) {
    ASSERT_TRUE(j.contains(key)) << key;
    EXPECT_TRUE(j[key].is_null()) << key << ": " << j[key];
  }
  // The text is the row a frame report prints for an empty tensor.
  const ProcessResult text = stats({file, "--dtype", "fp16"});
  ASSERT_EQ(0, text.exit_code) << text.err;
  EXPECT_EQ(text.out.substr(0, text.out.find('\n') + 1), "            empty " + file + "\n");
  EXPECT_NE(text.out.find("finite abs min: none"), std::string::npos) << text.out;
}

TEST(CmdStats, AllNanHasNoFiniteMagnitudes) {
  TempDir dir;
  const std::string file = dir.path() + "/nans";
  const unsigned char bf16_nans[] = {0xc0, 0x7f, 0xff, 0xff};  // 0x7fc0 and 0xffff
  write_bytes(file, reinterpret_cast<const char*>(bf16_nans), sizeof bf16_nans);
  const ProcessResult r = stats({file, "--dtype", "bf16", "--json"});
  ASSERT_EQ(0, r.exit_code) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ("nan", j["abs_min"]);
  EXPECT_EQ("nan", j["abs_max"]);
  EXPECT_TRUE(j["finite_abs_min"].is_null()) << j;
  EXPECT_TRUE(j["finite_abs_max"].is_null()) << j;
  EXPECT_EQ(2, j["nan"]);
  EXPECT_EQ(0, j["first_nonfinite"]);
}

TEST(CmdStats, ClearErrorsExitTwo) {
  TempDir dir;
  const std::string file = dir.path() + "/three";
  write_bytes(file, "abc", 3);

  ProcessResult r = stats({file, "--dtype", "fp16"});
  EXPECT_EQ(2, r.exit_code);
  EXPECT_NE(std::string::npos, r.err.find("not a whole number of fp16 elements")) << r.err;

  r = stats({file, "--dtype", "float128"});
  EXPECT_EQ(2, r.exit_code);
  EXPECT_NE(std::string::npos, r.err.find("unknown dtype 'float128'")) << r.err;
  EXPECT_NE(std::string::npos, r.err.find("bf16")) << r.err;

  r = stats({file, "--dtype", "uint8", "--offset", "1", "--count", "3"});
  EXPECT_EQ(2, r.exit_code);
  EXPECT_NE(std::string::npos, r.err.find("past the end")) << r.err;

  r = stats({file, "--dtype", "uint8", "--offset", "4"});
  EXPECT_EQ(2, r.exit_code);
  EXPECT_NE(std::string::npos, r.err.find("past the end")) << r.err;

  r = stats({file});
  EXPECT_EQ(2, r.exit_code);
  EXPECT_NE(std::string::npos, r.err.find("missing --dtype")) << r.err;

  r = stats({dir.path() + "/absent", "--dtype", "fp32"});
  EXPECT_EQ(2, r.exit_code);
  EXPECT_NE(std::string::npos, r.err.find("cannot open")) << r.err;

  r = stats({file, "--dtype", "uint8", "--bogus"});
  EXPECT_EQ(2, r.exit_code);
  EXPECT_NE(std::string::npos, r.err.find("unknown option")) << r.err;
}

}  // namespace
