# The installed layout, the same for `cmake --install` and the wheel (pyproject.toml):
#   bin/trainscope                    the command; `trainscope run` preloads <libdir>/libtrainscope.so
#   <libdir>/libtrainscope.so         the preloaded library: libc only
#   <libdir>/libtrainscope-engine.so  loaded by it on first NCCL use, from its own directory
#   <libdir>/lib*.so.*                with TRAINSCOPE_BUNDLE_DEPENDENCIES: every shared library the engine and the
#                                     command need but glibc's (ZeroMQ, libsodium, libunwind, theirs), as real files
#                                     named by their sonames
# The engine and the command find the bundled copies through a DT_RPATH of $ORIGIN (the engine) and
# $ORIGIN/<bin to libdir> (the command). DT_RPATH, not DT_RUNPATH: a RUNPATH serves only the object's own NEEDED, so
# libzmq's own dependencies (libsodium, libpgm, ...) would be looked up on the system; the loader searches the RPATHs
# of the chain of objects that loaded a library (libzmq -> the engine), which finds them beside the engine.

# Where the command finds its library dir, relative to its own (tools/install_layout.cc).
file(RELATIVE_PATH TRAINSCOPE_LIBDIR_FROM_BINDIR "${CMAKE_INSTALL_FULL_BINDIR}" "${CMAKE_INSTALL_FULL_LIBDIR}")
set_property(SOURCE ${PROJECT_SOURCE_DIR}/tools/install_layout.cc DIRECTORY ${PROJECT_SOURCE_DIR}/tools APPEND
  PROPERTY COMPILE_DEFINITIONS TRAINSCOPE_LIBDIR_FROM_BINDIR="${TRAINSCOPE_LIBDIR_FROM_BINDIR}")

# What `trainscope env` says the package was built for: the manylinux build's policy and glibc floors.
if(TRAINSCOPE_WHEEL_POLICY)
  set_property(SOURCE ${PROJECT_SOURCE_DIR}/tools/install_layout.cc DIRECTORY ${PROJECT_SOURCE_DIR}/tools APPEND
    PROPERTY COMPILE_DEFINITIONS TRAINSCOPE_WHEEL_POLICY="${TRAINSCOPE_WHEEL_POLICY}"
    TRAINSCOPE_GLIBC_FLOOR="${TRAINSCOPE_GLIBC_FLOOR}"
    TRAINSCOPE_PRELOAD_GLIBC_FLOOR="${TRAINSCOPE_PRELOAD_GLIBC_FLOOR}")
endif()

# The manylinux build links its dependencies and the C++ runtime statically: nothing to bundle, no RPATH.
if(NOT TRAINSCOPE_BUNDLE_DEPENDENCIES OR TRAINSCOPE_WHEEL_POLICY)
  return()
endif()

# The sanitizers' runtimes need the shared libstdc++: a sanitizer build keeps it.
if(TRAINSCOPE_SANITIZE STREQUAL "")
  target_link_options(trainscope_engine PRIVATE -static-libstdc++ -static-libgcc)
  target_link_options(trainscope_tool PRIVATE -static-libstdc++ -static-libgcc)
endif()
target_link_options(trainscope_engine PRIVATE -Wl,--disable-new-dtags)
target_link_options(trainscope_tool PRIVATE -Wl,--disable-new-dtags)
# The build tree's copies get the same RPATH (nothing is bundled there, so the system's libraries are found): else
# CMake would reserve the space with a padded RPATH holding an empty entry, which the loader reads as the current
# directory.
set_target_properties(trainscope_engine PROPERTIES INSTALL_RPATH "$ORIGIN" BUILD_WITH_INSTALL_RPATH ON)
set_target_properties(trainscope_tool PROPERTIES INSTALL_RPATH "$ORIGIN/${TRAINSCOPE_LIBDIR_FROM_BINDIR}"
  BUILD_WITH_INSTALL_RPATH ON)

# glibc's own libraries and the loader: every target machine has them, and they must be the machine's.
set(TRAINSCOPE_SYSTEM_LIBRARIES
  [[^(ld-linux.*|linux-vdso|libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libnsl|libmvec|libBrokenLocale|libthread_db)\.so(\..*)?$]])
# Resolved from the build tree's binaries (their build RPATH names no bundled copy), at install time.
string(CONFIGURE [[
file(GET_RUNTIME_DEPENDENCIES
  LIBRARIES "$<TARGET_FILE:trainscope_engine>"
  EXECUTABLES "$<TARGET_FILE:trainscope_tool>"
  RESOLVED_DEPENDENCIES_VAR _trainscope_deps
  UNRESOLVED_DEPENDENCIES_VAR _trainscope_missing
  PRE_EXCLUDE_REGEXES [=[@TRAINSCOPE_SYSTEM_LIBRARIES@]=])
if(_trainscope_missing)
  message(FATAL_ERROR "trainscope: cannot bundle unresolved libraries: ${_trainscope_missing}")
endif()
set(_trainscope_libdir "$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}/@CMAKE_INSTALL_LIBDIR@")
foreach(_dep IN LISTS _trainscope_deps)
  get_filename_component(_name "${_dep}" NAME)
  file(REAL_PATH "${_dep}" _real)
  # Installing into the system's own library dir (prefix /usr): the library is there already, maybe as a link a
  # package owns; leave it.
  if(EXISTS "${_trainscope_libdir}/${_name}")
    file(REAL_PATH "${_trainscope_libdir}/${_name}" _existing)
    if(_existing STREQUAL _real)
      message(STATUS "Already there: ${_trainscope_libdir}/${_name}")
      continue()
    endif()
  endif()
  file(INSTALL DESTINATION "${CMAKE_INSTALL_PREFIX}/@CMAKE_INSTALL_LIBDIR@" TYPE FILE FILES "${_real}"
    RENAME "${_name}" PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
endforeach()
]] TRAINSCOPE_BUNDLE_CODE @ONLY)
install(CODE "${TRAINSCOPE_BUNDLE_CODE}")
