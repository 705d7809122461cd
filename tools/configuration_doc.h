// docs/configuration.md's reference table is generated from shim/config_vars.h by `trainscope env --markdown`
// (printed) or --markdown=FILE (written between FILE's two marker lines below); CmdEnv.DocsTableIsGenerated compares
// the file with the command's output between the same markers, so they are written once, here.
#pragma once

namespace trainscope::tools {

inline constexpr char kConfigurationTableBegin[] =
    "<!-- Generated from shim/config_vars.h by `trainscope env --markdown=docs/configuration.md`: do not edit. -->\n";
inline constexpr char kConfigurationTableEnd[] = "<!-- End of the generated table. -->\n";

}  // namespace trainscope::tools
