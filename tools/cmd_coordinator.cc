// `trainscope coordinator`: runs the out-of-band exchange's coordinator as its own process until SIGINT/SIGTERM.
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "collectors/exchange/coordinator_server.h"
#include "reports/exchange_reports.h"
#include "shim/config.h"
#include "tools/commands.h"

namespace trainscope::tools {
namespace {

constexpr const char* kCoordinatorUsage =
    "usage: trainscope coordinator --bind ADDR --token TOKEN --dir RUN_DIR [--desync-timeout S]\n"
    "                              [--on-mismatch abort|warn] [--on-desync abort|warn]\n"
    "  --bind ADDR           ZeroMQ address to listen on: tcp://0.0.0.0:29400, tcp://HOST:PORT, ipc:///path\n"
    "  --token TOKEN         the job token every rank must present (TRAINSCOPE_TOKEN of the job):\n"
    "                        8-128 characters of [A-Za-z0-9._-]\n"
    "  --dir RUN_DIR         where reports and manifest.json are written (a folder, created 0700 if missing)\n"
    "  --desync-timeout S    seconds before a rank that is alive but silent is reported (default 300)\n"
    "  --on-mismatch ACTION  what ranks are told to do on a mismatch (default abort)\n"
    "  --on-desync ACTION    ... on a certain desync or a vanished rank (default abort)\n";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "trainscope coordinator: %s\n%s", message.c_str(), kCoordinatorUsage);
  return 2;
}

bool parse_action(const std::string& text, exchange::VerdictAction* action) {
  if (text == "abort")
    *action = exchange::VerdictAction::kAbort;
  else if (text == "warn")
    *action = exchange::VerdictAction::kWarn;
  else
    return false;
  return true;
}

}  // namespace

int cmd_coordinator(int argc, char** argv) {
  exchange::CoordinatorServerOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kCoordinatorUsage, stdout);
      return 0;
    }
    if (i + 1 >= argc) return usage_error("'" + flag + "' needs a value");
    const std::string value = argv[++i];
    if (flag == "--bind") {
      options.bind_address = value;
    } else if (flag == "--token") {
      options.token = value;
    } else if (flag == "--dir") {
      options.run_dir = value;
    } else if (flag == "--desync-timeout") {
      char* end = nullptr;
      errno = 0;
      const double seconds = std::strtod(value.c_str(), &end);
      if (errno != 0 || end == value.c_str() || *end != '\0' || !(seconds > 0) || seconds > 1e7) {
        return usage_error("--desync-timeout '" + value + "': expected a number of seconds > 0");
      }
      options.core.desync_timeout_ns = static_cast<uint64_t>(seconds * 1e9);
    } else if (flag == "--on-mismatch" || flag == "--on-desync") {
      exchange::VerdictAction action{};
      if (!parse_action(value, &action)) return usage_error(flag + " '" + value + "': expected abort or warn");
      (flag == "--on-mismatch" ? options.core.on_mismatch : options.core.on_desync) = action;
    } else {
      return usage_error("unknown argument '" + flag + "'");
    }
  }
  if (options.bind_address.empty()) return usage_error("--bind is required");
  if (options.token.empty()) return usage_error("--token is required");
  if (options.run_dir.empty()) return usage_error("--dir is required");
  // The token is never printed, not even a wrong one: it may be the job's real token, mistyped or cut.
  if (const char* reason = nullptr; !config_token_valid(options.token.c_str(), &reason)) {
    return usage_error(std::string("--token is not valid ") + reason +
                       "; accepted: " + config_vars()[kVarToken].accepted + ", as for TRAINSCOPE_TOKEN");
  }
  // The run directory before anything listens: a --dir that is a file, or cannot be made, is a wrong argument.
  std::string made_private;
  if (std::string error; !reports::make_report_directory(options.run_dir, &error, &made_private))
    return usage_error("--dir: " + error);
  if (!made_private.empty()) std::fprintf(stderr, "[trainscope warning] %s\n", made_private.c_str());

  options.log = [](LogLevel level, const std::string& message) {
    if (level <= LogLevel::kDebug) return;
    std::fprintf(stderr, "[trainscope %s] %s\n", level == LogLevel::kWarn ? "warning" : log_level_name(level),
                 message.c_str());
  };
  // Block the signals before any thread starts, so every thread inherits the mask and sigwait() gets them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  exchange::CoordinatorServer server(options);
  std::string error;
  if (!server.start(&error)) {
    std::fprintf(stderr, "trainscope coordinator: %s\n", error.c_str());
    return 2;  // an address that cannot be bound (malformed, or in use) is a wrong argument
  }
  std::fprintf(stderr, "[trainscope info] coordinator listening on %s, reports in %s\n", server.endpoint().c_str(),
               options.run_dir.c_str());
  int received = 0;
  sigwait(&signals, &received);
  server.stop();
  const exchange::CoordinatorServerStats stats = server.stats();
  std::fprintf(stderr,
               "[trainscope info] coordinator stopped (%s): %llu ranks said hello, %llu fingerprints, %llu verdicts, "
               "%llu malformed messages, %llu rejected tokens, %llu connections without the job's key, %llu closed "
               "before a valid hello\n",
               received == SIGINT ? "SIGINT" : "SIGTERM", static_cast<unsigned long long>(stats.hellos),
               static_cast<unsigned long long>(stats.core.fingerprints),
               static_cast<unsigned long long>(stats.verdicts), static_cast<unsigned long long>(stats.malformed),
               static_cast<unsigned long long>(stats.rejected_tokens),
               static_cast<unsigned long long>(stats.rejected_handshakes),
               static_cast<unsigned long long>(stats.gate.refused() + stats.gate.hello_timeouts));
  return 0;
}

}  // namespace trainscope::tools
