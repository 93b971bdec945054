# `cmake --install BUILD --prefix P` installs the fp8lm libraries, the public headers
# (include/fp8lm) and a package configuration, so that a user's CMake project does
#   find_package(fp8lm REQUIRED)
#   target_link_libraries(app PRIVATE fp8lm::fp8lm)
# (examples/CMakeLists.txt). An emulator build (FP8LM_CUDA_EMU) is a test build: not installed.
if(FP8LM_CUDA_EMU)
  return()
endif()
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(FP8LM_INSTALLED_TARGETS fp8lm fp8lm_api fp8lm_io fp8lm_train fp8lm_nn fp8lm_dist fp8lm_cuda
    fp8lm_kernels fp8lm_fp8 fp8lm_text fp8lm_core fp8lm_tensorboard_proto)
install(TARGETS ${FP8LM_INSTALLED_TARGETS} EXPORT fp8lmTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/fp8lm DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT fp8lmTargets NAMESPACE fp8lm:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/fp8lm)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/fp8lmConfig.cmake.in
  ${PROJECT_BINARY_DIR}/fp8lmConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/fp8lm)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/fp8lmConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/fp8lmConfig.cmake ${PROJECT_BINARY_DIR}/fp8lmConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/fp8lm)
# The command-line tool, so that an installed prefix's bin/ puts fp8lm on the PATH.
install(TARGETS fp8lm_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
