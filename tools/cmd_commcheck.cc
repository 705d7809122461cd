// `trainscope commcheck`: the seed's torch-distributed-gpu-test.py without PyTorch, under any launcher. Every rank
// loads NCCL (dlopen), gets rank 0's unique id, creates a communicator, all-reduces and checks the sum, barriers,
// and prints OK or what broke, within a bounded time.
#include <cuda.h>
#include <dlfcn.h>
#include <nccl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "shim/identity.h"
#include "tools/commands.h"
#include "tools/commcheck_relay.h"
#include "tools/commcheck_rendezvous.h"
#include "tools/doctor_checks.h"

extern char** environ;

namespace trainscope::tools {
namespace {

using commcheck::Clock;

constexpr int kMaxTimeoutSeconds = 3600;
constexpr int kRendezvousPortOffset = 4;  // MASTER_PORT is torchrun's store, MASTER_PORT + 3 trainscope's coordinator
constexpr auto kAnswerGrace = std::chrono::seconds(2);
constexpr auto kWatchdogGrace = std::chrono::seconds(3);
constexpr const char* kHint =
    "  rerun with NCCL_DEBUG=INFO for NCCL's own account of it (NCCL_DEBUG=INFO <launcher> trainscope commcheck)";

constexpr const char* kUsage =
    "usage: <launcher> trainscope commcheck [--timeout S] [--count N] [--buffers auto|device|host] [--nccl LIB]\n"
    "                                       [--rendezvous HOST:PORT]\n"
    "Every rank creates an NCCL communicator, all-reduces N floats and checks the sum, barriers, and prints\n"
    "'[host-localrank] is OK (global rank: r/world)' or what broke. Ranks come from the launcher (RANK/WORLD_SIZE/\n"
    "LOCAL_RANK, Open MPI, PMI, Slurm); without one, a single rank checks itself.\n"
    "  --timeout S        give up after S seconds, 1-3600, optionally suffixed s or m (default 60)\n"
    "  --count N          elements of the all-reduce, 1-268435456 (default 1048576)\n"
    "  --buffers KIND     device: GPU memory on device LOCAL_RANK % count (driver API); host: host memory (only the\n"
    "                     CPU stand-in NCCL of the tests takes it); auto (default): device when a GPU is visible\n"
    "  --nccl LIB         the NCCL library to load (default libnccl.so.2, as the loader finds it)\n"
    "  --rendezvous H:P   where rank 0 hands out the unique id (default MASTER_ADDR, port MASTER_PORT + 4)\n"
    "Exit status: 0 every check passed on this rank, 1 something broke, 2 bad arguments or environment.\n";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "trainscope commcheck: %s\n%s", message.c_str(), kUsage);
  return 2;
}

// ---- NCCL and the driver, loaded at run time -----------------------------------------------------------------------

struct Nccl {
  void* handle = nullptr;
  decltype(&::ncclGetVersion) get_version = nullptr;
  decltype(&::ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&::ncclCommInitRank) init_rank = nullptr;
  decltype(&::ncclAllReduce) all_reduce = nullptr;
  decltype(&::ncclCommDestroy) destroy = nullptr;
  decltype(&::ncclGetErrorString) error_string = nullptr;
  decltype(&::ncclGetLastError) last_error = nullptr;

  // Empty on success.
  std::string load(const std::string& path) {
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      return "cannot load " + path + " (" + (why != nullptr ? why : "?") +
             "): put NCCL's lib folder in LD_LIBRARY_PATH, or give --nccl PATH";
    }
    bool complete = true;
    auto find = [&](auto* fn, const char* name) {
      *fn = reinterpret_cast<std::remove_reference_t<decltype(*fn)>>(dlsym(handle, name));
      if (*fn == nullptr) complete = false;
    };
    find(&get_version, "ncclGetVersion");
    find(&get_unique_id, "ncclGetUniqueId");
    find(&init_rank, "ncclCommInitRank");
    find(&all_reduce, "ncclAllReduce");
    find(&destroy, "ncclCommDestroy");
    find(&error_string, "ncclGetErrorString");
    last_error = reinterpret_cast<decltype(last_error)>(dlsym(handle, "ncclGetLastError"));  // NCCL 2.13 and later
    if (!complete) return path + " lacks a function commcheck needs: it is not an NCCL library";
    return {};
  }

  std::string version() const {
    int code = 0;
    return get_version(&code) == ncclSuccess && code > 0 ? doctor::nccl_version_text(code) : "?";
  }

  // "ncclCommInitRank failed: unhandled system error (...) - <ncclGetLastError>".
  std::string failure(const char* call, ncclResult_t result, ncclComm_t comm) const {
    std::string text =
        std::string(call) + " returned " + std::to_string(static_cast<int>(result)) + " (" + error_string(result) + ")";
    const char* last = last_error != nullptr ? last_error(comm) : nullptr;
    if (last != nullptr && *last != '\0') text += ": " + std::string(last);
    return text;
  }
};

