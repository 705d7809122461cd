// `trainscope doctor`'s parsers and findings, fed directly (the probes are tested through the command).
#include "tools/doctor_checks.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace {

using namespace trainscope::tools::doctor;

const Finding* find(const std::vector<Finding>& findings, const std::string& check) {
  const auto it = std::find_if(findings.begin(), findings.end(), [&](const Finding& f) { return f.check == check; });
  return it == findings.end() ? nullptr : &*it;
}

TEST(DoctorParsers, NvccReleaseAndToolkitVersionFiles) {
  EXPECT_EQ("12.4", parse_nvcc_release("nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.4, "
                                       "V12.4.131\nBuild cuda_12.4.r12.4/compiler.34097967_0\n"));
  EXPECT_EQ("", parse_nvcc_release("command not found"));
  EXPECT_EQ("12.4", parse_toolkit_version_file(R"({"cuda" : {"name" : "CUDA SDK", "version" : "12.4.1"}})"));
  EXPECT_EQ("10.2", parse_toolkit_version_file("CUDA Version 10.2.89\n"));
}

TEST(DoctorParsers, TorchVersionPyWithAndWithoutCuda) {
  std::string version;
  std::optional<std::string> cuda;
  ASSERT_TRUE(
      parse_torch_version_py("from typing import Optional\n__all__ = ['__version__']\n"
                             "__version__ = '2.3.0+cu121'\ndebug = False\ncuda: Optional[str] = '12.1'\n"
                             "git_version = 'abc'\nhip: Optional[str] = None\n",
                             &version, &cuda));
  EXPECT_EQ("2.3.0+cu121", version);
  ASSERT_TRUE(cuda.has_value());
  EXPECT_EQ("12.1", *cuda);
  ASSERT_TRUE(parse_torch_version_py("__version__ = \"2.1.0+cpu\"\ncuda = None\n", &version, &cuda));
  EXPECT_EQ("2.1.0+cpu", version);
  EXPECT_FALSE(cuda.has_value());
  EXPECT_FALSE(parse_torch_version_py("print('hello')\n", &version, &cuda));
}

TEST(DoctorParsers, HostConfigNcclHeaderAndVersionCodes) {
  EXPECT_EQ(12, parse_host_config_gcc_max("#if defined(__GNUC__)\n\n#if __GNUC__ > 12\n\n#error -- unsupported GNU "
                                          "version! gcc versions later than 12 are not supported!\n#endif\n"));
  EXPECT_EQ(-1, parse_host_config_gcc_max("#if defined(__clang__)\n#endif\n"));
  EXPECT_EQ("2.18.3", parse_nccl_header_version("#define NCCL_MAJOR 2\n#define NCCL_MINOR 18\n#define NCCL_PATCH 3\n"));
  EXPECT_EQ("", parse_nccl_header_version("#define NCCL_H_\n"));
  EXPECT_EQ("2.21.5", nccl_version_text(22105));
  EXPECT_EQ("2.7.8", nccl_version_text(2708));
  EXPECT_EQ("12.4", cuda_version_text(12040));
}

TEST(DoctorParsers, ArchListAndCoverage) {
  std::vector<Arch> archs;
  std::string bad;
  ASSERT_TRUE(parse_arch_list("7.0;8.0 9.0a+PTX", &archs, &bad));
  ASSERT_EQ(3u, archs.size());
  EXPECT_TRUE(archs[2].ptx);
  EXPECT_EQ(Coverage::kExact, arch_coverage(archs, 8, 0));
  EXPECT_EQ(Coverage::kCompatible, arch_coverage(archs, 8, 6));   // sm_80 SASS runs on 8.6
  EXPECT_EQ(Coverage::kCompatible, arch_coverage(archs, 10, 0));  // 9.0 PTX is JIT-compiled
  EXPECT_EQ(Coverage::kCompatible, arch_coverage(archs, 7, 5));
  EXPECT_EQ(Coverage::kNone, arch_coverage(archs, 6, 1));
  ASSERT_TRUE(parse_arch_list("8.6", &archs, &bad));
  EXPECT_EQ(Coverage::kNone, arch_coverage(archs, 9, 0));
  EXPECT_EQ(Coverage::kNone, arch_coverage(archs, 8, 0));  // code for 8.6 does not run on 8.0
  ASSERT_TRUE(parse_arch_list("Ampere;Hopper+PTX", &archs, &bad));
  EXPECT_EQ(3u, archs.size());
  EXPECT_FALSE(parse_arch_list("8.6;sm_90", &archs, &bad));
  EXPECT_EQ("sm_90", bad);
}

TEST(DoctorParsers, GccVersionAndDriverModuleVersion) {
  EXPECT_EQ("13.2.0", parse_gcc_version("13.2.0\n"));
  EXPECT_EQ("11", parse_gcc_version("gcc 11.\n"));
  EXPECT_EQ("", parse_gcc_version("no version here"));
  EXPECT_EQ("550.54.14", parse_driver_module_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu "
                                                     "Feb 22 01:44:30 UTC 2024\nGCC version:  gcc version 12.2.0\n"));
  EXPECT_EQ("535.104.05", parse_driver_module_version("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  "
                                                      "535.104.05  Release Build  (dvs-builder@U16)\n"));
  EXPECT_EQ("", parse_driver_module_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module\n"));
}

