# Finds the CPython interpreters installed on this machine, for the tests that run real interpreters.
#
# Looks for each version in TRAINSCOPE_PYTHON_VERSIONS in pyenv ($PYENV_ROOT or ~/.pyenv: versions/X.Y*/bin/pythonX.Y)
# first, then pythonX.Y on PATH, and keeps an interpreter only if it runs and says it is that version. Sets:
#   TRAINSCOPE_PYTHONS                      the versions found, e.g. "3.9;3.12"
#   TRAINSCOPE_PYTHON_<X>_<Y>_EXECUTABLE    the interpreter ("" when not found)
#   TRAINSCOPE_PYTHON_<X>_<Y>_INCLUDE_DIR   its headers (include/pythonX.Y; "" when not found)
#   TRAINSCOPE_PYTHON_<X>_<Y>_LIBRARY       its shared libpython ("" when not found or built static)
# and trainscope_python_definitions(<target>) gives a target the same as compile definitions, for every version
# looked for (empty strings for those not found), so that a test can skip a version by name.

set(TRAINSCOPE_PYTHON_VERSIONS 2.7 3.6 3.7 3.8 3.9 3.10 3.11 3.12 3.13 3.14)

set(_ts_pyenv_root "$ENV{PYENV_ROOT}")
if(_ts_pyenv_root STREQUAL "")
  set(_ts_pyenv_root "$ENV{HOME}/.pyenv")
endif()

# Runs under Python 2.7 too.
set(_ts_describe [=[
import os, sys, sysconfig
v = sysconfig.get_config_var
library = os.path.join(v('LIBDIR') or '', v('INSTSONAME') or '') if v('Py_ENABLE_SHARED') else ''
sys.stdout.write('%d.%d\t%s\t%s' % (sys.version_info[0], sys.version_info[1], sysconfig.get_paths()['include'],
                                    library if os.path.isfile(library) else ''))
]=])

set(TRAINSCOPE_PYTHONS "")
foreach(_ts_version IN LISTS TRAINSCOPE_PYTHON_VERSIONS)
  string(REPLACE "." "_" _ts_id "${_ts_version}")
  set(_ts_executable "")
  set(_ts_include "")
  set(_ts_library "")
  file(GLOB _ts_candidates "${_ts_pyenv_root}/versions/${_ts_version}*/bin/python${_ts_version}")
  list(SORT _ts_candidates)
  find_program(_ts_on_path_${_ts_id} python${_ts_version} NO_CACHE)
  if(_ts_on_path_${_ts_id})
    list(APPEND _ts_candidates "${_ts_on_path_${_ts_id}}")
  endif()
  foreach(_ts_candidate IN LISTS _ts_candidates)
    # Runs it: a pyenv shim on PATH for a version that is not installed fails here. Prints
    # "X.Y<TAB>include dir<TAB>shared library or nothing".
    execute_process(
      COMMAND "${_ts_candidate}" -c "${_ts_describe}"
      RESULT_VARIABLE _ts_result OUTPUT_VARIABLE _ts_output ERROR_QUIET TIMEOUT 30)
    if(_ts_result EQUAL 0 AND _ts_output MATCHES "^${_ts_version}\t([^\t]*)\t(.*)$")
      set(_ts_executable "${_ts_candidate}")
      set(_ts_include "${CMAKE_MATCH_1}")
      set(_ts_library "${CMAKE_MATCH_2}")
      break()
    endif()
  endforeach()
  set(TRAINSCOPE_PYTHON_${_ts_id}_EXECUTABLE "${_ts_executable}")
  set(TRAINSCOPE_PYTHON_${_ts_id}_INCLUDE_DIR "${_ts_include}")
  set(TRAINSCOPE_PYTHON_${_ts_id}_LIBRARY "${_ts_library}")
  if(_ts_executable)
    list(APPEND TRAINSCOPE_PYTHONS "${_ts_version}")
  endif()
endforeach()
message(STATUS "Python interpreters for the tests: ${TRAINSCOPE_PYTHONS}")

function(trainscope_python_definitions target)
  foreach(version IN LISTS TRAINSCOPE_PYTHON_VERSIONS)
    string(REPLACE "." "_" id "${version}")
    target_compile_definitions(${target} PRIVATE
      TRAINSCOPE_PYTHON_${id}_EXECUTABLE="${TRAINSCOPE_PYTHON_${id}_EXECUTABLE}"
      TRAINSCOPE_PYTHON_${id}_INCLUDE_DIR="${TRAINSCOPE_PYTHON_${id}_INCLUDE_DIR}"
      TRAINSCOPE_PYTHON_${id}_LIBRARY="${TRAINSCOPE_PYTHON_${id}_LIBRARY}")
  endforeach()
endfunction()
