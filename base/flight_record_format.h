// On-disk layout of one process's flight recorder file, shared by the writer (in the shim) and the reader.
//
// The file is memory-mapped MAP_SHARED by the process that records, so every store is in the page cache
// the moment it is made and survives SIGKILL. Layout (version 2):
//   [FileHeader, kHeaderBytes] [CommEntry x header.max_comms] [SiteEntry x header.max_sites] [Record x header.capacity]
// Version 1 had no site table ([FileHeader] [CommEntry x max_comms] [Record x capacity]), no site in its records
// (an int32 redop where version 2 has int16 redop + uint16 site) and none of the header fields after `exe`; the
// reader still reads it.
// Version 4 changed only the records' checksum (record_checksum); the reader checks older files with theirs.
// A record is complete only when its `commit` equals its index + 1 and its checksum matches; anything else
// (a slot being written when the process died, a slot of an older lap of the ring) is treated as absent. A comm or
// site entry is complete only when its `commit` equals its slot index + 1 (for a site, that is its id).
//
// This header must stay freestanding (no libstdc++ symbols): the preloaded shim includes it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace trainscope::recorder {

inline constexpr char kMagic[8] = {'T', 'S', 'F', 'R', 'E', 'C', '0', '1'};
inline constexpr uint32_t kFormatVersion = 4;
inline constexpr uint32_t kOldestFormatVersion = 1;  // the reader accepts kOldestFormatVersion..kFormatVersion
inline constexpr uint32_t kHeaderBytes = 4096;
inline constexpr uint32_t kDefaultMaxComms = 1024;
inline constexpr uint32_t kDefaultMaxSites = 4096;
inline constexpr uint32_t kDefaultMaxNames = 4096;   // version 3: kernel and CUDA API names
inline constexpr uint32_t kDefaultMaxStreams = 256;  // version 3: CUDA streams that launched kernels
inline constexpr int32_t kResultPending = -1;        // the call has not returned (yet, or ever: it hung or crashed)
inline constexpr int32_t kUnknown = -1;              // rank, world, peer, root, dtype, redop not known or not used
// A kModuleForward record's aux (see "Module records" below).
inline constexpr uint64_t kModuleRecordForward = 0;
inline constexpr uint64_t kModuleRecordRoot = 1;
inline constexpr uint64_t kModuleRecordBackward = 2;
inline constexpr uint64_t kModuleRecordStepSkipped = 3;
inline constexpr uint64_t kModuleRecordLossScaler = 4;
inline constexpr uint64_t kModuleRecordBeside = 5;
inline constexpr uint64_t kModuleRecordStepApplied = 6;

// Every intercepted NCCL entry point. Values are stable: they are stored in files.
enum class Op : uint16_t {
  kNone = 0,
  kGetUniqueId = 1,
  kCommInitRank = 2,
  kCommInitRankConfig = 3,
  kCommInitAll = 4,
  kCommInitRankScalable = 5,
  kCommSplit = 6,
  kCommShrink = 7,
  kCommFinalize = 8,
  kCommDestroy = 9,
  kCommAbort = 10,
  kCommRevoke = 11,
  kAllReduce = 12,
  kReduce = 13,
  kBroadcast = 14,
  kBcast = 15,
  kReduceScatter = 16,
  kAllGather = 17,
  kAlltoAll = 18,
  kGather = 19,
  kScatter = 20,
  kSend = 21,
  kRecv = 22,
  kGroupStart = 23,
  kGroupEnd = 24,
  kGroupSimulateEnd = 25,
  kStepMarker = 26,  // an NVTX range whose name matched TRAINSCOPE_STEP_MARKER=nvtx:REGEX (a batch starts)
  // Version 3: the launch collector's records (CUDA API callbacks; see "Launch records" below).
  kKernelLaunch = 27,   // a kernel launch (runtime or driver, plain, cooperative or extended launch)
  kGraphLaunch = 28,    // cudaGraphLaunch / cuGraphLaunch
  kCudaError = 29,      // a CUDA API call that returned an error
  kStreamSync = 30,     // a stream, event, context or device synchronisation that returned
  kModuleForward = 31,  // a torch.nn.Module's forward ended (TRAINSCOPE_WATCH=modules; see "Module records" below)
  kCount = 32,
};

