# The manylinux toolchain: what `pip wheel .` / `pip install .` build with on x86_64 Linux (pyproject.toml), so that the
# wheel loads on every glibc from 2.28 (RHEL 8, Ubuntu 20.04 and later) and the preloaded library on every glibc from
# 2.17. Zig's clang from PyPI (the ziglang package, a build requirement) compiles against the headers of that old
# glibc and links against its stubs, with LLVM's libc++, libc++abi and libunwind linked statically: the files need
# no libstdc++ and no glibc symbol newer than the floor, whatever the build machine has. ZeroMQ and libsodium are built
# the same way from Debian's source packages (scripts/manylinux_deps.sh, run by cmake/TrainscopeDependencies.cmake) and
# linked statically. DESIGN.md ("Packaging") says why this route.
#
# Used as -DCMAKE_TOOLCHAIN_FILE=cmake/ManylinuxToolchain.cmake. The Zig binary: TS_BUILD_ZIG (an environment
# variable) or TRAINSCOPE_ZIG (a CMake variable), else the ziglang package of the Python that runs the build
# (scikit-build-core passes Python_EXECUTABLE), else of python3 on PATH. Where the dependency builds and Zig's cache are
# kept: TS_BUILD_CACHE_DIR (environment) or TRAINSCOPE_CACHE_DIR (CMake), else ~/.cache/trainscope. (Not TRAINSCOPE_*
# in the environment: the preloaded library warns about TRAINSCOPE_* names it does not know.)
# The same system and processor as the build machine's, only an older glibc: not a cross build (CMake runs what it
# builds).
if(NOT CMAKE_HOST_SYSTEM_NAME STREQUAL "Linux" OR NOT CMAKE_HOST_SYSTEM_PROCESSOR STREQUAL "x86_64")
  message(FATAL_ERROR "trainscope: the manylinux toolchain builds on x86_64 Linux, not on "
    "${CMAKE_HOST_SYSTEM_NAME} ${CMAKE_HOST_SYSTEM_PROCESSOR}")
endif()
set(TRAINSCOPE_WHEEL_POLICY manylinux_2_28_x86_64)
set(TRAINSCOPE_GLIBC_FLOOR 2.28)
set(TRAINSCOPE_PRELOAD_GLIBC_FLOOR 2.17)
set(TRAINSCOPE_ZIG_TARGET x86_64-linux-gnu)

# A try_compile project reads this file again: the compilers are its parent's, nothing to find or write.
get_property(_trainscope_in_try_compile GLOBAL PROPERTY IN_TRY_COMPILE)
if(_trainscope_in_try_compile)
  return()
endif()

# Looked for at each configure: a pip build runs in a new isolated environment each time, with its own ziglang.
if(DEFINED ENV{TS_BUILD_ZIG})
  set(TRAINSCOPE_ZIG_PROGRAM "$ENV{TS_BUILD_ZIG}")
elseif(TRAINSCOPE_ZIG)
  set(TRAINSCOPE_ZIG_PROGRAM "${TRAINSCOPE_ZIG}")
else()
  set(_trainscope_python "${Python_EXECUTABLE}")
  if(NOT _trainscope_python)
    set(_trainscope_python "${Python3_EXECUTABLE}")
  endif()
  if(NOT _trainscope_python)
    find_program(_trainscope_python NAMES python3 python)
  endif()
  execute_process(
    COMMAND "${_trainscope_python}" -c
            "import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), 'zig'))"
    OUTPUT_VARIABLE TRAINSCOPE_ZIG_PROGRAM OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()
if(NOT EXISTS "${TRAINSCOPE_ZIG_PROGRAM}")
  message(FATAL_ERROR "trainscope: the manylinux build needs Zig, and found none ('${TRAINSCOPE_ZIG_PROGRAM}'): "
    "pip adds the ziglang package to a `pip wheel .` build; elsewhere set TS_BUILD_ZIG to a zig binary")
endif()

# Where the dependency builds and Zig's own cache (libc++ and the glibc stubs, per target) are kept between builds.
if(NOT TRAINSCOPE_CACHE_DIR)
  if(DEFINED ENV{TS_BUILD_CACHE_DIR})
    set(TRAINSCOPE_CACHE_DIR "$ENV{TS_BUILD_CACHE_DIR}")
  elseif(DEFINED ENV{XDG_CACHE_HOME})
    set(TRAINSCOPE_CACHE_DIR "$ENV{XDG_CACHE_HOME}/trainscope")
  else()
    set(TRAINSCOPE_CACHE_DIR "$ENV{HOME}/.cache/trainscope")
  endif()
endif()
set(TRAINSCOPE_CACHE_DIR "${TRAINSCOPE_CACHE_DIR}" CACHE PATH "Dependency builds and Zig's cache, kept between builds")

# CMake wants one program per compiler: small wrappers run `zig cc` / `zig c++` for the floor's target. A target that
# needs an older floor (the preloaded library) adds its own -target, which Zig takes over the wrapper's.
set(TRAINSCOPE_ZIG_BIN "${CMAKE_BINARY_DIR}/zig-toolchain")
file(MAKE_DIRECTORY "${TRAINSCOPE_ZIG_BIN}")
foreach(_tool cc c++ ar ranlib)
  if(_tool MATCHES "^c")
    set(_args "${_tool} -target ${TRAINSCOPE_ZIG_TARGET}.${TRAINSCOPE_GLIBC_FLOOR}")
  else()
    set(_args "${_tool}")
  endif()
  file(CONFIGURE OUTPUT "${TRAINSCOPE_ZIG_BIN}/${_tool}" @ONLY CONTENT [[#!/bin/sh
# Written by cmake/ManylinuxToolchain.cmake.
ZIG_GLOBAL_CACHE_DIR="${ZIG_GLOBAL_CACHE_DIR:-@TRAINSCOPE_CACHE_DIR@/zig}" exec "@TRAINSCOPE_ZIG_PROGRAM@" @_args@ "$@"
]])
  file(CHMOD "${TRAINSCOPE_ZIG_BIN}/${_tool}" PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ
    GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
endforeach()
set(CMAKE_C_COMPILER "${TRAINSCOPE_ZIG_BIN}/cc")
set(CMAKE_CXX_COMPILER "${TRAINSCOPE_ZIG_BIN}/c++")
set(CMAKE_AR "${TRAINSCOPE_ZIG_BIN}/ar" CACHE FILEPATH "" FORCE)
set(CMAKE_RANLIB "${TRAINSCOPE_ZIG_BIN}/ranlib" CACHE FILEPATH "" FORCE)

# Nothing of the build machine's own libraries: the dependencies come from their prefix
# (TrainscopeDependencies.cmake), the CUDA toolkit's headers from explicit hints. Programs (nvcc) are still found.
set(CMAKE_FIND_USE_CMAKE_SYSTEM_PATH OFF)
set(CMAKE_FIND_USE_PACKAGE_REGISTRY OFF)
set(CMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY OFF)
