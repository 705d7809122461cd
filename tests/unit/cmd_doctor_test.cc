// Runs the real `trainscope doctor` on fake toolkit trees (nvcc scripts, host_config.h, torch/version.py, nccl.h),
// with a stand-in libcuda.so.1 for the driver and GPUs, and checks its findings, text, JSON and exit status.
#include <nccl.h>
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/subprocess.h"

namespace {

using trainscope::testing::ProcessOptions;
using trainscope::testing::ProcessResult;
using trainscope::testing::run_process;
using trainscope::testing::TempDir;

void write(const std::string& path, const std::string& text, bool executable = false) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
  if (executable) chmod(path.c_str(), 0755);
}

// A fake machine under dir: root/ holds the system folders, bin/ the programs on PATH, site/ Python's packages.
struct FakeMachine {
  TempDir dir;
  std::string root = dir.path() + "/root";
  std::string bin = dir.path() + "/bin";
  std::string site = dir.path() + "/site";
  ProcessOptions options;

  FakeMachine() {
    write(bin + "/python3", "#!/bin/sh\necho " + site + "\n", true);
    write(site + "/torch/version.py",
          "from typing import Optional\n__version__ = '2.3.0+cu121'\ndebug = False\ncuda: Optional[str] = '12.1'\n");
    write(root + "/proc/sys/kernel/osrelease", "6.1.0-18-amd64\n");
    for (const char* name : {"CUDA_HOME", "CUDA_PATH", "CONDA_PREFIX", "NCCL_HOME", "NCCL_ROOT", "NCCL_INCLUDE_DIR",
                             "TORCH_CUDA_ARCH_LIST", "LD_PRELOAD", "CUDA_VISIBLE_DEVICES"})
      options.env[name] = std::nullopt;
    options.env["PATH"] = bin;
    options.env["LD_LIBRARY_PATH"] = "";
    options.env["TSFAKE_CUDA_DRIVER"] = "12040";
    options.env["TSFAKE_CUDA_GPUS"] = "NVIDIA A100-SXM4-80GB=8.0;NVIDIA A100-SXM4-80GB=8.0";
    options.timeout_seconds = 60;
  }

  std::string toolkit(const std::string& version, int gcc_max) {
    const std::string cuda = root + "/usr/local/cuda-" + version;
    write(cuda + "/bin/nvcc",
          "#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\necho 'Cuda compilation tools, release " + version +
              ", V" + version + ".131'\n",
          true);
    write(cuda + "/include/crt/host_config.h", "#if defined(__GNUC__)\n\n#if __GNUC__ > " + std::to_string(gcc_max) +
                                                   "\n\n#error -- unsupported GNU version!\n\n#endif\n#endif\n");
    write(cuda + "/lib64/libcudart.so." + version.substr(0, version.find('.')), "");
    return cuda;
  }

  void gcc(const std::string& version) { write(bin + "/gcc", "#!/bin/sh\necho " + version + "\n", true); }

  void nccl_header(const std::string& major, const std::string& minor, const std::string& patch) {
    write(root + "/usr/include/nccl.h",
          "#define NCCL_MAJOR " + major + "\n#define NCCL_MINOR " + minor + "\n#define NCCL_PATCH " + patch + "\n");
  }

  ProcessResult doctor(std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {TRAINSCOPE_TOOL_PATH, "doctor", "--root",    root, "--libcuda",
                                     TS_FAKE_CUDA_DRIVER,  "--nccl", TS_FAKE_NCCL};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run_process(argv, options);
  }
};

nlohmann::json finding(const nlohmann::json& report, const std::string& check) {
  for (const auto& f : report["findings"])
    if (f["check"] == check) return f;
  return nullptr;
}

