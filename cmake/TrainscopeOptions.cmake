# Compiler warnings and sanitizer flags shared by every target.

add_library(trainscope_warnings INTERFACE)
target_compile_options(trainscope_warnings INTERFACE
  -Wall -Wextra -Wshadow -Wnon-virtual-dtor -Wcast-align -Wunused -Wnull-dereference -Wdouble-promotion
  -Wformat=2 -Wimplicit-fallthrough)
if(TRAINSCOPE_WERROR)
  target_compile_options(trainscope_warnings INTERFACE -Werror)
endif()

# The test binaries' own code: after the build type's flags, so that its -O and -g win. Only -O and -g levels are
# accepted: anything else would make the tests differ from the code they test.
add_library(trainscope_test_code INTERFACE)
separate_arguments(_trainscope_test_code_flags UNIX_COMMAND "${TRAINSCOPE_TEST_CODE_FLAGS}")
foreach(flag IN LISTS _trainscope_test_code_flags)
  if(NOT flag MATCHES "^-(O[0-3sgz]?|g[0-3]?)$")
    message(FATAL_ERROR "TRAINSCOPE_TEST_CODE_FLAGS='${TRAINSCOPE_TEST_CODE_FLAGS}': '${flag}' is not accepted; "
      "give optimisation and debug levels only (-O, -O0 to -O3, -Og, -Os, -Oz, -g, -g0 to -g3), e.g. '-O0 -g1'")
  endif()
endforeach()
target_compile_options(trainscope_test_code INTERFACE ${_trainscope_test_code_flags})

# The test binaries' files are compiled 16 at a time (CMake's unity build): the GoogleTest and JSON templates that every
# file instantiates are then compiled once a batch instead of once a file. On 2 cores the three GoogleTest binaries of
# the plain build took 135 s to compile file by file and take 51 s so (61 s in batches of 8); the README's test command builds
# them three times (plain, ASan, TSan). A file's helpers, in its anonymous namespace, share that namespace with the
# other files of its batch, so names must not clash across the files of a binary: the build says where they do (give
# the helper a name of its own, or move a shared one to a header of tests/support or of the test folder).
option(TRAINSCOPE_UNITY_TESTS "Compile the test binaries' files in batches (CMake's unity build); OFF: each alone" ON)
function(trainscope_unity_tests target)
  if(TRAINSCOPE_UNITY_TESTS)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 16)
  endif()
endfunction()

# CMAKE_UNITY_BUILD=ON batches every target's files the same way (CI's sanitizer builds: under ASan a library file took
# 10 to 47 s of CPU to compile, 4 to 7 s of it parsing the headers every file parses again; batched, the ASan build took
# 8.8 minutes on 2 cores instead of 12.1, json_fwd.hpp's change included). A type of a .cc file that holds a member of
# its anonymous namespace is then in an included file, which GCC warns of (-Wsubobject-linkage) though the batch is one
# translation unit, as the file alone was.
if(CMAKE_UNITY_BUILD)
  target_compile_options(trainscope_warnings INTERFACE -Wno-subobject-linkage)
endif()

# Code that runs inside the preloaded library: no libstdc++ runtime, no exceptions, no RTTI, no guarded statics.
add_library(trainscope_freestanding INTERFACE)
target_compile_options(trainscope_freestanding INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-fno-exceptions -fno-rtti -fno-threadsafe-statics> -fvisibility=hidden)
# The manylinux build (cmake/ManylinuxToolchain.cmake): the preloaded library, loaded into every process of the job,
# is compiled for an older glibc still than the rest (shim/CMakeLists.txt links it for the same one).
if(TRAINSCOPE_PRELOAD_GLIBC_FLOOR)
  target_compile_options(trainscope_freestanding INTERFACE
    --target=${TRAINSCOPE_ZIG_TARGET}.${TRAINSCOPE_PRELOAD_GLIBC_FLOOR})
endif()

# GCC's -Wmaybe-uninitialized gives false positives inside libstdc++ (std::regex, std::function) once the
# sanitizers' instrumentation is in; the plain build keeps the warning.
if(TRAINSCOPE_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
                      -Wno-maybe-uninitialized)
  add_link_options(-fsanitize=address,undefined)
  # The test binaries' own code (GoogleTest's macros, the tests' helpers) without UBSan's checks and ASan's scope
  # checks: with them a batch of test files took 79 s to compile on 2 cores, without them 40 s, and what they check
  # there is not ours. The libraries' own files keep every check (an inline function of their headers that a test file
  # also compiles may be linked from the test's copy, without UBSan's checks); ASan still checks each access the tests
  # make.
  target_compile_options(trainscope_test_code INTERFACE -fno-sanitize=undefined -fno-sanitize-address-use-after-scope)
elseif(TRAINSCOPE_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer -Wno-maybe-uninitialized)
  add_link_options(-fsanitize=thread)
elseif(NOT TRAINSCOPE_SANITIZE STREQUAL "")
  message(FATAL_ERROR "TRAINSCOPE_SANITIZE='${TRAINSCOPE_SANITIZE}': accepted '', 'address', 'thread'")
endif()
