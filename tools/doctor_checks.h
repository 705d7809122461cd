// `trainscope doctor`'s judgement: what the probes found (Facts) becomes findings, each with a severity and the
// seed's remedy; and the parsers of the files and outputs the probes read. No I/O here: the unit tests feed it.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace trainscope::tools::doctor {

enum class Severity { kOk = 0, kInfo = 1, kWarning = 2, kError = 3 };
const char* severity_name(Severity severity);
// 0 when nothing is worse than info, 1 for a warning, 3 for an error (2 is a bad argument, as for every command).
int exit_status(Severity worst);

struct Finding {
  std::string check;  // short id: toolkits, nvcc-vs-torch, driver, path-order, gcc, arch-list, kernel, gpus, nccl
  Severity severity = Severity::kOk;
  std::string found;   // what was found, with paths and versions
  std::string remedy;  // what to do (the seed's advice), empty when nothing is to be done
};

struct Toolkit {
  std::string root;     // the toolkit's folder (its bin/nvcc, include/, lib64/)
  std::string version;  // "12.4", or "" when it could not be told
  std::string source;   // how it was found: "/usr/local", "CUDA_HOME", "PATH", "conda", "pip nvidia-cuda-nvcc"
};

struct Gpu {
  std::string name;
  int major = 0;
  int minor = 0;
};

// A file the probes found but did not read whole: not a regular file (a FIFO, a device, a folder), longer than
// their limit (only its start was read), or unreadable.
struct FileNote {
  std::string check;  // the check that wanted it ("driver" for /proc/driver/nvidia/version)
  std::string path;
  std::string problem;  // "is not a regular file (a FIFO): not read"
  bool not_regular = false;
};

struct Facts {
  std::vector<Toolkit> toolkits;  // every toolkit found, each folder once
  std::string cuda_home;          // CUDA_HOME (or CUDA_PATH) as set, "" when neither
  std::string cuda_home_var;      // which of the two
  int build_toolkit = -1;         // the toolkit an extension build uses (index in toolkits), -1 when none
  std::string build_toolkit_why;  // "CUDA_HOME", "the first nvcc on PATH", "/usr/local/cuda"
  std::string path_nvcc;          // the first nvcc on PATH, "" when none, and the toolkit folder it belongs to
  std::string path_nvcc_toolkit;
  std::string ld_cudart;  // the first libcudart.so* in LD_LIBRARY_PATH, "" when none, and its toolkit folder
  std::string ld_cudart_toolkit;
  std::vector<std::string> dead_dirs;     // "PATH: /usr/local/cuda-10.2/bin" entries naming CUDA that do not exist
  std::string python;                     // the interpreter asked for its import path, "" when none ran
  std::string python_note;                // why it told no import path ("could not be run"), "" when it did
  std::string torch_dir;                  // the torch package found (its folder), "" when none
  std::string torch_version_file;         // a torch/version.py found that told no version (not read, or none in it)
  std::string torch_version;              // torch/version.py's __version__
  std::optional<std::string> torch_cuda;  // its cuda ("12.1"); nullopt for a CPU-only build
  std::string driver_cuda;                // the CUDA the driver supports ("12.4", cuDriverGetVersion), "" if unknown
  std::string driver_version;             // the kernel module's version (/proc/driver/nvidia/version), "" if unknown
  std::string driver_note;                // why the driver could not be asked
  std::vector<Gpu> gpus;
  std::string gpu_note;  // why no GPU is listed
  std::string gcc;       // the host compiler nvcc would use, and its version
  std::string gcc_version;
  std::string host_config;  // the host_config.h read, and the newest gcc major it accepts (-1: unknown)
  int gcc_max_major = -1;
  std::optional<std::string> arch_list;  // TORCH_CUDA_ARCH_LIST, nullopt when unset
  std::string kernel_release;
  std::string nccl_library;  // path of the NCCL library found, and its ncclGetVersion ("2.21.5")
  std::string nccl_library_version;
  std::string nccl_note;    // why no library version is known
  std::string nccl_header;  // the nccl.h found first, and its NCCL_MAJOR.MINOR.PATCH
  std::string nccl_header_version;
  std::vector<FileNote> file_notes;  // each path once
};

std::vector<Finding> evaluate(const Facts& facts);
Severity worst(const std::vector<Finding>& findings);

// The parsers take any bytes (files of any content, cut at the probes' size limit) in time linear in their length.
// ---- parsers -------------------------------------------------------------------------------------------------------
// "Cuda compilation tools, release 12.4, V12.4.131" -> "12.4".
std::string parse_nvcc_release(const std::string& nvcc_output);
// version.json ("cuda": {"version": "12.4.1"}) or version.txt ("CUDA Version 10.2.89") -> "12.4" / "10.2".
std::string parse_toolkit_version_file(const std::string& text);
// torch/version.py: __version__ and cuda (None for a CPU build). False when __version__ is not there.
bool parse_torch_version_py(const std::string& text, std::string* version, std::optional<std::string>* cuda);
// host_config.h: N of the `#if __GNUC__ > N` check that refuses newer gcc; -1 when there is none.
int parse_host_config_gcc_max(const std::string& text);
// nccl.h: "MAJOR.MINOR.PATCH" from NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH; "" when absent.
std::string parse_nccl_header_version(const std::string& text);
// gcc -dumpfullversion's "13.2.0" (the first dotted number in the output); "" when there is none.
std::string parse_gcc_version(const std::string& output);
// /proc/driver/nvidia/version: the number after "Kernel Module" ("550.54.14"); "" when absent.
std::string parse_driver_module_version(const std::string& text);
// ncclGetVersion's code (22105 or 2708) -> "2.21.5" / "2.7.8".
std::string nccl_version_text(int code);
// cuDriverGetVersion's 12040 -> "12.4".
std::string cuda_version_text(int code);

// One TORCH_CUDA_ARCH_LIST entry: 8.6, 8.6+PTX, 9.0a, or a name (Ampere, Hopper, ...) for its architectures.
struct Arch {
  int major = 0;
  int minor = 0;
  bool ptx = false;
};
// Entries separated by ';' or spaces. False with the offending entry in *bad.
bool parse_arch_list(const std::string& text, std::vector<Arch>* archs, std::string* bad);
enum class Coverage { kExact, kCompatible, kNone };
// Whether code built for `archs` runs on a GPU of compute capability major.minor: SASS of the same major and a
// minor not above it, or PTX of an architecture not above it.
Coverage arch_coverage(const std::vector<Arch>& archs, int major, int minor);

// "12.4" vs "12.1": -1, 0, 1 by (major, minor); major_differs tells whether the majors differ.
int compare_versions(const std::string& a, const std::string& b, bool* major_differs = nullptr);

}  // namespace trainscope::tools::doctor
