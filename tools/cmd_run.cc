// `trainscope run [options] -- CMD...`: runs a job under trainscope with its own coordinator. It starts the
// coordinator, sets LD_PRELOAD and the TRAINSCOPE_* variables for the job, runs the command (torchrun, mpirun,
// a plain program), waits for it, stops the coordinator, and prints the run's summary. On a job of several hosts, one
// `trainscope run --coordinator HOST:PORT` per host: the host whose address HOST is starts the coordinator there, the
// others join it, and every host's run folder gets the same name (from --run-id, Slurm or torchrun's rendezvous id).
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "analysis/run_summary.h"
#include "base/flight_recorder_reader.h"
#include "base/printable.h"
#include "base/private_files.h"
#include "collectors/exchange/coordinator_server.h"
#include "collectors/exchange/job_secret.h"
#include "reports/exchange_reports.h"
#include "reports/recorder_report.h"
#include "shim/config.h"
#include "tools/commands.h"
#include "tools/install_layout.h"
#include "tools/multi_node_run.h"

extern char** environ;

namespace trainscope::tools {
namespace {

namespace fs = std::filesystem;

constexpr const char* kRunUsage =
    "usage: trainscope run [options] -- COMMAND [ARGS...]\n"
    "  --dir DIR              parent of the run directory (default: TRAINSCOPE_DIR or ./trainscope-runs)\n"
    "  --run-id ID            name of the run directory (default: run-<UTC date and time>-<random>)\n"
    "  --bind ADDR            where the coordinator listens (default tcp://127.0.0.1:*, any free port; use\n"
    "                         tcp://0.0.0.0:PORT when ranks on other hosts must reach it)\n"
    "  --coordinator HOST:PORT  a job of several hosts, one trainscope run per host: the host whose address HOST\n"
    "                         is starts the coordinator at HOST:PORT, the others join it. Needs TRAINSCOPE_TOKEN,\n"
    "                         the same on every host; the run id is --run-id, TRAINSCOPE_RUN_ID, Slurm's job and\n"
    "                         step (slurm-JOB.STEP) or torchrun's --rdzv-id (torchrun-ID), alike on every host\n"
    "  --join HOST:PORT       as --coordinator, but never start it here (HOST is another host's, or a proxy)\n"
    "  --on-mismatch ACTION   abort|warn (default: TRAINSCOPE_ON_MISMATCH, else abort)\n"
    "  --on-desync ACTION     abort|warn (default: TRAINSCOPE_ON_DESYNC, else abort)\n"
    "  --desync-timeout S     seconds (default: TRAINSCOPE_DESYNC_TIMEOUT, else 300)\n"
    "  --library PATH         the preloaded library (default: found beside this command)\n"
    "The command's exit status is trainscope run's; a job stopped by a verdict exits 86.\n";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "trainscope run: %s\n%s", message.c_str(), kRunUsage);
  return 2;
}

volatile sig_atomic_t g_child = 0;

void forward_signal(int sig) {
  if (g_child > 0) kill(static_cast<pid_t>(g_child), sig);
}

bool parse_action(const std::string& text, exchange::VerdictAction* action) {
  if (text == "abort") {
    *action = exchange::VerdictAction::kAbort;
  } else if (text == "warn") {
    *action = exchange::VerdictAction::kWarn;
  } else {
    return false;
  }
  return true;
}

exchange::VerdictAction action_of(VerdictPolicy policy) {
  return policy == VerdictPolicy::kAbort ? exchange::VerdictAction::kAbort : exchange::VerdictAction::kWarn;
}

// "tcp://127.0.0.1:41234" -> "127.0.0.1:41234", the form TRAINSCOPE_COORDINATOR takes.
std::string host_port_of(const std::string& endpoint) {
  std::string rest = endpoint.rfind("tcp://", 0) == 0 ? endpoint.substr(6) : endpoint;
  if (rest.rfind("0.0.0.0:", 0) == 0 || rest.rfind("*:", 0) == 0) {
    char host[256] = "localhost";
    gethostname(host, sizeof(host) - 1);
    rest = std::string(host) + rest.substr(rest.find(':'));
  }
  return rest;
}

