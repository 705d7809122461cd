// What nccl.h 2.29.7 adds that the stand-in exports ahead of the nccl.h it is built with: communicator suspend and
// resume (vLLM 0.33's wrapper requires them of any NCCL it loads) and their memory statistics.
#pragma once

#include <cstdint>

#include <nccl.h>

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 29, 7)
#define NCCL_SUSPEND_MEM 0x01

typedef enum {
  ncclStatGpuMemSuspend = 0,    // bytes that a suspend would release
  ncclStatGpuMemSuspended = 1,  // 1 while suspended, else 0
  ncclStatGpuMemPersist = 2,    // bytes that stay through a suspend
  ncclStatGpuMemTotal = 3
} ncclCommMemStat_t;

extern "C" {
ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags);
ncclResult_t pncclCommSuspend(ncclComm_t comm, int flags);
ncclResult_t ncclCommResume(ncclComm_t comm);
ncclResult_t pncclCommResume(ncclComm_t comm);
ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value);
ncclResult_t pncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value);
}
#endif
