// `trainscope doctor`'s findings from what the probes found, and the parsers of version files and outputs.
#include "tools/doctor_checks.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string_view>

#include "collectors/exchange/coordinator_core.h"

namespace trainscope::tools::doctor {
namespace {

// The seed's advice (the transformers "Debugging" page, DeepSpeed CUDA installation; accelerate "Troubleshooting").
constexpr const char* kIdenticalToolkits =
    "PyTorch comes with its own CUDA toolkit, but to build CUDA extensions (DeepSpeed ops) you need an identical "
    "version of CUDA installed system-wide: if you installed PyTorch with CUDA {torch}, install CUDA {torch} "
    "everywhere (usually /usr/local/cuda-{torch}) and point CUDA_HOME, PATH and LD_LIBRARY_PATH at it; "
    "`which nvcc` shows which one is found.";
constexpr const char* kPathOrder =
    "Package installers typically set the paths to whatever version was installed last. Put the right toolkit first: "
    "export PATH={root}/bin:$PATH; export LD_LIBRARY_PATH={root}/lib64:$LD_LIBRARY_PATH (PATH lists where "
    "executables are, LD_LIBRARY_PATH where shared libraries are; earlier entries win). Also check that the "
    "folders you name exist.";
constexpr const char* kOldCompiler =
    "Older CUDA versions may refuse to build with newer compilers. Install the newest CUDA toolkit that supports your "
    "framework, or install an older compiler beside the current one and make it the one this CUDA finds: "
    "sudo ln -s /usr/bin/gcc-{max} {root}/bin/gcc; sudo ln -s /usr/bin/g++-{max} {root}/bin/g++";
constexpr const char* kArchList =
    "Set TORCH_CUDA_ARCH_LIST to the architectures of the GPUs that will run the code: \"{list}\" here (for several "
    "GPUs with different architectures list them all, as in \"6.1;8.6\"). Detecting the architecture at build time "
    "need not match the GPUs of the machine that runs the job; setting it explicitly is more reliable.";
constexpr const char* kKernel =
    "On Linux with a kernel older than 5.5, hanging processes have been reported. To avoid the problem, upgrade your "
    "system to a later kernel version.";
constexpr const char* kDriver =
    "Install an NVIDIA driver that supports CUDA {need} or later (a driver supports the CUDA versions up to the one "
    "it reports), or use a framework build for the CUDA this driver supports ({have}).";
constexpr const char* kMixedGpus =
    "Ranks on different GPU models run at different speeds, and code built for one architecture may not run on the "
    "other: build for every architecture present (TORCH_CUDA_ARCH_LIST=\"{list}\"), or run on identical GPUs.";
constexpr const char* kNotRegular =
    "Put the regular file that belongs there back (reinstall the package or driver that installs it); a program that "
    "reads it blocks or fails as well.";
constexpr const char* kNccl =
    "Build against the headers of the NCCL the job loads (its include folder first in the compiler's path, or "
    "NCCL_HOME), or put the lib folder of the NCCL matching the headers first in LD_LIBRARY_PATH.";

std::string substitute(std::string text, const std::string& key, const std::string& value) {
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + value.size()))
    text.replace(at, key.size(), value);
  return text;
}

// ---- scanning ------------------------------------------------------------------------------------------------------
// The parsers scan by hand, never with std::regex: libstdc++'s regex recurses once for each character a quantifier
// takes, so one long line (30,000 spaces in an nccl.h) overflows the stack. Each helper is linear in what it reads.