struct Driver {
  decltype(&::cuInit) init = nullptr;
  decltype(&::cuDeviceGetCount) device_count = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) retain = nullptr;
  decltype(&::cuCtxSetCurrent) set_current = nullptr;
  decltype(&::cuMemAlloc) alloc = nullptr;
  decltype(&::cuMemFree) free = nullptr;
  decltype(&::cuMemcpyHtoD) to_device = nullptr;
  decltype(&::cuMemcpyDtoH) to_host = nullptr;
  decltype(&::cuCtxSynchronize) synchronize = nullptr;
  decltype(&::cuGetErrorString) error_string = nullptr;
  int device_ordinal = -1;

  // Empty when a device is ready for this rank; otherwise why there is none.
  std::string open(int local_rank) {
    void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) return "no CUDA driver (libcuda.so.1 cannot be loaded)";
#define TRAINSCOPE_CU_FIND(member, name) member = reinterpret_cast<decltype(member)>(dlsym(handle, name))
    TRAINSCOPE_CU_FIND(init, "cuInit");
    TRAINSCOPE_CU_FIND(device_count, "cuDeviceGetCount");
    TRAINSCOPE_CU_FIND(device_get, "cuDeviceGet");
    TRAINSCOPE_CU_FIND(retain, "cuDevicePrimaryCtxRetain");
    TRAINSCOPE_CU_FIND(set_current, "cuCtxSetCurrent");
    TRAINSCOPE_CU_FIND(alloc, "cuMemAlloc_v2");
    TRAINSCOPE_CU_FIND(free, "cuMemFree_v2");
    TRAINSCOPE_CU_FIND(to_device, "cuMemcpyHtoD_v2");
    TRAINSCOPE_CU_FIND(to_host, "cuMemcpyDtoH_v2");
    TRAINSCOPE_CU_FIND(synchronize, "cuCtxSynchronize");
    TRAINSCOPE_CU_FIND(error_string, "cuGetErrorString");
#undef TRAINSCOPE_CU_FIND
    if (init == nullptr || device_count == nullptr || device_get == nullptr || retain == nullptr ||
        set_current == nullptr || alloc == nullptr || free == nullptr || to_device == nullptr || to_host == nullptr ||
        synchronize == nullptr)
      return "the CUDA driver lacks a function commcheck needs";
    if (CUresult r = init(0); r != CUDA_SUCCESS) return "cuInit failed: " + text(r);
    int count = 0;
    if (CUresult r = device_count(&count); r != CUDA_SUCCESS) return "cuDeviceGetCount failed: " + text(r);
    if (count <= 0) return "no CUDA device is visible";
    device_ordinal = local_rank % count;
    CUdevice device = 0;
    CUcontext context = nullptr;
    if (CUresult r = device_get(&device, device_ordinal); r != CUDA_SUCCESS) return "cuDeviceGet failed: " + text(r);
    if (CUresult r = retain(&context, device); r != CUDA_SUCCESS) return "cannot use device: " + text(r);
    if (CUresult r = set_current(context); r != CUDA_SUCCESS) return "cuCtxSetCurrent failed: " + text(r);
    return {};
  }

  std::string text(CUresult result) const {
    const char* s = nullptr;
    if (error_string != nullptr) error_string(result, &s);
    return s != nullptr ? std::string(s) : "CUDA error " + std::to_string(static_cast<int>(result));
  }
};

// ---- the bounded wait ------------------------------------------------------------------------------------------

// What the rank is doing now, for the watchdog's message. Static strings only.
std::atomic<const char*> g_phase{"starting"};
std::atomic<bool> g_done{false};
std::atomic<commcheck::FailureRelay*> g_relay{nullptr};  // once the rendezvous connected the ranks
std::string g_label;  // "[host-localrank] FAILED (global rank: r/world)", set before the watchdog starts

void fail_line(const std::string& what) {
  g_done = true;  // the watchdog has nothing left to say
  std::fprintf(stderr, "%s: %s\n%s\n", g_label.c_str(), what.c_str(), kHint);
  std::fflush(stderr);
}

