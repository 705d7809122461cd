// The fixed-size summary of one NCCL call that ranks exchange out of band, and the events around it.
//
// A Fingerprint is derived from a flight-recorder Record (base/flight_record_format.h) by the engine's
// background thread: the job's threads pay nothing extra for the exchange. Everything the coordinator compares
// across ranks (what counts as a mismatch, DESIGN.md) is in here, plus what a report needs to point back at the
// call (record index, call site, start time).
#pragma once

#include <cstdint>

#include "base/flight_record_format.h"

namespace trainscope::exchange {

enum class EventKind : uint8_t {
  kCall = 1,          // an NCCL call was issued (collective, send/recv, split/shrink, group markers are not sent)
  kReturned = 2,      // the call with this (comm, seq, op) returned; result in `result`
  kCommCreated = 3,   // this rank became member `comm_rank` of `nranks` of communicator `comm_id`
  kCommEnded = 4,     // this rank finalized/destroyed/aborted/revoked the communicator (`op` says which)
  kCommCreating = 5,  // this rank waits in the creation (`op`: ncclCommInitRank...) of communicator `comm_id`, as
                      // member `comm_rank` of `nranks`, since `start_ns`: the members that never come are a desync
};

struct Fingerprint {
  uint64_t comm_id;
  uint64_t seq;           // collectives: per-communicator; send/recv: per (peer, direction); split: split number
  uint64_t count;         // as passed: all-gather sendcount, reduce-scatter recvcount, otherwise count
  uint64_t record_index;  // index of the call in this rank's flight recorder
  uint64_t start_ns;      // CLOCK_REALTIME when the call was issued (or the event happened)
  uint64_t caller;        // call site, for the stack shown in reports
  uint64_t aux;           // split/shrink: child communicator id
  int32_t comm_rank;      // this rank's rank in the communicator
  int32_t nranks;
  int32_t peer;       // root for rooted collectives, peer for send/recv, color for split, else -1
  int32_t redop;      // ncclRedOp_t, or -1
  int32_t result;     // kReturned: ncclResult_t; otherwise recorder::kResultPending
  uint32_t stack_id;  // 0 when no stack was captured for this call site
  uint16_t op;        // recorder::Op
  int8_t dtype;       // ncclDataType_t or -1
  uint8_t kind;       // EventKind
  uint8_t flags;      // recorder::RecordFlags
  uint8_t reserved[3];
};
static_assert(sizeof(Fingerprint) == 88);

}  // namespace trainscope::exchange
