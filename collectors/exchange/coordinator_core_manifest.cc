// The job manifest from the ranks' hellos, and the warnings a heterogeneous job earns (GPU models and memory sizes,
// NCCL / CUDA / driver versions, old kernels): said once at the start, where a user looks before blaming the code.
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "collectors/exchange/coordinator_core.h"
#include "collectors/exchange/coordinator_core_detail.h"

namespace trainscope::exchange {

namespace {

// Groups ranks by a string property: value -> ranks, in rank order.
std::string describe_groups(const std::map<std::string, std::vector<int32_t>>& groups) {
  std::string text;
  for (const auto& [value, ranks] : groups) {
    if (!text.empty()) text += "; ";
    text += "'" + value + "' on rank" + (ranks.size() > 1 ? "s " : " ") + rank_ranges(ranks);
  }
  return text;
}

std::string gib(uint64_t bytes) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return buffer;
}

}  // namespace

std::vector<std::string> CoordinatorCore::manifest_warnings() const {
  std::map<int32_t, const Hello*> hellos_by_rank;
  for (const auto& [rank, info] : ranks_) {
    if (info->has_hello) hellos_by_rank[rank] = &info->hello;
  }
  std::map<std::string, std::vector<int32_t>> models, memories, nccl, cuda, drivers;
  std::map<uint64_t, std::vector<int32_t>> memory_bytes;
  std::vector<std::string> warnings;
  for (const auto& [rank, hello] : hellos_by_rank) {
    if (!hello->gpu_name.empty()) models[hello->gpu_name].push_back(rank);
    if (hello->gpu_memory_bytes != 0) {
      memories[gib(hello->gpu_memory_bytes)].push_back(rank);
      memory_bytes[hello->gpu_memory_bytes].push_back(rank);
    }
    if (!hello->nccl_version.empty()) nccl[hello->nccl_version].push_back(rank);
    if (!hello->cuda_runtime_version.empty()) cuda[hello->cuda_runtime_version].push_back(rank);
    if (!hello->driver_version.empty()) drivers[hello->driver_version].push_back(rank);
    if (!hello->kernel_release.empty() && kernel_older_than(hello->kernel_release, 5, 5)) {
      warnings.push_back("rank " + std::to_string(rank) + " (host " + hello->host + ") runs Linux kernel " +
                         hello->kernel_release +
                         ", older than the recommended minimum 5.5.0: processes can hang on such kernels");
    }
  }
  if (models.size() > 1) {
    warnings.push_back("GPUs of different models: " + describe_groups(models) +
                       ". The slowest GPU bounds the step of every rank.");
  }
  if (memory_bytes.size() > 1) {
    warnings.push_back("GPUs with different memory sizes: " + describe_groups(memories) + ". The smallest (" +
                       gib(memory_bytes.begin()->first) + ") bounds the batch size of every rank.");
  }
  if (nccl.size() > 1) warnings.push_back("different NCCL versions across ranks: " + describe_groups(nccl));
  if (cuda.size() > 1) warnings.push_back("different CUDA runtime versions across ranks: " + describe_groups(cuda));
  if (drivers.size() > 1) warnings.push_back("different GPU driver versions across ranks: " + describe_groups(drivers));
  return warnings;
}

nlohmann::json CoordinatorCore::manifest() const {
  std::map<int32_t, const Hello*> hellos_by_rank;
  for (const auto& [rank, info] : ranks_) {
    if (info->has_hello) hellos_by_rank[rank] = &info->hello;
  }
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& [rank, h] : hellos_by_rank) {
    nlohmann::json gpu = nullptr;
    if (!h->gpu_name.empty()) {
      gpu = {{"name", h->gpu_name},
             {"memory_bytes", h->gpu_memory_bytes},
             {"compute_capability",
              std::to_string(h->compute_capability_major) + "." + std::to_string(h->compute_capability_minor)},
             {"bus_id", h->gpu_bus_id}};
    }
    ranks.push_back({{"rank", rank},
                     {"launcher_rank", h->launcher_rank},
                     {"host", h->host},
                     {"host_id", h->host_id},
                     {"pid", h->pid},
                     {"gpu", gpu},
                     {"driver_version", h->driver_version},
                     {"cuda_runtime_version", h->cuda_runtime_version},
                     {"nccl_version", h->nccl_version},
                     {"kernel_release", h->kernel_release},
                     {"flight_recorder", h->flight_recorder_path}});
  }
  return {{"world_size", world_size()}, {"ranks", std::move(ranks)}, {"warnings", manifest_warnings()}};
}

std::string rank_ranges(const std::vector<int32_t>& sorted_ranks) {
  std::string text;
  for (size_t i = 0; i < sorted_ranks.size();) {
    size_t j = i;
    while (j + 1 < sorted_ranks.size() && sorted_ranks[j + 1] == sorted_ranks[j] + 1) ++j;
    if (!text.empty()) text += ",";
    text += std::to_string(sorted_ranks[i]);
    if (j > i) text += "-" + std::to_string(sorted_ranks[j]);
    i = j + 1;
  }
  return text;
}

bool kernel_older_than(const std::string& release, int major, int minor) {
  int release_major = 0;
  int release_minor = 0;
  if (std::sscanf(release.c_str(), "%d.%d", &release_major, &release_minor) != 2) return false;
  return release_major < major || (release_major == major && release_minor < minor);
}

}  // namespace trainscope::exchange
