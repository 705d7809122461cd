// End-to-end tests of the preloaded shim: unmodified NCCL programs run as real processes with and without
// LD_PRELOAD, on the CPU stand-in NCCL (and the toolkit's real libnccl.so.2 where it loads), and what the flight
// recorder holds afterwards is read back and compared with what the programs did.
#include <elf.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "base/flight_recorder_reader.h"
#include "integration_helpers.h"
#include "support/subprocess.h"

namespace trainscope {
namespace {

namespace fs = std::filesystem;
using recorder::Op;
using recorder::RecorderFile;
using testing::ProcessOptions;
using testing::ProcessResult;
using testing::TempDir;

ProcessOptions shim_job_options(const TempDir& dir, bool with_shim, const std::string& nccl_dir = TS_FAKE_NCCL_DIR) {
  ProcessOptions options;
  options.env["LD_LIBRARY_PATH"] = nccl_dir;
  options.env["TRAINSCOPE_DIR"] = dir.path() + "/runs";
  options.env["TRAINSCOPE_RUN_ID"] = "test-run";
  options.env["LD_PRELOAD"] = with_shim ? std::optional<std::string>(shim_preload()) : std::nullopt;
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
                           "SLURM_JOB_ID", "TRAINSCOPE_LOG_RANKS", "TRAINSCOPE_LOG_LEVEL", "TRAINSCOPE_ENABLE"})
    options.env[name] = std::nullopt;
  if (sanitized()) options.env["ASAN_OPTIONS"] = "detect_leaks=0:verify_asan_link_order=0";
  options.timeout_seconds = 120;
  return options;
}

std::string test_run_dir(const TempDir& dir) { return dir.path() + "/runs/test-run"; }

recorder::RunDirectory read_run(const std::string& path) {
  recorder::RunDirectory run;
  std::string error;
  EXPECT_TRUE(recorder::read_run_directory(path, &run, &error)) << error;
  EXPECT_TRUE(run.errors.empty()) << run.errors.front().message;
  return run;
}

const RecorderFile* file_of_rank(const recorder::RunDirectory& run, int rank) {
  for (const auto& file : run.files)
    if (file.header.launcher_rank == rank) return &file;
  return nullptr;
}

std::string describe(const recorder::Record& r) {
  std::ostringstream line;
  line << recorder::op_name(static_cast<Op>(r.op)) << ' ' << r.count << ' ' << static_cast<int>(r.dtype) << ' '
       << r.peer;
  return line.str();
}

// ---- the library itself ----

struct ElfDynamic {
  std::vector<std::string> needed;
  std::set<std::string> exported;
};

// Reads DT_NEEDED and the defined global dynamic symbols of a 64-bit ELF shared object.
ElfDynamic read_elf_dynamic(const std::string& path) {
  const std::string image = testing::read_file(path);
  ElfDynamic out;
  if (image.size() < sizeof(Elf64_Ehdr)) return out;
  const auto* base = reinterpret_cast<const unsigned char*>(image.data());
  Elf64_Ehdr eh;
  std::memcpy(&eh, base, sizeof(eh));
  auto section = [&](size_t i) {
    Elf64_Shdr sh;
    std::memcpy(&sh, base + eh.e_shoff + i * eh.e_shentsize, sizeof(sh));
    return sh;
  };
  for (size_t i = 0; i < eh.e_shnum; ++i) {
    const Elf64_Shdr sh = section(i);
    const Elf64_Shdr strtab = section(sh.sh_link);
    const char* strings = reinterpret_cast<const char*>(base + strtab.sh_offset);
    if (sh.sh_type == SHT_DYNAMIC) {
      for (size_t off = 0; off + sizeof(Elf64_Dyn) <= sh.sh_size; off += sizeof(Elf64_Dyn)) {
        Elf64_Dyn dyn;
        std::memcpy(&dyn, base + sh.sh_offset + off, sizeof(dyn));
        if (dyn.d_tag == DT_NEEDED) out.needed.emplace_back(strings + dyn.d_un.d_val);
      }
    } else if (sh.sh_type == SHT_DYNSYM) {
      for (size_t off = 0; off + sizeof(Elf64_Sym) <= sh.sh_size; off += sizeof(Elf64_Sym)) {
        Elf64_Sym sym;
        std::memcpy(&sym, base + sh.sh_offset + off, sizeof(sym));
        if (sym.st_shndx != SHN_UNDEF && ELF64_ST_BIND(sym.st_info) == STB_GLOBAL)
          out.exported.insert(strings + sym.st_name);
      }
    }
  }
  return out;
}