// Longer numbers are no version (and would overflow an int).
constexpr size_t kMaxDigits = 9;
// A driver version longer than this is cut: it is shown, never compared.
constexpr size_t kMaxVersionText = 64;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_word(char c) { return is_digit(c) || c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

size_t skip_spaces(std::string_view t, size_t i) {
  while (i < t.size() && is_space(t[i])) ++i;
  return i;
}

bool literal_at(std::string_view t, size_t i, std::string_view literal) {
  return i <= t.size() && t.substr(i).substr(0, literal.size()) == literal;
}

// The end of the run of 1 to kMaxDigits digits at i, its value in *value; npos when there is none or it is longer.
size_t number_at(std::string_view t, size_t i, int* value) {
  size_t end = i;
  int v = 0;
  while (end < t.size() && is_digit(t[end])) {
    if (end - i == kMaxDigits) return std::string_view::npos;
    v = v * 10 + (t[end++] - '0');
  }
  if (end == i) return std::string_view::npos;
  *value = v;
  return end;
}

// "MAJOR.MINOR" at i (what follows is not looked at), as "12.4" in *out.
bool major_minor_at(std::string_view t, size_t i, std::string* out) {
  int major = 0;
  int minor = 0;
  const size_t dot = number_at(t, i, &major);
  if (dot == std::string_view::npos || dot >= t.size() || t[dot] != '.') return false;
  if (number_at(t, dot + 1, &minor) == std::string_view::npos) return false;
  *out = std::to_string(major) + "." + std::to_string(minor);
  return true;
}

// One line of Python assigning a string or None to `name`, with an optional annotation: `cuda: Optional[str] = '12.1'`.
struct PythonValue {
  bool none = false;
  std::string text;
};
std::optional<PythonValue> python_assignment(std::string_view line, std::string_view name) {
  if (!literal_at(line, 0, name)) return std::nullopt;
  size_t i = skip_spaces(line, name.size());
  if (i < line.size() && line[i] == ':') {
    const size_t type = skip_spaces(line, i + 1);
    i = type;
    while (i < line.size() && (is_word(line[i]) || line[i] == '[' || line[i] == ']')) ++i;
    if (i == type) return std::nullopt;
    i = skip_spaces(line, i);
  }
  if (i >= line.size() || line[i] != '=') return std::nullopt;
  i = skip_spaces(line, i + 1);
  if (literal_at(line, i, "None")) return PythonValue{true, ""};
  if (i >= line.size() || (line[i] != '\'' && line[i] != '"')) return std::nullopt;
  const size_t close = line.find_first_of("'\"", i + 1);
  if (close == std::string_view::npos) return std::nullopt;
  return PythonValue{false, std::string(line.substr(i + 1, close - i - 1))};
}

// "8.6", "9.0a", "10.0f", "8.6+PTX"; nullopt for anything else.
std::optional<Arch> numeric_arch(std::string_view entry) {
  Arch arch;
  const size_t dot = number_at(entry, 0, &arch.major);
  if (dot == std::string_view::npos || dot >= entry.size() || entry[dot] != '.') return std::nullopt;
  size_t end = number_at(entry, dot + 1, &arch.minor);
  if (end == std::string_view::npos) return std::nullopt;
  if (end < entry.size() && (entry[end] == 'a' || entry[end] == 'f')) ++end;
  if (literal_at(entry, end, "+PTX")) {
    arch.ptx = true;
    end += 4;
  }
  if (end != entry.size()) return std::nullopt;
  return arch;
}

std::string arch_text(int major, int minor) { return std::to_string(major) + "." + std::to_string(minor); }

// The compute capabilities the GPU names stand for in TORCH_CUDA_ARCH_LIST (torch.utils.cpp_extension's table).
const std::vector<std::pair<std::string, std::vector<Arch>>>& named_archs() {
  static const std::vector<std::pair<std::string, std::vector<Arch>>> kNamed = {
      {"Kepler", {{3, 5, false}, {3, 7, false}}},
      {"Kepler+Tesla", {{3, 7, false}}},
      {"Maxwell", {{5, 0, false}, {5, 2, false}}},
      {"Maxwell+Tegra", {{5, 3, false}}},
      {"Pascal", {{6, 0, false}, {6, 1, false}}},
      {"Volta", {{7, 0, false}}},
      {"Turing", {{7, 5, false}}},
      {"Ampere", {{8, 0, false}, {8, 6, false}}},
      {"Ada", {{8, 9, false}}},
      {"Hopper", {{9, 0, false}}},
      {"Blackwell", {{10, 0, false}, {12, 0, false}}},
  };
  return kNamed;
}

}  // namespace

