// Flight recorder files for the report tests, opened by the real writer: one rank's process, and a live communicator
// it is a member of.
#pragma once

#include <cstdint>

#include "base/flight_record_format.h"
#include "base/flight_recorder_writer.h"

namespace trainscope::testing {

// Who writes a test's recorder file (its local rank is its rank), and the sizes of the file's tables.
struct RankProcess {
  int32_t rank = 0;
  int32_t world = 1;
  int32_t pid = 0;
  const char* host = "node-1";
  const char* run_id = "run";
  const char* exe = "/usr/bin/python3";
  uint64_t start_ns = 0;
  uint64_t capacity = 64;
  uint32_t max_comms = 4;
  uint32_t max_sites = 0;
  uint32_t max_names = 0;
  uint32_t max_streams = 0;
};

// Opens `path` (which must outlive the call) for `process`; the writer's open() status.
inline int open_rank_recorder(recorder::Writer& w, const char* path, const RankProcess& process) {
  recorder::WriterOptions o{};
  o.path = path;
  o.capacity = process.capacity;
  o.max_comms = process.max_comms;
  o.max_sites = process.max_sites;
  o.max_names = process.max_names;
  o.max_streams = process.max_streams;
  o.pid = process.pid;
  o.launcher_rank = process.rank;
  o.launcher_world = process.world;
  o.local_rank = process.rank;
  o.host = process.host;
  o.run_id = process.run_id;
  o.exe = process.exe;
  o.start_ns = process.start_ns;
  return w.open(o);
}

// Adds communicator `id`, live since `created_ns` (made by ncclCommInitRank), the process its rank `rank` of `nranks`.
inline void add_live_comm(recorder::Writer& w, uint64_t id, int32_t rank, int32_t nranks, uint64_t created_ns) {
  recorder::CommEntry c{};
  c.id = id;
  c.created_ns = created_ns;
  c.rank = rank;
  c.nranks = nranks;
  c.color = recorder::kUnknown;
  c.state = static_cast<uint16_t>(recorder::CommState::kLive);
  c.origin = static_cast<uint16_t>(recorder::Op::kCommInitRank);
  w.add_comm(c);
}

}  // namespace trainscope::testing