// The NCCL function name of an op ("ncclAllReduce"), or "unknown".
constexpr const char* op_name(Op op) {
  switch (op) {
    case Op::kNone:
      return "none";
    case Op::kGetUniqueId:
      return "ncclGetUniqueId";
    case Op::kCommInitRank:
      return "ncclCommInitRank";
    case Op::kCommInitRankConfig:
      return "ncclCommInitRankConfig";
    case Op::kCommInitAll:
      return "ncclCommInitAll";
    case Op::kCommInitRankScalable:
      return "ncclCommInitRankScalable";
    case Op::kCommSplit:
      return "ncclCommSplit";
    case Op::kCommShrink:
      return "ncclCommShrink";
    case Op::kCommFinalize:
      return "ncclCommFinalize";
    case Op::kCommDestroy:
      return "ncclCommDestroy";
    case Op::kCommAbort:
      return "ncclCommAbort";
    case Op::kCommRevoke:
      return "ncclCommRevoke";
    case Op::kAllReduce:
      return "ncclAllReduce";
    case Op::kReduce:
      return "ncclReduce";
    case Op::kBroadcast:
      return "ncclBroadcast";
    case Op::kBcast:
      return "ncclBcast";
    case Op::kReduceScatter:
      return "ncclReduceScatter";
    case Op::kAllGather:
      return "ncclAllGather";
    case Op::kAlltoAll:
      return "ncclAlltoAll";
    case Op::kGather:
      return "ncclGather";
    case Op::kScatter:
      return "ncclScatter";
    case Op::kSend:
      return "ncclSend";
    case Op::kRecv:
      return "ncclRecv";
    case Op::kGroupStart:
      return "ncclGroupStart";
    case Op::kGroupEnd:
      return "ncclGroupEnd";
    case Op::kGroupSimulateEnd:
      return "ncclGroupSimulateEnd";
    case Op::kStepMarker:
      return "nvtxRangePush";
    case Op::kKernelLaunch:
      return "kernel launch";
    case Op::kGraphLaunch:
      return "graph launch";
    case Op::kCudaError:
      return "CUDA error";
    case Op::kStreamSync:
      return "synchronisation";
    case Op::kModuleForward:
      return "module forward";
    case Op::kCount:
      break;
  }
  return "unknown";
}

// Bytes per element of an ncclDataType_t value (int8 0 ... float8e5m2 11); 0 for anything else.
constexpr size_t nccl_dtype_bytes(int dtype) {
  switch (dtype) {
    case 0:
    case 1:
    case 10:
    case 11:
      return 1;  // int8, uint8, float8e4m3, float8e5m2
    case 6:
    case 9:
      return 2;  // float16, bfloat16
    case 2:
    case 3:
    case 7:
      return 4;  // int32, uint32, float32
    case 4:
    case 5:
    case 8:
      return 8;  // int64, uint64, float64
    default:
      return 0;
  }
}

// Collectives share one sequence per communicator; sends and receives are numbered per peer and direction.
constexpr bool is_collective(Op op) { return op >= Op::kAllReduce && op <= Op::kScatter; }
constexpr bool is_point_to_point(Op op) { return op == Op::kSend || op == Op::kRecv; }
// A communicator's creation from unique ids, which every member must join as it joins a collective.
constexpr bool is_creation_from_unique_ids(Op op) {
  return op == Op::kCommInitRank || op == Op::kCommInitRankConfig || op == Op::kCommInitRankScalable;
}
// The launch collector's records (version 3).
constexpr bool is_cuda_record(Op op) { return op >= Op::kKernelLaunch && op <= Op::kStreamSync; }

enum RecordFlags : uint8_t {
  kFlagInPlace = 1u << 0,      // sendbuff == recvbuff (or the op's in-place layout)
  kFlagInGroup = 1u << 1,      // issued between ncclGroupStart and ncclGroupEnd
  kFlagUnavailable = 1u << 2,  // the loaded NCCL lacks this function; ncclInvalidUsage was returned
  kFlagNonBlocking = 1u << 3,  // communicator created with config.blocking = 0
  kFlagWatched = 1u << 4,      // its buffers' statistics were taken (TRAINSCOPE_WATCH): the engine has a frame for it
  kFlagCapturing = 1u << 5,    // a launch into a stream under CUDA graph capture (recorded into a graph, not run)
};

// ---- Module records -------------------------------------------------------------------------------------------------
// TRAINSCOPE_WATCH=modules: the Python hooks (python/inject/) hand each torch.nn.Module forward to the shim
// (shim/module_frames.cc), which appends one record when the forward has ended, watched (kFlagWatched), its result 0:
//   kModuleForward  start_ns  the hook's entry         seq    the process's module frame number (1-based)
//                   count     rows of the frame         aux    kModuleRecordForward (0), kModuleRecordRoot (1: the
//                                                              forward of a root module; a batch ends),
//                                                              kModuleRecordBackward (2: the module's gradients) or
//                                                              kModuleRecordStepSkipped (3: a loss scaler skipped the
//                                                              optimizer step; no frame, not watched; count is how
//                                                              many batches ago that step was, 0: this one) or
//                                                              kModuleRecordLossScaler (4: a loss scaler is enabled
//                                                              in the process; no frame, not watched) or
//                                                              kModuleRecordBeside (5: a forward in a smaller root's
//                                                              tree, a loss module's: begins no batch) or
//                                                              kModuleRecordStepApplied (6: the loss scaler's step
//                                                              was applied; as kModuleRecordStepSkipped)
//                   caller    a hash of the module's qualified name and class (its call site for near overflow)
// rank, nranks, peer, redop and dtype are kUnknown, comm_id and site 0. The name and the rows are the engine's (the
// frame reports); the record keeps the frames in one order with the job's collectives and launches.