const char* severity_name(Severity severity) {
  switch (severity) {
    case Severity::kOk:
      return "ok";
    case Severity::kInfo:
      return "info";
    case Severity::kWarning:
      return "warning";
    case Severity::kError:
      return "error";
  }
  return "?";
}

int exit_status(Severity worst) {
  if (worst == Severity::kError) return 3;
  return worst == Severity::kWarning ? 1 : 0;
}

Severity worst(const std::vector<Finding>& findings) {
  Severity w = Severity::kOk;
  for (const Finding& f : findings) w = std::max(w, f.severity);
  return w;
}

std::string parse_nvcc_release(const std::string& nvcc_output) {
  const std::string_view t = nvcc_output;
  std::string version;
  for (size_t at = t.find("release "); at != std::string_view::npos; at = t.find("release ", at + 1))
    if (major_minor_at(t, at + 8, &version)) return version;
  return "";
}

std::string parse_toolkit_version_file(const std::string& text) {
  const std::string_view t = text;
  std::string version;
  // version.json: "cuda" : { ... "version" : "12.4.1" with no '}' between the '{' and "version".
  bool in_cuda_object = false;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '}') {
      in_cuda_object = false;
    } else if (literal_at(t, i, "\"cuda\"")) {
      size_t j = skip_spaces(t, i + 6);
      if (j < t.size() && t[j] == ':') {
        j = skip_spaces(t, j + 1);
        if (j < t.size() && t[j] == '{') in_cuda_object = true;
      }
    } else if (in_cuda_object && literal_at(t, i, "\"version\"")) {
      size_t j = skip_spaces(t, i + 9);
      if (j >= t.size() || t[j] != ':') continue;
      j = skip_spaces(t, j + 1);
      if (j < t.size() && t[j] == '"' && major_minor_at(t, j + 1, &version)) return version;
    }
  }
  // version.txt: "CUDA Version 10.2.89".
  for (size_t at = t.find("CUDA Version "); at != std::string_view::npos; at = t.find("CUDA Version ", at + 1))
    if (major_minor_at(t, at + 13, &version)) return version;
  return "";
}

bool parse_torch_version_py(const std::string& text, std::string* version, std::optional<std::string>* cuda) {
  std::optional<std::string> found_version;
  std::optional<PythonValue> found_cuda;
  const std::string_view t = text;
  for (size_t start = 0; start < t.size() && !(found_version && found_cuda);) {
    const size_t end = std::min(t.find('\n', start), t.size());
    const std::string_view line = t.substr(start, end - start);
    if (!found_version) {
      const std::optional<PythonValue> v = python_assignment(line, "__version__");
      if (v && !v->none && !v->text.empty()) found_version = v->text;
    }
    if (!found_cuda) found_cuda = python_assignment(line, "cuda");
    start = end + 1;
  }
  if (!found_version) return false;
  *version = *found_version;
  cuda->reset();
  if (found_cuda && !found_cuda->none && !found_cuda->text.empty()) *cuda = found_cuda->text;
  return true;
}

int parse_host_config_gcc_max(const std::string& text) {
  const std::string_view t = text;
  for (size_t at = t.find('#'); at != std::string_view::npos; at = t.find('#', at + 1)) {
    size_t i = skip_spaces(t, at + 1);
    if (!literal_at(t, i, "if")) continue;
    const size_t name = skip_spaces(t, i + 2);
    if (name == i + 2 || !literal_at(t, name, "__GNUC__")) continue;
    i = skip_spaces(t, name + 8);
    if (i >= t.size() || t[i] != '>') continue;
    i = skip_spaces(t, i + 1);
    int value = 0;
    if (number_at(t, i, &value) != std::string_view::npos) return value;
  }
  return -1;
}