int exit_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// What the coordinator could not write (a full disk), as it tells: the summary names each report and why.
class UnwrittenReports {
 public:
  void note(const reports::UnwrittenReport& unwritten) {
    std::lock_guard<std::mutex> lock(mutex_);
    reports_.push_back(unwritten);
  }
  std::vector<reports::UnwrittenReport> take() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::exchange(reports_, {});
  }

 private:
  std::mutex mutex_;
  std::vector<reports::UnwrittenReport> reports_;
};

// The job's end: its status, then the run's summary (what went wrong, where and when), as `trainscope report
// --summary` prints it, with what only this process knows: how the job it started ended, and what its coordinator
// could not write.
void print_summary(const std::string& run_dir, int status, const reports::JobEnd& job,
                   std::vector<reports::UnwrittenReport> unwritten) {
  std::fprintf(stderr, "\ntrainscope: the job exited with status %d\n", status);
  std::fprintf(stderr, "trainscope: run directory %s\n", run_dir.c_str());
  reports::RunSummary summary;
  std::string error;
  if (!reports::read_run_summary(run_dir, &summary, &error)) {
    std::fprintf(stderr, "trainscope: %s\n", error.c_str());
    return;
  }
  summary.job_started = true;
  summary.job = job;
  summary.unwritten = std::move(unwritten);
  recorder::RunDirectory run;
  if (recorder::read_run_directory(run_dir, &run, &error)) reports::note_recorders(&summary, run);
  // The summary holds strings from the recorders and from the ranks: printed with their control characters escaped.
  std::fputs(reports::printable_text(reports::format_summary_text(summary)).c_str(), stderr);
  std::fprintf(stderr, "trainscope: details: trainscope report %s\n", run_dir.c_str());
}

// What the command line asks of `trainscope run`, before anything is derived from it.
struct RunOptions {
  std::string dir;
  std::string run_id;
  std::string bind = "tcp://127.0.0.1:*";
  bool bind_given = false;
  std::string coordinator_flag, join_flag;
  std::string library;
  exchange::CoordinatorServerOptions server_options;
  int command = 0;  // argv index of the job's command
};

// Every early exit below returns the status to exit with; nullopt means "go on".
using ExitCode = std::optional<int>;

ExitCode parse_run_arguments(int argc, char** argv, const Config& config, RunOptions* options) {
  options->dir = config.dir;
  exchange::CoordinatorServerOptions& server_options = options->server_options;
  server_options.core.on_mismatch = action_of(config.on_mismatch);
  server_options.core.on_desync = action_of(config.on_desync);
  server_options.core.desync_timeout_ns = uint64_t{config.desync_timeout_seconds} * 1000000000ull;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--") {
      ++i;
      break;
    }
    if (flag == "--help" || flag == "-h") {
      std::fputs(kRunUsage, stdout);
      return 0;
    }
    if (i + 1 >= argc) return usage_error("'" + flag + "' needs a value (or '--' before the command is missing)");
    const std::string value = argv[++i];
    if (flag == "--dir") {
      options->dir = value;
    } else if (flag == "--run-id") {
      options->run_id = value;
    } else if (flag == "--bind") {
      options->bind = value;
      options->bind_given = true;
    } else if (flag == "--coordinator") {
      options->coordinator_flag = value;
    } else if (flag == "--join") {
      options->join_flag = value;
    } else if (flag == "--library") {
      options->library = value;
    } else if (flag == "--on-mismatch") {
      if (!parse_action(value, &server_options.core.on_mismatch))
        return usage_error("--on-mismatch '" + value + "': accepted abort|warn");
    } else if (flag == "--on-desync") {
      if (!parse_action(value, &server_options.core.on_desync))
        return usage_error("--on-desync '" + value + "': accepted abort|warn");
    } else if (flag == "--desync-timeout") {
      char* end = nullptr;
      const unsigned long seconds = std::strtoul(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || seconds == 0 || seconds > kMaxDesyncTimeoutSeconds)
        return usage_error("--desync-timeout '" + value + "': accepted 1-604800 seconds");
      server_options.core.desync_timeout_ns = seconds * 1000000000ull;
    } else {
      return usage_error("unknown option '" + flag + "'");
    }
  }
  if (i >= argc) return usage_error("no command given after --");
  options->command = i;
  if (options->library.empty()) options->library = find_preload_library();
  if (options->library.empty() || !fs::exists(options->library))
    return usage_error("cannot find libtrainscope.so beside this command; pass --library PATH");
  return std::nullopt;
}