TEST(ShimLibrary, NeedsNothingButTheCRuntime) {
  if (sanitized()) GTEST_SKIP() << "sanitizer builds link their runtime into the shim";
  const ElfDynamic dyn = read_elf_dynamic(TS_SHIM);
  ASSERT_FALSE(dyn.needed.empty());
  for (const auto& lib : dyn.needed) EXPECT_EQ(lib, "libc.so.6") << "unexpected DT_NEEDED " << lib;
}

TEST(ShimLibrary, ExportsExactlyTheInterposedNcclFunctions) {
  const std::set<std::string> expected = {
      "ncclGetUniqueId", "ncclCommInitRank", "ncclCommInitRankConfig", "ncclCommInitAll", "ncclCommInitRankScalable",
      "ncclCommSplit", "ncclCommShrink", "ncclCommFinalize", "ncclCommDestroy", "ncclCommAbort", "ncclCommRevoke",
      "ncclAllReduce", "ncclReduce", "ncclBroadcast", "ncclBcast", "ncclReduceScatter", "ncclAllGather", "ncclAlltoAll",
      "ncclGather", "ncclScatter", "ncclSend", "ncclRecv", "ncclGroupStart", "ncclGroupEnd", "ncclGroupSimulateEnd",
      // interposed without a record: confirms non-blocking calls for the frame reports
      "ncclCommGetAsyncError",
      // NVTX's tool entry point (TRAINSCOPE_STEP_MARKER=nvtx:REGEX) and the CUDA driver's (launches from cuInit on)
      "InitializeInjectionNvtx2", "InitializeInjection",
      // look-ups on a library handle (ctypes, JAX's NCCL stub) hand out our hooks
      "dlsym", "dlvsym",
      // ends of a process that run no exit() handler (process_end.cc)
      "_exit", "_Exit", "execve", "execv", "execvp", "execvpe", "fexecve", "execl", "execlp", "execle",
      // the Python module hooks' entry points (TRAINSCOPE_WATCH=modules, module_frame_abi.h)
      "trainscope_module_frame", "trainscope_module_watched", "trainscope_module_backward"};
  std::set<std::string> exported;
  for (const auto& name : read_elf_dynamic(TS_SHIM).exported)
    if (!sanitized() || name.rfind("nccl", 0) == 0 || name.rfind("InitializeInjection", 0) == 0 || name == "dlsym" ||
        name == "dlvsym" || expected.count(name) != 0)
      exported.insert(name);
  EXPECT_EQ(exported, expected);
}

// ---- unmodified multi-rank programs ----

class MultiRank : public ::testing::TestWithParam<int> {};

TEST_P(MultiRank, SameResultsWithAndWithoutShimAndRecorderHoldsEveryCallInOrder) {
  const int ranks = GetParam();
  TempDir plain_dir;
  TempDir shim_dir;
  const std::vector<std::string> argv_plain = {
      TS_LAUNCH, "-n",  std::to_string(ranks), "--", program("collectives_program"), "--iterations", "3",
      "--count", "5000"};
  const ProcessResult plain = testing::run_process(argv_plain, shim_job_options(plain_dir, false));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_FALSE(fs::exists(plain_dir.path() + "/runs"));

  std::vector<std::string> argv_shim = argv_plain;
  argv_shim.push_back("--calls");
  argv_shim.push_back(shim_dir.path() + "/calls");
  const ProcessResult shimmed = testing::run_process(argv_shim, shim_job_options(shim_dir, true));
  ASSERT_EQ(shimmed.exit_code, 0) << shimmed.err;
  EXPECT_EQ(sorted_lines(plain.out), sorted_lines(shimmed.out));
  EXPECT_EQ(sorted_lines(plain.out).size(), static_cast<size_t>(ranks));

  const recorder::RunDirectory run = read_run(test_run_dir(shim_dir));
  ASSERT_EQ(run.files.size(), static_cast<size_t>(ranks));
  EXPECT_EQ(fs::status(test_run_dir(shim_dir)).permissions(), fs::perms::owner_all);
  for (const auto& file : run.files)
    EXPECT_EQ(fs::status(file.path).permissions(), fs::perms::owner_read | fs::perms::owner_write) << file.path;
  std::map<uint64_t, std::set<int>> members;  // comm id -> ranks that used it in collectives
  for (int rank = 0; rank < ranks; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const RecorderFile* file = file_of_rank(run, rank);
    ASSERT_NE(file, nullptr);
    EXPECT_EQ(file->torn_records, 0u);
    EXPECT_EQ(file->header.state, static_cast<uint32_t>(recorder::ProcessState::kExited));
    EXPECT_EQ(file->header.global_rank, rank);
    const std::vector<std::string> expected =
        testing::split_lines(testing::read_file(shim_dir.path() + "/calls.rank" + std::to_string(rank)));
    std::vector<std::string> recorded;
    std::map<uint64_t, uint64_t> last_seq;
    for (const auto& call : file->records) {
      const auto& r = call.record;
      recorded.push_back(describe(r));
      EXPECT_EQ(r.result, 0) << describe(r);
      if (recorder::is_collective(static_cast<Op>(r.op))) {
        EXPECT_EQ(r.seq, last_seq[r.comm_id] + 1) << "collective numbering per communicator";
        last_seq[r.comm_id] = r.seq;
        members[r.comm_id].insert(rank);
      }
    }
    EXPECT_EQ(recorded, expected);
    EXPECT_EQ(file->comms.size(), 2u);  // the world and its split child
  }
  // The world communicator has one id on every rank; the split halves have one id each.
  size_t world_comms = 0;
  for (const auto& [id, who] : members) {
    if (who.size() == static_cast<size_t>(ranks)) ++world_comms;
  }
  EXPECT_EQ(world_comms, 1u);
  EXPECT_EQ(members.size(), ranks > 1 ? 3u : 2u);
}