// ---- Launch records (version 3) ------------------------------------------------------------------------------------
// The launch collector (collectors/launches/) appends these into the same ring as the NCCL calls, so one order holds
// both. Their fields reuse the Record layout:
//   kKernelLaunch  start_ns  API entry            seq      CUPTI correlation id
//                  count     grid  (x | y << 32 | z << 48)       sendbuff  block (x | y << 16 | z << 32)
//                  recvbuff  dynamic shared memory bytes          stream    the launch's stream (0: legacy default)
//                  caller    the CUfunction                       aux       the CUcontext
//                  peer      the kernel's name id (name table, 1-based; 0: unknown)
//                  redop     launch_api(): CudaDomain << 8 | LaunchKind
//                  result    the API call's result (cudaError_t or CUresult by domain); end_ns the API's return
//   kGraphLaunch   as kKernelLaunch, with group the CUgraphExec, caller 0, peer 0 (or the graph's name id)
//   kCudaError     start_ns, seq, stream, aux as above; count the CUPTI callback id; peer the API function's name id;
//                  redop the CudaDomain; result the error
//   kStreamSync    start_ns, seq, aux, redop as above; stream the synchronised stream, 0 for a context/device-wide or
//                  event synchronisation; peer the API function's name id; result
// rank, nranks and dtype are kUnknown, comm_id and site 0. A launch's kernel finishing is not in its record (the
// record is immutable once committed): the stream table says up to which launch each stream is known to be done.
// Scoped enumerators cannot hide the namespace's kUnknown (they are always named CudaDomain::kUnknown), but GCC 12's
// -Wshadow says they do; the names stay, the false warning is silenced here only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wshadow"
enum class CudaDomain : uint8_t { kUnknown = 0, kRuntime = 1, kDriver = 2 };
enum class LaunchKind : uint8_t {
  kUnknown = 0,
  kKernel = 1,       // cudaLaunchKernel, cuLaunchKernel, <<<...>>>
  kCooperative = 2,  // cudaLaunchCooperativeKernel(MultiDevice), cuLaunchCooperativeKernel(MultiDevice)
  kExtended = 3,     // cudaLaunchKernelExC, cuLaunchKernelEx (attributes: clusters, programmatic launch ...)
  kGraph = 4,        // cudaGraphLaunch, cuGraphLaunch
};
#pragma GCC diagnostic pop
constexpr int16_t launch_api(CudaDomain domain, LaunchKind kind) {
  return static_cast<int16_t>((static_cast<unsigned>(domain) << 8) | static_cast<unsigned>(kind));
}
constexpr CudaDomain launch_domain(int16_t redop) { return static_cast<CudaDomain>((redop >> 8) & 0xff); }
constexpr LaunchKind launch_kind(int16_t redop) { return static_cast<LaunchKind>(redop & 0xff); }
constexpr uint64_t pack_grid(uint32_t x, uint32_t y, uint32_t z) {
  return uint64_t{x} | (uint64_t{y & 0xffffu} << 32) | (uint64_t{z & 0xffffu} << 48);
}
constexpr uint64_t pack_block(uint32_t x, uint32_t y, uint32_t z) {
  return uint64_t{x & 0xffffu} | (uint64_t{y & 0xffffu} << 16) | (uint64_t{z & 0xffffu} << 32);
}
struct Dim3 {
  uint32_t x, y, z;
};
constexpr Dim3 unpack_grid(uint64_t v) {
  return {static_cast<uint32_t>(v), static_cast<uint32_t>((v >> 32) & 0xffff), static_cast<uint32_t>(v >> 48)};
}
constexpr Dim3 unpack_block(uint64_t v) {
  return {static_cast<uint32_t>(v & 0xffff), static_cast<uint32_t>((v >> 16) & 0xffff),
          static_cast<uint32_t>((v >> 32) & 0xffff)};
}

// One interned name (version 3): a kernel's demangled name (key: its CUfunction), or a CUDA API function's name
// (key: kNameKeyApi | domain << 32 | CUPTI callback id). Written once, at first sight; never changed afterwards.
inline constexpr uint64_t kNameKeyApi = 1ull << 63;
struct NameEntry {
  uint64_t commit;  // slot index + 1 (the name's id) once final
  uint64_t key;
  char text[240];  // NUL-terminated, cut to fit (the demangled name; a cut name ends in "...")
};
static_assert(sizeof(NameEntry) == 256);

