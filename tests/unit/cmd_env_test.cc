// Runs the real `trainscope env` with chosen environments and checks its text, JSON, warnings and exit status.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "shim/config.h"
#include "tools/configuration_doc.h"

#include <cerrno>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

struct RunResult {
  int exit_code = -1;  // -1: killed, timed out or not started
  std::string out;
  std::string err;
};

int64_t monotonic_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// Runs the tool with exactly `env` (nothing inherited), reading both pipes until they close; a tool that hangs is
// killed after 20 seconds so a bug fails the test instead of stalling CI.
RunResult run_tool(std::vector<std::string> args, std::vector<std::string> env) {
  RunResult result;
  std::string tool = TRAINSCOPE_TOOL_PATH;
  std::vector<char*> argv = {tool.data()};
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  int out_pipe[2];
  int err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe: " << errno;
    return result;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  pid_t pid = -1;
  const int spawn_error = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (spawn_error != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    ADD_FAILURE() << "posix_spawn " << argv[0] << ": " << spawn_error;
    return result;
  }

  const int64_t deadline = monotonic_ms() + 20000;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_count = 2;
  bool timed_out = false;
  while (open_count > 0) {
    const int64_t left = deadline - monotonic_ms();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    const int ready = poll(fds, 2, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[4096];
      const ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        sinks[i]->append(buffer, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_count;
      }
    }
  }
  for (const pollfd& fd : fds) {
    if (fd.fd >= 0) close(fd.fd);
  }
  if (timed_out) {
    kill(pid, SIGKILL);
    ADD_FAILURE() << "trainscope env did not finish within 20 s";
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && !timed_out) result.exit_code = WEXITSTATUS(status);
  return result;
}

// The frame variables (issue 5) and the thread class, at their defaults: the tail of every listing below.
#define TS_FRAME_DEFAULTS                       \
  "TRAINSCOPE_WATCH=collectives  (default)\n"   \
  "TRAINSCOPE_WATCH_EVERY=1  (default)\n"       \
  "TRAINSCOPE_WATCH_MIN_BYTES=0  (default)\n"   \
  "TRAINSCOPE_MAX_FRAMES=21  (default)\n"       \
  "TRAINSCOPE_STEP_MARKER=auto  (default)\n"    \
  "TRAINSCOPE_ON_NONFINITE=report  (default)\n" \
  "TRAINSCOPE_OVERFLOW_STREAK=5  (default)\n"   \
  "TRAINSCOPE_NEAR_OVERFLOW=0.9  (default)\n"   \
  "TRAINSCOPE_TRACE_BATCHES=  (default)\n"      \
  "TRAINSCOPE_ABORT_AFTER_BATCH=  (default)\n"  \
  "TRAINSCOPE_LAUNCHES=on  (default)\n"         \
  "TRAINSCOPE_KERNEL_DTYPE=  (default)\n"       \
  "TRAINSCOPE_THREAD_CLASS=idle  (default)\n"

// The variables' part of the text output: the lines before the libraries (`variables_of`).
constexpr const char* kDefaultText =
    "TRAINSCOPE_ENABLE=1  (default)\n"
    "TRAINSCOPE_DIR=./trainscope-runs  (default)\n"
    "TRAINSCOPE_RUN_ID=  (default)\n"
    "TRAINSCOPE_RECORDER_RECORDS=65536  (default)\n"
    "TRAINSCOPE_LOG_LEVEL=info  (default)\n"
    "TRAINSCOPE_LOG_RANKS=main  (default)\n"
    "TRAINSCOPE_COORDINATOR=auto  (default)\n"
    "TRAINSCOPE_TOKEN=  (default)\n"
    "TRAINSCOPE_ON_MISMATCH=abort  (default)\n"
    "TRAINSCOPE_ON_DESYNC=abort  (default)\n"
    "TRAINSCOPE_DESYNC_TIMEOUT=300  (default)\n" TS_FRAME_DEFAULTS;