std::string parse_nccl_header_version(const std::string& text) {
  const std::string_view t = text;
  // The number of the first `#define NAME <digits>`, "" when there is none.
  auto defined = [&](std::string_view name) -> std::string {
    for (size_t at = t.find("#define"); at != std::string_view::npos; at = t.find("#define", at + 1)) {
      const size_t i = skip_spaces(t, at + 7);
      if (i == at + 7 || !literal_at(t, i, name)) continue;
      const size_t digits = skip_spaces(t, i + name.size());
      int value = 0;
      if (digits == i + name.size()) continue;
      const size_t end = number_at(t, digits, &value);
      if (end != std::string_view::npos) return std::string(t.substr(digits, end - digits));
    }
    return "";
  };
  const std::string major = defined("NCCL_MAJOR");
  const std::string minor = major.empty() ? "" : defined("NCCL_MINOR");
  if (minor.empty()) return "";
  const std::string patch = defined("NCCL_PATCH");
  return major + "." + minor + "." + (patch.empty() ? std::string("0") : patch);
}

std::string parse_gcc_version(const std::string& output) {
  const std::string_view t = output;
  for (size_t i = 0; i < t.size(); ++i) {
    if (!is_digit(t[i])) continue;
    int value = 0;
    size_t end = number_at(t, i, &value);
    if (end == std::string_view::npos) return "";
    while (end + 1 < t.size() && t[end] == '.' && is_digit(t[end + 1])) {
      const size_t next = number_at(t, end + 1, &value);
      if (next == std::string_view::npos) break;
      end = next;
    }
    return std::string(t.substr(i, end - i));
  }
  return "";
}

std::string parse_driver_module_version(const std::string& text) {
  const std::string_view t = text;
  // Spaces, then [0-9]+\.[0-9.]+ at i: the version, "" when not there.
  auto version_after = [&](size_t i) -> std::string {
    const size_t start = skip_spaces(t, i);
    size_t end = start;
    while (end < t.size() && is_digit(t[end])) ++end;
    if (start == i || end == start || end >= t.size() || t[end] != '.') return "";
    const size_t dot = end++;
    while (end < t.size() && (is_digit(t[end]) || t[end] == '.')) ++end;
    return end == dot + 1 ? "" : std::string(t.substr(start, std::min(end - start, kMaxVersionText)));
  };
  for (size_t at = t.find("Kernel Module"); at != std::string_view::npos; at = t.find("Kernel Module", at + 1)) {
    const size_t i = at + 13;
    if (literal_at(t, i, " for ")) {  // "NVIDIA UNIX Open Kernel Module for x86_64  535.104.05"
      size_t j = i + 5;
      while (j < t.size() && (is_word(t[j]))) ++j;
      if (j > i + 5) {
        std::string version = version_after(j);
        if (!version.empty()) return version;
      }
    }
    std::string version = version_after(i);
    if (!version.empty()) return version;
  }
  return "";
}