// One CUDA stream the process launched on (version 3). The collector claims it at the stream's first launch; its
// progress fields are stored (relaxed, then `checked_ns` released) as the engine learns them.
struct StreamEntry {
  uint64_t commit;         // slot index + 1 once final
  uint64_t stream;         // CUstream (0: the legacy default stream, 2: per-thread default)
  uint64_t context;        // CUcontext
  uint64_t launched_seq;   // correlation id of the latest launch on it
  uint64_t completed_seq;  // every launch with a correlation id up to this one is known to have finished ...
  uint64_t completed_ns;   // ... at this time (CUPTI kernel activity end, or the return of a synchronisation)
  uint64_t checked_ns;     // when completion was last brought up to date for it (0: never)
  uint32_t launches;       // launches recorded on it (wraps)
  uint32_t reserved;
};
static_assert(sizeof(StreamEntry) == 64);

// FileHeader::launch_mode: what the launch collector could do in this process.
enum class LaunchMode : uint32_t {
  kNone = 0,         // not started (no CUDA use seen, or TRAINSCOPE_LAUNCHES=off)
  kCallbacks = 1,    // CUPTI callbacks: launches, errors and synchronisations, no kernel completion
  kCompletions = 2,  // callbacks and CUPTI kernel activity: which launches finished
  kUnavailable = 3,  // wanted but not possible: launch_note says why (CUPTI taken by another tool, no CUPTI)
};

// FileHeader::exchange_state: whether this process's calls were compared with the other ranks' (the out-of-band
// exchange). A run whose checks did not run must never read as a clean one: a mismatch there hangs unreported.
enum class ExchangeState : uint32_t {
  kNotSaid = 0,    // nothing said: an older file, or a process that never started the engine
  kNotNeeded = 1,  // nothing to compare with (one process) or turned off by the user (TRAINSCOPE_COORDINATOR=off)
  kWaiting = 2,    // started, not (yet) welcomed by the coordinator: exchange_note says what it waits for
  kRan = 3,        // the coordinator accepted this rank: its calls were compared
  kDidNotRun = 4,  // the checks never ran for this process: exchange_note says why
};

// One intercepted call. 128 bytes, two cache lines.
struct Record {
  uint64_t commit;  // index + 1 once the fields up to `checksum` are final; 0 while being written
  // --- covered by checksum: bytes [8, kChecksummedEnd) ---
  uint64_t start_ns;  // CLOCK_REALTIME at entry
  uint64_t comm_id;   // communicator id (see DESIGN "Identity"); 0 for calls without one
  uint64_t seq;       // 1-based. Collective: per-communicator sequence; send/recv: per (peer, direction);
                      // Split/Shrink: the parent's split number; else 0
  uint64_t count;     // element count as passed; InitAll: ndev; Split: key; Shrink: excludeRanksCount
  uint64_t sendbuff;
  uint64_t recvbuff;
  uint64_t stream;
  uint64_t caller;  // return address into the caller of the NCCL function
  uint64_t group;   // number of the outermost ncclGroupStart this call is inside; 0 outside groups
  uint64_t aux;     // Split/Shrink: the child's communicator id; Revoke: revokeFlags; else 0
  int32_t rank;     // rank in this communicator
  int32_t nranks;   // ranks in this communicator
  int32_t peer;     // root (rooted collectives), peer (send/recv), color (Split), shrinkFlags (Shrink)
  int16_t redop;    // ncclRedOp_t or kUnknown (version 1: an int32 over redop and site)
  uint16_t site;    // call site: 1-based id in the file's site table; 0 = none (always 0 in a version 1 file)
  uint32_t tid;     // kernel thread id of the caller
  uint16_t op;      // Op
  int8_t dtype;     // ncclDataType_t or kUnknown
  uint8_t flags;    // RecordFlags
  // --- end of checksummed bytes ---
  uint32_t checksum;  // record_checksum() of bytes [8, kChecksummedEnd)
  int32_t result;     // ncclResult_t once the call returned, kResultPending before
  uint64_t end_ns;    // CLOCK_REALTIME at return; meaningful only when result != kResultPending
};
static_assert(sizeof(Record) == 128);
inline constexpr size_t kChecksummedBegin = offsetof(Record, start_ns);
inline constexpr size_t kChecksummedEnd = offsetof(Record, checksum);
static_assert((kChecksummedEnd - kChecksummedBegin) % 8 == 0);

// Communicator lifecycle states, stored in CommEntry::state.
enum class CommState : uint16_t { kLive = 1, kFinalized = 2, kDestroyed = 3, kAborted = 4, kRevoked = 5 };

