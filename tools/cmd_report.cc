// placeholder: being written
#include "tools/commands.h"
namespace trainscope::tools {
int cmd_report(int, char**) { return 1; }
}  // namespace trainscope::tools