INSTANTIATE_TEST_SUITE_P(Ranks, MultiRank, ::testing::Values(2, 4));

TEST(Shim, DisabledIsAPurePassThrough) {
  TempDir dir;
  ProcessOptions options = shim_job_options(dir, true);
  options.env["TRAINSCOPE_ENABLE"] = "0";
  const ProcessResult result =
      testing::run_process({TS_LAUNCH, "-n", "2", "--", program("collectives_program"), "--iterations", "1"}, options);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_FALSE(fs::exists(dir.path() + "/runs"));
  EXPECT_EQ(result.err.find("[trainscope]"), std::string::npos) << result.err;
}

TEST(Shim, ThreadsWithCommInitAll) {
  TempDir plain_dir;
  TempDir shim_dir;
  const ProcessResult plain =
      testing::run_process({program("threads_program"), "4", "40"}, shim_job_options(plain_dir, false));
  const ProcessResult shimmed =
      testing::run_process({program("threads_program"), "4", "40"}, shim_job_options(shim_dir, true));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(shimmed.exit_code, 0) << shimmed.err;
  EXPECT_EQ(plain.out, shimmed.out);

  const recorder::RunDirectory run = read_run(test_run_dir(shim_dir));
  ASSERT_EQ(run.files.size(), 1u);
  const RecorderFile& file = run.files[0];
  EXPECT_EQ(file.torn_records, 0u);
  ASSERT_EQ(file.comms.size(), 4u);
  std::set<int> comm_ranks;
  for (const auto& comm : file.comms) {
    EXPECT_EQ(comm.id, file.comms[0].id) << "one clique, one id";
    EXPECT_EQ(comm.nranks, 4);
    comm_ranks.insert(comm.rank);
  }
  EXPECT_EQ(comm_ranks, (std::set<int>{0, 1, 2, 3}));
  std::map<int, std::vector<uint64_t>> seq_by_rank;
  std::set<uint32_t> threads;
  size_t group_starts = 0;
  size_t grouped_broadcasts = 0;
  for (const auto& call : file.records) {
    const auto& r = call.record;
    if (r.op == static_cast<uint16_t>(Op::kAllReduce)) {
      seq_by_rank[r.rank].push_back(r.seq);
      threads.insert(r.tid);
    }
    if (r.op == static_cast<uint16_t>(Op::kGroupStart)) ++group_starts;
    if (r.op == static_cast<uint16_t>(Op::kBroadcast)) {
      EXPECT_NE(r.flags & recorder::kFlagInGroup, 0);
      EXPECT_NE(r.group, 0u);
      EXPECT_EQ(r.seq, 41u);
      ++grouped_broadcasts;
    }
  }
  EXPECT_EQ(threads.size(), 4u);
  EXPECT_EQ(group_starts, 1u);
  EXPECT_EQ(grouped_broadcasts, 4u);
  for (int rank = 0; rank < 4; ++rank) {
    ASSERT_EQ(seq_by_rank[rank].size(), 40u);
    for (size_t i = 0; i < 40; ++i) EXPECT_EQ(seq_by_rank[rank][i], i + 1);
  }
}