void start_watchdog(Clock::time_point deadline, int timeout_seconds) {
  std::thread([deadline, timeout_seconds] {
    std::this_thread::sleep_until(deadline);
    if (g_done.exchange(true)) return;
    const std::string what =
        "still " + std::string(g_phase.load()) + " when --timeout " + std::to_string(timeout_seconds) + " s (and " +
        std::to_string(kWatchdogGrace.count()) +
        " s of grace) ran out: the ranks did not all make this call alike (a rank that failed before it says why in "
        "its own line; ranks given different --count), or the network between them is blocked";
    // The others hear it from this rank rather than see its connection drop as if it had crashed.
    if (commcheck::FailureRelay* relay = g_relay.load()) relay->report_failure(what);
    fail_line(what);
    _exit(1);
  }).detach();
}

// Rank r contributes r + 1 + (i % 7) at element i: every rank's part is checked, not only how many ranks there were.
float contribution(int rank, std::size_t i) { return static_cast<float>(rank + 1 + static_cast<int>(i % 7)); }
float expected_sum(int world, std::size_t i) {
  return static_cast<float>(world * (world + 1) / 2 + world * static_cast<int>(i % 7));
}

struct CommcheckOptions {
  int timeout_seconds = 60;
  long long count = 1 << 20;
  std::string buffers = "auto";
  std::string nccl_path = "libnccl.so.2";
  std::string endpoint;
};

// Every early exit below returns the status to exit with; nullopt means "go on".
using ExitCode = std::optional<int>;

ExitCode parse_commcheck_arguments(int argc, char** argv, CommcheckOptions* options) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (flag != "--timeout" && flag != "--count" && flag != "--buffers" && flag != "--nccl" && flag != "--rendezvous")
      return usage_error("unknown argument '" + flag + "'");
    if (i + 1 >= argc) return usage_error(flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--timeout") {
      if (!commcheck::parse_timeout_seconds(value, kMaxTimeoutSeconds, &options->timeout_seconds))
        return usage_error("--timeout '" + value +
                           "': expected a number of seconds from 1 to 3600, optionally suffixed s or m (60, 90s, 2m)");
    } else if (flag == "--count") {
      char* end = nullptr;
      errno = 0;
      options->count = std::strtoll(value.c_str(), &end, 10);
      if (errno != 0 || end == value.c_str() || *end != '\0' || options->count < 1 || options->count > (1LL << 28))
        return usage_error("--count '" + value + "': expected a number of elements from 1 to 268435456");
    } else if (flag == "--buffers") {
      if (value != "auto" && value != "device" && value != "host")
        return usage_error("--buffers '" + value + "': expected auto, device or host");
      options->buffers = value;
    } else if (flag == "--nccl") {
      options->nccl_path = value;
    } else {
      options->endpoint = value;
    }
  }
  return std::nullopt;
}

// Who this rank is, by the launcher's rules (the shim's own reading of RANK, OMPI_*, PMI_*, SLURM_*); without a
// launcher, the only rank of a world of one.
ExitCode identify_rank(int* rank, int* world, int* local_rank) {
  const shim::LauncherIdentity id = shim::launcher_identity(environ);
  if (id.rank >= 0 || id.world >= 0) {
    if (id.rank < 0 || id.world < 1)
      return usage_error(std::string("the launcher's environment gives ") +
                         (id.rank < 0 ? "a world size but no rank" : "a rank but no world size") +
                         ": set both (RANK and WORLD_SIZE, or your launcher's OMPI_COMM_WORLD_*, PMI_*, SLURM_*)");
    if (id.rank >= id.world)
      return usage_error("rank " + std::to_string(id.rank) + " (from " + id.source + ") is not below the world size " +
                         std::to_string(id.world));
    *rank = id.rank;
    *world = id.world;
  }
  *local_rank = id.local_rank >= 0 ? id.local_rank : *rank;
  return std::nullopt;
}

// Where rank 0 hands out the unique id: --rendezvous, else torchrun's MASTER_ADDR with a port of trainscope's own.
ExitCode find_rendezvous(const std::string& endpoint, commcheck::RendezvousRequest* request) {
  std::string reason;
  if (!endpoint.empty()) {
    if (!commcheck::parse_endpoint(endpoint, &request->address, &request->port, &reason))
      return usage_error("--rendezvous '" + endpoint + "': " + reason);
    return std::nullopt;
  }
  const char* addr = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  if (addr == nullptr || *addr == '\0' || port == nullptr || *port == '\0')
    return usage_error("a job of " + std::to_string(request->world) +
                       " ranks needs MASTER_ADDR and MASTER_PORT (set by torchrun and accelerate) or "
                       "--rendezvous HOST:PORT, the same on every rank");
  char* end = nullptr;
  errno = 0;
  const long master_port = std::strtol(port, &end, 10);
  if (errno != 0 || *end != '\0' || master_port < 1 || master_port + kRendezvousPortOffset > 65535)
    return usage_error(std::string("MASTER_PORT '") + port + "': expected a port from 1 to 65531");
  request->address = addr;
  request->port = static_cast<int>(master_port) + kRendezvousPortOffset;
  return std::nullopt;
}

