// `trainscope report --last all` on a big run: peak memory (the child's ru_maxrss) and wall time of the text and the
// JSON report, and of the timeline (--trace), of 4 flight recorders of 40k calls each (160k records, every call from a
// Python site), written once into a scratch run directory. A figure, not a test.
//   report_bench [--tool=PATH_TO_TRAINSCOPE] [--records=PER_RECORDER] [--run-dir=DIR] [Google Benchmark flags]
// --tool measures another build of the command (an older one, for a before/after figure); --run-dir writes the run
// directory at DIR (a new folder) and keeps it, to compare two builds' output.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "base/flight_recorder_writer.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using trainscope::recorder::CommEntry;
using trainscope::recorder::CommState;
using trainscope::recorder::kUnknown;
using trainscope::recorder::Op;
using trainscope::recorder::Record;
using trainscope::recorder::SiteEntry;
using trainscope::recorder::Writer;
using trainscope::recorder::WriterOptions;

constexpr int kRecorders = 4;
constexpr uint64_t kBase = 1700000000123456789ull;
constexpr uint64_t kCommId = 0x3f2a9c0011223344ull;

std::string g_tool = TRAINSCOPE_TOOL_PATH;
uint64_t g_records = 40000;  // per recorder
std::string g_run_dir;       // --run-dir: kept

SiteEntry python_site(uint64_t caller, int32_t line, const char* function, const char* file) {
  SiteEntry entry{};
  entry.caller = caller;
  entry.python_depth = 12;
  entry.python_frames = 1;
  entry.frames[0].line = line;
  std::strncpy(entry.frames[0].function, function, sizeof(entry.frames[0].function) - 1);
  std::strncpy(entry.frames[0].file, file, sizeof(entry.frames[0].file) - 1);
  return entry;
}

// One rank of a data-parallel job: an all-reduce, then a broadcast and a send in a group, over and over; the last
// call never returned. Returns false when the file cannot be written.
bool write_recorder(const std::string& path, int32_t rank) {
  WriterOptions o{};
  o.path = path.c_str();
  o.capacity = g_records;
  o.max_comms = 16;
  o.max_sites = 16;
  o.pid = 1000000 + rank;
  o.launcher_rank = rank;
  o.launcher_world = kRecorders;
  o.local_rank = rank;
  o.host = "bench-node";
  o.run_id = "bench-run";
  o.exe = "/usr/bin/python3";
  o.start_ns = kBase;
  Writer w;
  if (w.open(o) != 0) return false;
  w.set_global_rank(rank);
  w.set_nccl_version(22809);
  w.set_python(3, 12, "");
  CommEntry c{};
  c.id = kCommId;
  c.created_ns = kBase;
  c.rank = rank;
  c.nranks = kRecorders;
  c.color = kUnknown;
  c.state = static_cast<uint16_t>(CommState::kLive);
  c.origin = static_cast<uint16_t>(Op::kCommInitRank);
  w.add_comm(c);
  const uint32_t sites[] = {w.add_site(python_site(0x401000, 88, "backward", "/home/me/train.py")),
                            w.add_site(python_site(0x402000, 131, "evaluate", "/home/me/train.py"))};
  for (uint64_t i = 0; i < g_records; ++i) {
    Record r{};
    r.start_ns = kBase + i * 1000000;
    r.comm_id = kCommId;
    r.seq = i + 1;
    r.rank = rank;
    r.nranks = kRecorders;
    r.redop = kUnknown;
    r.dtype = 6;
    r.site = static_cast<uint16_t>(sites[i % 2]);
    r.tid = static_cast<uint32_t>(4000 + rank);
    switch (i % 3) {
      case 0:
        r.op = static_cast<uint16_t>(Op::kAllReduce);
        r.count = 1048576;
        r.redop = 0;
        r.peer = kUnknown;
        break;
      case 1:
        r.op = static_cast<uint16_t>(Op::kBroadcast);
        r.count = 4096;
        r.peer = 0;
        r.group = i;
        break;
      default:
        r.op = static_cast<uint16_t>(Op::kSend);
        r.count = 128;
        r.peer = (rank + 1) % kRecorders;
        r.group = i - 1;
        break;
    }
    const auto pending = w.append(r);
    if (i + 1 < g_records) Writer::complete(pending, 0, r.start_ns + 250000);
  }
  w.abandon();  // as after SIGKILL: still marked running, its last call pending
  return true;
}

