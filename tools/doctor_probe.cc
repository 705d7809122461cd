// The doctor's probes: toolkits, PATH/LD_LIBRARY_PATH, torch/version.py, gcc, host_config.h, driver, GPUs, NCCL.
#include "tools/doctor_probe.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>
#include <vector>

#include "base/bounded_file.h"
#include "kernels/cuda_devices.h"

extern char** environ;

namespace trainscope::tools::doctor {
namespace {

namespace fs = std::filesystem;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

std::vector<std::string> split_path(const std::string& list) {
  std::vector<std::string> parts;
  std::stringstream in(list);
  for (std::string part; std::getline(in, part, ':');)
    if (!part.empty()) parts.push_back(part);
  return parts;
}

bool is_file(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

bool is_executable(const std::string& path) { return is_file(path) && access(path.c_str(), X_OK) == 0; }

std::string real(const std::string& path) {
  std::error_code ec;
  const fs::path canonical = fs::canonical(path, ec);
  return ec ? fs::path(path).lexically_normal().string() : canonical.string();
}

// The machine's files can be anything: a FIFO (an open or a read of it blocks forever), a device, a file of
// gigabytes, one line of a megabyte. Each is opened without blocking, read only when it is a regular file, and only
// its first kFileLimit bytes; a file not read whole is noted (f->file_notes) for the findings. Links are followed:
// /usr/local/cuda and system headers are links on most machines.
constexpr size_t kFileLimit = 256 << 10;
constexpr const char* kFileLimitText = "256 KiB";

// The file's first kFileLimit bytes; nullopt when it is missing (silently) or could not be read (noted).
std::optional<std::string> read_text(const std::string& path, const char* check, Facts* f) {
  auto note = [&](std::string problem, bool not_regular) {
    for (const FileNote& n : f->file_notes)
      if (n.path == path) return;
    f->file_notes.push_back({check, path, std::move(problem), not_regular});
  };
  std::string text;
  const files::BoundedRead read = files::read_bounded(path, kFileLimit, /*follow_links=*/true, &text);
  switch (read.outcome) {
    case files::ReadOutcome::kRead:
      break;
    case files::ReadOutcome::kMissing:
      return std::nullopt;
    case files::ReadOutcome::kNotRegular:
      note(std::string("is not a regular file (") + files::file_type_name(read.mode) + "): not read", true);
      return std::nullopt;
    case files::ReadOutcome::kFailed:
      if (read.error == ENAMETOOLONG) return std::nullopt;
      note(std::string("cannot be read (") + std::strerror(read.error) + ")", false);
      return std::nullopt;
  }
  if (read.truncated)
    note(std::string("is longer than ") + kFileLimitText + ": only its first " + kFileLimitText + " were read", false);
  return text;
}

std::string which(const std::string& name, const std::vector<std::string>& dirs) {
  for (const std::string& dir : dirs)
    if (is_executable(dir + "/" + name)) return dir + "/" + name;
  return "";
}

// Runs argv with the given PATH, stdout and stderr together, for at most `timeout` seconds (then killed, and
// *killed set).
std::optional<std::string> run_capture(const std::vector<std::string>& argv, int timeout_seconds,
                                       bool* killed = nullptr) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return std::nullopt;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, argv[0].c_str(), &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(pipe_fds[1]);
  if (rc != 0) {
    close(pipe_fds[0]);
    return std::nullopt;
  }
  std::string output;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_seconds);
  bool timed_out = false;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd pfd{pipe_fds[0], POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(std::min<long long>(left, 1000))) <= 0) continue;
    char chunk[4096];
    const ssize_t n = read(pipe_fds[0], chunk, sizeof(chunk));
    if (n <= 0) break;
    if (output.size() < (1 << 20)) output.append(chunk, static_cast<std::size_t>(n));
  }
  close(pipe_fds[0]);
  // A program may close its output and go on running: its exit is waited for until the same deadline.
  int status = 0;
  while (!timed_out && waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      timed_out = true;
      break;
    }
    timespec pause{0, 10 * 1000 * 1000};
    nanosleep(&pause, nullptr);
  }
  if (timed_out) {
    if (killed != nullptr) *killed = true;
    kill(-pid, SIGKILL);
    waitpid(pid, &status, 0);
    return std::nullopt;
  }
  return output;
}

