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
# The logging library, header-only and compiled into the engine with hidden visibility: the engine must not clash with
# a job that brings its own spdlog or fmt.
add_library(trainscope_logging_headers INTERFACE)
target_compile_definitions(trainscope_logging_headers INTERFACE SPDLOG_HEADER_ONLY SPDLOG_FMT_EXTERNAL FMT_HEADER_ONLY)

if(TRAINSCOPE_WHEEL_POLICY)
  # The manylinux build (cmake/ManylinuxToolchain.cmake): ZeroMQ and libsodium built by Zig for the glibc floor and
  # linked statically, the header-only libraries beside them (scripts/manylinux_deps.sh; a cache hit builds nothing).
  message(STATUS "trainscope: ${TRAINSCOPE_WHEEL_POLICY}: the dependencies for glibc ${TRAINSCOPE_GLIBC_FLOOR}")
  execute_process(
    COMMAND bash "${PROJECT_SOURCE_DIR}/scripts/manylinux_deps.sh" "${TRAINSCOPE_ZIG_PROGRAM}"
            "${TRAINSCOPE_ZIG_TARGET}.${TRAINSCOPE_GLIBC_FLOOR}" "${TRAINSCOPE_CACHE_DIR}"
    OUTPUT_VARIABLE TRAINSCOPE_DEPS_PREFIX OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _trainscope_deps_status)
  if(NOT _trainscope_deps_status EQUAL 0)
    message(FATAL_ERROR "trainscope: building the manylinux dependencies failed (scripts/manylinux_deps.sh, above)")
  endif()
  message(STATUS "trainscope: dependencies: ${TRAINSCOPE_DEPS_PREFIX}")
  add_library(trainscope_sodium STATIC IMPORTED)
  set_target_properties(trainscope_sodium PROPERTIES IMPORTED_LOCATION "${TRAINSCOPE_DEPS_PREFIX}/lib/libsodium.a"
    INTERFACE_INCLUDE_DIRECTORIES "${TRAINSCOPE_DEPS_PREFIX}/include")
  add_library(trainscope_zmq STATIC IMPORTED)
  set_target_properties(trainscope_zmq PROPERTIES IMPORTED_LOCATION "${TRAINSCOPE_DEPS_PREFIX}/lib/libzmq.a"
    INTERFACE_INCLUDE_DIRECTORIES "${TRAINSCOPE_DEPS_PREFIX}/include" INTERFACE_COMPILE_DEFINITIONS ZMQ_STATIC
    INTERFACE_LINK_LIBRARIES "trainscope_sodium;Threads::Threads")
  add_library(trainscope_json INTERFACE)
  target_include_directories(trainscope_json SYSTEM INTERFACE "${TRAINSCOPE_DEPS_PREFIX}/include")
  add_library(nlohmann_json::nlohmann_json ALIAS trainscope_json)
  target_include_directories(trainscope_logging_headers SYSTEM INTERFACE "${TRAINSCOPE_DEPS_PREFIX}/include")
  add_library(cppzmq ALIAS trainscope_zmq)
  add_library(PkgConfig::libsodium ALIAS trainscope_sodium)
else()
  find_package(PkgConfig REQUIRED)
  find_package(fmt REQUIRED)
  find_package(spdlog REQUIRED)
  find_package(nlohmann_json 3 REQUIRED)
  find_package(cppzmq REQUIRED)  # the out-of-band exchange (libzmq underneath)
  # libsodium: the crypto under ZeroMQ's CURVE (so already in the process); it derives the job's keys (job_secret.h).
  pkg_check_modules(libsodium REQUIRED IMPORTED_TARGET libsodium)
endif()

if(TRAINSCOPE_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(TRAINSCOPE_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