// Several hosts: this one hosts the coordinator when HOST is one of its addresses (then `bind` becomes that
// address), else joins it (then `join_address` is HOST:PORT).
ExitCode place_coordinator(RunOptions* options, std::string* join_address) {
  const std::string& coordinator_flag = options->coordinator_flag;
  const std::string& join_flag = options->join_flag;
  const bool several_hosts = !coordinator_flag.empty() || !join_flag.empty();
  if (!coordinator_flag.empty() && !join_flag.empty()) return usage_error("--coordinator and --join: give one of them");
  if (several_hosts && options->bind_given)
    return usage_error("--bind with --coordinator or --join: the coordinator's address is HOST:PORT there");
  if (!several_hosts) return std::nullopt;
  const std::string& address = join_flag.empty() ? coordinator_flag : join_flag;
  const char* flag = join_flag.empty() ? "--coordinator" : "--join";
  std::string host, why;
  uint16_t port = 0;
  if (!split_host_port(address, &host, &port, &why)) return usage_error(std::string(flag) + " " + why);
  std::string numeric;
  const bool local = join_flag.empty() && is_local_address(host, &numeric, &why);
  if (!why.empty()) return usage_error(std::string(flag) + " '" + address + "': " + why);
  if (local) {
    const bool v6 = numeric.find(':') != std::string::npos;
    options->bind = "tcp://" + (v6 ? "[" + numeric + "]" : numeric) + ":" + std::to_string(port);
  } else {
    *join_address = address;
  }
  return std::nullopt;
}

// The job's token keeps other programs off its coordinator: without randomness there is no run, rather than a
// token anyone can compute. The hosts of one job share the one the user set. `run_suffix` is the random tail of a
// generated run id.
ExitCode choose_token(const Config& config, bool several_hosts, std::string* token, std::string* run_suffix) {
  *token = config.token;
  if (several_hosts && token->empty())
    return usage_error(
        "a job of several hosts needs its secret on every host: set TRAINSCOPE_TOKEN (8-128 characters of "
        "[A-Za-z0-9._-]) to the same value on each, e.g. export TRAINSCOPE_TOKEN=$(openssl rand -hex 16) before the "
        "launch");
  try {
    if (token->empty()) *token = exchange::random_hex(16);
    *run_suffix = exchange::random_hex(3);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainscope run: cannot make the job's secret token: %s\n", e.what());
    return 1;
  }
  return std::nullopt;
}

// The run id: the flag's, the environment's, the scheduler's (the hosts of one run must agree), else a fresh one.
ExitCode choose_run_id(const Config& config, bool several_hosts, const std::string& run_suffix,
                       const std::vector<std::string>& command, std::string* run_id) {
  if (run_id->empty()) *run_id = config.run_id;
  if (run_id->empty() && several_hosts) {
    *run_id = scheduler_run_id(environ, command);
    if (run_id->empty())
      return usage_error(
          "the hosts of one run need the same run id: pass --run-id ID (the same on every host), or run under Slurm "
          "(SLURM_JOB_ID) or torchrun with --rdzv-id");
  }
  if (run_id->empty()) {
    char stamp[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::gmtime(&now));
    *run_id = std::string("run-") + stamp + "-" + run_suffix;
  }
  // The run id is checked exactly as the preloaded library will check it.
  std::string run_id_entry = "TRAINSCOPE_RUN_ID=" + *run_id;
  char* check_env[] = {run_id_entry.data(), nullptr};
  Config scratch;
  char error[512];
  if (!parse_config(check_env, &scratch, error, sizeof(error))) {
    std::fprintf(stderr, "%s\n", error);
    return 2;
  }
  return std::nullopt;
}