std::string toolkit_version(const std::string& root, int timeout_seconds, Facts* f) {
  if (is_executable(root + "/bin/nvcc")) {
    if (const auto out = run_capture({root + "/bin/nvcc", "--version"}, timeout_seconds)) {
      const std::string v = parse_nvcc_release(*out);
      if (!v.empty()) return v;
    }
  }
  for (const char* file : {"/version.json", "/version.txt"}) {
    if (const auto text = read_text(root + file, "toolkits", f)) {
      const std::string v = parse_toolkit_version_file(*text);
      if (!v.empty()) return v;
    }
  }
  return "";
}

// The toolkit folder a library folder belongs to: <root>/lib64, <root>/lib, <root>/targets/<arch>/lib.
std::string toolkit_of_library_dir(const std::string& dir) {
  fs::path p = fs::path(real(dir));
  if (p.filename() == "lib" && p.parent_path().parent_path().filename() == "targets")
    return p.parent_path().parent_path().parent_path().string();
  if (p.filename() == "lib64" || p.filename() == "lib") return p.parent_path().string();
  return p.string();
}

std::vector<std::string> python_import_path(const std::string& python, int timeout_seconds, std::string* note) {
  std::vector<std::string> dirs;
  bool killed = false;
  const auto out =
      run_capture({python, "-c", "import sys\nfor p in sys.path:\n    print(p)"}, timeout_seconds, &killed);
  if (!out) {
    *note = killed ? "did not tell its import path within " + std::to_string(timeout_seconds) + " s (stopped)"
                   : "could not be run";
    return dirs;
  }
  std::stringstream in(*out);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] == '/') dirs.push_back(line);
  return dirs;
}

void probe_driver(const ProbeOptions& o, Facts* f) {
  if (const auto text = read_text(o.root + "/proc/driver/nvidia/version", "driver", f))
    f->driver_version = parse_driver_module_version(*text);
  const stats::CudaDriver driver = stats::query_cuda_driver(o.libcuda, -1);
  f->driver_cuda = cuda_version_text(driver.version);
  if (f->driver_cuda.empty())
    f->driver_note = driver.error.empty() ? o.libcuda + " did not tell its CUDA version" : driver.error;
  for (const stats::CudaDevice& device : driver.devices) f->gpus.push_back({device.name, device.major, device.minor});
  const bool loaded = driver.error.rfind(o.libcuda + " cannot be loaded", 0) != 0;
  if (f->gpus.empty()) f->gpu_note = loaded ? driver.error : "no driver";
  if (f->gpu_note == "the driver sees no GPU")
    f->gpu_note += " (CUDA_VISIBLE_DEVICES='" + env("CUDA_VISIBLE_DEVICES") + "')";
}

void probe_nccl(const ProbeOptions& o, const std::vector<std::string>& site_dirs, const std::string& build_root,
                Facts* f) {
  std::vector<std::string> libraries = {o.nccl};
  for (const std::string& site : site_dirs) libraries.push_back(site + "/nvidia/nccl/lib/libnccl.so.2");
  for (const std::string& library : libraries) {
    if (library != o.nccl && !is_file(library)) continue;
    void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      if (f->nccl_note.empty()) {
        const char* why = dlerror();
        f->nccl_note = library + " cannot be loaded: " + (why != nullptr ? why : "?");
      }
      continue;
    }
    using VersionFn = int (*)(int*);
    auto get_version = reinterpret_cast<VersionFn>(dlsym(handle, "ncclGetVersion"));
    int code = 0;
    if (get_version == nullptr || get_version(&code) != 0) {
      f->nccl_note = library + " has no working ncclGetVersion";
      continue;
    }
    link_map* map = nullptr;
    f->nccl_library = dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr
                          ? std::string(map->l_name)
                          : library;
    f->nccl_library_version = nccl_version_text(code);
    break;
  }
  std::vector<std::string> headers;
  for (const std::string& home : {env("NCCL_HOME"), env("NCCL_ROOT")})
    if (!home.empty()) headers.push_back(home + "/include/nccl.h");
  if (!env("NCCL_INCLUDE_DIR").empty()) headers.push_back(env("NCCL_INCLUDE_DIR") + "/nccl.h");
  if (!build_root.empty()) headers.push_back(build_root + "/include/nccl.h");
  headers.push_back(o.root + "/usr/include/nccl.h");
  headers.push_back(o.root + "/usr/local/include/nccl.h");
  for (const std::string& site : site_dirs) headers.push_back(site + "/nvidia/nccl/include/nccl.h");
  for (const Toolkit& t : f->toolkits) headers.push_back(t.root + "/include/nccl.h");
  for (const std::string& header : headers) {
    const auto text = read_text(header, "nccl", f);
    if (!text) continue;
    const std::string version = parse_nccl_header_version(*text);
    if (version.empty()) continue;
    f->nccl_header = header;
    f->nccl_header_version = version;
    break;
  }
}