TEST(Shim, ForkedChildrenNeverWriteTheParentsRecorder) {
  TempDir dir;
  const ProcessResult result = testing::run_process({program("fork_program")}, shim_job_options(dir, true));
  ASSERT_EQ(result.exit_code, 0) << result.err << result.out;
  const recorder::RunDirectory run = read_run(test_run_dir(dir));
  // The parent and the child that used NCCL each have their own file; the child that did not has none.
  ASSERT_EQ(run.files.size(), 2u) << result.out;
  int parent_pid = -1;
  int child_pid = -1;
  for (const auto& line : testing::split_lines(result.out)) {
    std::sscanf(line.c_str(), "parent pid %d", &parent_pid);
    std::sscanf(line.c_str(), "child pid %d", &child_pid);
  }
  for (const auto& file : run.files) {
    std::vector<std::string> ops;
    for (const auto& call : file.records) ops.push_back(recorder::op_name(static_cast<Op>(call.record.op)));
    if (file.pid() == parent_pid) {
      EXPECT_EQ(ops, (std::vector<std::string>{"ncclGetUniqueId", "ncclCommInitRank", "ncclAllReduce", "ncclAllReduce",
                                               "ncclCommDestroy"}));
    } else {
      EXPECT_EQ(file.pid(), child_pid);
      EXPECT_EQ(ops,
                (std::vector<std::string>{"ncclGetUniqueId", "ncclCommInitRank", "ncclAllReduce", "ncclCommDestroy"}));
    }
    EXPECT_EQ(file.torn_records, 0u);
  }
}

// ---- the real NCCL and an older one ----

TEST(Shim, RealNcclPassesThroughUnchanged) {
  if (std::strlen(TS_REAL_NCCL_DIR) == 0 || !fs::exists(std::string(TS_REAL_NCCL_DIR) + "/libnccl.so.2"))
    GTEST_SKIP() << "the CUDA toolkit's libnccl.so.2 was not found at configure time";
  TempDir plain_dir;
  TempDir shim_dir;
  const ProcessResult plain =
      testing::run_process({program("nccl_probe_program")}, shim_job_options(plain_dir, false, TS_REAL_NCCL_DIR));
  const ProcessResult shimmed =
      testing::run_process({program("nccl_probe_program")}, shim_job_options(shim_dir, true, TS_REAL_NCCL_DIR));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(shimmed.exit_code, 0) << shimmed.err;
  // Version, unique id and the failing communicator init (no GPU here) return the same codes.
  EXPECT_EQ(plain.out, shimmed.out);
  EXPECT_NE(plain.out.find("ncclGetVersion 0 2"), std::string::npos) << plain.out;
  const recorder::RunDirectory run = read_run(test_run_dir(shim_dir));
  ASSERT_EQ(run.files.size(), 1u);
  EXPECT_GE(run.files[0].header.nccl_version, 22800);
  ASSERT_GE(run.files[0].records.size(), 2u);
  EXPECT_EQ(run.files[0].records[0].record.op, static_cast<uint16_t>(Op::kGetUniqueId));
  EXPECT_EQ(run.files[0].records[1].record.op, static_cast<uint16_t>(Op::kCommInitRank));
  for (const auto& line : testing::split_lines(plain.out)) {
    int code = -1;
    if (std::sscanf(line.c_str(), "ncclCommInitRank %d", &code) == 1) {
      EXPECT_EQ(run.files[0].records[1].record.result, code);
    }
  }
}

TEST(Shim, FunctionMissingFromAnOlderNcclReturnsInvalidUsageAndSaysSo) {
  TempDir dir;
  ProcessOptions options = shim_job_options(dir, true, TS_OLD_NCCL_DIR);
  const ProcessResult result = testing::run_process({program("nccl_probe_program"), "--shrink"}, options);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("ncclCommShrink 5"), std::string::npos) << result.out;  // ncclInvalidUsage
  EXPECT_NE(result.err.find("ncclCommShrink is not in the loaded NCCL " + std::string(TS_OLD_NCCL_DIR)),
            std::string::npos)
      << result.err;
  EXPECT_NE(result.err.find("(version 2.18.0"), std::string::npos) << result.err;
  const recorder::RunDirectory run = read_run(test_run_dir(dir));
  ASSERT_EQ(run.files.size(), 1u);
  bool seen = false;
  for (const auto& call : run.files[0].records) {
    if (call.record.op != static_cast<uint16_t>(Op::kCommShrink)) continue;
    seen = true;
    EXPECT_NE(call.record.flags & recorder::kFlagUnavailable, 0);
    EXPECT_EQ(call.record.result, 5);
  }
  EXPECT_TRUE(seen);
}

