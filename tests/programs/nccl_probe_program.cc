// Calls a few NCCL functions and prints each return code, so runs with and without the shim (and against the
// real libnccl.so.2 on a machine without a GPU) can be compared line by line.
#include <nccl.h>

#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  const bool shrink = argc > 1 && std::strcmp(argv[1], "--shrink") == 0;
  int version = 0;
  const ncclResult_t v = ncclGetVersion(&version);
  std::printf("ncclGetVersion %d %d\n", static_cast<int>(v), version);
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  const ncclResult_t u = ncclGetUniqueId(&id);
  std::printf("ncclGetUniqueId %d\n", static_cast<int>(u));
  ncclComm_t comm = nullptr;
  const ncclResult_t init = ncclCommInitRank(&comm, 1, id, 0);
  std::printf("ncclCommInitRank %d\n", static_cast<int>(init));
  if (shrink && init == ncclSuccess) {
    ncclComm_t child = nullptr;
    const ncclResult_t s = ncclCommShrink(comm, nullptr, 0, &child, nullptr, NCCL_SHRINK_DEFAULT);
    std::printf("ncclCommShrink %d\n", static_cast<int>(s));
  }
  if (init == ncclSuccess) std::printf("ncclCommDestroy %d\n", static_cast<int>(ncclCommDestroy(comm)));
  return 0;
}
