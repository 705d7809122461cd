// `trainscope env`: the effective TRAINSCOPE_* configuration of this environment, parsed by the shim's own code.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shim/config.h"
#include "tools/commands.h"
#include "tools/configuration_doc.h"
#include "tools/install_layout.h"

namespace trainscope::tools {

namespace {

constexpr const char* kEnvUsage =
    "usage: trainscope env [--json]\n"
    "\n"
    "Prints the effective value of every TRAINSCOPE_* variable and where it came from (default or environment),\n"
    "and warns about unknown TRAINSCOPE_* names. Exits 2 if a value is invalid, as the preloaded library would.\n"
    "Then says which libraries are used: the one `trainscope run` preloads, the engine it loads, the libraries\n"
    "bundled beside the engine, and where this command's own ZeroMQ and libsodium were loaded from; and what the\n"
    "package was built for (the wheel's manylinux policy and the glibc it needs) beside the glibc found here.\n"
    "\n"
    "  --json   print one JSON object instead of text\n";

struct UnknownVariable {
  std::string name;
  std::string suggestion;  // empty: no known name is close
};

void collect_unknown(const char* name, size_t name_len, const char* suggestion, void* ctx) {
  auto* unknown = static_cast<std::vector<UnknownVariable>*>(ctx);
  unknown->push_back({std::string(name, name_len), suggestion != nullptr ? suggestion : ""});
}

std::string escaped(const std::string& value) {
  char out[kMaxShownValue * 4 + 4];
  escape_value(value.data(), value.size(), out, sizeof(out));
  return out;
}

// Like escape_value but whole: the text output must show the full effective path, not its first bytes.
std::string escaped_whole(const std::string& value) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (const char ch : value) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\\') {
      out += "\\\\";
    } else if (c >= 0x20 && c < 0x7f) {
      out += ch;
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  return out;
}

std::string value_text(const Config& config, ConfigVar var) {
  std::vector<char> text(kMaxPath + 16);
  config_value_text(config, var, text.data(), text.size());
  return text.data();
}

const char* source_name(ValueSource source) { return source == ValueSource::kEnvironment ? "environment" : "default"; }

// The libraries trainscope works with: what `trainscope run` preloads, the engine that loads, what is bundled beside
// the engine (the package's copies of ZeroMQ, libsodium, libunwind...; none: the system's are used) and where this
// command's own copies were loaded from.
struct Libraries {
  std::string preload;  // empty: not found
  std::string engine;   // empty: not found
  std::vector<std::string> bundled;
  std::vector<LoadedLibrary> loaded;
};

Libraries find_libraries() {
  Libraries libraries;
  libraries.preload = find_preload_library();
  const std::string engine = engine_beside(libraries.preload);
  if (!engine.empty() && access(engine.c_str(), R_OK) == 0) libraries.engine = engine;
  if (!libraries.engine.empty()) {
    libraries.bundled = bundled_libraries(libraries.engine.substr(0, libraries.engine.rfind('/')));
  }
  libraries.loaded = loaded_libraries({"libzmq.", "libsodium.", "libunwind.", "libstdc++.", "libgcc_s."});
  return libraries;
}

nlohmann::ordered_json path_or_null(const std::string& path) {
  return path.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(path);
}

// docs/configuration.md's reference table (configuration_doc.h), by the hidden option --markdown.
constexpr const char* kTableBegin = kConfigurationTableBegin;
constexpr const char* kTableEnd = kConfigurationTableEnd;

// A table cell: a | would end it.
std::string cell(const char* text) {
  std::string out;
  for (const char* c = text; *c != '\0'; ++c) {
    if (*c == '|') out += '\\';
    out += *c;
  }
  return out;
}

std::string markdown_table() {
  std::string out = "| Variable | Default | Accepted values | Meaning |\n|---|---|---|---|\n";
  const ConfigVarInfo* vars = config_vars();
  for (int i = 0; i < kConfigVarCount; ++i) {
    const std::string default_text = vars[i].default_text[0] != '\0' ? "`" + cell(vars[i].default_text) + "`" : "none";
    out += "| `" + std::string(vars[i].name) + "` | " + default_text + " | " + cell(vars[i].accepted) + " | " +
           cell(vars[i].description) + " |\n";
  }
  return out;
}

// Replaces what lies between the marker lines of `path` with the generated table.
int write_markdown(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string doc = text.str();
  const size_t begin = doc.find(kTableBegin);
  const size_t end = begin == std::string::npos ? std::string::npos : doc.find(kTableEnd, begin);
  if (!in || end == std::string::npos) {
    std::fprintf(stderr, "trainscope env: %s has no generated table between the lines\n%s...\n%s",
                 escaped(path).c_str(), kTableBegin, kTableEnd);
    return 1;
  }
  const size_t body = begin + std::strlen(kTableBegin);
  doc.replace(body, end - body, markdown_table());
  std::ofstream out(path, std::ios::trunc);
  out << doc;
  out.close();
  if (!out) {
    std::fprintf(stderr, "trainscope env: cannot write %s\n", escaped(path).c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int cmd_env(int argc, char** argv) {
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) {
      json = true;
    } else if (std::strcmp(argv[i], "--markdown") == 0) {  // hidden: docs/configuration.md's table
      std::fputs(markdown_table().c_str(), stdout);
      return 0;
    } else if (std::strncmp(argv[i], "--markdown=", 11) == 0) {
      return write_markdown(argv[i] + 11);
    } else if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::fputs(kEnvUsage, stdout);
      return 0;
    } else {
      std::fprintf(stderr, "trainscope env: unknown argument '%s'\n%s", escaped(argv[i]).c_str(), kEnvUsage);
      return 2;
    }
  }

  // Warned about before the values are checked: a misspelt name is often why a value seems to be ignored.
  std::vector<UnknownVariable> unknown;
  for_each_unknown_variable(environ, collect_unknown, &unknown);
  for (const UnknownVariable& u : unknown) {
    if (u.suggestion.empty()) {
      std::fprintf(stderr, "trainscope: unknown variable %s\n", escaped(u.name).c_str());
    } else {
      std::fprintf(stderr, "trainscope: unknown variable %s; did you mean %s?\n", escaped(u.name).c_str(),
                   u.suggestion.c_str());
    }
  }

  // Config holds kMaxPath bytes and more: too big to be worth putting on the stack.
  auto config = std::make_unique<Config>();
  char error[1024];
  if (!parse_config(environ, config.get(), error, sizeof(error))) {
    std::fprintf(stderr, "%s\n", error);
    return 2;
  }

  const ConfigVarInfo* vars = config_vars();
  if (json) {
    nlohmann::ordered_json out;
    out["variables"] = nlohmann::ordered_json::object();
    for (int i = 0; i < kConfigVarCount; ++i) {
      const auto var = static_cast<ConfigVar>(i);
      out["variables"][vars[i].name] = {
          {"value", value_text(*config, var)},  {"source", source_name(config->source[i])},
          {"default", vars[i].default_text},    {"accepted", vars[i].accepted},
          {"description", vars[i].description},
      };
    }
    out["unknown"] = nlohmann::ordered_json::array();
    for (const UnknownVariable& u : unknown) {
      nlohmann::ordered_json item = {{"name", u.name}, {"suggestion", nullptr}};
      if (!u.suggestion.empty()) item["suggestion"] = u.suggestion;
      out["unknown"].push_back(std::move(item));
    }
    const Libraries libraries = find_libraries();
    nlohmann::ordered_json loaded = nlohmann::ordered_json::array();
    for (const LoadedLibrary& l : libraries.loaded) loaded.push_back({{"name", l.name}, {"path", l.path}});
    out["libraries"] = {{"preload", path_or_null(libraries.preload)},
                        {"engine", path_or_null(libraries.engine)},
                        {"bundled", libraries.bundled},
                        {"loaded", std::move(loaded)}};
    const PackagePlatform platform = package_platform();
    out["platform"] = {
        {"policy", platform.policy.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(platform.policy)},
        {"glibc_needed", platform.glibc_needed},
        {"preload_glibc_needed", platform.preload_glibc_needed},
        {"glibc_found", platform.glibc_found}};
    // A path is bytes, not necessarily UTF-8: replace what JSON cannot carry instead of throwing.
    std::printf("%s\n", out.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
    return 0;
  }

  for (int i = 0; i < kConfigVarCount; ++i) {
    std::printf("%s=%s  (%s)\n", vars[i].name, escaped_whole(value_text(*config, static_cast<ConfigVar>(i))).c_str(),
                source_name(config->source[i]));
  }
  const Libraries libraries = find_libraries();
  std::printf("\nlibraries:\n  preloaded by `trainscope run`: %s\n",
              libraries.preload.empty() ? "not found beside this command" : escaped_whole(libraries.preload).c_str());
  std::printf("  engine (loaded by it on first NCCL use): %s\n",
              libraries.engine.empty() ? "not found" : escaped_whole(libraries.engine).c_str());
  std::string bundled;
  for (const std::string& name : libraries.bundled) bundled += " " + escaped_whole(name);
  const PackagePlatform platform = package_platform();
  const char* none = platform.policy.empty() ? " none (the system's are used)"
                                             : " none (ZeroMQ, libsodium and the C++ runtime are linked in)";
  std::printf("  bundled beside the engine:%s\n", bundled.empty() ? none : bundled.c_str());
  for (const LoadedLibrary& l : libraries.loaded) {
    std::printf("  loaded by this command: %s => %s\n", escaped_whole(l.name).c_str(), escaped_whole(l.path).c_str());
  }
  std::printf("\nplatform:\n");
  if (platform.policy.empty()) {
    std::printf("  built for its build machine: needs glibc %s or newer\n", platform.glibc_needed.c_str());
  } else {
    std::printf("  wheel policy: %s (needs glibc %s or newer; the preloaded library %s)\n", platform.policy.c_str(),
                platform.glibc_needed.c_str(), platform.preload_glibc_needed.c_str());
  }
  std::printf("  glibc found: %s\n", platform.glibc_found.c_str());
  return 0;
}

}  // namespace trainscope::tools