// The text output up to the blank line before "libraries:".
std::string variables_of(const std::string& out) {
  const size_t end = out.find("\n\nlibraries:\n");
  return end == std::string::npos ? out : out.substr(0, end + 1);
}

TEST(CmdEnv, PrintsDefaults) {
  const RunResult r = run_tool({"env"}, {"PATH=/usr/bin:/bin", "NCCL_DEBUG=INFO"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(variables_of(r.out), kDefaultText);
  EXPECT_EQ(r.err, "");
}

TEST(CmdEnv, PrintsEnvironmentValuesInCanonicalForm) {
  const RunResult r = run_tool(
      {"env"}, {"TRAINSCOPE_ENABLE=off", "TRAINSCOPE_DIR=/tmp/ts runs", "TRAINSCOPE_RUN_ID=job-7",
                "TRAINSCOPE_RECORDER_RECORDS=64K", "TRAINSCOPE_LOG_LEVEL=WARNING", "TRAINSCOPE_LOG_RANKS=0,03,5-7"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(variables_of(r.out),
            "TRAINSCOPE_ENABLE=0  (environment)\n"
            "TRAINSCOPE_DIR=/tmp/ts runs  (environment)\n"
            "TRAINSCOPE_RUN_ID=job-7  (environment)\n"
            "TRAINSCOPE_RECORDER_RECORDS=65536  (environment)\n"
            "TRAINSCOPE_LOG_LEVEL=warn  (environment)\n"
            "TRAINSCOPE_LOG_RANKS=0,3,5-7  (environment)\n"
            "TRAINSCOPE_COORDINATOR=auto  (default)\n"
            "TRAINSCOPE_TOKEN=  (default)\n"
            "TRAINSCOPE_ON_MISMATCH=abort  (default)\n"
            "TRAINSCOPE_ON_DESYNC=abort  (default)\n"
            "TRAINSCOPE_DESYNC_TIMEOUT=300  (default)\n" TS_FRAME_DEFAULTS);
  EXPECT_EQ(r.err, "");
}

TEST(CmdEnv, WarnsAboutUnknownNames) {
  const RunResult r = run_tool({"env"}, {"TRAINSCOPE_LOGLEVEL=debug", "TRAINSCOPE_FOO=1"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(variables_of(r.out), kDefaultText);
  EXPECT_EQ(r.err,
            "trainscope: unknown variable TRAINSCOPE_LOGLEVEL; did you mean TRAINSCOPE_LOG_LEVEL?\n"
            "trainscope: unknown variable TRAINSCOPE_FOO\n");
}

TEST(CmdEnv, InvalidValueExitsTwo) {
  for (const char* flag : {"", "--json"}) {
    std::vector<std::string> args = {"env"};
    if (*flag != '\0') args.emplace_back(flag);
    const RunResult r = run_tool(args, {"TRAINSCOPE_LOG_LEVEL=loud"});
    EXPECT_EQ(r.exit_code, 2) << flag;
    EXPECT_EQ(r.out, "") << flag;
    EXPECT_EQ(r.err,
              "trainscope: invalid TRAINSCOPE_LOG_LEVEL='loud': accepted "
              "trace|debug|info|warn|warning|error|critical|off\n")
        << flag;
  }
  const RunResult empty = run_tool({"env"}, {"TRAINSCOPE_RECORDER_RECORDS="});
  EXPECT_EQ(empty.exit_code, 2);
  EXPECT_NE(empty.err.find("invalid TRAINSCOPE_RECORDER_RECORDS='': accepted"), std::string::npos) << empty.err;
}

TEST(CmdEnv, WatchedKernelsRegexIsShownAndCheckedAsTheEngineCompilesIt) {
  const RunResult ok = run_tool({"env"}, {"TRAINSCOPE_WATCH=collectives,kernels:gemm|elementwise<float, 4>"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("TRAINSCOPE_WATCH=collectives,kernels:gemm|elementwise<float, 4>  (environment)\n"),
            std::string::npos)
      << ok.out;
  const RunResult bad = run_tool({"env"}, {"TRAINSCOPE_WATCH=kernels:gemm("});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(
      bad.err.find(
          "invalid TRAINSCOPE_WATCH='kernels:gemm(': accepted off, or a comma-separated list of collectives, modules"),
      std::string::npos)
      << bad.err;
  EXPECT_NE(bad.err.find("(invalid POSIX extended regular expression:"), std::string::npos) << bad.err;
}

TEST(CmdEnv, HostileValuesCannotReachTheTerminal) {
  const RunResult bad = run_tool({"env"}, {"TRAINSCOPE_LOG_RANKS=\x1b[2J\x1b]0;x\x07" + std::string(5000, 'A')});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_LT(bad.err.size(), 600u);
  const RunResult odd = run_tool({"env"}, {"TRAINSCOPE_DIR=/tmp/\x1b[31mred\nline", "TRAINSCOPE_\x1b[2J=1"});
  EXPECT_EQ(odd.exit_code, 0);
  EXPECT_NE(odd.out.find("TRAINSCOPE_DIR=/tmp/\\x1b[31mred\\x0aline  (environment)\n"), std::string::npos) << odd.out;
  EXPECT_EQ(odd.err, "trainscope: unknown variable TRAINSCOPE_\\x1b[2J\n");
  for (const std::string* text : {&bad.err, &odd.out, &odd.err}) {
    for (const char c : *text) EXPECT_NE(c, '\x1b');
  }
}

// docs/configuration.md's table is generated from shim/config_vars.h: it can never drift from the code.
TEST(CmdEnv, DocsTableIsGenerated) {
  const std::string path = std::string(TRAINSCOPE_SOURCE_DIR) + "/docs/configuration.md";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const std::string begin_line = trainscope::tools::kConfigurationTableBegin;
  const size_t begin = doc.find(begin_line);
  ASSERT_NE(begin, std::string::npos) << path << " lost its generated table's first marker line";
  const size_t body = begin + begin_line.size();
  const size_t end = doc.find(trainscope::tools::kConfigurationTableEnd, body);
  ASSERT_NE(end, std::string::npos) << path << " lost its generated table's last marker line";
  const RunResult r = run_tool({"env", "--markdown"}, {"PATH=/usr/bin:/bin"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(doc.substr(body, end - body), r.out)
      << "docs/configuration.md's table differs from shim/config_vars.h; regenerate it from the source directory with "
         "build/tools/trainscope env --markdown=docs/configuration.md";
}

TEST(CmdEnv, MarkdownTableHasEveryVariable) {
  const RunResult r = run_tool({"env", "--markdown"}, {"PATH=/usr/bin:/bin"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("| Variable | Default | Accepted values | Meaning |\n|---|---|---|---|\n", 0), 0u) << r.out;
  const trainscope::ConfigVarInfo* vars = trainscope::config_vars();
  for (int i = 0; i < trainscope::kConfigVarCount; ++i) {
    EXPECT_NE(r.out.find(std::string("| `") + vars[i].name + "` | "), std::string::npos) << vars[i].name;
  }
  // A | of an accepted value is escaped: it would end the cell.
  EXPECT_NE(r.out.find("| `info` | trace\\|debug\\|info"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| `TRAINSCOPE_RUN_ID` | none | "), std::string::npos) << r.out;
}

TEST(CmdEnv, Json) {
  const RunResult r = run_tool({"env", "--json"},
                               {"TRAINSCOPE_LOG_LEVEL=debug", "TRAINSCOPE_RECORDER_RECORDS=1M", "TRAINSCOPE_ENABLD=0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.is_object());
  const nlohmann::json& vars = j.at("variables");
  ASSERT_EQ(vars.size(), static_cast<size_t>(trainscope::kConfigVarCount));
  EXPECT_EQ(vars.at("TRAINSCOPE_LOG_LEVEL").at("value"), "debug");
  EXPECT_EQ(vars.at("TRAINSCOPE_LOG_LEVEL").at("source"), "environment");
  EXPECT_EQ(vars.at("TRAINSCOPE_LOG_LEVEL").at("default"), "info");
  EXPECT_EQ(vars.at("TRAINSCOPE_RECORDER_RECORDS").at("value"), "1048576");
  EXPECT_EQ(vars.at("TRAINSCOPE_DIR").at("value"), "./trainscope-runs");
  EXPECT_EQ(vars.at("TRAINSCOPE_DIR").at("source"), "default");
  EXPECT_EQ(vars.at("TRAINSCOPE_ENABLE").at("value"), "1");
  EXPECT_EQ(vars.at("TRAINSCOPE_RUN_ID").at("value"), "");
  EXPECT_EQ(vars.at("TRAINSCOPE_LOG_RANKS").at("value"), "main");
  for (const auto& [name, var] : vars.items()) {
    EXPECT_TRUE(var.at("accepted").is_string()) << name;
    EXPECT_FALSE(var.at("description").get<std::string>().empty()) << name;
  }
  const nlohmann::json& unknown = j.at("unknown");
  ASSERT_EQ(unknown.size(), 1u);
  EXPECT_EQ(unknown[0].at("name"), "TRAINSCOPE_ENABLD");
  EXPECT_EQ(unknown[0].at("suggestion"), "TRAINSCOPE_ENABLE");
  EXPECT_EQ(r.err, "trainscope: unknown variable TRAINSCOPE_ENABLD; did you mean TRAINSCOPE_ENABLE?\n");
}

TEST(CmdEnv, JsonSurvivesNonUtf8Paths) {
  const RunResult r = run_tool({"env", "--json"}, {"TRAINSCOPE_DIR=/tmp/\xff\xfe", "TRAINSCOPE_X=1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("variables").at("TRAINSCOPE_DIR").at("source"), "environment");
  EXPECT_TRUE(j.at("unknown")[0].at("suggestion").is_null());
}

TEST(CmdEnv, BadArgumentsExitTwoWithUsage) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"env", "--bogus"}, std::vector<std::string>{"env", "json"},
        std::vector<std::string>{"env", "--json", "extra"}}) {
    const RunResult r = run_tool(args, {});
    EXPECT_EQ(r.exit_code, 2) << args.back();
    EXPECT_EQ(r.out, "");
    EXPECT_NE(r.err.find("unknown argument '" + args.back() + "'"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("usage: trainscope env [--json]"), std::string::npos) << r.err;
  }
  const RunResult help = run_tool({"env", "--help"}, {});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("usage: trainscope env [--json]"), std::string::npos);
}

}  // namespace

// In the build tree the command preloads shim/libtrainscope.so and bundles nothing; its own ZeroMQ is the system's.
TEST(CmdEnv, SaysWhichLibrariesAreUsed) {
  const RunResult text = run_tool({"env"}, {});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("\n\nlibraries:\n  preloaded by `trainscope run`: /"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("/shim/libtrainscope.so\n  engine (loaded by it on first NCCL use): /"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("/shim/libtrainscope-engine.so\n"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("  bundled beside the engine: none (the system's are used)\n"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("  loaded by this command: libzmq.so.5 => /"), std::string::npos) << text.out;

  const RunResult r = run_tool({"env", "--json"}, {});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json libraries = nlohmann::json::parse(r.out).at("libraries");
  const std::string preload = libraries.at("preload");
  const std::string engine = libraries.at("engine");
  EXPECT_TRUE(preload.ends_with("/shim/libtrainscope.so")) << preload;
  EXPECT_EQ(engine, preload.substr(0, preload.rfind('/')) + "/libtrainscope-engine.so");
  EXPECT_TRUE(libraries.at("bundled").empty()) << libraries;
  bool zmq = false;
  for (const nlohmann::json& l : libraries.at("loaded")) {
    if (l.at("name") == "libzmq.so.5") zmq = l.at("path").get<std::string>().starts_with("/");
  }
  EXPECT_TRUE(zmq) << libraries;
}
