# `cmake --install build --prefix X` and the exported package: find_package(attncheck) gives attncheck::core (problem
# model, reference, tolerance), attncheck::fixture (golden fixture I/O, HDF5 found through find_dependency),
# attncheck::api (Impl interface, reference adapter, plugin loader) and attncheck::plugin_abi (the C header only).
# The registry with the built-in backends (attncheck_impls) is not exported: it drags in every backend's toolkit
# (Eigen, CUDA, cuDNN) for users who bring their own implementation; the `attncheck` binary carries it instead.
include_guard(GLOBAL)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(ATTNCHECK_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/attncheck)

add_library(attncheck_plugin_abi INTERFACE)
add_library(attncheck::plugin_abi ALIAS attncheck_plugin_abi)
target_include_directories(attncheck_plugin_abi INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/impls/include>
                                                          $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)

set(_attncheck_exported attncheck_core attncheck_api attncheck_plugin_abi)
set_target_properties(attncheck_core PROPERTIES EXPORT_NAME core)
# core's four layers (reference/CMakeLists.txt), each exported under its own name: attncheck::model, ...
foreach(layer plumbing model oracle tolerance)
  list(APPEND _attncheck_exported attncheck_${layer})
  set_target_properties(attncheck_${layer} PROPERTIES EXPORT_NAME ${layer})
endforeach()
set_target_properties(attncheck_api PROPERTIES EXPORT_NAME api)
set_target_properties(attncheck_plugin_abi PROPERTIES EXPORT_NAME plugin_abi)
# The core links muparser (static), so consumers find it too.
set(ATTNCHECK_PACKAGE_DEPENDENCIES "find_dependency(Threads)\nfind_dependency(muparser)\n")
if(TARGET attncheck_fixture)
  list(APPEND _attncheck_exported attncheck_fixture)
  set_target_properties(attncheck_fixture PROPERTIES EXPORT_NAME fixture)
  # CMake's FindHDF5 probes with the C compiler, so a C++-only consumer project gets C enabled here rather than
  # a FindHDF5 error about a disabled language.
  string(APPEND ATTNCHECK_PACKAGE_DEPENDENCIES [=[
get_property(_attncheck_languages GLOBAL PROPERTY ENABLED_LANGUAGES)
if(NOT "C" IN_LIST _attncheck_languages)
  enable_language(C)
endif()
find_dependency(HDF5 COMPONENTS C)
find_dependency(ZLIB)
]=])
  get_target_property(_fixture_libs attncheck_fixture LINK_LIBRARIES)
  if(_fixture_libs MATCHES "nlohmann_json")
    string(APPEND ATTNCHECK_PACKAGE_DEPENDENCIES "find_dependency(nlohmann_json 3)\n")
  endif()
endif()

install(TARGETS ${_attncheck_exported} EXPORT attncheckTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS attncheck RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# Public headers only (include/attncheck/*.h, *.hpp); the libraries' private headers stay in their src/ folders.
foreach(dir reference/plumbing/include reference/model/include reference/oracle/include reference/tolerance/include
            impls/include golden/include)
  if(EXISTS ${PROJECT_SOURCE_DIR}/${dir})
    install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
            FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")
  endif()
endforeach()

install(EXPORT attncheckTargets NAMESPACE attncheck:: DESTINATION ${ATTNCHECK_INSTALL_CMAKEDIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/attncheckConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/attncheckConfig.cmake
                              INSTALL_DESTINATION ${ATTNCHECK_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/attncheckConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/attncheckConfig.cmake ${PROJECT_BINARY_DIR}/attncheckConfigVersion.cmake
        DESTINATION ${ATTNCHECK_INSTALL_CMAKEDIR})

# The Python wheel (pyproject.toml, scikit-build-core sets SKBUILD): component `python` puts the executable and the
# golden cases, gradient and module fixtures inside the attncheck package, where attncheck._cli, attncheck.golden_cases,
# attncheck.check_gradients and attncheck.check_module_function look first.
if(SKBUILD)
  install(TARGETS attncheck RUNTIME DESTINATION attncheck COMPONENT python)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/golden/cases/ DESTINATION attncheck/golden COMPONENT python
          FILES_MATCHING PATTERN "*.h5")
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/golden/backward/ DESTINATION attncheck/golden_backward COMPONENT python
          FILES_MATCHING PATTERN "*.h5")
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/golden/modules/ DESTINATION attncheck/golden_modules COMPONENT python
          FILES_MATCHING PATTERN "*.h5")
endif()