ExitCode make_run_directory(const std::string& dir, const std::string& run_id, fs::path* run_dir) {
  std::error_code ec;
  *run_dir = fs::absolute(fs::path(dir) / run_id, ec);
  if (ec) {
    std::fprintf(stderr, "trainscope run: cannot use the run directory %s: %s\n", (fs::path(dir) / run_id).c_str(),
                 ec.message().c_str());
    return 1;
  }
  std::string made_private;
  if (std::string error; !reports::make_report_directory(run_dir->string(), &error, &made_private)) {
    std::fprintf(stderr, "trainscope run: %s\n", error.c_str());
    return 1;
  }
  if (!made_private.empty()) std::fprintf(stderr, "[trainscope][run] warning: %s\n", made_private.c_str());
  return std::nullopt;
}

// Joining another host's coordinator, this host starts none: then `server` stays empty.
ExitCode start_coordinator(exchange::CoordinatorServerOptions options, UnwrittenReports* unwritten,
                           std::unique_ptr<exchange::CoordinatorServer>* server) {
  options.log = [unwritten](LogLevel level, const std::string& message) {
    if (level <= LogLevel::kDebug) return;
    // The ranks print each verdict's report; the coordinator's own line is enough here.
    const size_t newline = message.find('\n');
    std::fprintf(stderr, "[trainscope][run] %s\n", message.substr(0, newline).c_str());
  };
  options.on_unwritten = [unwritten](const reports::UnwrittenReport& report) { unwritten->note(report); };
  *server = std::make_unique<exchange::CoordinatorServer>(options);
  std::string server_error;
  if (!(*server)->start(&server_error)) {
    std::fprintf(stderr, "trainscope run: cannot start the coordinator at %s: %s\n", options.bind_address.c_str(),
                 server_error.c_str());
    return 1;
  }
  return std::nullopt;
}

// The job's environment: ours, with the library preloaded first and the exchange pointed at our coordinator.
std::vector<std::string> job_environment(const std::string& library, const std::string& coordinator_address,
                                         const std::string& token, const fs::path& run_dir, const std::string& run_id) {
  std::vector<std::string> env;
  std::string preload = library;
  // The tool variables that make trainscope the job's NVTX tool (batches at the framework's own NVTX ranges) and the
  // CUDA driver's injection library (launches from cuInit on). Another tool the job set (Nsight Systems sets both)
  // keeps its place, and what that costs is said.
  struct ToolVariable {
    std::string prefix;
    const char* cost;
    bool set;
  };
  ToolVariable tools[] = {
      {"NVTX_INJECTION64_PATH=", "TRAINSCOPE_STEP_MARKER=nvtx:... will see no NVTX range", false},
      {"CUDA_INJECTION64_PATH=", "CUDA launches are recorded from the first NCCL call on, not from cuInit", false}};
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    if (entry.rfind("LD_PRELOAD=", 0) == 0) {
      if (entry.size() > 11) preload += ":" + entry.substr(11);
      continue;
    }
    bool ours = false;
    for (const char* name : {"TRAINSCOPE_COORDINATOR=", "TRAINSCOPE_TOKEN=", "TRAINSCOPE_DIR=", "TRAINSCOPE_RUN_ID="})
      if (entry.rfind(name, 0) == 0) ours = true;
    for (ToolVariable& tool : tools) {
      if (entry.rfind(tool.prefix, 0) != 0) continue;
      std::fprintf(stderr, "[trainscope][run] %.*s is set (%s): %s\n", static_cast<int>(tool.prefix.size() - 1),
                   tool.prefix.c_str(), entry.c_str() + tool.prefix.size(), tool.cost);
      tool.set = true;
    }
    if (!ours) env.push_back(entry);
  }
  for (const ToolVariable& tool : tools)
    if (!tool.set) env.push_back(tool.prefix + library);
  env.push_back("LD_PRELOAD=" + preload);
  env.push_back("TRAINSCOPE_COORDINATOR=" + coordinator_address);
  env.push_back("TRAINSCOPE_TOKEN=" + token);
  env.push_back("TRAINSCOPE_DIR=" + run_dir.parent_path().string());
  env.push_back("TRAINSCOPE_RUN_ID=" + run_id);
  return env;
}

