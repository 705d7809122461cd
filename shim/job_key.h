// The job key: the bytes of the ncclUniqueId of the first communicator this rank creates that spans every rank of the
// launcher (the "world" communicator). Every rank of one run sees the same one and no other run does, because NCCL
// fills it with a random number; the job hands it to its ranks over its own rendezvous, so an outsider never sees it.
//
// What it gives, without any rank talking to another:
//   - the job's secret for the exchange when TRAINSCOPE_TOKEN is not set (collectors/exchange/job_secret.h): the
//     cross-rank checks start once it is known;
//   - the run's own directory when the run id is one that reruns share (identity.h run_id_is_reused): the files this
//     process made so far move into <run dir>/run-<hex>/.
// Freestanding (libc only), like the rest of the shim.
#pragma once

#include <cstddef>

namespace trainscope::shim {

// Called by the hooks that create a communicator from unique ids, before NCCL sees them, with the first id and the
// communicator's size. Cheap after the first time (one acquire load).
void note_job_key(const void* unique_id, size_t len, int nranks);

// Called by ncclGetUniqueId's hook with the id it made. The first one is what this process's run is named after if it
// ends before any world communicator is created (settle_run_directory_at_exit).
void note_unique_id_made(const void* unique_id, size_t len);

// At exit, a process that never learnt the job key but made a unique id (rank 0 of a job whose start-up failed after
// it published the id) moves its files into the run's own folder named after that id, where the other ranks, which
// created their communicator from it, put theirs: one run, one directory.
void settle_run_directory_at_exit();

// A forked child starts anew: it learns its own key.
void reset_job_key();

}  // namespace trainscope::shim