// ---- crashes, configuration, logging ----

TEST(Shim, SigkilledRankKeepsEveryCommittedRecord) {
  TempDir dir;
  ProcessOptions options = shim_job_options(dir, true);
  options.env["TRAINSCOPE_RECORDER_RECORDS"] = "4096";  // small, so the ring laps many times before the kill
  const pid_t launcher = testing::start_process(
      {TS_LAUNCH, "-n", "2", "--timeout", "120", "--", program("loop_program"), "--iterations", "0"}, options);
  ASSERT_GT(launcher, 0);
  // Wait (bounded) until rank 1 has recorded well past one lap of its ring.
  RecorderFile rank1;
  bool ready = false;
  for (int attempt = 0; attempt < 6000 && !ready; ++attempt) {
    recorder::RunDirectory run;
    std::string error;
    if (recorder::read_run_directory(test_run_dir(dir), &run, &error)) {
      const RecorderFile* file = file_of_rank(run, 1);
      if (file != nullptr && file->records_total() > 20000) {
        rank1 = *file;
        ready = true;
      }
    }
    if (!ready) usleep(10000);  // polling a file another process writes, bounded by the attempt count
  }
  ASSERT_TRUE(ready) << "rank 1 never recorded 20000 calls";
  ASSERT_EQ(kill(rank1.pid(), SIGKILL), 0);
  // Rank 0 now waits forever in its all-reduce, as with real NCCL: take it down too.
  recorder::RunDirectory run = read_run(test_run_dir(dir));
  const RecorderFile* rank0 = file_of_rank(run, 0);
  ASSERT_NE(rank0, nullptr);
  kill(rank0->pid(), SIGKILL);
  const ProcessResult launched = testing::wait_process(launcher, 60);
  EXPECT_FALSE(launched.timed_out);
  // The stand-in NCCL names its shared memory after the process that made the unique id (rank 0); killed ranks
  // cannot remove it themselves.
  const std::string segment_prefix = "tsfake-" + std::to_string(rank0->pid()) + "-";
  for (const auto& entry : fs::directory_iterator("/dev/shm"))
    if (entry.path().filename().string().rfind(segment_prefix, 0) == 0) fs::remove(entry.path());

  run = read_run(test_run_dir(dir));
  const RecorderFile* file = file_of_rank(run, 1);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->header.state, static_cast<uint32_t>(recorder::ProcessState::kRunning));  // never exited
  ASSERT_FALSE(file->records.empty());
  EXPECT_LE(file->records.size(), 4096u);
  EXPECT_LE(file->torn_records, 1u);  // at most the slot being written at the kill
  size_t pending = 0;
  for (size_t i = 0; i < file->records.size(); ++i) {
    const auto& call = file->records[i];
    EXPECT_EQ(call.record.checksum, recorder::record_checksum(call.record));
    if (i > 0) {
      EXPECT_GT(call.index, file->records[i - 1].index);
    }
    if (call.pending()) ++pending;
  }
  EXPECT_LE(pending, 1u);  // only the call it was inside when killed
  EXPECT_GE(file->records.back().index + 1, file->records_total() - 1);
}

TEST(Shim, InvalidConfigurationStopsTheJobBeforeItRuns) {
  const std::vector<std::pair<std::string, std::string>> invalid = {{"TRAINSCOPE_ENABLE", "maybe"},
                                                                    {"TRAINSCOPE_LOG_LEVEL", "loud"},
                                                                    {"TRAINSCOPE_LOG_RANKS", "0,x"},
                                                                    {"TRAINSCOPE_RECORDER_RECORDS", "12abc"},
                                                                    {"TRAINSCOPE_RECORDER_RECORDS", "1"},
                                                                    {"TRAINSCOPE_RUN_ID", "a/b"},
                                                                    {"TRAINSCOPE_DIR", ""}};
  for (const auto& [name, value] : invalid) {
    SCOPED_TRACE(name + "=" + value);
    TempDir dir;
    ProcessOptions options = shim_job_options(dir, true);
    options.env[name] = value;
    const ProcessResult result = testing::run_process({program("nccl_probe_program")}, options);
    EXPECT_EQ(result.exit_code, 2);
    EXPECT_TRUE(result.out.empty()) << "the job must not run: " << result.out;
    EXPECT_NE(result.err.find("trainscope: invalid " + name), std::string::npos) << result.err;
    EXPECT_FALSE(fs::exists(dir.path() + "/runs"));
  }
}