// One communicator this process was a member of. Written when it is created; `state` and `ended_ns` change later.
struct CommEntry {
  uint64_t commit;     // slot index + 1 once the entry is final
  uint64_t id;         // communicator id
  uint64_t parent_id;  // for split/shrink children; 0 otherwise
  uint64_t handle;     // ncclComm_t value in the recording process
  uint64_t created_ns;
  uint64_t ended_ns;  // 0 while live
  int32_t rank;
  int32_t nranks;
  int32_t color;    // split color, kUnknown otherwise
  uint16_t state;   // CommState
  uint16_t origin;  // Op that created it
};
static_assert(sizeof(CommEntry) == 64);

// One Python frame of a call site, fixed size; both strings NUL-terminated, cut to fit.
struct SiteFrame {
  int32_t line;       // 1-based line number; 0 (or less) when not known
  char function[88];  // the function's name
  char file[152];     // the code's file name, as Python knows it
};
static_assert(sizeof(SiteFrame) == 244);

// Where a call came from: a native return address, plus, when the calling thread ran CPython, the innermost Python
// location and the job's own line (in a framework every collective leaves from one native address; the Python frames
// tell sites apart, and dist.all_reduce's innermost frame is in torch, not in the user's train.py).
// Written once, at the site's first call; never changed afterwards.
struct SiteEntry {
  uint64_t commit;         // slot index + 1 (the site's id) once the entry is final; 0 while being written
  uint64_t caller;         // native return address into the caller of the NCCL function
  uint32_t python_depth;   // Python frames on the calling thread at first sight; 0: not called from Python
  uint32_t python_frames;  // 0, 1 or 2 frames stored below
  // [0]: the innermost frame. [1]: when [0] is in the Python installation or an installed package
  // (is_library_python_file), the innermost frame outside them — the job's own line — if there is one; otherwise
  // [0]'s caller.
  SiteFrame frames[2];
};
static_assert(sizeof(SiteEntry) == 512);

enum class ProcessState : uint32_t { kRunning = 1, kExited = 2 };

// FileHeader::end_flags.
enum EndFlags : uint32_t {
  kEndExitStatus = 1u << 0,     // exit_status holds the status the process exited with
  kEndStopped = 1u << 1,        // trainscope stopped the process: stop_reason (and exit_status) say why
  kEndStopBatch = 1u << 2,      // stop_batch holds a batch number
  kEndReportMissing = 1u << 3,  // the verdict that stopped it came without a report: the coordinator could not write it
  kEndUnwritten = 1u << 4,      // unwritten_report / unwritten_cause hold the first report it could not write
  kEndExec = 1u << 5,           // the process replaced its program by exec(): a clean end of this recording
};

// FileHeader::unwritten_note: who may write the note of an unwritten report, and what it holds.
enum UnwrittenNote : uint32_t {
  kNoteEmpty = 0,
  kNoteBeingWritten = 1,  // one thread writes it (a process that died now leaves it so: the reader drops it)
  kNoteWithoutCause = 2,  // a report, why not known: a later one that knows why replaces it
  kNoteWithCause = 3,     // a report and why: kept
};

// Why trainscope stopped a process (FileHeader::stop_reason). Values are stable: they are stored in files.
enum class StopReason : uint32_t {
  kNone = 0,
  kMismatch = 1,         // a mismatch verdict, TRAINSCOPE_ON_MISMATCH=abort (status 86)
  kDesync = 2,           // a desync verdict, TRAINSCOPE_ON_DESYNC=abort (status 86)
  kVanishedRank = 3,     // a vanished-rank verdict, TRAINSCOPE_ON_DESYNC=abort (status 86)
  kNonfinite = 4,        // inf/nan under TRAINSCOPE_ON_NONFINITE=abort (status 87)
  kAbortAfterBatch = 5,  // TRAINSCOPE_ABORT_AFTER_BATCH (status 87)
};

// "mismatch", "desync", "vanished rank", "inf/nan abort", "abort after batch"; "unknown reason" for anything else.
constexpr const char* stop_reason_name(uint32_t reason) {
  switch (static_cast<StopReason>(reason)) {
    case StopReason::kMismatch:
      return "mismatch";
    case StopReason::kDesync:
      return "desync";
    case StopReason::kVanishedRank:
      return "vanished rank";
    case StopReason::kNonfinite:
      return "inf/nan abort";
    case StopReason::kAbortAfterBatch:
      return "abort after batch";
    case StopReason::kNone:
      break;
  }
  return "unknown reason";
}

// Whether a Python file belongs to the Python installation or an installed package (site-packages, dist-packages,
// the standard library's lib/python3.X, frozen modules) rather than to the job's own code: the reports show the job's
// own line first. Freestanding: the shim calls it on the job's thread.
inline bool is_library_python_file(const char* path) {
  if (path == nullptr) return false;
  if (__builtin_strncmp(path, "<frozen ", 8) == 0) return true;
  if (__builtin_strstr(path, "/site-packages/") != nullptr || __builtin_strstr(path, "/dist-packages/") != nullptr)
    return true;
  for (const char* at = __builtin_strstr(path, "/lib/python3."); at != nullptr;
       at = __builtin_strstr(at + 1, "/lib/python3.")) {
    const char* p = at + 13;
    if (*p < '0' || *p > '9') continue;
    while (*p >= '0' && *p <= '9') ++p;
    if (*p == '/') return true;
  }
  return false;
}

