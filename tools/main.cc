// Entry point of the `trainscope` command: dispatches to the subcommands.
#include <cstdio>
#include <cstring>

#include "tools/commands.h"

namespace {

constexpr const char* kUsage =
    "usage: trainscope <command> [arguments]\n"
    "\n"
    "commands:\n"
    "  env                  print the effective TRAINSCOPE_* configuration and where each value came from\n"
    "  report RUN_DIR       summarise a run directory: ranks, communicators, last calls (--json for JSON)\n"
    "  stats FILE --dtype T abs min/max, inf/nan counts and checksum of a raw tensor dump (--json for JSON)\n"
    "  run [options] -- CMD  run a job under trainscope with its own coordinator; prints the run's summary\n"
    "  coordinator --bind ADDR --token TOKEN --dir RUN_DIR [--desync-timeout S]\n"
    "                       run the cross-rank coordinator as its own process (multi-node jobs)\n"
    "  commcheck [options]  under a launcher: every rank creates an NCCL communicator, all-reduces, barriers, says OK\n"
    "  doctor [--json]      find set-up problems before a run: CUDA toolkits, nvcc vs torch vs driver, PATH order,\n"
    "                       gcc, TORCH_CUDA_ARCH_LIST vs the GPUs, kernel, mixed GPUs, NCCL library vs headers\n"
    "  version              print the version\n"
    "  help                 print this help\n"
    "\n"
    "To record a job, preload the library: LD_PRELOAD=<prefix>/lib/libtrainscope.so <your launcher> ...\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const char* command = argv[1];
  if (std::strcmp(command, "env") == 0) return trainscope::tools::cmd_env(argc - 1, argv + 1);
  if (std::strcmp(command, "report") == 0) return trainscope::tools::cmd_report(argc - 1, argv + 1);
  if (std::strcmp(command, "stats") == 0) return trainscope::tools::cmd_stats(argc - 1, argv + 1);
  if (std::strcmp(command, "run") == 0) return trainscope::tools::cmd_run(argc - 1, argv + 1);
  if (std::strcmp(command, "coordinator") == 0) return trainscope::tools::cmd_coordinator(argc - 1, argv + 1);
  if (std::strcmp(command, "commcheck") == 0) return trainscope::tools::cmd_commcheck(argc - 1, argv + 1);
  if (std::strcmp(command, "doctor") == 0) return trainscope::tools::cmd_doctor(argc - 1, argv + 1);
  if (std::strcmp(command, "version") == 0 || std::strcmp(command, "--version") == 0) {
    std::printf("trainscope %s\n", TRAINSCOPE_VERSION);
    return 0;
  }
  if (std::strcmp(command, "help") == 0 || std::strcmp(command, "--help") == 0 || std::strcmp(command, "-h") == 0) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::fprintf(stderr,
               "trainscope: unknown command '%s'; accepted: run, env, report, stats, coordinator, commcheck, doctor, "
               "version, help\n",
               command);
  return 2;
}