TEST(CmdDoctor, AHealthyMachineIsAllOk) {
  FakeMachine m;
  const std::string cuda = m.toolkit("12.1", 12);
  m.gcc("11.4.0");
  m.nccl_header(std::to_string(NCCL_MAJOR), std::to_string(NCCL_MINOR), std::to_string(NCCL_PATCH));
  m.options.env["PATH"] = cuda + "/bin:" + m.bin;
  m.options.env["LD_LIBRARY_PATH"] = cuda + "/lib64";
  m.options.env["CUDA_HOME"] = cuda;
  m.options.env["TORCH_CUDA_ARCH_LIST"] = "8.0";
  const ProcessResult r = m.doctor({"--json"});
  ASSERT_EQ(0, r.exit_code) << r.out << r.err;
  const nlohmann::json report = nlohmann::json::parse(r.out);
  EXPECT_EQ("ok", report["worst"]);
  EXPECT_EQ(0, report["exit_status"]);
  for (const auto& f : report["findings"]) EXPECT_EQ("ok", f["severity"]) << f.dump();
  EXPECT_NE(std::string::npos,
            finding(report, "nvcc-vs-torch")["found"].get<std::string>().find(
                "is CUDA 12.1; PyTorch 2.3.0+cu121 (" + m.site + "/torch) was built with CUDA 12.1"));
  EXPECT_NE(std::string::npos, finding(report, "gpus")["found"].get<std::string>().find("2 x NVIDIA A100-SXM4-80GB"));
}

TEST(CmdDoctor, TheSeedsFailuresAreFoundWithTheirRemedies) {
  FakeMachine m;
  const std::string old_cuda = m.toolkit("11.8", 11);
  const std::string cuda = m.toolkit("12.1", 12);
  m.gcc("13.2.0");
  m.nccl_header("2", "18", "3");
  write(m.root + "/proc/sys/kernel/osrelease", "5.4.0-150-generic\n");
  // The older toolkit comes first on PATH and LD_LIBRARY_PATH, while CUDA_HOME names the one torch matches.
  m.options.env["PATH"] = old_cuda + "/bin:" + m.bin + ":" + m.root + "/usr/local/cuda-10.2/bin";
  m.options.env["LD_LIBRARY_PATH"] = old_cuda + "/lib64";
  m.options.env["CUDA_HOME"] = cuda;
  m.options.env["TORCH_CUDA_ARCH_LIST"] = "8.6";
  m.options.env["TSFAKE_CUDA_GPUS"] = "NVIDIA A100-SXM4-80GB=8.0;NVIDIA H100 80GB HBM3=9.0";
  const ProcessResult r = m.doctor({"--json"});
  ASSERT_EQ(3, r.exit_code) << r.out << r.err;
  const nlohmann::json report = nlohmann::json::parse(r.out);
  EXPECT_EQ("error", report["worst"]);
  auto expect = [&](const char* check, const char* severity, const std::string& in_found,
                    const std::string& in_remedy) {
    const nlohmann::json f = finding(report, check);
    ASSERT_FALSE(f.is_null()) << check;
    EXPECT_EQ(severity, f["severity"]) << f.dump();
    EXPECT_NE(std::string::npos, f["found"].get<std::string>().find(in_found)) << f.dump();
    EXPECT_NE(std::string::npos, f["remedy"].get<std::string>().find(in_remedy)) << f.dump();
  };
  expect("toolkits", "info", "2 CUDA toolkits: " + cuda + " (CUDA 12.1, CUDA_HOME); " + old_cuda, "export PATH=");
  expect("nvcc-vs-torch", "ok", "is CUDA 12.1", "");
  expect("driver", "ok", "supports CUDA up to 12.4", "");
  expect("path-order", "warning", "the first nvcc on PATH is " + old_cuda + "/bin/nvcc, not the one of " + cuda,
         "export PATH=" + cuda + "/bin:$PATH; export LD_LIBRARY_PATH=" + cuda + "/lib64:$LD_LIBRARY_PATH");
  expect("path-order", "warning", "the first libcudart in LD_LIBRARY_PATH is " + old_cuda + "/lib64/libcudart.so.11",
         "");
  expect("path-order", "warning", "PATH entry " + m.root + "/usr/local/cuda-10.2/bin does not exist", "");
  expect("gcc", "error", "gcc 13.2.0 (" + m.bin + "/gcc); CUDA 12.1 of " + cuda + " accepts gcc up to 12",
         "sudo ln -s /usr/bin/gcc-12 " + cuda + "/bin/gcc");
  expect("arch-list", "error", "TORCH_CUDA_ARCH_LIST=\"8.6\"; the GPUs here are 8.0;9.0", "\"8.0;9.0\"");
  expect("kernel", "warning", "Linux 5.4.0-150-generic is older than 5.5", "upgrade your system to a later kernel");
  expect("gpus", "warning", "mixed GPU models: 1 x NVIDIA A100-SXM4-80GB, 1 x NVIDIA H100 80GB HBM3", "");
  expect("nccl", "warning", "headers 2.18.3 (" + m.root + "/usr/include/nccl.h)", "NCCL_HOME");
}

