# FP8LM_CUDA_EMU: the CUDA backend built for the CPU, to run the CUDA test suites without a GPU
# (tools/cuda_emu/README.md). The .cu sources are rewritten (rewrite_cu.py: launch syntax,
# extern __shared__) into the build tree and compiled by the C++ compiler against the shim
# headers in tools/cuda_emu/include, with the emulator runtime standing in for CUDA::cudart
# and CUDA::cublasLt. Nothing under src/ changes: this file patches the fp8lm_cuda target
# after src/ has defined it.
option(FP8LM_CUDA_EMU "Build the CUDA backend for the CUDA emulator (tests without a GPU)" OFF)
if(NOT FP8LM_CUDA_EMU)
  return()
endif()
if(FP8LM_WITH_CUDA)
  message(FATAL_ERROR "FP8LM_CUDA_EMU needs FP8LM_CUDA=OFF (it replaces the real toolkit)")
endif()
find_package(Python3 REQUIRED COMPONENTS Interpreter)

# src/ and tests/ then build the CUDA backend, the GPU model and the test_cuda_* suites.
set(FP8LM_WITH_CUDA ON)
set(FP8LM_CUDA_EMU_DIR ${PROJECT_SOURCE_DIR}/tools/cuda_emu)

file(GLOB FP8LM_CUDA_EMU_RUNTIME CONFIGURE_DEPENDS ${FP8LM_CUDA_EMU_DIR}/src/*.cpp)
add_library(fp8lm_cuda_emu STATIC ${FP8LM_CUDA_EMU_RUNTIME})
# SYSTEM: the shim headers are the toolkit's stand-in, outside the project's warning rules.
target_include_directories(fp8lm_cuda_emu SYSTEM PUBLIC ${FP8LM_CUDA_EMU_DIR}/include)
target_compile_options(fp8lm_cuda_emu PRIVATE ${FP8LM_WARNINGS})

# Device code (the rewritten .cu files) checks the alignment of every typed load and store, and
# calls the shared-memory race check before each one (GCC's kernel-address instrumentation,
# every access through a call, whose targets the emulator supplies: src/shared_races.h).
set(FP8LM_CUDA_EMU_ALIGNMENT -fsanitize=alignment -fno-sanitize-recover=alignment)
set(FP8LM_CUDA_EMU_RACES -fsanitize=kernel-address --param=asan-stack=0 --param=asan-globals=0
  --param=asan-instrumentation-with-call-threshold=0)

# The names src/CMakeLists.txt links fp8lm_cuda against.
foreach(name cudart_static cublasLt)
  add_library(CUDA::${name} INTERFACE IMPORTED GLOBAL)
  target_link_libraries(CUDA::${name} INTERFACE fp8lm_cuda_emu)
endforeach()

# Swaps fp8lm_cuda's .cu sources for rewritten copies compiled as C++. Runs deferred, at the end
# of the top-level CMakeLists.txt, once src/ has defined the target.
function(fp8lm_cuda_emu_patch target)
  set(out_root ${PROJECT_BINARY_DIR}/cuda_emu)
  set(script ${FP8LM_CUDA_EMU_DIR}/rewrite_cu.py)
  get_target_property(sources ${target} SOURCES)
  get_target_property(source_dir ${target} SOURCE_DIR)
  # Headers with launches (column_sum.cuh) are rewritten too, into a tree searched first for
  # quoted includes (-iquote) by the rewritten .cu files.
  file(GLOB_RECURSE headers CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/*.cuh)
  set(kept "")
  set(generated "")
  foreach(file ${sources} ${headers})
    cmake_path(ABSOLUTE_PATH file BASE_DIRECTORY ${source_dir})
    if(NOT file MATCHES "\\.cuh?$")
      list(APPEND kept ${file})
      continue()
    endif()
    cmake_path(RELATIVE_PATH file BASE_DIRECTORY ${PROJECT_SOURCE_DIR}/src OUTPUT_VARIABLE rel)
    set(out ${out_root}/${rel})
    if(file MATCHES "\\.cu$")
      string(APPEND out ".cpp")
    endif()
    add_custom_command(OUTPUT ${out}
      COMMAND ${Python3_EXECUTABLE} ${script} ${file} ${out}
      DEPENDS ${file} ${script}
      COMMENT "cuda-emu: rewriting ${rel}")
    list(APPEND generated ${out})
    if(file MATCHES "\\.cu$")
      list(APPEND kept ${out})
    endif()
  endforeach()
  add_custom_target(${target}_emu_sources DEPENDS ${generated})
  add_dependencies(${target} ${target}_emu_sources)
  set_property(TARGET ${target} PROPERTY SOURCES ${kept})

  set(cu_sources ${kept})
  list(FILTER cu_sources INCLUDE REGEX "\\.cu\\.cpp$")
  # What nvcc gives a .cu file: __CUDACC__ and the device pass's __CUDA_ARCH__ (the emulator
  # runs the device code), cuda_runtime.h included first. nvcc builds them with -Wall -Wextra
  # only (src/CMakeLists.txt), so the project's stricter warnings are relaxed to that here; and
  # g++ does not know CUDA's #pragma unroll (-Wno-unknown-pragmas, the emulation's one). A GPU
  # faults on a misaligned vector load; the alignment sanitizer stops the program there.
  set_source_files_properties(${cu_sources} TARGET_DIRECTORY ${target} PROPERTIES
    GENERATED ON
    COMPILE_DEFINITIONS "__CUDACC__;__CUDA_ARCH__=900"
    COMPILE_OPTIONS "-iquote;${out_root};-include;cuda_runtime.h;-Wno-conversion;-Wno-shadow;-Wno-pedantic;-Wno-unknown-pragmas;${FP8LM_CUDA_EMU_ALIGNMENT};${FP8LM_CUDA_EMU_RACES}")
  target_compile_definitions(${target} PUBLIC FP8LM_CUDA_EMU=1)
  target_link_options(${target} PUBLIC ${FP8LM_CUDA_EMU_ALIGNMENT})
endfunction()
cmake_language(DEFER CALL fp8lm_cuda_emu_patch fp8lm_cuda)

# The emulator's own tests (tools/cuda_emu/tests): a .cu file rewritten and compiled as above.
if(FP8LM_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
  set(selftest_src ${FP8LM_CUDA_EMU_DIR}/tests/emu_selftest.cu)
  set(selftest_out ${PROJECT_BINARY_DIR}/cuda_emu/selftest/emu_selftest.cu.cpp)
  add_custom_command(OUTPUT ${selftest_out}
    COMMAND ${Python3_EXECUTABLE} ${FP8LM_CUDA_EMU_DIR}/rewrite_cu.py ${selftest_src} ${selftest_out}
    DEPENDS ${selftest_src} ${FP8LM_CUDA_EMU_DIR}/rewrite_cu.py
    COMMENT "cuda-emu: rewriting emu_selftest.cu")
  add_executable(test_cuda_emu ${selftest_out})
  set_source_files_properties(${selftest_out} PROPERTIES
    COMPILE_DEFINITIONS "__CUDACC__;__CUDA_ARCH__=900"
    COMPILE_OPTIONS "-include;cuda_runtime.h;${FP8LM_CUDA_EMU_ALIGNMENT};${FP8LM_CUDA_EMU_RACES}")
  target_link_libraries(test_cuda_emu PRIVATE fp8lm_cuda_emu GTest::gtest_main)
  target_link_options(test_cuda_emu PRIVATE ${FP8LM_CUDA_EMU_ALIGNMENT})
  set_target_properties(test_cuda_emu PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  gtest_discover_tests(test_cuda_emu DISCOVERY_TIMEOUT 60)
endif()