// The scratch run directory, written on first use and removed at exit.
class RunDir {
 public:
  RunDir() : keep_(!g_run_dir.empty()) {
    std::string pattern = (fs::temp_directory_path() / "trainscope-report-bench-XXXXXX").string();
    if (keep_ ? mkdir(g_run_dir.c_str(), 0700) != 0 : mkdtemp(pattern.data()) == nullptr) return;
    path_ = keep_ ? g_run_dir : pattern;
    for (int rank = 0; rank < kRecorders; ++rank) {
      if (!write_recorder(path_ + "/rank" + std::to_string(rank) + ".tsrec", rank)) ok_ = false;
    }
  }
  ~RunDir() {
    std::error_code ec;
    if (!path_.empty() && !keep_) fs::remove_all(path_, ec);
  }
  bool ok() const { return ok_ && !path_.empty(); }
  const std::string& path() const { return path_; }

 private:
  bool keep_;
  std::string path_;
  bool ok_ = true;
};

const RunDir& run_dir() {
  static RunDir dir;
  return dir;
}

// Runs the tool with stdout and stderr on /dev/null; its exit status (-1 when it did not exit), wall time and rusage.
int run_tool(const std::vector<std::string>& args, double* seconds, rusage* usage) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  std::vector<std::string> storage = {g_tool};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, g_tool.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) return -1;
  int status = 0;
  if (wait4(pid, &status, 0, usage) != pid) return -1;
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

enum class Output { kText, kJson, kTrace };

// Counters: peak_rss_MiB (the largest ru_maxrss over the iterations), rss_per_record_B (that over the records).
void BM_ReportLastAll(benchmark::State& state, Output output) {
  const RunDir& dir = run_dir();
  if (!dir.ok()) {
    state.SkipWithError("cannot write the run directory under the temporary folder");
    return;
  }
  std::vector<std::string> args = {"report", dir.path(), "--last", "all"};
  if (output == Output::kJson) args.emplace_back("--json");
  // The timeline goes beside the run directory (replaced at each iteration; removed at the end).
  const std::string timeline = dir.path() + ".timeline.json";
  if (output == Output::kTrace) args = {"report", dir.path(), "--trace", timeline};
  long peak_kib = 0;
  for (auto _ : state) {
    double seconds = 0;
    rusage usage{};
    if (run_tool(args, &seconds, &usage) != 0) {
      state.SkipWithError(("'" + g_tool + " report' failed").c_str());
      return;
    }
    state.SetIterationTime(seconds);
    peak_kib = std::max(peak_kib, usage.ru_maxrss);
  }
  if (output == Output::kTrace) {
    std::error_code ec;
    state.counters["trace_MiB"] = static_cast<double>(fs::file_size(timeline, ec)) / 1048576.0;
    fs::remove(timeline, ec);
  }
  const double records = static_cast<double>(g_records) * kRecorders;
  state.counters["records"] = records;
  state.counters["peak_rss_MiB"] = static_cast<double>(peak_kib) / 1024.0;
  state.counters["rss_per_record_B"] = static_cast<double>(peak_kib) * 1024.0 / records;
}
BENCHMARK_CAPTURE(BM_ReportLastAll, json, Output::kJson)->Iterations(3)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ReportLastAll, text, Output::kText)->Iterations(3)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ReportLastAll, trace, Output::kTrace)
    ->Iterations(3)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--tool=", 7) == 0) {
      g_tool = argv[i] + 7;
    } else if (std::strncmp(argv[i], "--run-dir=", 10) == 0) {
      g_run_dir = argv[i] + 10;
    } else if (std::strncmp(argv[i], "--records=", 10) == 0) {
      char* end = nullptr;
      g_records = std::strtoull(argv[i] + 10, &end, 10);
      if (*end != '\0' || g_records == 0 || g_records > (uint64_t{1} << 24)) {
        std::fprintf(stderr, "report_bench: --records wants 1..16777216, got '%s'\n", argv[i] + 10);
        return 2;
      }
    } else {
      std::fprintf(stderr,
                   "report_bench: unknown argument '%s'; accepted: --tool=PATH, --records=N, --run-dir=DIR and Google "
                   "Benchmark's flags\n",
                   argv[i]);
      return 2;
    }
  }
  std::printf("report_bench: %s; %d recorders x %llu records\n", g_tool.c_str(), kRecorders,
              static_cast<unsigned long long>(g_records));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