// std::regex recursed once per character a quantifier took: each of these overflowed the stack (SIGSEGV).
TEST(DoctorParsers, LongLinesAreParsedInsteadOfOverflowingTheStack) {
  const std::string spaces(1 << 20, ' ');
  EXPECT_EQ("2.18.3",
            parse_nccl_header_version("#define" + std::string(30000, ' ') + "NCCL_MAJOR 2\n#define NCCL_MINOR" +
                                      spaces + "18\n#define NCCL_PATCH 3\n"));
  EXPECT_EQ("12.4", parse_toolkit_version_file("{\"cuda\" :" + spaces + "{\"name\" : \"" + std::string(1 << 20, 'x') +
                                               "\", \"version\" :" + spaces + "\"12.4.1\"}}"));
  EXPECT_EQ("10.2", parse_toolkit_version_file(std::string(1 << 20, '"') + "CUDA Version 10.2.89\n"));
  std::string version;
  std::optional<std::string> cuda;
  ASSERT_TRUE(parse_torch_version_py(
      "__version__ =" + spaces + "'2.3.0+cu121'\ncuda: Optional[str] =" + spaces + "'12.1'\n", &version, &cuda));
  EXPECT_EQ("2.3.0+cu121", version);
  EXPECT_EQ("12.1", cuda.value_or("none"));
  EXPECT_FALSE(parse_torch_version_py("__version__ = '" + std::string(1 << 20, 'x'), &version, &cuda));
  EXPECT_EQ("550.54.14", parse_driver_module_version("NVIDIA UNIX x86_64 Kernel Module" + spaces + "550.54.14\n"));
  EXPECT_EQ(12, parse_host_config_gcc_max("#if" + spaces + "__GNUC__" + spaces + ">" + spaces + "12\n"));
  EXPECT_EQ("", parse_nvcc_release("release " + std::string(1 << 20, '1')));  // no version, and no int overflow
  EXPECT_EQ("13.2", parse_gcc_version(std::string(1 << 20, '.') + "13.2"));
  std::vector<Arch> archs;
  std::string bad;
  EXPECT_FALSE(parse_arch_list(std::string(1 << 20, '8') + ".0", &archs, &bad));
  EXPECT_EQ((1u << 20) + 2, bad.size());
}

Facts healthy() {
  Facts f;
  f.toolkits = {{"/usr/local/cuda-12.1", "12.1", "/usr/local"}};
  f.build_toolkit = 0;
  f.build_toolkit_why = "CUDA_HOME";
  f.cuda_home = "/usr/local/cuda-12.1";
  f.cuda_home_var = "CUDA_HOME";
  f.path_nvcc = "/usr/local/cuda-12.1/bin/nvcc";
  f.path_nvcc_toolkit = "/usr/local/cuda-12.1";
  f.ld_cudart = "/usr/local/cuda-12.1/lib64/libcudart.so.12";
  f.ld_cudart_toolkit = "/usr/local/cuda-12.1";
  f.python = "/usr/bin/python3";
  f.torch_dir = "/site/torch";
  f.torch_version = "2.3.0+cu121";
  f.torch_cuda = "12.1";
  f.driver_cuda = "12.4";
  f.gpus = {{"NVIDIA A100", 8, 0}, {"NVIDIA A100", 8, 0}};
  f.gcc = "/usr/bin/gcc";
  f.gcc_version = "11.4.0";
  f.host_config = "/usr/local/cuda-12.1/include/crt/host_config.h";
  f.gcc_max_major = 12;
  f.arch_list = "8.0";
  f.kernel_release = "6.1.0-18-amd64";
  f.nccl_library = "/lib/libnccl.so.2";
  f.nccl_library_version = "2.21.5";
  f.nccl_header = "/usr/include/nccl.h";
  f.nccl_header_version = "2.21.5";
  return f;
}

TEST(DoctorFindings, AHealthySetUpIsAllOk) {
  const std::vector<Finding> findings = evaluate(healthy());
  for (const Finding& f : findings) EXPECT_EQ(Severity::kOk, f.severity) << f.check << ": " << f.found;
  EXPECT_EQ(9u, findings.size());
  EXPECT_EQ(0, exit_status(worst(findings)));
}

