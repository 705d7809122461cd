// placeholder: being written
#include "tools/commands.h"
namespace trainscope::tools {
int cmd_env(int, char**) { return 1; }
}  // namespace trainscope::tools
