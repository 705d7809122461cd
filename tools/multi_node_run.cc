#include "tools/multi_node_run.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "shim/config.h"

namespace trainscope::tools {
namespace {

const char* env_value(char** env, const char* name) {
  const size_t len = std::strlen(name);
  for (char** e = env; e != nullptr && *e != nullptr; ++e)
    if (std::strncmp(*e, name, len) == 0 && (*e)[len] == '=') return *e + len + 1;
  return nullptr;
}

// The run id's alphabet ([A-Za-z0-9._-]); anything else becomes '-'.
std::string run_id_characters(const std::string& text) {
  std::string out = text;
  for (char& c : out) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) c = '-';
  }
  return out;
}

// Whether two socket addresses are the same IP address (ports aside).
bool same_ip(const sockaddr* a, const sockaddr* b) {
  if (a == nullptr || b == nullptr || a->sa_family != b->sa_family) return false;
  if (a->sa_family == AF_INET)
    return reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(b)->sin_addr.s_addr;
  if (a->sa_family == AF_INET6)
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(b)->sin6_addr, sizeof(in6_addr)) == 0;
  return false;
}

}  // namespace

std::string scheduler_run_id(char** env, const std::vector<std::string>& command) {
  if (const char* job = env_value(env, "SLURM_JOB_ID"); job != nullptr && *job != '\0') {
    std::string id = std::string("slurm-") + job;
    if (const char* step = env_value(env, "SLURM_STEP_ID"); step != nullptr && *step != '\0')
      id += std::string(".") + step;
    return run_id_characters(id);
  }
  for (size_t i = 0; i < command.size(); ++i) {
    std::string value;
    for (const char* flag : {"--rdzv-id", "--rdzv_id"}) {
      const std::string with_equals = std::string(flag) + "=";
      if (command[i] == flag && i + 1 < command.size()) value = command[i + 1];
      if (command[i].rfind(with_equals, 0) == 0) value = command[i].substr(with_equals.size());
    }
    if (!value.empty() && value != "none") return run_id_characters("torchrun-" + value);
  }
  return "";
}

bool split_host_port(const std::string& text, std::string* host, uint16_t* port, std::string* error) {
  // TRAINSCOPE_COORDINATOR's grammar, checked by its own parser so that the command and the ranks accept the same.
  std::string entry = "TRAINSCOPE_COORDINATOR=" + text;
  char* env[] = {entry.data(), nullptr};
  Config config;
  char why[512];
  if (!parse_config(env, &config, why, sizeof(why)) || config.coordinator_mode != CoordinatorMode::kAddress) {
    *error = "'" + text + "': accepted HOST:PORT or [IPv6]:PORT, PORT 1-65535";
    return false;
  }
  *host = config.coordinator_host;
  if (host->size() >= 2 && host->front() == '[') *host = host->substr(1, host->size() - 2);
  *port = config.coordinator_port;
  return true;
}

bool is_local_address(const std::string& host, std::string* numeric, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* resolved = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &resolved); rc != 0) {
    *error = "cannot resolve '" + host + "': " + gai_strerror(rc);
    return false;
  }
  ifaddrs* interfaces = nullptr;
  if (getifaddrs(&interfaces) != 0) {
    freeaddrinfo(resolved);
    *error = std::string("cannot list this host's addresses: ") + std::strerror(errno);
    return false;
  }
  bool local = false;
  for (const addrinfo* a = resolved; a != nullptr && !local; a = a->ai_next) {
    for (const ifaddrs* i = interfaces; i != nullptr && !local; i = i->ifa_next) {
      if (!same_ip(a->ai_addr, i->ifa_addr)) continue;
      char text[INET6_ADDRSTRLEN] = "";
      const void* raw = a->ai_family == AF_INET
                            ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr)
                            : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr);
      inet_ntop(a->ai_family, raw, text, sizeof(text));
      *numeric = text;
      local = true;
    }
  }
  freeifaddrs(interfaces);
  freeaddrinfo(resolved);
  error->clear();
  return local;
}

}  // namespace trainscope::tools