TEST(CmdDoctor, TorchBuiltForAnotherCudaThanNvccAndTheDriver) {
  FakeMachine m;
  const std::string cuda = m.toolkit("11.8", 11);
  m.gcc("11.4.0");
  m.options.env["PATH"] = cuda + "/bin:" + m.bin;
  m.options.env["TSFAKE_CUDA_DRIVER"] = "11080";
  const ProcessResult r = m.doctor();
  EXPECT_EQ(3, r.exit_code) << r.out << r.err;
  EXPECT_NE(std::string::npos, r.out.find("[error]   nvcc-vs-torch: nvcc of " + cuda +
                                          " (the first nvcc on PATH) is CUDA 11.8; PyTorch "
                                          "2.3.0+cu121 (" +
                                          m.site + "/torch) was built with CUDA 12.1"))
      << r.out;
  EXPECT_NE(std::string::npos, r.out.find("          remedy: PyTorch comes with its own CUDA toolkit")) << r.out;
  EXPECT_NE(std::string::npos, r.out.find("[error]   driver: the driver supports CUDA up to 11.8; PyTorch needs CUDA "
                                          "12.1"))
      << r.out;
  EXPECT_NE(std::string::npos, r.out.find("[info]    arch-list: TORCH_CUDA_ARCH_LIST is not set")) << r.out;
  EXPECT_NE(std::string::npos, r.out.find("worst finding: error (exit status 3)")) << r.out;
}

TEST(CmdDoctor, ToolkitsOfCondaAndThePipNvccWheelAreListed) {
  FakeMachine m;
  const std::string cuda = m.toolkit("12.1", 12);
  const std::string conda = m.dir.path() + "/conda-env";
  const std::string wheel = m.site + "/nvidia/cuda_nvcc";
  for (const auto& [dir, version] : {std::pair<std::string, std::string>{conda, "12.4"}, {wheel, "12.6"}})
    write(dir + "/bin/nvcc", "#!/bin/sh\necho 'Cuda compilation tools, release " + version + ", V" + version + ".1'\n",
          true);
  m.options.env["CONDA_PREFIX"] = conda;
  m.options.env["CUDA_HOME"] = cuda;
  const ProcessResult r = m.doctor({"--json"});
  const nlohmann::json report = nlohmann::json::parse(r.out);
  const std::string found = finding(report, "toolkits")["found"];
  EXPECT_NE(std::string::npos, found.find("3 CUDA toolkits: " + cuda + " (CUDA 12.1, CUDA_HOME); " + conda +
                                          " (CUDA 12.4, conda); " + wheel + " (CUDA 12.6, pip nvidia-cuda-nvcc)"))
      << found;
  EXPECT_NE(std::string::npos, found.find("builds use " + cuda + " (CUDA_HOME)")) << found;
}

