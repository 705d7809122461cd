# Finds the CUDA toolkit pieces (headers only for now; no GPU is needed to build) and the Debian packages.

find_package(CUDAToolkit REQUIRED)
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include REQUIRED)
find_path(NCCL_REAL_LIBRARY_DIR libnccl.so.2
  HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib /usr/local/cuda/lib /usr/local/cuda/lib64)
file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_version_lines REGEX "#define NCCL_(MAJOR|MINOR|PATCH) ")
message(STATUS "nccl.h: ${NCCL_INCLUDE_DIR} (${_nccl_version_lines}); real libnccl.so.2: ${NCCL_REAL_LIBRARY_DIR}")

# nccl.h pulls in cuda_runtime.h for cudaStream_t; only the headers are used, no cudart is linked.
add_library(trainscope_nccl_headers INTERFACE)
target_include_directories(trainscope_nccl_headers SYSTEM INTERFACE ${NCCL_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS})

find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
# libunwind (the nongnu one, Debian libunwind-dev): cheap local stack walks for the reports.
pkg_check_modules(libunwind REQUIRED IMPORTED_TARGET libunwind)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(cppzmq REQUIRED)  # the out-of-band exchange (libzmq underneath)
# libsodium: the crypto under ZeroMQ's CURVE (so already in the process); it derives the job's keys (job_secret.h).
pkg_check_modules(libsodium REQUIRED IMPORTED_TARGET libsodium)

if(TRAINSCOPE_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(TRAINSCOPE_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
