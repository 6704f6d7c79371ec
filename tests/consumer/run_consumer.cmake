# ctest driver for the install/export test: install this build into a fresh prefix, then configure, build and run
# tests/consumer against it with the same compiler (and ccache), so the exported package is what gets tested.
# cmake -DBUILD_DIR= -DSOURCE_DIR= -DWORK_DIR= -DCXX= -DCC= [-DLAUNCHER=] [-DGOLDEN_FIXTURE=] [-DEXAMPLE_PLUGIN=] -P ...
function(step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  message("${what}: ok")
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
step("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
set(launcher)
if(LAUNCHER)
  set(launcher -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER} -DCMAKE_C_COMPILER_LAUNCHER=${LAUNCHER})
endif()
step("configure consumer" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/build
     -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_C_COMPILER=${CC} ${launcher}
     -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
     -DGOLDEN_FIXTURE=${GOLDEN_FIXTURE} -DEXAMPLE_PLUGIN=${EXAMPLE_PLUGIN})
step("build consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
execute_process(COMMAND ${WORK_DIR}/build/test_consumer RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "test_consumer failed (${rc})")
endif()
