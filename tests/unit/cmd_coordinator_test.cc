// Runs the real `trainscope coordinator` with arguments it must refuse before it serves: a token TRAINSCOPE_TOKEN would
// refuse, a --dir that is a file or cannot be made; and a --dir open to others, which it makes private.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "support/subprocess.h"

namespace trainscope {
namespace {

using testing::ProcessOptions;
using testing::ProcessResult;
using testing::TempDir;

constexpr const char* kGoodToken = "abcdefgh12345678";

// Every run here ends on its own (a refusal, or an address that cannot be bound); the timeout only bounds a bug.
ProcessResult coordinator(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {TRAINSCOPE_TOOL_PATH, "coordinator"};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcessOptions options;
  options.timeout_seconds = 60;
  return testing::run_process(argv, options);
}

TEST(CmdCoordinator, RefusesATokenTheJobWouldRefuseWithoutPrintingIt) {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"x1y2z", "(too short)"}, {std::string(129, 'a'), "(too long)"}, {"with space 123", "(character outside"}};
  for (const auto& [token, reason] : cases) {
    SCOPED_TRACE(token);
    const ProcessResult result =
        coordinator({"--bind", "tcp://127.0.0.1:*", "--token", token, "--dir", dir.path() + "/run"});
    EXPECT_FALSE(result.timed_out) << "it must refuse, not serve";
    EXPECT_EQ(result.exit_code, 2);
    EXPECT_EQ(result.err.rfind("trainscope coordinator: --token is not valid " + reason, 0), 0u) << result.err;
    EXPECT_NE(result.err.find("accepted: 8-128 characters of [A-Za-z0-9._-], as for TRAINSCOPE_TOKEN"),
              std::string::npos)
        << result.err;
    EXPECT_EQ(result.err.find(token), std::string::npos) << "the token is never printed: " << result.err;
  }
}

TEST(CmdCoordinator, RefusesADirThatIsAFileOrCannotBeMadeBeforeItServes) {
  TempDir dir;
  const std::string file = dir.path() + "/a-file";
  std::ofstream(file) << "not a folder\n";
  ProcessResult result = coordinator({"--bind", "tcp://127.0.0.1:*", "--token", kGoodToken, "--dir", file});
  EXPECT_FALSE(result.timed_out) << "it must refuse, not serve";
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_EQ(result.err.rfind(
                "trainscope coordinator: --dir: cannot use the run directory " + file + ": it is not a folder\n", 0),
            0u)
      << result.err;
  EXPECT_EQ(result.err.find("listening"), std::string::npos) << result.err;

  result = coordinator({"--bind", "tcp://127.0.0.1:*", "--token", kGoodToken, "--dir", file + "/run"});
  EXPECT_FALSE(result.timed_out);
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_EQ(
      result.err.rfind(
          "trainscope coordinator: --dir: cannot create the run directory " + file + "/run: Not a directory\n", 0),
      0u)
      << result.err;
}

TEST(CmdCoordinator, MakesADirOpenToOthersPrivateAndSaysSo) {
  TempDir dir;
  const std::string run = dir.path() + "/run";
  ASSERT_EQ(mkdir(run.c_str(), 0700), 0);
  ASSERT_EQ(chmod(run.c_str(), 0777), 0);
  // An address that cannot be bound ends the command right after the folder was checked.
  const ProcessResult result = coordinator({"--bind", "bogus://unbindable", "--token", kGoodToken, "--dir", run});
  EXPECT_EQ(result.exit_code, 2) << result.err;
  EXPECT_NE(result.err.find("[trainscope warning] made the run directory " + run +
                            " private: it was mode 0777, open to other users\n"),
            std::string::npos)
      << result.err;
  struct stat st {};
  ASSERT_EQ(stat(run.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

}  // namespace
}  // namespace trainscope