std::string nccl_version_text(int code) {
  if (code <= 0) return "";
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? (code / 100) % 100 : (code / 100) % 10;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

std::string cuda_version_text(int code) {
  if (code <= 0) return "";
  return std::to_string(code / 1000) + "." + std::to_string((code % 1000) / 10);
}

bool parse_arch_list(const std::string& text, std::vector<Arch>* archs, std::string* bad) {
  archs->clear();
  std::string entry;
  auto take = [&]() -> bool {
    if (entry.empty()) return true;
    if (const std::optional<Arch> numeric = numeric_arch(entry)) {
      archs->push_back(*numeric);
    } else {
      const bool ptx = entry.size() > 4 && entry.compare(entry.size() - 4, 4, "+PTX") == 0;
      const std::string name = ptx ? entry.substr(0, entry.size() - 4) : entry;
      bool known = false;
      for (const auto& [named, list] : named_archs()) {
        if (named != name) continue;
        known = true;
        for (Arch a : list) archs->push_back({a.major, a.minor, ptx});
      }
      if (!known) {
        *bad = entry;
        return false;
      }
    }
    entry.clear();
    return true;
  };
  for (char c : text) {
    if (c == ';' || c == ' ' || c == ',') {
      if (!take()) return false;
    } else {
      entry += c;
    }
  }
  return take();
}

Coverage arch_coverage(const std::vector<Arch>& archs, int major, int minor) {
  Coverage best = Coverage::kNone;
  for (const Arch& a : archs) {
    if (a.major == major && a.minor == minor) return Coverage::kExact;
    const bool sass_runs = a.major == major && a.minor < minor;
    const bool ptx_runs = a.ptx && (a.major < major || (a.major == major && a.minor < minor));
    if (sass_runs || ptx_runs) best = Coverage::kCompatible;
  }
  return best;
}

int compare_versions(const std::string& a, const std::string& b, bool* major_differs) {
  int a_major = 0, a_minor = 0, b_major = 0, b_minor = 0;
  std::sscanf(a.c_str(), "%d.%d", &a_major, &a_minor);
  std::sscanf(b.c_str(), "%d.%d", &b_major, &b_minor);
  if (major_differs != nullptr) *major_differs = a_major != b_major;
  if (a_major != b_major) return a_major < b_major ? -1 : 1;
  if (a_minor != b_minor) return a_minor < b_minor ? -1 : 1;
  return 0;
}

namespace {

std::string describe_toolkit(const Toolkit& t) {
  return t.root + " (" + (t.version.empty() ? "version unknown" : "CUDA " + t.version) + ", " + t.source + ")";
}

// The compute capabilities of the GPUs here, each once, in order, and as a TORCH_CUDA_ARCH_LIST would list them.
std::set<std::pair<int, int>> present_archs(const std::vector<Gpu>& gpus) {
  std::set<std::pair<int, int>> present;
  for (const Gpu& g : gpus) present.insert({g.major, g.minor});
  return present;
}
std::string arch_list_of(const std::set<std::pair<int, int>>& present) {
  std::string wanted;
  for (const auto& [major, minor] : present) wanted += (wanted.empty() ? "" : ";") + arch_text(major, minor);
  return wanted;
}

// One check per member, each adding its findings in the order doctor prints them.
struct Evaluation {
  const Facts& f;
  const Toolkit* build;  // the toolkit builds use, or nullptr
  std::vector<Finding> out;

  void add(const char* check, Severity severity, std::string found, std::string remedy = {}) {
    out.push_back({check, severity, std::move(found), std::move(remedy)});
  }

  void check_toolkits() {
    if (f.toolkits.empty()) {
      add("toolkits", Severity::kInfo,
          "no CUDA toolkit (nvcc) found: only needed to build CUDA extensions (DeepSpeed ops, custom kernels)");
    } else if (f.toolkits.size() == 1) {
      add("toolkits", Severity::kOk, "one CUDA toolkit: " + describe_toolkit(f.toolkits[0]));
    } else {
      std::string list;
      for (const Toolkit& t : f.toolkits) list += (list.empty() ? "" : "; ") + describe_toolkit(t);
      add("toolkits", Severity::kInfo,
          std::to_string(f.toolkits.size()) + " CUDA toolkits: " + list + "; builds use " +
              (build != nullptr ? build->root + " (" + f.build_toolkit_why + ")" : std::string("none of them")),
          substitute(kPathOrder, "{root}", build != nullptr ? build->root : f.toolkits.back().root));
    }
    if (!f.cuda_home.empty() && build == nullptr) {
      add("toolkits", Severity::kError, f.cuda_home_var + "=" + f.cuda_home + " is not a CUDA toolkit (no bin/nvcc)",
          "Point " + f.cuda_home_var + " at the folder of the CUDA toolkit that matches your framework, or unset it.");
    }
  }

  // nvcc vs the CUDA the framework was built with.
  void check_nvcc_against_torch() {
    if (f.torch_dir.empty()) {
      add("nvcc-vs-torch", Severity::kInfo,
          f.python.empty()                ? "no Python interpreter found on PATH: PyTorch not checked"
          : !f.python_note.empty()        ? f.python + " " + f.python_note + ": PyTorch not checked"
          : !f.torch_version_file.empty() ? "the version of PyTorch could not be told from " + f.torch_version_file +
                                                " (of " + f.python + "): not checked"
                                          : "PyTorch is not installed for " + f.python);
    } else if (!f.torch_cuda) {
      add("nvcc-vs-torch", Severity::kInfo,
          "PyTorch " + f.torch_version + " (" + f.torch_dir + ") is a CPU-only build: it uses no CUDA");
    } else if (build == nullptr || build->version.empty()) {
      add("nvcc-vs-torch", Severity::kInfo,
          "PyTorch " + f.torch_version + " was built with CUDA " + *f.torch_cuda +
              (build == nullptr ? "; no CUDA toolkit to compare it with"
                                : "; the version of " + build->root + " could not be told"));
    } else {
      bool major_differs = false;
      const int order = compare_versions(build->version, *f.torch_cuda, &major_differs);
      const std::string found = "nvcc of " + build->root + " (" + f.build_toolkit_why + ") is CUDA " + build->version +
                                "; PyTorch " + f.torch_version + " (" + f.torch_dir + ") was built with CUDA " +
                                *f.torch_cuda;
      if (order == 0) {
        add("nvcc-vs-torch", Severity::kOk, found);
      } else {
        add("nvcc-vs-torch", major_differs ? Severity::kError : Severity::kWarning,
            found + (major_differs ? ": extensions built with this nvcc will not load"
                                   : ": the minor versions differ (builds usually work, but a mismatch is a suspect)"),
            substitute(kIdenticalToolkits, "{torch}", *f.torch_cuda));
      }
    }
  }

  // The driver's CUDA vs the framework's and the toolkit's.
  void check_driver() {
    if (f.driver_cuda.empty()) {
      add("driver", Severity::kInfo,
          "no NVIDIA driver could be asked (" + f.driver_note + ")" +
              (f.driver_version.empty() ? "" : "; kernel module " + f.driver_version));
    } else {
      std::string found = "the driver" + (f.driver_version.empty() ? "" : " " + f.driver_version) +
                          " supports CUDA up to " + f.driver_cuda;
      Severity severity = Severity::kOk;
      std::string need;
      for (const auto& [who, version] :
           {std::pair<std::string, std::string>{"PyTorch", f.torch_cuda.value_or("")},
            std::pair<std::string, std::string>{"nvcc", build != nullptr ? build->version : ""}}) {
        if (version.empty()) continue;
        bool major_differs = false;
        if (compare_versions(f.driver_cuda, version, &major_differs) >= 0) continue;
        found += "; " + who + " needs CUDA " + version;
        severity = std::max(severity, major_differs ? Severity::kError : Severity::kWarning);
        if (need.empty() || compare_versions(version, need) > 0) need = version;
      }
      if (severity == Severity::kWarning)
        found +=
            " (newer minor versions run on this driver only through CUDA's minor version compatibility: PTX "
            "and some features are not available)";
      add("driver", severity, found,
          severity == Severity::kOk ? "" : substitute(substitute(kDriver, "{need}", need), "{have}", f.driver_cuda));
    }
  }

  // PATH and LD_LIBRARY_PATH order.
  void check_path_order() {
    std::vector<std::string> problems;
    const std::string want = build != nullptr ? build->root : "";
    if (!want.empty() && !f.path_nvcc.empty() && f.path_nvcc_toolkit != want)
      problems.push_back("the first nvcc on PATH is " + f.path_nvcc + ", not the one of " + want + " (" +
                         f.build_toolkit_why + ")");
    if (!want.empty() && f.path_nvcc.empty() && f.build_toolkit_why != "the first nvcc on PATH")
      problems.push_back("no nvcc on PATH (" + want + "/bin is not in it)");
    if (!f.ld_cudart.empty()) {
      const std::string& other = want.empty() ? f.path_nvcc_toolkit : want;
      if (!other.empty() && f.ld_cudart_toolkit != other)
        problems.push_back("the first libcudart in LD_LIBRARY_PATH is " + f.ld_cudart + ", not one of " + other);
    }
    for (const std::string& dead : f.dead_dirs) problems.push_back(dead + " does not exist");
    if (problems.empty()) {
      add("path-order", Severity::kOk,
          f.path_nvcc.empty() && f.ld_cudart.empty()
              ? "no nvcc on PATH and no libcudart in LD_LIBRARY_PATH"
              : "PATH and LD_LIBRARY_PATH find " + (want.empty() ? f.path_nvcc_toolkit : want) + " first");
    } else {
      std::string found;
      for (const std::string& p : problems) found += (found.empty() ? "" : "; ") + p;
      add("path-order", Severity::kWarning, found,
          substitute(kPathOrder, "{root}",
                     !want.empty()        ? want
                     : f.toolkits.empty() ? "/usr/local/cuda-X.Y"
                                          : f.toolkits.front().root));
    }
  }

  // gcc within the toolkit's range.
  void check_gcc() {
    if (build == nullptr) return;
    if (f.gcc_version.empty()) {
      add("gcc", Severity::kInfo, "no gcc found for " + build->root + " (neither its bin/gcc nor one on PATH)");
    } else if (f.gcc_max_major < 0) {
      add("gcc", Severity::kInfo,
          "gcc " + f.gcc_version + " (" + f.gcc + "); " +
              (f.host_config.empty() ? build->root + " has no include/crt/host_config.h"
                                     : f.host_config + " states no newest gcc") +
              ": the range was not checked");
    } else {
      const int major = std::atoi(f.gcc_version.c_str());
      const std::string found = "gcc " + f.gcc_version + " (" + f.gcc + "); CUDA " + build->version + " of " +
                                build->root + " accepts gcc up to " + std::to_string(f.gcc_max_major) + " (" +
                                f.host_config + ")";
      if (major > f.gcc_max_major) {
        add("gcc", Severity::kError, found + ": nvcc stops with 'unsupported GNU version'",
            substitute(substitute(kOldCompiler, "{max}", std::to_string(f.gcc_max_major)), "{root}", build->root));
      } else {
        add("gcc", Severity::kOk, found);
      }
    }
  }

  // TORCH_CUDA_ARCH_LIST against the GPUs.
  void check_arch_list() {
    const std::set<std::pair<int, int>> present = present_archs(f.gpus);
    const std::string wanted = arch_list_of(present);
    std::vector<Arch> archs;
    std::string bad;
    if (f.gpus.empty()) {
      add("arch-list", Severity::kInfo,
          "no GPU visible (" + f.gpu_note + "): TORCH_CUDA_ARCH_LIST" +
              (f.arch_list ? "=\"" + *f.arch_list + "\"" : std::string(" (unset)")) +
              " not checked against the GPUs; run doctor where the job runs");
    } else if (!f.arch_list) {
      add("arch-list", Severity::kInfo, "TORCH_CUDA_ARCH_LIST is not set; the GPUs here are " + wanted,
          substitute(kArchList, "{list}", wanted));
    } else if (!parse_arch_list(*f.arch_list, &archs, &bad)) {
      add("arch-list", Severity::kError,
          "TORCH_CUDA_ARCH_LIST=\"" + *f.arch_list + "\": '" + bad +
              "' is not an architecture (accepted: 8.6, 8.6+PTX, 9.0a, or Kepler, Maxwell, Pascal, Volta, Turing, "
              "Ampere, Ada, Hopper, Blackwell)",
          substitute(kArchList, "{list}", wanted));
    } else {
      std::vector<std::string> missing;
      std::vector<std::string> compatible;
      for (const auto& [major, minor] : present) {
        const Coverage c = arch_coverage(archs, major, minor);
        if (c == Coverage::kNone) missing.push_back(arch_text(major, minor));
        if (c == Coverage::kCompatible) compatible.push_back(arch_text(major, minor));
      }
      std::string found = "TORCH_CUDA_ARCH_LIST=\"" + *f.arch_list + "\"; the GPUs here are " + wanted;
      if (!missing.empty()) {
        std::string list;
        for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
        add("arch-list", Severity::kError,
            found + ": nothing built runs on compute capability " + list + " ('no kernel image is available')",
            substitute(kArchList, "{list}", wanted));
      } else if (!compatible.empty()) {
        std::string list;
        for (const std::string& c : compatible) list += (list.empty() ? "" : ", ") + c;
        add("arch-list", Severity::kInfo,
            found + ": compute capability " + list + " runs code built for an older architecture of its family " +
                "or JIT-compiled PTX, not code tuned for it",
            substitute(kArchList, "{list}", wanted));
      } else {
        add("arch-list", Severity::kOk, found);
      }
    }
  }

  void check_kernel() {
    if (f.kernel_release.empty()) {
      add("kernel", Severity::kInfo, "the kernel release could not be read");
    } else if (exchange::kernel_older_than(f.kernel_release, 5, 5)) {
      add("kernel", Severity::kWarning, "Linux " + f.kernel_release + " is older than 5.5", kKernel);
    } else {
      add("kernel", Severity::kOk, "Linux " + f.kernel_release);
    }
  }

  void check_gpu_models() {
    if (f.gpus.empty()) return;
    std::vector<std::string> models;
    for (const Gpu& g : f.gpus)
      if (std::find(models.begin(), models.end(), g.name) == models.end()) models.push_back(g.name);
    std::string list;
    for (const std::string& m : models) {
      const auto n = std::count_if(f.gpus.begin(), f.gpus.end(), [&](const Gpu& g) { return g.name == m; });
      list += (list.empty() ? "" : ", ") + std::to_string(n) + " x " + m;
    }
    const std::string wanted = arch_list_of(present_archs(f.gpus));
    if (models.size() > 1)
      add("gpus", Severity::kWarning, "mixed GPU models: " + list, substitute(kMixedGpus, "{list}", wanted));
    else
      add("gpus", Severity::kOk, list);
  }

  // NCCL library vs headers.
  void check_nccl() {
    if (f.nccl_library_version.empty() && f.nccl_header_version.empty()) {
      add("nccl", Severity::kInfo, "no NCCL library (" + f.nccl_note + ") and no nccl.h found");
    } else if (f.nccl_library_version.empty()) {
      add("nccl", Severity::kInfo,
          "nccl.h " + f.nccl_header_version + " (" + f.nccl_header + "), but no NCCL library (" + f.nccl_note + ")");
    } else if (f.nccl_header_version.empty()) {
      add("nccl", Severity::kInfo,
          "NCCL " + f.nccl_library_version + " (" + f.nccl_library + "); no nccl.h found (only needed to build)");
    } else {
      const std::string found = "NCCL library " + f.nccl_library_version + " (" + f.nccl_library + "), headers " +
                                f.nccl_header_version + " (" + f.nccl_header + ")";
      if (compare_versions(f.nccl_library_version, f.nccl_header_version) != 0)
        add("nccl", Severity::kWarning,
            found + ": code built with these headers may call functions or pass structures the library does not have",
            kNccl);
      else
        add("nccl", Severity::kOk, found);
    }
  }

  // Files found but not read whole: what was told from them may be missing, and a FIFO or device where a version
  // file belongs stops the programs that read it too (import torch blocks on a FIFO version.py).
  void note_unread_files() {
    for (const FileNote& note : f.file_notes)
      out.push_back({note.check, note.not_regular ? Severity::kWarning : Severity::kInfo,
                     note.path + " " + note.problem, note.not_regular ? kNotRegular : ""});
  }
};

}  // namespace

std::vector<Finding> evaluate(const Facts& f) {
  Evaluation e{f, f.build_toolkit >= 0 ? &f.toolkits[static_cast<size_t>(f.build_toolkit)] : nullptr, {}};
  e.check_toolkits();
  e.check_nvcc_against_torch();
  e.check_driver();
  e.check_path_order();
  e.check_gcc();
  e.check_arch_list();
  e.check_kernel();
  e.check_gpu_models();
  e.check_nccl();
  e.note_unread_files();
  return std::move(e.out);
}

}  // namespace trainscope::tools::doctor
