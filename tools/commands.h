// The subcommands of the `trainscope` command; each returns the process exit status.
#pragma once

namespace trainscope::tools {

// argv[0] is the subcommand name; the rest are its arguments.
int cmd_env(int argc, char** argv);
int cmd_report(int argc, char** argv);
int cmd_run(int argc, char** argv);
int cmd_stats(int argc, char** argv);
int cmd_coordinator(int argc, char** argv);
int cmd_commcheck(int argc, char** argv);
int cmd_doctor(int argc, char** argv);

}  // namespace trainscope::tools
