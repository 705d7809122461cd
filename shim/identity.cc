// Launcher identity and run-directory naming from the environment (see identity.h for the rules).
#include "shim/identity.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace trainscope::shim {

const char* find_env(char* const* env, const char* name) {
  if (env == nullptr) return nullptr;
  const size_t len = strlen(name);
  for (char* const* entry = env; *entry != nullptr; ++entry) {
    if (strncmp(*entry, name, len) == 0 && (*entry)[len] == '=') return *entry + len + 1;
  }
  return nullptr;
}

namespace {

// A non-negative decimal int, or -1 when absent or malformed (a launcher variable we cannot read is ignored).
int32_t env_int(char* const* env, const char* name) {
  const char* value = find_env(env, name);
  if (value == nullptr || *value == '\0') return -1;
  char* end = nullptr;
  errno = 0;
  const long parsed = strtol(value, &end, 10);
  if (errno != 0 || *end != '\0' || parsed < 0 || parsed > INT32_MAX) return -1;
  return static_cast<int32_t>(parsed);
}

int32_t first_int(char* const* env, const char* const* names, size_t n, const char** source) {
  for (size_t i = 0; i < n; ++i) {
    const int32_t v = env_int(env, names[i]);
    if (v >= 0) {
      if (source != nullptr) *source = names[i];
      return v;
    }
  }
  return -1;
}

void sanitize(char* s) {
  for (; *s != '\0'; ++s) {
    const char c = *s;
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) *s = '_';
  }
}

bool non_empty(const char* s) { return s != nullptr && *s != '\0'; }

}  // namespace

LauncherIdentity launcher_identity(char* const* env) {
  static const char* const kRanks[] = {"RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
  static const char* const kWorlds[] = {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"};
  static const char* const kLocals[] = {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"};
  LauncherIdentity id;
  id.rank = first_int(env, kRanks, sizeof(kRanks) / sizeof(kRanks[0]), &id.source);
  id.world = first_int(env, kWorlds, sizeof(kWorlds) / sizeof(kWorlds[0]), nullptr);
  id.local_rank = first_int(env, kLocals, sizeof(kLocals) / sizeof(kLocals[0]), nullptr);
  return id;
}

bool run_id_from_environment(char* const* env, const char* configured_run_id, const char* host, int32_t pgid, char* out,
                             size_t out_len, RunIdSource* source) {
  int n = -1;
  RunIdSource from = RunIdSource::kLocal;
  const char* elastic = find_env(env, "TORCHELASTIC_RUN_ID");
  const char* slurm_job = find_env(env, "SLURM_JOB_ID");
  const char* slurm_step = find_env(env, "SLURM_STEP_ID");
  const char* ompi_job = find_env(env, "OMPI_MCA_ess_base_jobid");
  const char* pmix_namespace = find_env(env, "PMIX_NAMESPACE");
  const char* master_addr = find_env(env, "MASTER_ADDR");
  const char* master_port = find_env(env, "MASTER_PORT");
  if (non_empty(configured_run_id)) {
    n = snprintf(out, out_len, "%s", configured_run_id);
    from = RunIdSource::kConfigured;
  } else if (non_empty(elastic) && strcmp(elastic, "none") != 0) {
    n = snprintf(out, out_len, "torchelastic-%s", elastic);
    from = RunIdSource::kTorchElastic;
  } else if (non_empty(slurm_job)) {
    n = non_empty(slurm_step) ? snprintf(out, out_len, "slurm-%s.%s", slurm_job, slurm_step)
                              : snprintf(out, out_len, "slurm-%s", slurm_job);
    from = RunIdSource::kSlurm;
  } else if (non_empty(ompi_job)) {
    n = snprintf(out, out_len, "mpi-%s", ompi_job);
    from = RunIdSource::kMpi;
  } else if (non_empty(pmix_namespace)) {
    n = snprintf(out, out_len, "mpi-%s", pmix_namespace);
    from = RunIdSource::kMpi;
  } else if (non_empty(master_addr) && non_empty(master_port)) {
    n = snprintf(out, out_len, "master-%s-%s", master_addr, master_port);
    from = RunIdSource::kMaster;
  } else {
    n = snprintf(out, out_len, "local-%s-pg%d", non_empty(host) ? host : "host", static_cast<int>(pgid));
  }
  if (n < 0 || static_cast<size_t>(n) >= out_len) return false;
  sanitize(out);
  if (source != nullptr) *source = from;
  return true;
}

bool run_id_is_reused(RunIdSource source) {
  return source == RunIdSource::kMaster || source == RunIdSource::kTorchElastic;
}

}  // namespace trainscope::shim