// First page of the file.
struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint32_t record_bytes;
  uint32_t comm_bytes;
  uint64_t capacity;   // record slots in the ring
  uint32_t max_comms;  // comm slots
  int32_t pid;
  int32_t launcher_rank;  // from the launcher's environment, kUnknown if none
  int32_t launcher_world;
  int32_t local_rank;
  int32_t global_rank;   // best known global rank: launcher_rank, else rank in the first communicator
  int32_t nccl_version;  // ncclGetVersion of the loaded NCCL, 0 until known
  uint32_t state;        // ProcessState
  uint64_t start_ns;
  uint64_t next;        // records claimed so far (atomic); the ring holds the last `capacity` of them
  uint32_t comms_used;  // comm slots claimed (atomic)
  uint32_t sites_used;  // site slots claimed (atomic); version 1: reserved, 0
  uint64_t exit_ns;
  char host[64];
  char run_id[128];
  char exe[256];
  // --- version 2 (appended: every offset above is version 1's; a version 1 file holds zeros here) ---
  uint32_t max_sites;     // site slots
  int16_t python_major;   // the CPython this process runs (3), 0: it runs no Python (or not known yet)
  int16_t python_minor;   // (12)
  char python_note[192];  // why Python stacks are not available ("" when they are, or no Python runs)
  // --- how the process ended, in its own words (appended later in version 2: older files hold zeros here, which
  // says nothing). Stored before the process goes, into the mapping, so it is on disk even when no file can be
  // written any more (a full disk) and whatever happens after (see record_exit_status and record_stop below).
  uint32_t end_flags;          // EndFlags: which of the fields below hold something
  int32_t exit_status;         // kEndExitStatus: the status the process exited with (0..255)
  uint32_t stop_reason;        // kEndStopped: StopReason, why trainscope stopped the process
  uint32_t reports_unwritten;  // reports this process could not write (its coordinator's too, in rank 0)
  uint32_t unwritten_note;     // UnwrittenNote: the state of unwritten_report / unwritten_cause
  uint32_t reserved_end;       // 0
  uint64_t stop_comm_id;       // kEndStopped by a verdict about a call: that call's communicator (0: none) ...
  uint64_t stop_seq;           // ... and number; kStopAbortAfterBatch / kStopNonfinite from this rank: 0
  uint64_t stop_batch;         // kEndStopBatch: the batch a stop on inf/nan or after a batch names
  char unwritten_report[96];   // kEndUnwritten: the first report it could not write and knew why, else the first
  char unwritten_cause[64];    // one ("stop-rank0.json"); why, as strerror() says it ("No space left on device")
  // --- version 3: the launch collector ---
  uint32_t max_names;          // name slots
  uint32_t names_used;         // name slots claimed (atomic)
  uint32_t max_streams;        // stream slots
  uint32_t streams_used;       // stream slots claimed (atomic)
  uint32_t launch_mode;        // LaunchMode; launch_note is stored before it (release)
  uint32_t cuda_errors;        // CUDA API calls that returned an error (atomic; only the first has a kCudaError record)
  uint64_t first_error_index;  // ring index + 1 of the first kCudaError record, 0: none
  uint64_t completions_ns;     // when the engine last brought the stream table's completion up to date (0: never)
  uint64_t dropped_launches;   // launches not recorded (name or stream table full is not a drop: those are recorded)
  char launch_note[160];       // why launches are not (all) seen: "CUPTI is in use by another tool (Nsight Systems?)"
  // --- the cross-rank checks (appended later in version 3: older files hold zeros here, which says nothing) ---
  uint32_t exchange_state;     // ExchangeState; exchange_note is stored before it (release)
  uint32_t reserved_exchange;  // 0
  char exchange_note[256];     // why the checks did not run (or have not started yet) on this process
};
static_assert(sizeof(FileHeader) <= kHeaderBytes);
static_assert(offsetof(FileHeader, exe) + 256 == offsetof(FileHeader, max_sites), "version 1 offsets are kept");