TEST(CmdDoctor, NoDriverNoGpuNoTorchIsInfoOnly) {
  FakeMachine m;
  std::filesystem::remove_all(m.site + "/torch");
  m.options.env["TORCH_CUDA_ARCH_LIST"] = "8.6";
  const ProcessResult r = m.doctor({"--json", "--libcuda", "/nonexistent/libcuda.so.1", "--nccl", "/nonexistent/x.so"});
  ASSERT_EQ(0, r.exit_code) << r.out << r.err;
  const nlohmann::json report = nlohmann::json::parse(r.out);
  EXPECT_EQ("info", report["worst"]);
  EXPECT_NE(std::string::npos, finding(report, "arch-list")["found"].get<std::string>().find(
                                   "no GPU visible (no driver): TORCH_CUDA_ARCH_LIST=\"8.6\" not checked"));
  EXPECT_NE(std::string::npos,
            finding(report, "driver")["found"].get<std::string>().find("/nonexistent/libcuda.so.1 cannot be loaded"));
  EXPECT_NE(std::string::npos, finding(report, "nvcc-vs-torch")["found"].get<std::string>().find(
                                   "PyTorch is not installed for " + m.bin + "/python3"));
}

// The finding of `check` whose found text holds `text`; null when there is none.
nlohmann::json finding_with(const nlohmann::json& report, const std::string& check, const std::string& text) {
  for (const auto& f : report["findings"])
    if (f["check"] == check && f["found"].get<std::string>().find(text) != std::string::npos) return f;
  return nullptr;
}

// A toolkit whose nvcc does not tell its release: its version comes from version.json.
std::string toolkit_with_version_json(FakeMachine& m, const std::string& json) {
  const std::string cuda = m.root + "/usr/local/cuda-12.1";
  write(cuda + "/bin/nvcc", "#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\n", true);
  write(cuda + "/version.json", json);
  return cuda;
}