TEST(DoctorFindings, EachSeedFailureHasItsSeverityAndRemedy) {
  Facts f = healthy();
  f.toolkits.push_back({"/usr/local/cuda-11.8", "11.8", "/usr/local"});
  f.toolkits[0].version = "11.8";  // CUDA_HOME's toolkit is 11.8, torch's CUDA 12.1: majors differ
  f.driver_cuda = "11.8";
  f.gcc_version = "13.2.0";
  f.arch_list = "8.6";
  f.kernel_release = "5.4.0-150-generic";
  f.gpus = {{"NVIDIA A100", 8, 0}, {"NVIDIA H100", 9, 0}};
  f.nccl_header_version = "2.18.3";
  f.ld_cudart = "/usr/local/cuda-11.8/lib64/libcudart.so.11.0";
  f.ld_cudart_toolkit = "/usr/local/cuda-11.8";
  const std::vector<Finding> findings = evaluate(f);
  auto expect = [&](const char* check, Severity severity, const char* in_found, const char* in_remedy) {
    const Finding* finding = find(findings, check);
    ASSERT_NE(nullptr, finding) << check;
    EXPECT_EQ(severity, finding->severity) << check << ": " << finding->found;
    EXPECT_NE(std::string::npos, finding->found.find(in_found)) << finding->found;
    EXPECT_NE(std::string::npos, finding->remedy.find(in_remedy)) << finding->remedy;
  };
  expect("toolkits", Severity::kInfo, "2 CUDA toolkits", "export PATH=/usr/local/cuda-12.1/bin:$PATH");
  expect("nvcc-vs-torch", Severity::kError, "built with CUDA 12.1", "install CUDA 12.1 everywhere");
  expect("driver", Severity::kError, "PyTorch needs CUDA 12.1", "supports CUDA 12.1 or later");
  expect("path-order", Severity::kWarning, "the first libcudart in LD_LIBRARY_PATH is /usr/local/cuda-11.8",
         "export LD_LIBRARY_PATH=/usr/local/cuda-12.1/lib64:$LD_LIBRARY_PATH");
  expect("gcc", Severity::kError, "accepts gcc up to 12", "sudo ln -s /usr/bin/gcc-12 /usr/local/cuda-12.1/bin/gcc");
  expect("arch-list", Severity::kError, "nothing built runs on compute capability 8.0, 9.0",
         "TORCH_CUDA_ARCH_LIST to the architectures of the GPUs that will run the code: \"8.0;9.0\"");
  expect("kernel", Severity::kWarning, "Linux 5.4.0-150-generic is older than 5.5", "upgrade your system");
  expect("gpus", Severity::kWarning, "mixed GPU models: 1 x NVIDIA A100, 1 x NVIDIA H100", "\"8.0;9.0\"");
  expect("nccl", Severity::kWarning, "NCCL library 2.21.5", "NCCL_HOME");
  EXPECT_EQ(3, exit_status(worst(findings)));
}

TEST(DoctorFindings, MinorMismatchesAreWarningsAndNothingFoundIsInfo) {
  Facts f = healthy();
  f.toolkits[0].version = "12.4";
  EXPECT_EQ(Severity::kWarning, find(evaluate(f), "nvcc-vs-torch")->severity);

  Facts none;
  none.gpu_note = "no driver";
  none.driver_note = "libcuda.so.1 cannot be loaded";
  none.nccl_note = "libnccl.so.2 cannot be loaded";
  none.kernel_release = "6.8.0";
  const std::vector<Finding> findings = evaluate(none);
  EXPECT_EQ(Severity::kInfo, worst(findings));
  EXPECT_EQ(0, exit_status(worst(findings)));
  EXPECT_NE(std::string::npos, find(findings, "arch-list")->found.find("no GPU visible (no driver)"));
  EXPECT_EQ(nullptr, find(findings, "gcc"));  // no toolkit, nothing to build with
}

TEST(DoctorFindings, FilesNotReadWholeAreFindingsOfTheirCheck) {
  Facts f = healthy();
  f.file_notes = {{"driver", "/proc/driver/nvidia/version", "is not a regular file (a FIFO): not read", true},
                  {"nccl", "/usr/include/nccl.h", "is longer than 256 KiB: only its first 256 KiB were read", false}};
  const std::vector<Finding> findings = evaluate(f);
  int seen = 0;
  for (const Finding& finding : findings) {
    if (finding.check == "driver" && finding.severity == Severity::kWarning) {
      EXPECT_EQ("/proc/driver/nvidia/version is not a regular file (a FIFO): not read", finding.found);
      EXPECT_NE(std::string::npos, finding.remedy.find("Put the regular file that belongs there back"));
      ++seen;
    }
    if (finding.check == "nccl" && finding.severity == Severity::kInfo) {
      EXPECT_EQ("/usr/include/nccl.h is longer than 256 KiB: only its first 256 KiB were read", finding.found);
      ++seen;
    }
  }
  EXPECT_EQ(2, seen);
  EXPECT_EQ(1, exit_status(worst(findings)));
}

TEST(DoctorFindings, CudaHomeThatIsNotAToolkitIsAnError) {
  Facts f = healthy();
  f.build_toolkit = -1;
  f.cuda_home = "/opt/cuda-missing";
  const std::vector<Finding> findings = evaluate(f);
  bool seen = false;
  for (const Finding& finding : findings)
    if (finding.check == "toolkits" && finding.severity == Severity::kError) seen = true;
  EXPECT_TRUE(seen);
}

}  // namespace