// Python's import path (returned): torch, and the pip wheels of CUDA and NCCL.
std::vector<std::string> probe_python(const ProbeOptions& o, const std::vector<std::string>& path, Facts* f) {
  f->python = o.python.empty() ? which("python3", path) : o.python;
  if (f->python.empty()) f->python = which("python", path);
  std::vector<std::string> site_dirs;
  if (!f->python.empty()) site_dirs = python_import_path(f->python, o.command_timeout_seconds, &f->python_note);
  for (const std::string& site : site_dirs) {
    const std::string file = site + "/torch/version.py";
    const auto text = read_text(file, "nvcc-vs-torch", f);
    if (!text || !parse_torch_version_py(*text, &f->torch_version, &f->torch_cuda)) {
      std::error_code ec;
      if (f->torch_version_file.empty() && (text || fs::exists(file, ec))) f->torch_version_file = file;
      continue;
    }
    f->torch_dir = site + "/torch";
    break;
  }
  return site_dirs;
}

// Where a toolkit may be, with what found it: CUDA_HOME, the first nvcc on PATH, /usr/local/cuda*, conda, the pip
// nvidia-cuda-nvcc wheel.
std::vector<std::pair<std::string, std::string>> toolkit_candidates(const ProbeOptions& o, const Facts& f,
                                                                    const std::vector<std::string>& site_dirs) {
  std::vector<std::pair<std::string, std::string>> candidates;  // folder, source
  if (!f.cuda_home.empty()) candidates.push_back({f.cuda_home, f.cuda_home_var});
  if (!f.path_nvcc_toolkit.empty()) candidates.push_back({f.path_nvcc_toolkit, "PATH"});
  std::vector<std::string> local;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(o.root + "/usr/local", ec)) {
    const std::string name = entry.path().filename().string();
    if (name == "cuda" || name.rfind("cuda-", 0) == 0) local.push_back(entry.path().string());
  }
  std::sort(local.begin(), local.end());
  for (const std::string& dir : local) candidates.push_back({dir, "/usr/local"});
  for (const std::string& conda : {env("CONDA_PREFIX"), o.root + "/opt/conda"})
    if (!conda.empty()) candidates.push_back({conda, "conda"});
  for (const std::string& site : site_dirs) candidates.push_back({site + "/nvidia/cuda_nvcc", "pip nvidia-cuda-nvcc"});
  return candidates;
}

// Every toolkit found, each once, and the one builds use, as a build would choose it.
void probe_toolkits(const ProbeOptions& o, const std::vector<std::string>& path,
                    const std::vector<std::string>& site_dirs, Facts* f) {
  f->cuda_home_var = !env("CUDA_HOME").empty() ? "CUDA_HOME" : !env("CUDA_PATH").empty() ? "CUDA_PATH" : "";
  if (!f->cuda_home_var.empty()) f->cuda_home = env(f->cuda_home_var.c_str());
  f->path_nvcc = which("nvcc", path);
  if (!f->path_nvcc.empty()) f->path_nvcc_toolkit = fs::path(real(f->path_nvcc)).parent_path().parent_path().string();
  for (const auto& [dir, source] : toolkit_candidates(o, *f, site_dirs)) {
    if (!is_executable(dir + "/bin/nvcc")) continue;
    const std::string root = real(dir);
    if (std::any_of(f->toolkits.begin(), f->toolkits.end(), [&](const Toolkit& t) { return t.root == root; })) continue;
    f->toolkits.push_back({root, toolkit_version(root, o.command_timeout_seconds, f), source});
  }
  auto index_of = [&](const std::string& dir) {
    const std::string root = real(dir);
    for (size_t i = 0; i < f->toolkits.size(); ++i)
      if (f->toolkits[i].root == root) return static_cast<int>(i);
    return -1;
  };
  if (!f->cuda_home.empty()) {
    f->build_toolkit = index_of(f->cuda_home);
    f->build_toolkit_why = f->cuda_home_var;
  } else if (!f->path_nvcc_toolkit.empty()) {
    f->build_toolkit = index_of(f->path_nvcc_toolkit);
    f->build_toolkit_why = "the first nvcc on PATH";
  } else if (is_executable(o.root + "/usr/local/cuda/bin/nvcc")) {
    f->build_toolkit = index_of(o.root + "/usr/local/cuda");
    f->build_toolkit_why = "/usr/local/cuda";
  }
}

