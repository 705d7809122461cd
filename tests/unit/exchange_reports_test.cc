// The exchange's report files: both forms written mode 0600, never overwriting an earlier report.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <string>

#include "reports/exchange_reports.h"
#include "tests/support/subprocess.h"

namespace trainscope::reports {
namespace {

TEST(ExchangeReportsTest, WritesTextAndJsonPrivatelyWithoutOverwriting) {
  testing::TempDir dir;
  const std::string run = dir.path() + "/runs/job1";
  VanishedReport report;
  report.global_rank = 3;
  report.host = "node3";
  report.pid = 77;
  report.time_ns = 1700000000000000000ull;
  const WrittenReport first =
      write_report(run, vanished_base_name(report), format_vanished_text(report), vanished_json(report));
  ASSERT_TRUE(first.error.empty()) << first.error;
  EXPECT_EQ(first.text_path, run + "/vanished-rank3.txt");
  EXPECT_EQ(first.json_path, run + "/vanished-rank3.json");
  struct stat info {};
  ASSERT_EQ(stat(first.text_path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(run.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0700u);
  EXPECT_EQ(testing::read_file(first.text_path), format_vanished_text(report));
  EXPECT_NE(testing::read_file(first.json_path).find("\"kind\": \"vanished\""), std::string::npos);
  const WrittenReport second = write_report(run, vanished_base_name(report), "again\n", vanished_json(report));
  ASSERT_TRUE(second.error.empty()) << second.error;
  EXPECT_EQ(second.text_path, run + "/vanished-rank3-2.txt");
  EXPECT_EQ(testing::read_file(first.text_path), format_vanished_text(report));
}

}  // namespace
}  // namespace trainscope::reports