inline constexpr size_t comm_table_offset() { return kHeaderBytes; }
inline constexpr size_t site_table_offset(uint32_t max_comms) {
  return kHeaderBytes + size_t{max_comms} * sizeof(CommEntry);
}
// Version 3: [header] [comms] [sites] [names x max_names] [streams x max_streams] [ring]. A version 1 file is laid
// out as a version 2 file with max_sites 0, a version 2 file as a version 3 file with max_names = max_streams = 0.
inline constexpr size_t name_table_offset(uint32_t max_comms, uint32_t max_sites) {
  return site_table_offset(max_comms) + size_t{max_sites} * sizeof(SiteEntry);
}
inline constexpr size_t stream_table_offset(uint32_t max_comms, uint32_t max_sites, uint32_t max_names) {
  return name_table_offset(max_comms, max_sites) + size_t{max_names} * sizeof(NameEntry);
}
inline constexpr size_t ring_offset(uint32_t max_comms, uint32_t max_sites, uint32_t max_names = 0,
                                    uint32_t max_streams = 0) {
  return stream_table_offset(max_comms, max_sites, max_names) + size_t{max_streams} * sizeof(StreamEntry);
}
inline constexpr size_t file_bytes(uint32_t max_comms, uint32_t max_sites, uint64_t capacity, uint32_t max_names = 0,
                                   uint32_t max_streams = 0) {
  return ring_offset(max_comms, max_sites, max_names, max_streams) + capacity * sizeof(Record);
}
// The site, name and stream slots of a file, by its version (older versions have none, whatever the header holds).
inline constexpr uint32_t max_sites_of(const FileHeader& header) { return header.version >= 2 ? header.max_sites : 0; }
inline constexpr uint32_t max_names_of(const FileHeader& header) { return header.version >= 3 ? header.max_names : 0; }
inline constexpr uint32_t max_streams_of(const FileHeader& header) {
  return header.version >= 3 ? header.max_streams : 0;
}
// Where the ring of the file with this header starts (any version).
inline constexpr size_t ring_offset(const FileHeader& header) {
  return ring_offset(header.max_comms, max_sites_of(header), max_names_of(header), max_streams_of(header));
}

// ---- How a process ended, said by the process itself (freestanding: the shim and the engine call these) ----------
// Each is a few stores into the live mapping: nothing to create or allocate, so they work on a full disk, and a
// process killed right after has still said it. A reader trusts a field once its flag is set (release stores).

// Copies a C string into a fixed header field, NUL-terminated, cut to fit.
inline void copy_header_text(char* field, size_t size, const char* text) {
  size_t n = 0;
  if (text != nullptr)
    while (n + 1 < size && text[n] != '\0') ++n;
  if (n > 0) __builtin_memcpy(field, text, n);
  field[n] = '\0';
}

// The status the process exits with (exit()'s argument; the shim's on_exit handler).
inline void record_exit_status(FileHeader* h, int status) {
  if (h == nullptr) return;
  __atomic_store_n(&h->exit_status, static_cast<int32_t>(status & 0xff), __ATOMIC_RELAXED);
  __atomic_fetch_or(&h->end_flags, static_cast<uint32_t>(kEndExitStatus), __ATOMIC_RELEASE);
}

// The process ends without exit()'s handlers (_exit(), or exec() when `exec`): marks it exited at `exit_ns`, as the
// recorder's close at a normal exit would, so that a clean end never reads as a crash. Async-signal-safe.
inline void record_end_without_exit(FileHeader* h, bool exec, uint64_t exit_ns) {
  if (h == nullptr) return;
  if (exec) __atomic_fetch_or(&h->end_flags, static_cast<uint32_t>(kEndExec), __ATOMIC_RELEASE);
  __atomic_store_n(&h->exit_ns, exit_ns, __ATOMIC_RELAXED);
  __atomic_store_n(&h->state, static_cast<uint32_t>(ProcessState::kExited), __ATOMIC_RELEASE);
}

// A failed exec(): the process goes on, and so does its recording.
inline void record_exec_failed(FileHeader* h) {
  if (h == nullptr) return;
  __atomic_fetch_and(&h->end_flags, ~static_cast<uint32_t>(kEndExec), __ATOMIC_RELAXED);
  __atomic_store_n(&h->exit_ns, uint64_t{0}, __ATOMIC_RELAXED);
  __atomic_store_n(&h->state, static_cast<uint32_t>(ProcessState::kRunning), __ATOMIC_RELEASE);
}

// trainscope stops this process with `status` (it calls _exit() next): why, about which call or batch, and whether
// the verdict's report is missing. Marks the process exited at `exit_ns`, as a clean exit would.
inline void record_stop(FileHeader* h, StopReason reason, int status, uint64_t comm_id, uint64_t seq, bool has_batch,
                        uint64_t batch, bool report_missing, uint64_t exit_ns) {
  if (h == nullptr) return;
  __atomic_store_n(&h->stop_reason, static_cast<uint32_t>(reason), __ATOMIC_RELAXED);
  __atomic_store_n(&h->exit_status, static_cast<int32_t>(status & 0xff), __ATOMIC_RELAXED);
  __atomic_store_n(&h->stop_comm_id, comm_id, __ATOMIC_RELAXED);
  __atomic_store_n(&h->stop_seq, seq, __ATOMIC_RELAXED);
  __atomic_store_n(&h->stop_batch, has_batch ? batch : 0, __ATOMIC_RELAXED);
  uint32_t flags = kEndStopped | kEndExitStatus;
  if (has_batch) flags |= kEndStopBatch;
  if (report_missing) flags |= kEndReportMissing;
  __atomic_fetch_or(&h->end_flags, flags, __ATOMIC_RELEASE);
  __atomic_store_n(&h->exit_ns, exit_ns, __ATOMIC_RELAXED);
  __atomic_store_n(&h->state, static_cast<uint32_t>(ProcessState::kExited), __ATOMIC_RELEASE);
}

