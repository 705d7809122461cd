#include "reports/unwritten_report.h"

#include <vector>

namespace trainscope::reports {

bool parse_coordinator_write_error(std::string_view message, UnwrittenReport* out) {
  static constexpr std::string_view kPrefix = "coordinator: ";
  if (!message.starts_with(kPrefix)) return false;
  message.remove_prefix(kPrefix.size());
  message = message.substr(0, message.find('\n'));
  std::string_view what;
  for (std::string_view verb : {"cannot write ", "cannot create "}) {
    if (message.starts_with(verb)) what = message.substr(verb.size());
  }
  if (what.empty()) return false;
  // "<path>: <why>"; the origin's "<a> or <b>" and the manifest's "<path>" say no why.
  std::string_view paths = what;
  std::string_view cause;
  if (const size_t colon = what.rfind(": "); colon != std::string_view::npos) {
    paths = what.substr(0, colon);
    cause = what.substr(colon + 2);
  }
  // Each path's file name; a temporary's mapped back to the report it was for.
  const auto file_of = [](std::string_view path) {
    std::string name(path.substr(path.rfind('/') == std::string_view::npos ? 0 : path.rfind('/') + 1));
    if (name.starts_with(".") && name.find(".part-") != std::string::npos) {
      // write_report's ".<base>.<pid>.<n>.part-json" / "-text"
      const std::string base = name.substr(1, name.find('.', 1) - 1);
      name = base + (name.ends_with("-text") ? ".txt" : ".json");
    } else if (name.ends_with(".tmp")) {
      name.resize(name.size() - 4);  // replace_file's "<file>.tmp"
    }
    return name;
  };
  std::vector<std::string> names;
  for (size_t at = 0; at <= paths.size();) {
    size_t end = paths.find(" or ", at);
    if (end == std::string_view::npos) end = paths.size();
    names.push_back(file_of(paths.substr(at, end - at)));
    at = end + 4;
  }
  std::string report;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) report += i + 1 == names.size() ? " and " : ", ";
    report += names[i];
  }
  out->report = report;
  out->cause = std::string(cause);
  out->by = "the coordinator";
  return true;
}

}  // namespace trainscope::reports
