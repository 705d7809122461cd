// What `trainscope run` needs to run one job over several hosts, one `trainscope run` per host: the run id every host
// derives alike (so each host's folder has the same name and `trainscope report DIR1 DIR2` reads them as one run),
// and whether the coordinator's address is this host's (host it here) or another's (join it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainscope::tools {

// The run id a scheduler gives every host of one job alike, or "" when none says one: Slurm's job and step
// (`slurm-<SLURM_JOB_ID>` or `slurm-<SLURM_JOB_ID>.<SLURM_STEP_ID>`), else torchrun's rendezvous id found in the
// command (`--rdzv-id X`, `--rdzv_id=X`; not its default "none"): `torchrun-X`. Characters a run id does not accept
// become '-'.
std::string scheduler_run_id(char** env, const std::vector<std::string>& command);

// "host:port" or "[v6]:port" split; false with a reason naming what is accepted.
bool split_host_port(const std::string& text, std::string* host, uint16_t* port, std::string* error);

// Whether `host` (a name or a numeric address) resolves to an address of one of this host's interfaces; `numeric` is
// that address (the form ZeroMQ binds to). A name that does not resolve is an error, said in `error`.
bool is_local_address(const std::string& host, std::string* numeric, std::string* error);

}  // namespace trainscope::tools