// A report this process could not write (`report`: its file name) and why (`cause`: strerror's text; nullptr or ""
// when not known). Counted every time; the first one that says why is kept by name (else the first one): on a full
// disk the manifest's failure, which says no why, must not hide the mismatch report's "No space left on device".
// Lock-free: the note is claimed with a compare-and-swap, and a thread that finds it being written leaves it.
inline void record_unwritten_report(FileHeader* h, const char* report, const char* cause) {
  if (h == nullptr) return;
  __atomic_fetch_add(&h->reports_unwritten, 1u, __ATOMIC_RELAXED);
  const bool has_cause = cause != nullptr && cause[0] != '\0';
  uint32_t state = __atomic_load_n(&h->unwritten_note, __ATOMIC_ACQUIRE);
  do {
    if (state == kNoteBeingWritten || state == kNoteWithCause || (state == kNoteWithoutCause && !has_cause)) return;
  } while (!__atomic_compare_exchange_n(&h->unwritten_note, &state, static_cast<uint32_t>(kNoteBeingWritten), false,
                                        __ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE));
  copy_header_text(h->unwritten_report, sizeof(h->unwritten_report), report);
  copy_header_text(h->unwritten_cause, sizeof(h->unwritten_cause), cause);
  __atomic_store_n(&h->unwritten_note, static_cast<uint32_t>(has_cause ? kNoteWithCause : kNoteWithoutCause),
                   __ATOMIC_RELEASE);
  __atomic_fetch_or(&h->end_flags, static_cast<uint32_t>(kEndUnwritten), __ATOMIC_RELEASE);
}

// Whether this process's calls are compared across ranks, and if not why (`note`, cut to fit). Any thread; the
// last call wins.
inline void record_exchange_state(FileHeader* h, ExchangeState state, const char* note) {
  if (h == nullptr) return;
  copy_header_text(h->exchange_note, sizeof(h->exchange_note), note);
  __atomic_store_n(&h->exchange_state, static_cast<uint32_t>(state), __ATOMIC_RELEASE);
}

// The checksum of versions 1 to 3: one chain of dependent multiplies over the 14 words, which was a third of the
// shim's time per call.
inline uint32_t record_checksum_v1(const Record& r) {
  const unsigned char* p = reinterpret_cast<const unsigned char*>(&r) + kChecksummedBegin;
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < kChecksummedEnd - kChecksummedBegin; i += 8) {
    uint64_t w;
    __builtin_memcpy(&w, p + i, 8);
    h ^= w + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  return static_cast<uint32_t>(h ^ (h >> 32));
}

// A cheap 32-bit checksum of a record's immutable fields, as the file's `version` computes it. Version 4: four
// independent lanes of xor-multiply (each step a bijection of its lane, so any changed word changes its lane), then
// a 64-bit finaliser over the lanes: a quarter of the dependent multiplies of version 1's, for the same catch of a
// torn or lapped slot (a mixture of two records matches with odds of 2^-32).
inline uint32_t record_checksum(const Record& r, uint32_t version = kFormatVersion) {
  if (version < 4) return record_checksum_v1(r);
  const unsigned char* p = reinterpret_cast<const unsigned char*>(&r) + kChecksummedBegin;
  constexpr size_t kWords = (kChecksummedEnd - kChecksummedBegin) / 8;
  uint64_t lane[4] = {0x9E3779B97F4A7C15ull, 0xC2B2AE3D27D4EB4Full, 0x165667B19E3779F9ull, 0xD6E8FEB86659FD93ull};
  for (size_t i = 0; i < kWords; ++i) {
    uint64_t w;
    __builtin_memcpy(&w, p + i * 8, 8);
    lane[i % 4] = (lane[i % 4] ^ w) * 0xBF58476D1CE4E5B9ull;
  }
  const auto rotl = [](uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
  uint64_t h = lane[0] ^ rotl(lane[1], 16) ^ rotl(lane[2], 32) ^ rotl(lane[3], 48);
  h ^= h >> 31;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 29;
  return static_cast<uint32_t>(h ^ (h >> 32));
}

}  // namespace trainscope::recorder