// std::regex overflowed the stack (SIGSEGV) on each of these lines; they are parsed.
TEST(CmdDoctor, LongLinesInTheMachinesFilesAreParsed) {
  FakeMachine m;
  const std::string spaces(100000, ' ');
  write(m.root + "/usr/include/nccl.h",
        "#define" + std::string(30000, ' ') + "NCCL_MAJOR 2\n#define NCCL_MINOR 18\n#define NCCL_PATCH 3\n");
  write(m.site + "/torch/version.py", "__version__ =" + spaces + "'2.3.0+cu121'\ncuda = '12.1'\n");
  write(m.root + "/proc/driver/nvidia/version",
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module" + spaces + "550.54.14  Thu Feb 22 01:44:30 UTC 2024\n");
  const std::string cuda =
      toolkit_with_version_json(m, "{\"cuda\" :" + spaces + "{\"name\" : \"CUDA SDK\", \"version\" : \"12.1.1\"}}");
  m.options.env["CUDA_HOME"] = cuda;
  const ProcessResult r = m.doctor({"--json"});
  ASSERT_FALSE(r.timed_out);
  ASSERT_LT(r.exit_code, 128) << r.err;
  const nlohmann::json report = nlohmann::json::parse(r.out);
  EXPECT_FALSE(finding_with(report, "nccl", "headers 2.18.3 (" + m.root + "/usr/include/nccl.h)").is_null()) << r.out;
  EXPECT_FALSE(finding_with(report, "nvcc-vs-torch", "is CUDA 12.1; PyTorch 2.3.0+cu121").is_null()) << r.out;
  EXPECT_FALSE(finding_with(report, "driver", "the driver 550.54.14 supports CUDA up to 12.4").is_null()) << r.out;
  EXPECT_FALSE(finding_with(report, "toolkits", "one CUDA toolkit: " + cuda + " (CUDA 12.1, CUDA_HOME)").is_null())
      << r.out;
}

// Files of a megabyte on one line: only their first 256 KiB are read, and the findings say so.
TEST(CmdDoctor, FilesOfAMegabyteAreCutAndSaidToBe) {
  FakeMachine m;
  const std::string megabyte(1 << 20, ' ');
  write(m.root + "/usr/include/nccl.h", "#define" + megabyte + "NCCL_MAJOR 2\n");
  write(m.site + "/torch/version.py", "__version__ =" + megabyte + "'2.3.0+cu121'\n");
  write(m.root + "/proc/driver/nvidia/version",
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module" + megabyte + "550.54\n");
  const std::string cuda = toolkit_with_version_json(m, "{\"cuda\" :" + megabyte + "{\"version\" : \"12.1.1\"}}");
  m.options.env["CUDA_HOME"] = cuda;
  const ProcessResult r = m.doctor({"--json"});
  ASSERT_FALSE(r.timed_out);
  ASSERT_LT(r.exit_code, 128) << r.err;
  const nlohmann::json report = nlohmann::json::parse(r.out);
  const std::string cut = " is longer than 256 KiB: only its first 256 KiB were read";
  for (const auto& [check, path] : {std::pair<std::string, std::string>{"nccl", m.root + "/usr/include/nccl.h"},
                                    {"nvcc-vs-torch", m.site + "/torch/version.py"},
                                    {"driver", m.root + "/proc/driver/nvidia/version"},
                                    {"toolkits", cuda + "/version.json"}}) {
    const nlohmann::json f = finding_with(report, check, path + cut);
    ASSERT_FALSE(f.is_null()) << check << ": " << r.out;
    EXPECT_EQ("info", f["severity"]) << f.dump();
  }
  EXPECT_FALSE(finding_with(report, "toolkits", cuda + " (version unknown, CUDA_HOME)").is_null()) << r.out;
  EXPECT_FALSE(finding_with(report, "nvcc-vs-torch",
                            "the version of PyTorch could not be told from " + m.site + "/torch/version.py")
                   .is_null())
      << r.out;
}

// Opening a FIFO to read it waits for a writer: doctor hung for ever. Bounded by the subprocess timeout here.
TEST(CmdDoctor, AFifoWhereAVersionFileBelongsIsNotRead) {
  FakeMachine m;
  const std::string cuda = toolkit_with_version_json(m, "");
  for (const std::string& path :
       {m.site + "/torch/version.py", cuda + "/version.json", m.root + "/proc/driver/nvidia/version",
        m.root + "/usr/include/nccl.h", m.root + "/proc/sys/kernel/osrelease"}) {
    std::filesystem::remove(path);
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    ASSERT_EQ(0, mkfifo(path.c_str(), 0600)) << path;
  }
  m.options.env["CUDA_HOME"] = cuda;
  m.options.timeout_seconds = 30;
  const ProcessResult r = m.doctor({"--json"});
  ASSERT_FALSE(r.timed_out) << "doctor hung on a FIFO";
  ASSERT_EQ(1, r.exit_code) << r.out << r.err;
  const nlohmann::json report = nlohmann::json::parse(r.out);
  const std::string fifo = " is not a regular file (a FIFO): not read";
  for (const auto& [check, path] : {std::pair<std::string, std::string>{"nvcc-vs-torch", m.site + "/torch/version.py"},
                                    {"toolkits", cuda + "/version.json"},
                                    {"driver", m.root + "/proc/driver/nvidia/version"},
                                    {"nccl", m.root + "/usr/include/nccl.h"},
                                    {"kernel", m.root + "/proc/sys/kernel/osrelease"}}) {
    const nlohmann::json f = finding_with(report, check, path + fifo);
    ASSERT_FALSE(f.is_null()) << check << ": " << r.out;
    EXPECT_EQ("warning", f["severity"]) << f.dump();
  }
}

// A Python that closes its output and goes on running: doctor waited for its exit for ever, now for its 10 s.
TEST(CmdDoctor, APythonThatClosesItsOutputAndRunsOnIsStopped) {
  FakeMachine m;
  write(m.bin + "/python3", "#!/bin/sh\nexec >/dev/null 2>&1\nexec /bin/sleep 120\n", true);
  m.options.timeout_seconds = 60;
  const ProcessResult r = m.doctor({"--json"});
  ASSERT_FALSE(r.timed_out) << "doctor waited for the Python for ever";
  ASSERT_EQ(0, r.exit_code) << r.out << r.err;
  const nlohmann::json report = nlohmann::json::parse(r.out);
  EXPECT_FALSE(finding_with(report, "nvcc-vs-torch",
                            m.bin + "/python3 did not tell its import path within 10 s (stopped): PyTorch not checked")
                   .is_null())
      << r.out;
}

// nlohmann's dump threw type_error.316 on a byte that is not UTF-8 and doctor aborted: each such byte is U+FFFD.
TEST(CmdDoctor, JsonIsValidWhenTheEnvironmentIsNotUtf8) {
  FakeMachine m;
  const std::string cuda_home = m.dir.path() + "/cuda\xff\xfe";
  m.options.env["CUDA_HOME"] = cuda_home;
  m.options.env["PATH"] = m.bin + ":/opt/cuda-\xc3/bin";
  const ProcessResult r = m.doctor({"--json"});
  ASSERT_EQ(3, r.exit_code) << r.out << r.err;
  nlohmann::json report;
  ASSERT_NO_THROW(report = nlohmann::json::parse(r.out)) << r.out;
  const std::string replacement = "\xef\xbf\xbd";  // U+FFFD
  EXPECT_FALSE(finding_with(report, "toolkits", "CUDA_HOME=" + m.dir.path() + "/cuda" + replacement).is_null())
      << r.out;
  EXPECT_FALSE(
      finding_with(report, "path-order", "PATH entry /opt/cuda-" + replacement + "/bin does not exist").is_null())
      << r.out;
}

// Environment values reached the terminal raw: an escape sequence or a newline in one now shows as \xHH.
TEST(CmdDoctor, ControlCharactersInTheEnvironmentArePrintedEscaped) {
  FakeMachine m;
  m.options.env["CUDA_HOME"] = "/opt/cuda\x1b[31m\nred";
  m.options.env["TORCH_CUDA_ARCH_LIST"] = "8.0;\x1b]0;title\x07";
  m.options.env["PATH"] = m.bin + ":/opt/cuda-\xff/bin";
  const ProcessResult r = m.doctor();
  ASSERT_EQ(3, r.exit_code) << r.out << r.err;
  EXPECT_EQ(std::string::npos, r.out.find('\x1b')) << r.out;
  EXPECT_EQ(std::string::npos, r.out.find('\x07')) << r.out;
  EXPECT_NE(
      std::string::npos,
      r.out.find("[error]   toolkits: CUDA_HOME=/opt/cuda\\x1b[31m\\x0ared is not a CUDA toolkit (no bin/nvcc)\n"))
      << r.out;
  EXPECT_NE(std::string::npos, r.out.find("'\\x1b]0' is not an architecture")) << r.out;
  EXPECT_NE(std::string::npos, r.out.find("PATH entry /opt/cuda-\\xff/bin does not exist")) << r.out;
}

TEST(CmdDoctor, BadArgumentsAreClearErrors) {
  FakeMachine m;
  ProcessResult r = run_process({TRAINSCOPE_TOOL_PATH, "doctor", "--root"}, m.options);
  EXPECT_EQ(2, r.exit_code);
  EXPECT_NE(std::string::npos, r.err.find("trainscope doctor: --root needs a value")) << r.err;
  r = run_process({TRAINSCOPE_TOOL_PATH, "doctor", "--fix"}, m.options);
  EXPECT_EQ(2, r.exit_code);
  EXPECT_NE(std::string::npos, r.err.find("unknown argument '--fix'")) << r.err;
  EXPECT_NE(std::string::npos, r.err.find("Exit status: 0 nothing worse than info, 1 a warning, 3 an error")) << r.err;
}

}  // namespace
