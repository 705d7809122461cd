/* Extra C entry point of the CPU stand-in libnccl.so.2 that lets tests see which rank is blocked in which call and why.
 */
#ifndef TRAINSCOPE_FAKE_NCCL_DEBUG_H
#define TRAINSCOPE_FAKE_NCCL_DEBUG_H

#include <stddef.h>

#include <nccl.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An ncclUniqueId from the stand-in holds a magic number in bytes 0..7 and, from byte 8 on, the NUL-terminated
 * name of the POSIX shared-memory segment its ranks meet in (so a test that kills its ranks can shm_unlink it). */
#define TSFAKE_UNIQUE_ID_NAME_OFFSET 8

/* Reports the ranks of the communicator created from `id` that are blocked inside an NCCL call right now.
 * Writes one line per blocked rank, "rank <r>: <call> #<n> <why>\n", into buf (truncated to len-1 bytes, always
 * NUL-terminated when len > 0) and returns how many ranks are blocked: 0 when none, -1 when no segment with that
 * id exists (not created yet, or every rank has destroyed its communicator).
 * A member that disagrees with the others reads "... mismatch in <count|datatype|reduction op|root> ...",
 * a collective called by a different collective "... mismatch: rank <r> called <other> instead",
 * a send/recv pair that disagrees "ncclRecv #<k> from rank <p> mismatch: ...",
 * and a member that never calls "... waiting for rank <r> to join ...".
 * A waiting rank may still complete when its peers arrive; a mismatched one never does, as with real NCCL.
 * Safe to call from any process and thread, including one that is not a member; it never blocks. */
int tsfake_stuck_state(const ncclUniqueId* id, char* buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* TRAINSCOPE_FAKE_NCCL_DEBUG_H */
