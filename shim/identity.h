// Who this process is in the job (from the launcher's environment) and where its run directory is.
//
// Freestanding (libc only): computed by the preloaded shim before any communicator exists.
#pragma once

#include <cstddef>
#include <cstdint>

namespace trainscope::shim {

struct LauncherIdentity {
  int32_t rank = -1;        // RANK, OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, SLURM_PROCID
  int32_t world = -1;       // WORLD_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS
  int32_t local_rank = -1;  // LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID
  const char* source = "";  // name of the variable the rank came from, "" if none
};

// Reads the launcher's rank variables from `getenv`-style lookup over `env` (environ layout).
LauncherIdentity launcher_identity(char* const* env);

// The run directory's name, so that every rank of one job agrees on it without talking:
//   TRAINSCOPE_RUN_ID (configured_run_id, if non-empty) as is;
//   TORCHELASTIC_RUN_ID (unless "none")          -> torchelastic-<id>
//   SLURM_JOB_ID [+ SLURM_STEP_ID]                -> slurm-<job>[.<step>]
//   OMPI_MCA_ess_base_jobid / PMIX_NAMESPACE      -> mpi-<id>
//   MASTER_ADDR + MASTER_PORT                     -> master-<addr>-<port>
//   otherwise                                     -> local-<host>-pg<process group id>
// Characters outside [A-Za-z0-9._-] become '_'. Writes a NUL-terminated name; returns false if it did not fit.
enum class RunIdSource { kConfigured, kTorchElastic, kSlurm, kMpi, kMaster, kLocal };
bool run_id_from_environment(char* const* env, const char* configured_run_id, const char* host, int32_t pgid, char* out,
                             size_t out_len, RunIdSource* source = nullptr);

// Whether a run id from `source` names every rerun of the same command alike: MASTER_ADDR/MASTER_PORT do, and so
// does TORCHELASTIC_RUN_ID (torchrun's --rdzv-id is usually fixed in a job script). Each run then gets its own
// sub-directory below it, named from the job key (run_subdirectory_name).
bool run_id_is_reused(RunIdSource source);

// Looks `name` up in an environ-style array (getenv without touching the process's own environment).
const char* find_env(char* const* env, const char* name);

}  // namespace trainscope::shim