// Where the buffers live: `on_device` once a device is ready, else `no_device` says why there is none.
struct BufferPlace {
  bool on_device = false;
  std::string no_device;
};

// What this rank needs before it can take part; a failure lands in request->own_error, to be told to every rank
// through the rendezvous.
BufferPlace prepare_rank(Nccl& nccl, Driver& driver, const CommcheckOptions& options,
                         commcheck::RendezvousRequest* request) {
  BufferPlace place;
  request->own_error = nccl.load(options.nccl_path);
  if (request->own_error.empty() && options.buffers != "host") {
    place.no_device = driver.open(request->local_rank);
    place.on_device = place.no_device.empty();
    if (!place.on_device && options.buffers == "device") request->own_error = "--buffers device: " + place.no_device;
  }
  if (request->own_error.empty() && request->rank == 0) {
    g_phase = "in ncclGetUniqueId";
    ncclUniqueId unique_id;
    if (const ncclResult_t r = nccl.get_unique_id(&unique_id); r != ncclSuccess)
      request->own_error = nccl.failure("ncclGetUniqueId", r, nullptr);
    else
      std::memcpy(request->unique_id.data(), &unique_id, sizeof(unique_id));
  }
  return place;
}

commcheck::RendezvousResult meet_the_other_ranks(const commcheck::RendezvousRequest& request) {
  commcheck::RendezvousResult met;
  if (request.world > 1) {
    g_phase = "in the rendezvous";
    met = commcheck::rendezvous(request);
  } else {
    met.ok = request.own_error.empty();
    met.error = request.own_error;
    met.unique_id = request.unique_id;
  }
  return met;
}

// The all-reduce's and the barrier's results, as copied back to the host; empty when every element is right.
std::string check_results(const std::vector<float>& host_data, const std::vector<int>& barrier_host, int world) {
  for (std::size_t i = 0; i < host_data.size(); ++i) {
    if (host_data[i] != expected_sum(world, i)) {
      return "ncclAllReduce returned a wrong sum: element " + std::to_string(i) + " is " +
             std::to_string(host_data[i]) + ", expected " + std::to_string(expected_sum(world, i));
    }
  }
  if (barrier_host[0] != world)
    return "the barrier counted " + std::to_string(barrier_host[0]) + " ranks, expected " + std::to_string(world);
  return {};
}

// The all-reduce, then a one-element all-reduce as the barrier (what torch.distributed's NCCL barrier does), their
// results checked and the communicator destroyed. Empty when all went well, else what broke first.
std::string all_reduce_and_check(const Nccl& nccl, const Driver& driver, ncclComm_t comm, bool on_device, std::size_t n,
                                 int rank, int world) {
  std::vector<float> host_data(n);
  for (std::size_t i = 0; i < n; ++i) host_data[i] = contribution(rank, i);
  std::vector<int> barrier_host(1, 1);
  void* data = host_data.data();
  void* barrier = barrier_host.data();
  CUdeviceptr device_data = 0;
  CUdeviceptr device_barrier = 0;
  std::string error;
  if (on_device) {
    g_phase = "allocating and filling device memory";
    CUresult r = driver.alloc(&device_data, n * sizeof(float));
    if (r == CUDA_SUCCESS) r = driver.alloc(&device_barrier, sizeof(int));
    if (r == CUDA_SUCCESS) r = driver.to_device(device_data, host_data.data(), n * sizeof(float));
    if (r == CUDA_SUCCESS) r = driver.to_device(device_barrier, barrier_host.data(), sizeof(int));
    if (r != CUDA_SUCCESS)
      error = "cannot allocate or fill " + std::to_string(n * sizeof(float)) + " bytes on device " +
              std::to_string(driver.device_ordinal) + ": " + driver.text(r);
    data = reinterpret_cast<void*>(device_data);
    barrier = reinterpret_cast<void*>(device_barrier);
  }
  if (error.empty()) {
    g_phase = "in ncclAllReduce";
    if (const ncclResult_t r = nccl.all_reduce(data, data, n, ncclFloat32, ncclSum, comm, nullptr); r != ncclSuccess)
      error = nccl.failure("ncclAllReduce", r, comm);
  }
  if (error.empty()) {
    g_phase = "in the barrier (an all-reduce of one int)";
    if (const ncclResult_t r = nccl.all_reduce(barrier, barrier, 1, ncclInt32, ncclSum, comm, nullptr);
        r != ncclSuccess)
      error = nccl.failure("ncclAllReduce (barrier)", r, comm);
  }
  if (error.empty() && on_device) {
    g_phase = "waiting for the device to finish the all-reduce (cuCtxSynchronize)";
    CUresult r = driver.synchronize();
    if (r == CUDA_SUCCESS) r = driver.to_host(host_data.data(), device_data, n * sizeof(float));
    if (r == CUDA_SUCCESS) r = driver.to_host(barrier_host.data(), device_barrier, sizeof(int));
    if (r != CUDA_SUCCESS)
      error =
          "the all-reduce on device " + std::to_string(driver.device_ordinal) + " did not complete: " + driver.text(r);
  }
  if (error.empty()) error = check_results(host_data, barrier_host, world);
  if (error.empty()) {
    g_phase = "in ncclCommDestroy";
    if (const ncclResult_t r = nccl.destroy(comm); r != ncclSuccess) error = nccl.failure("ncclCommDestroy", r, comm);
  }
  if (on_device) {
    if (device_data != 0) driver.free(device_data);
    if (device_barrier != 0) driver.free(device_barrier);
  }
  return error;
}

}  // namespace