// The first libcudart the loader would find through LD_LIBRARY_PATH, and CUDA folders named that do not exist.
void probe_search_paths(const std::vector<std::string>& path, const std::vector<std::string>& ld_path, Facts* f) {
  for (const std::string& dir : ld_path) {
    std::error_code ec;
    std::vector<std::string> found;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("libcudart.so", 0) == 0) found.push_back(entry.path().string());
    }
    if (found.empty()) continue;
    std::sort(found.begin(), found.end());
    f->ld_cudart = found.front();
    f->ld_cudart_toolkit = toolkit_of_library_dir(dir);
    break;
  }
  for (const auto& [name, list] :
       {std::pair<const char*, const std::vector<std::string>*>{"PATH", &path},
        std::pair<const char*, const std::vector<std::string>*>{"LD_LIBRARY_PATH", &ld_path}}) {
    for (const std::string& dir : *list) {
      std::string lower = dir;
      std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
      std::error_code ec;
      if (lower.find("cuda") != std::string::npos && !fs::exists(dir, ec))
        f->dead_dirs.push_back(std::string(name) + " entry " + dir);
    }
  }
}

// The host compiler nvcc uses: the toolkit's own bin/gcc (the seed's symlink), else the first gcc on PATH.
void probe_gcc(const std::string& build_root, const std::vector<std::string>& path, int timeout, Facts* f) {
  f->gcc = is_executable(build_root + "/bin/gcc") ? build_root + "/bin/gcc" : which("gcc", path);
  if (!f->gcc.empty()) {
    if (const auto out = run_capture({f->gcc, "-dumpfullversion", "-dumpversion"}, timeout))
      f->gcc_version = parse_gcc_version(*out);
  }
  std::vector<std::string> configs = {build_root + "/include/crt/host_config.h"};
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(build_root + "/targets", ec))
    configs.push_back(entry.path().string() + "/include/crt/host_config.h");
  for (const std::string& config : configs) {
    if (const auto text = read_text(config, "gcc", f)) {
      f->host_config = config;
      f->gcc_max_major = parse_host_config_gcc_max(*text);
      break;
    }
  }
}

void probe_kernel(const ProbeOptions& o, Facts* f) {
  if (const auto release = read_text(o.root + "/proc/sys/kernel/osrelease", "kernel", f)) {
    f->kernel_release = release->substr(0, release->find_first_of("\r\n"));
  } else if (o.root.empty()) {
    utsname u{};
    if (uname(&u) == 0) f->kernel_release = u.release;
  }
}

}  // namespace

Facts probe(const ProbeOptions& o) {
  Facts f;
  const std::vector<std::string> path = split_path(env("PATH"));
  const std::vector<std::string> ld_path = split_path(env("LD_LIBRARY_PATH"));
  const std::vector<std::string> site_dirs = probe_python(o, path, &f);
  probe_toolkits(o, path, site_dirs, &f);
  const std::string build_root =
      f.build_toolkit >= 0 ? f.toolkits[static_cast<size_t>(f.build_toolkit)].root : std::string();
  probe_search_paths(path, ld_path, &f);
  if (!build_root.empty()) probe_gcc(build_root, path, o.command_timeout_seconds, &f);
  if (const char* arch = std::getenv("TORCH_CUDA_ARCH_LIST"); arch != nullptr) f.arch_list = arch;
  probe_kernel(o, &f);
  probe_driver(o, &f);
  probe_nccl(o, site_dirs, build_root, &f);
  return f;
}

}  // namespace trainscope::tools::doctor
