// `trainscope doctor [--json]`: the seed's set-up failures found before a run, each with its remedy; the exit
// status says how bad the worst finding is.
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "base/printable.h"
#include "tools/commands.h"
#include "tools/doctor_checks.h"
#include "tools/doctor_probe.h"

namespace trainscope::tools {
namespace {

constexpr const char* kUsage =
    "usage: trainscope doctor [--json] [--root DIR] [--python EXE] [--libcuda LIB] [--nccl LIB]\n"
    "Checks the set-up before a run: several CUDA toolkits, nvcc vs the CUDA PyTorch was built with vs the driver,\n"
    "PATH/LD_LIBRARY_PATH order, gcc against the toolkit's supported range, TORCH_CUDA_ARCH_LIST against the GPUs,\n"
    "Linux older than 5.5, mixed GPU models, the NCCL library against the NCCL headers.\n"
    "  --json          print one JSON object: findings (check, severity, found, remedy), worst, exit_status\n"
    "  --root DIR      read the fixed system paths (/usr/local/cuda*, /opt/conda, /usr/include, /proc) under DIR\n"
    "  --python EXE    the Python whose PyTorch to check (default: python3, then python, on PATH); torch is not\n"
    "                  imported: its torch/version.py is read\n"
    "  --libcuda LIB   the driver library to ask for its CUDA version and GPUs (default libcuda.so.1)\n"
    "  --nccl LIB      the NCCL library to ask for its version (default libnccl.so.2)\n"
    "Exit status: 0 nothing worse than info, 1 a warning, 3 an error (2: bad arguments).\n";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "trainscope doctor: %s\n%s", message.c_str(), kUsage);
  return 2;
}

}  // namespace

int cmd_doctor(int argc, char** argv) {
  doctor::ProbeOptions options;
  bool as_json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (flag == "--json") {
      as_json = true;
      continue;
    }
    std::string* target = flag == "--root"      ? &options.root
                          : flag == "--python"  ? &options.python
                          : flag == "--libcuda" ? &options.libcuda
                          : flag == "--nccl"    ? &options.nccl
                                                : nullptr;
    if (target == nullptr) return usage_error("unknown argument '" + flag + "'");
    if (i + 1 >= argc || argv[i + 1][0] == '\0') return usage_error(flag + " needs a value");
    *target = argv[++i];
  }
  if (!options.root.empty()) {
    while (options.root.size() > 1 && options.root.back() == '/') options.root.pop_back();
    if (options.root == "/") options.root.clear();
  }

  const std::vector<doctor::Finding> findings = doctor::evaluate(doctor::probe(options));
  const doctor::Severity worst = doctor::worst(findings);
  const int status = doctor::exit_status(worst);
  if (as_json) {
    nlohmann::json out;
    out["findings"] = nlohmann::json::array();
    for (const doctor::Finding& f : findings)
      out["findings"].push_back({{"check", f.check},
                                 {"severity", doctor::severity_name(f.severity)},
                                 {"found", f.found},
                                 {"remedy", f.remedy}});
    out["worst"] = doctor::severity_name(worst);
    out["exit_status"] = status;
    // The findings carry bytes of the environment and of files as they are, UTF-8 or not: dump replaces each byte
    // that is not UTF-8 with U+FFFD (as every JSON of trainscope does) and printable_json escapes DEL and the C1
    // controls, so the JSON is valid for any input and drives no terminal.
    std::printf("%s\n",
                reports::printable_json(out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace)).c_str());
    return status;
  }
  // Every string may hold control characters from the environment or a file: each is shown escaped.
  for (const doctor::Finding& f : findings) {
    const std::string tag = std::string("[") + doctor::severity_name(f.severity) + "]";
    std::printf("%-9s %s: %s\n", tag.c_str(), reports::printable(f.check).c_str(), reports::printable(f.found).c_str());
    if (!f.remedy.empty()) std::printf("          remedy: %s\n", reports::printable(f.remedy).c_str());
  }
  std::printf("worst finding: %s (exit status %d)\n", doctor::severity_name(worst), status);
  return status;
}

}  // namespace trainscope::tools