// Starts the job with signals forwarded to it, and waits for it; false (said) when it cannot start.
bool run_job(char** command, std::vector<std::string>& env, pid_t* child, int* status) {
  std::vector<char*> envp;
  for (auto& entry : env) envp.push_back(entry.data());
  envp.push_back(nullptr);
  struct sigaction action {};
  action.sa_handler = forward_signal;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGHUP, &action, nullptr);
  const int rc = posix_spawnp(child, command[0], nullptr, nullptr, command, envp.data());
  if (rc != 0) {
    std::fprintf(stderr, "trainscope run: cannot start '%s': %s\n", command[0], std::strerror(rc));
    return false;
  }
  g_child = *child;
  while (waitpid(*child, status, 0) < 0 && errno == EINTR) {
  }
  g_child = 0;
  return true;
}

// Let the last goodbyes and any final verdict arrive (bounded), then stop.
void stop_after_goodbyes(exchange::CoordinatorServer* server) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (server->stats().connections > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  server->stop();
}

// How the job ended, for `trainscope report` later: its wait status names the signal that killed it. A file that
// cannot be written joins `not_written`.
reports::JobEnd record_job_end(const fs::path& run_dir, pid_t child, int status, int code,
                               std::vector<reports::UnwrittenReport>* not_written) {
  reports::JobEnd job;
  job.pid = child;
  job.signaled = WIFSIGNALED(status);
  job.exit_status = job.signaled ? 0 : code;
  job.signal = job.signaled ? WTERMSIG(status) : 0;
  const std::string content = reports::job_end_json(job).dump(2) + "\n";
  if (const int error =
          files::replace_file((run_dir / reports::kJobEndFile).string().c_str(), content.data(), content.size());
      error != 0)
    not_written->push_back({reports::kJobEndFile, files::error_text(error), "trainscope run"});
  return job;
}

}  // namespace

int cmd_run(int argc, char** argv) {
  Config config;
  char error[512];
  if (!parse_config(environ, &config, error, sizeof(error))) {
    std::fprintf(stderr, "%s\n", error);
    return 2;
  }
  RunOptions options;
  if (const ExitCode exit = parse_run_arguments(argc, argv, config, &options)) return *exit;
  std::string join_address;  // host:port of another host's coordinator; empty: ours
  if (const ExitCode exit = place_coordinator(&options, &join_address)) return *exit;
  const bool several_hosts = !options.coordinator_flag.empty() || !options.join_flag.empty();
  std::string token, run_suffix;
  if (const ExitCode exit = choose_token(config, several_hosts, &token, &run_suffix)) return *exit;
  std::string run_id = options.run_id;
  const std::vector<std::string> command(argv + options.command, argv + argc);
  if (const ExitCode exit = choose_run_id(config, several_hosts, run_suffix, command, &run_id)) return *exit;
  fs::path run_dir;
  if (const ExitCode exit = make_run_directory(options.dir, run_id, &run_dir)) return *exit;

  exchange::CoordinatorServerOptions& server_options = options.server_options;
  server_options.bind_address = options.bind;
  server_options.token = token;
  server_options.run_dir = run_dir.string();
  UnwrittenReports unwritten;
  std::unique_ptr<exchange::CoordinatorServer> server;
  if (join_address.empty()) {
    if (const ExitCode exit = start_coordinator(server_options, &unwritten, &server)) return *exit;
  }
  const std::string coordinator_address = server ? host_port_of(server->endpoint()) : join_address;
  std::vector<std::string> env = job_environment(options.library, coordinator_address, token, run_dir, run_id);

  if (server)
    std::fprintf(stderr, "[trainscope][run] run directory %s, coordinator %s\n", run_dir.c_str(),
                 server->endpoint().c_str());
  else
    std::fprintf(stderr, "[trainscope][run] run directory %s, joining the coordinator at %s\n", run_dir.c_str(),
                 coordinator_address.c_str());
  pid_t child = -1;
  int status = 0;
  if (!run_job(argv + options.command, env, &child, &status)) {
    if (server) server->stop();
    return 127;
  }
  if (server) stop_after_goodbyes(server.get());
  const int code = exit_status(status);
  std::vector<reports::UnwrittenReport> not_written = unwritten.take();
  const reports::JobEnd job = record_job_end(run_dir, child, status, code, &not_written);
  print_summary(run_dir.string(), code, job, std::move(not_written));
  return code;
}

}  // namespace trainscope::tools