TEST(Shim, RunDirectoryThatCannotBeCreatedWarnsOnceCauseFirstAndTheJobRunsOn) {
  TempDir dir;
  const std::string blocker = dir.path() + "/a-file";
  {
    FILE* f = std::fopen(blocker.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
  }
  TempDir plain_dir;
  const ProcessResult plain = testing::run_process({TS_LAUNCH, "-n", "2", "--", program("collectives_program")},
                                                   shim_job_options(plain_dir, false));
  ProcessOptions options = shim_job_options(dir, true);
  options.env["TRAINSCOPE_DIR"] = blocker + "/runs";  // below a regular file: mkdir fails with ENOTDIR
  const ProcessResult result =
      testing::run_process({TS_LAUNCH, "-n", "2", "--", program("collectives_program")}, options);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(sorted_lines(plain.out), sorted_lines(result.out));
  // One warning, from the main rank, the cause first: nothing else trainscope says (cross-rank checks off, frames
  // off) adds anything to it.
  std::vector<std::string> lines;
  for (const std::string& line : testing::split_lines(result.err))
    if (line.rfind("[trainscope]", 0) == 0) lines.push_back(line);
  ASSERT_EQ(lines.size(), 1u) << result.err;
  EXPECT_EQ(lines[0], "[trainscope][rank 0] warning: nothing is recorded: cannot create the run directory '" + blocker +
                          "/runs/test-run' (Not a directory); the job runs on without trainscope's checks and reports; "
                          "set TRAINSCOPE_DIR to a writable folder of yours");
}

TEST(Shim, LogsOnTheMainRankByDefaultAndEveryRankToItsFile) {
  TempDir dir;
  ProcessOptions options = shim_job_options(dir, true);
  options.env["TRAINSCOPE_LOG_LEVEL"] = "info";
  ProcessResult result = testing::run_process({TS_LAUNCH, "-n", "4", "--", program("collectives_program")}, options);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.err.find("[trainscope][rank 0] info: recording to "), std::string::npos) << result.err;
  EXPECT_EQ(result.err.find("[trainscope][rank 1]"), std::string::npos) << result.err;
  size_t logs = 0;
  for (const auto& entry : fs::directory_iterator(test_run_dir(dir))) {
    if (entry.path().extension() != ".log") continue;
    ++logs;
    EXPECT_EQ(fs::status(entry.path()).permissions(), fs::perms::owner_read | fs::perms::owner_write) << entry.path();
    EXPECT_NE(testing::read_file(entry.path()).find("info: recording to "), std::string::npos) << entry.path();
  }
  EXPECT_EQ(logs, 4u);

  TempDir all_dir;
  options = shim_job_options(all_dir, true);
  options.env["TRAINSCOPE_LOG_LEVEL"] = "info";
  options.env["TRAINSCOPE_LOG_RANKS"] = "all";
  result = testing::run_process({TS_LAUNCH, "-n", "4", "--", program("collectives_program")}, options);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_NE(result.err.find("[trainscope][rank " + std::to_string(rank) + "] info:"), std::string::npos)
        << result.err;
}

TEST(Shim, ReportToolReadsTheRunDirectory) {
  TempDir dir;
  const ProcessResult job =
      testing::run_process({TS_LAUNCH, "-n", "4", "--", program("collectives_program")}, shim_job_options(dir, true));
  ASSERT_EQ(job.exit_code, 0) << job.err;
  ProcessOptions tool_options;
  const ProcessResult report = testing::run_process({TS_TOOL, "report", test_run_dir(dir)}, tool_options);
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.out.find("ncclCommDestroy"), std::string::npos) << report.out;
  const ProcessResult json = testing::run_process({TS_TOOL, "report", "--json", test_run_dir(dir)}, tool_options);
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_EQ(json.out.front(), '{');
}

}  // namespace
}  // namespace trainscope