int cmd_commcheck(int argc, char** argv) {
  CommcheckOptions options;
  if (const ExitCode exit = parse_commcheck_arguments(argc, argv, &options)) return *exit;
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  if (const ExitCode exit = identify_rank(&rank, &world, &local_rank)) return *exit;
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "host");
  g_label = "[" + std::string(host) + "-" + std::to_string(local_rank) +
            "] FAILED (global rank: " + std::to_string(rank) + "/" + std::to_string(world) + ")";

  commcheck::RendezvousRequest request;
  request.rank = rank;
  request.world = world;
  request.local_rank = local_rank;
  request.host = host;
  request.pid = static_cast<int>(getpid());
  if (world > 1) {
    if (const ExitCode exit = find_rendezvous(options.endpoint, &request)) return *exit;
  }

  const Clock::time_point start = Clock::now();
  request.join_deadline = start + std::chrono::seconds(options.timeout_seconds);
  request.answer_deadline = request.join_deadline + kAnswerGrace;
  start_watchdog(request.join_deadline + kWatchdogGrace, options.timeout_seconds);

  Nccl nccl;
  Driver driver;
  const BufferPlace place = prepare_rank(nccl, driver, options, &request);
  commcheck::RendezvousResult met = meet_the_other_ranks(request);
  if (!met.ok) {
    fail_line(met.error);
    return 1;
  }
  // From here a rank that breaks tells the others through rank 0, and they stop waiting for it in NCCL at once.
  commcheck::FailureRelay relay(rank,
                                "rank " + std::to_string(rank) + " (" + host + "-" + std::to_string(local_rank) + ")",
                                std::move(met.links));
  g_relay = &relay;
  relay.start([](const std::string& what) {
    fail_line(what);
    _exit(1);
  });
  auto fail = [&relay](const std::string& what) {
    relay.report_failure(what);
    fail_line(what);
    return 1;
  };

  g_phase = "waiting in ncclCommInitRank for the other ranks";
  ncclUniqueId unique_id;
  std::memcpy(&unique_id, met.unique_id.data(), sizeof(unique_id));
  ncclComm_t comm = nullptr;
  if (const ncclResult_t r = nccl.init_rank(&comm, world, unique_id, rank); r != ncclSuccess) {
    return fail(nccl.failure("ncclCommInitRank", r, nullptr) + " (NCCL " + nccl.version() + ")");
  }
  const std::string error =
      all_reduce_and_check(nccl, driver, comm, place.on_device, static_cast<std::size_t>(options.count), rank, world);
  g_done = true;
  if (!error.empty()) {
    return fail(error + " (NCCL " + nccl.version() + ", " +
                (place.on_device           ? "device buffers"
                 : place.no_device.empty() ? "host buffers"
                                           : "host buffers: " + place.no_device) +
                ")");
  }
  relay.finish();
  std::printf("[%s-%d] is OK (global rank: %d/%d)\n", host, local_rank, rank, world);
  return 0;
}

}  // namespace trainscope::tools
