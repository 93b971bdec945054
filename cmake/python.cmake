# The Python package (python/fp8lm): the _fp8lm extension (nanobind, src/python/) built in the
# same tree as the program and the tests, next to a copy of the package's pure-Python files
# and a link to the program, so that build/<preset>/python is an importable fp8lm:
#   PYTHONPATH=build/release/python python3 -c "import fp8lm"
# `pip install .` (pyproject.toml, scikit-build-core) configures this tree and installs the
# component "python": the extension, its type stubs and the fp8lm program inside the package.
#
# FP8LM_PYTHON: AUTO builds it where Python's headers and nanobind (pip install nanobind) are
# found; ON requires them; OFF leaves it out (the sanitizer, emulator and fuzz presets).
set(FP8LM_PYTHON AUTO CACHE STRING "Build the Python package: AUTO, ON or OFF")
set_property(CACHE FP8LM_PYTHON PROPERTY STRINGS AUTO ON OFF)
set(FP8LM_WITH_PYTHON OFF)
if(NOT FP8LM_PYTHON STREQUAL "OFF")
  # Debian's interpreter: the one with python3-numpy and python3-torch (a pyenv shim may come
  # first on PATH). pip's build passes its own Python_EXECUTABLE.
  if(NOT DEFINED Python_EXECUTABLE AND EXISTS /usr/bin/python3 AND NOT SKBUILD)
    set(Python_EXECUTABLE /usr/bin/python3)
  endif()
  if(FP8LM_PYTHON STREQUAL "ON" OR SKBUILD)
    find_package(Python 3.9 REQUIRED COMPONENTS Interpreter Development.Module)
  else()
    find_package(Python 3.9 QUIET COMPONENTS Interpreter Development.Module)
  endif()
  if(Python_FOUND)
    execute_process(COMMAND ${Python_EXECUTABLE} -m nanobind --cmake_dir
                    OUTPUT_VARIABLE FP8LM_NANOBIND_DIR OUTPUT_STRIP_TRAILING_WHITESPACE
                    RESULT_VARIABLE FP8LM_NANOBIND_FOUND ERROR_QUIET)
    if(FP8LM_NANOBIND_FOUND EQUAL 0)
      set(FP8LM_WITH_PYTHON ON)
      list(APPEND CMAKE_PREFIX_PATH ${FP8LM_NANOBIND_DIR})
      find_package(nanobind CONFIG REQUIRED)
    elseif(FP8LM_PYTHON STREQUAL "ON" OR SKBUILD)
      message(FATAL_ERROR "FP8LM_PYTHON: nanobind not found for ${Python_EXECUTABLE} "
                          "(pip install nanobind==3.1.0)")
    endif()
  endif()
endif()
message(STATUS "fp8lm: Python package ${FP8LM_WITH_PYTHON}")
if(FP8LM_WITH_PYTHON)
  # The static libraries go into a shared extension module.
  set(CMAKE_POSITION_INDEPENDENT_CODE ON)
endif()
