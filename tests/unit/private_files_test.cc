// How trainscope creates files and folders: private, never through a link, never replacing what it did not create, and
// nothing left behind when a write fails (a full disk is played by RLIMIT_FSIZE).
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/private_files.h"
#include "support/subprocess.h"
#include "support/text_files.h"

namespace trainscope::files {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

constexpr uid_t kOtherUid = 65534;  // nobody

std::string read_text(const std::string& path) { return testing::read_file(path); }

mode_t mode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

// Every name in `dir`, sorted.
std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// A file outside the run directory that a planted link points at: it must never change.
struct Outside {
  TempDir dir;
  std::string path = dir.path() + "/precious";
  Outside() { testing::write_text(path, "precious\n"); }
  void expect_unchanged() const { EXPECT_EQ(read_text(path), "precious\n") << path; }
};

// Files past `bytes` cannot be written (EFBIG, SIGXFSZ ignored) while this lives: a full disk, for one process.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    old_handler_ = signal(SIGXFSZ, SIG_IGN);
    rlimit limit = saved_;
    limit.rlim_cur = bytes;
    EXPECT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit saved_{};
  sighandler_t old_handler_;
};

bool can_chown() { return geteuid() == 0; }

TEST(PrivateFiles, CreateFileIsExclusivePrivateAndNeverFollowsALink) {
  TempDir run;
  const std::string path = run.path() + "/report.json";
  const int fd = create_file(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << error_text(-fd);
  close(fd);
  EXPECT_EQ(mode_of(path), 0600u);
  EXPECT_EQ(create_file(path.c_str(), O_WRONLY), -EEXIST);

  Outside outside;
  const std::string planted = run.path() + "/planted.json";
  ASSERT_EQ(symlink(outside.path.c_str(), planted.c_str()), 0);
  EXPECT_EQ(create_file(planted.c_str(), O_WRONLY), -EEXIST);
  EXPECT_EQ(write_new_file(planted.c_str(), "x", 1), EEXIST);
  outside.expect_unchanged();
  const std::string dangling = run.path() + "/dangling.json";
  ASSERT_EQ(symlink((outside.dir.path() + "/created-through-a-link").c_str(), dangling.c_str()), 0);
  EXPECT_EQ(create_file(dangling.c_str(), O_WRONLY), -EEXIST);
  EXPECT_FALSE(fs::exists(outside.dir.path() + "/created-through-a-link"));
}

TEST(PrivateFiles, WriteNewFileLeavesNothingWhenTheDiskIsFull) {
  TempDir run;
  const std::string path = run.path() + "/manifest.json";
  {
    FileSizeLimit full(0);
    EXPECT_EQ(write_new_file(path.c_str(), "{}\n", 3), EFBIG);
  }
  EXPECT_TRUE(names_in(run.path()).empty()) << "a 0-byte file stayed behind";
  EXPECT_EQ(write_new_file(path.c_str(), "{}\n", 3), 0);
  EXPECT_EQ(read_text(path), "{}\n");
}

TEST(PrivateFiles, ReplaceFileReplacesItsOwnFileAtomically) {
  TempDir run;
  const std::string path = run.path() + "/manifest.json";
  ASSERT_EQ(replace_file(path.c_str(), "one\n", 4), 0);
  EXPECT_EQ(mode_of(path), 0600u);
  ASSERT_EQ(replace_file(path.c_str(), "two\n", 4), 0);
  EXPECT_EQ(read_text(path), "two\n");
  EXPECT_EQ(names_in(run.path()), std::vector<std::string>{"manifest.json"}) << "no temporary left";
}

TEST(PrivateFiles, ReplaceFileLeavesNoTemporaryAndTheOldFileWhenTheDiskIsFull) {
  TempDir run;
  const std::string path = run.path() + "/manifest.json";
  ASSERT_EQ(replace_file(path.c_str(), "old\n", 4), 0);
  for (rlim_t bytes : {rlim_t{0}, rlim_t{2}}) {
    SCOPED_TRACE(bytes);
    {
      FileSizeLimit full(bytes);
      EXPECT_EQ(replace_file(path.c_str(), "a longer manifest\n", 18), EFBIG);
    }
    EXPECT_EQ(names_in(run.path()), std::vector<std::string>{"manifest.json"}) << "a temporary stayed behind";
    EXPECT_EQ(read_text(path), "old\n");
  }
}

// Writes "piece 0\n" ... "piece 2\n", then fails with `error` (0: succeeds).
struct Pieces {
  int error = 0;
  int calls = 0;
};
int write_pieces(int fd, void* context) {
  Pieces* pieces = static_cast<Pieces*>(context);
  ++pieces->calls;
  for (int i = 0; i < 3; ++i) {
    const std::string piece = "piece " + std::to_string(i) + "\n";
    if (const int error = write_all(fd, piece.data(), piece.size()); error != 0) return error;
  }
  return pieces->error;
}

TEST(PrivateFiles, ReplaceFileWithWritesPieceByPieceAndLeavesTheOldFileWhenTheWriterFails) {
  TempDir run;
  const std::string path = run.path() + "/timeline.json";
  Pieces ok;
  ASSERT_EQ(replace_file_with(path.c_str(), write_pieces, &ok), 0);
  EXPECT_EQ(ok.calls, 1);
  EXPECT_EQ(read_text(path), "piece 0\npiece 1\npiece 2\n");
  EXPECT_EQ(mode_of(path), 0600u);
  Pieces failing{ENOMEM};
  EXPECT_EQ(replace_file_with(path.c_str(), write_pieces, &failing), ENOMEM);
  EXPECT_EQ(read_text(path), "piece 0\npiece 1\npiece 2\n");
  EXPECT_EQ(names_in(run.path()), std::vector<std::string>{"timeline.json"}) << "a temporary stayed behind";
  const std::string link = run.path() + "/link.json";
  ASSERT_EQ(symlink(path.c_str(), link.c_str()), 0);
  EXPECT_EQ(replace_file_with(link.c_str(), write_pieces, &ok), kIsSymlink);
}

TEST(PrivateFiles, ReplaceFileRefusesALinkAFolderAndAFileItDidNotCreate) {
  TempDir run;
  Outside outside;
  const std::string link = run.path() + "/origin.txt";
  ASSERT_EQ(symlink(outside.path.c_str(), link.c_str()), 0);
  EXPECT_EQ(replace_file(link.c_str(), "x\n", 2), kIsSymlink);
  outside.expect_unchanged();
  EXPECT_TRUE(fs::is_symlink(link)) << "the link itself is not replaced either";

  const std::string folder = run.path() + "/origin.json";
  ASSERT_EQ(mkdir(folder.c_str(), 0700), 0);
  EXPECT_EQ(replace_file(folder.c_str(), "x\n", 2), kNotRegular);

  const std::string linked = run.path() + "/trace.txt";
  ASSERT_EQ(::link(outside.path.c_str(), linked.c_str()), 0);
  EXPECT_EQ(replace_file(linked.c_str(), "x\n", 2), kHardLinked);
  outside.expect_unchanged();

  if (can_chown()) {
    const std::string theirs = run.path() + "/theirs.json";
    testing::write_text(theirs, "theirs\n");
    ASSERT_EQ(chown(theirs.c_str(), kOtherUid, kOtherUid), 0);
    EXPECT_EQ(replace_file(theirs.c_str(), "x\n", 2), kOtherOwner);
    EXPECT_EQ(read_text(theirs), "theirs\n");
  }
  // Nothing of ours left beside them.
  for (const std::string& name : names_in(run.path())) EXPECT_EQ(name.find(".tmp"), std::string::npos) << name;
}

TEST(PrivateFiles, ALinkPlantedAtTheOldTemporaryNameIsNeverWrittenThrough) {
  TempDir run;
  Outside outside;
  const std::string path = run.path() + "/manifest.json";
  ASSERT_EQ(symlink(outside.path.c_str(), (path + ".tmp").c_str()), 0);
  ASSERT_EQ(replace_file(path.c_str(), "{}\n", 3), 0);
  EXPECT_EQ(read_text(path), "{}\n");
  outside.expect_unchanged();
}

TEST(PrivateFiles, AppendRefusesALinkAFifoAndAFileItDidNotCreate) {
  TempDir run;
  const std::string log = run.path() + "/rank-0.pid-1.log";
  ASSERT_EQ(append_file(log.c_str(), "a\n", 2), 0);
  ASSERT_EQ(append_file(log.c_str(), "b\n", 2), 0);
  EXPECT_EQ(read_text(log), "a\nb\n");
  EXPECT_EQ(mode_of(log), 0600u);

  Outside outside;
  const std::string link = run.path() + "/trace-rank0.txt";
  ASSERT_EQ(symlink(outside.path.c_str(), link.c_str()), 0);
  EXPECT_EQ(open_append(link.c_str()), -kIsSymlink);
  EXPECT_EQ(append_file(link.c_str(), "x\n", 2), kIsSymlink);
  outside.expect_unchanged();
  const std::string dangling = run.path() + "/trace-rank1.txt";
  ASSERT_EQ(symlink((outside.dir.path() + "/new").c_str(), dangling.c_str()), 0);
  EXPECT_EQ(append_file(dangling.c_str(), "x\n", 2), kIsSymlink);
  EXPECT_FALSE(fs::exists(outside.dir.path() + "/new"));

  const std::string fifo = run.path() + "/trace-rank2.txt";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(append_file(fifo.c_str(), "x\n", 2), kNotRegular) << "refused, and without blocking";

  const std::string linked = run.path() + "/trace-rank3.txt";
  ASSERT_EQ(::link(outside.path.c_str(), linked.c_str()), 0);
  EXPECT_EQ(append_file(linked.c_str(), "x\n", 2), kHardLinked);
  outside.expect_unchanged();

  if (can_chown()) {
    const std::string theirs = run.path() + "/theirs.log";
    testing::write_text(theirs, "theirs\n");
    ASSERT_EQ(chown(theirs.c_str(), kOtherUid, kOtherUid), 0);
    EXPECT_EQ(append_file(theirs.c_str(), "x\n", 2), kOtherOwner);
    EXPECT_EQ(read_text(theirs), "theirs\n");
  }
}

TEST(PrivateDirectory, CreatesParentsPrivatelyAndReportsErrors) {
  TempDir dir;
  const std::string nested = dir.path() + "/a/b/c";
  EXPECT_EQ(make_private_directory(nested.c_str()).error, 0);
  const PrivateDirectory again = make_private_directory((nested + "/").c_str());  // existing is fine
  EXPECT_EQ(again.error, 0);
  EXPECT_EQ(again.old_mode, 0u);
  EXPECT_EQ(mode_of(nested), 0700u);
  EXPECT_EQ(mode_of(dir.path() + "/a"), 0700u);
  const std::string file = dir.path() + "/file";
  testing::write_text(file, "");
  EXPECT_EQ(make_private_directory(file.c_str()).error, kNotDirectory);
  EXPECT_EQ(make_private_directory((file + "/below").c_str()).error, ENOTDIR);
  EXPECT_EQ(make_private_directory("").error, ENAMETOOLONG);
}

TEST(PrivateDirectory, ALinkIsRefusedEvenToAFolderOfOurs) {
  TempDir dir;
  const std::string real = dir.path() + "/real";
  ASSERT_EQ(mkdir(real.c_str(), 0700), 0);
  const std::string link = dir.path() + "/run";
  ASSERT_EQ(symlink(real.c_str(), link.c_str()), 0);
  EXPECT_EQ(make_private_directory(link.c_str()).error, kIsSymlink);
  EXPECT_EQ(make_private_directory((link + "/").c_str()).error, kIsSymlink);
  // A link above the run directory (TRAINSCOPE_DIR itself may be one) is followed.
  EXPECT_EQ(make_private_directory((link + "/below").c_str()).error, 0);
}

TEST(PrivateDirectory, OurFolderOpenToOthersIsMadePrivateOnce) {
  TempDir dir;
  const std::string run = dir.path() + "/run";
  ASSERT_EQ(mkdir(run.c_str(), 0700), 0);
  ASSERT_EQ(chmod(run.c_str(), 0777), 0);
  const PrivateDirectory made = make_private_directory(run.c_str());
  EXPECT_EQ(made.error, 0);
  EXPECT_EQ(made.old_mode, 0777u);
  EXPECT_EQ(mode_of(run), 0700u);
  EXPECT_EQ(make_private_directory(run.c_str()).old_mode, 0u) << "said once: it is private now";
  ASSERT_EQ(chmod(run.c_str(), 0770), 0);
  EXPECT_EQ(make_private_directory(run.c_str()).old_mode, 0770u);
  EXPECT_EQ(mode_of(run), 0700u);
}

TEST(PrivateDirectory, AnotherUsersFolderThatOthersCanWriteIsRefused) {
  if (!can_chown()) GTEST_SKIP() << "needs root to give a folder to another user";
  TempDir dir;
  const std::string run = dir.path() + "/run";
  ASSERT_EQ(mkdir(run.c_str(), 0700), 0);
  ASSERT_EQ(chown(run.c_str(), kOtherUid, kOtherUid), 0);
  ASSERT_EQ(chmod(run.c_str(), 0777), 0);
  const PrivateDirectory refused = make_private_directory(run.c_str());
  EXPECT_EQ(refused.error, kOthersWrite);
  EXPECT_EQ(refused.owner_uid, kOtherUid);
  EXPECT_EQ(mode_of(run), 0777u) << "another user's folder is left as it is";
  ASSERT_EQ(chmod(run.c_str(), 0755), 0);
  EXPECT_EQ(make_private_directory(run.c_str()).error, 0) << "theirs, but only they can write to it";
  EXPECT_EQ(mode_of(run), 0755u);
}

TEST(PrivateDirectory, AStickyWorldWritableParentIsFine) {
  if (!can_chown()) GTEST_SKIP() << "needs root to make a /tmp-like parent of another user";
  TempDir dir;
  const std::string parent = dir.path() + "/tmp";
  ASSERT_EQ(mkdir(parent.c_str(), 0700), 0);
  ASSERT_EQ(chown(parent.c_str(), kOtherUid, kOtherUid), 0);
  ASSERT_EQ(chmod(parent.c_str(), 01777), 0);
  const PrivateDirectory made = make_private_directory((parent + "/run").c_str());
  EXPECT_EQ(made.error, 0);
  EXPECT_EQ(mode_of(parent + "/run"), 0700u);
  EXPECT_EQ(mode_of(parent), 01777u);
}

TEST(PrivateFiles, ErrorTextSaysWhatIsInTheWay) {
  EXPECT_STREQ(error_text(kIsSymlink), "it is a symbolic link, and trainscope never writes through one");
  EXPECT_STREQ(error_text(kNotRegular), "it is not a regular file");
  EXPECT_STREQ(error_text(kOtherOwner), "it belongs to another user");
  EXPECT_STREQ(error_text(kNotDirectory), "it is not a folder");
  EXPECT_STREQ(error_text(ENOSPC), std::strerror(ENOSPC));
}

}  // namespace
}  // namespace trainscope::files
