// The one bounded reader of small files (reports, traces, manifests, the doctor's system files): what it returns for
// each kind of file a run directory or a machine can hold.
#include "base/bounded_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "tests/support/subprocess.h"

namespace trainscope::files {
namespace {

TEST(BoundedFile, ARegularFileIsReadWholeOrCutAtTheLimit) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/report.json";
  std::ofstream(path) << "0123456789";
  std::string text;
  BoundedRead read = read_bounded(path, 64, false, &text);
  EXPECT_EQ(read.outcome, ReadOutcome::kRead);
  EXPECT_FALSE(read.truncated);
  EXPECT_EQ(text, "0123456789");
  read = read_bounded(path, 4, false, &text);
  EXPECT_EQ(read.outcome, ReadOutcome::kRead);
  EXPECT_TRUE(read.truncated);
  EXPECT_EQ(text, "0123");
}

TEST(BoundedFile, MissingFifoFolderAndLinkAreToldApartWithoutBlocking) {
  testing::TempDir dir;
  std::string text = "left over";
  BoundedRead read = read_bounded(dir.path() + "/missing.json", 64, false, &text);
  EXPECT_EQ(read.outcome, ReadOutcome::kMissing);
  EXPECT_TRUE(text.empty());
  const std::string fifo = dir.path() + "/fifo.json";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  read = read_bounded(fifo, 64, true, &text);  // a FIFO without a writer: opened non-blocking, never read
  EXPECT_EQ(read.outcome, ReadOutcome::kNotRegular);
  EXPECT_STREQ(file_type_name(read.mode), "a FIFO");
  read = read_bounded(dir.path(), 64, true, &text);
  EXPECT_EQ(read.outcome, ReadOutcome::kNotRegular);
  EXPECT_STREQ(file_type_name(read.mode), "a folder");
  const std::string target = dir.path() + "/target";
  std::ofstream(target) << "secret";
  const std::string link = dir.path() + "/link.json";
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  read = read_bounded(link, 64, false, &text);
  EXPECT_EQ(read.outcome, ReadOutcome::kNotRegular);
  EXPECT_STREQ(file_type_name(read.mode), "a link");
  EXPECT_TRUE(text.empty());
  read = read_bounded(link, 64, true, &text);
  EXPECT_EQ(read.outcome, ReadOutcome::kRead);
  EXPECT_EQ(text, "secret");
}

}  // namespace
}  // namespace trainscope::files
