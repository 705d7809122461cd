// Declares an NCCL entry point the way NCCL does: `ncclX` exported, plus `pncclX` as an alias for profilers.
#pragma once

#define TSFAKE_API(ret, func, ...)                                                                          \
  extern "C" __attribute__((visibility("default"))) __attribute__((alias(#func))) ret p##func(__VA_ARGS__); \
  extern "C" __attribute__((visibility("default"))) ret func(__VA_ARGS__)

#ifdef TSFAKE_PRETEND_NCCL_2_18
#define TSFAKE_VERSION_CODE 21800
#else
#define TSFAKE_VERSION_CODE NCCL_VERSION_CODE
#endif
