# `verify --impl NAME` on a machine where NAME cannot run must exit 1 and say why (CI honesty): a GPU runner with a
# broken driver must not stay green. Where NAME is available (a real device), the test says so and is skipped.
# cmake -DEXE=<attncheck> -DIMPL=<name> -DFIXTURES=<dir> -P expect_unavailable.cmake
execute_process(COMMAND ${EXE} list OUTPUT_VARIABLE listing RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "attncheck list failed (${rc})")
endif()
if(listing MATCHES "\n${IMPL} +available")
  message("SKIP: ${IMPL} is available on this machine")
  return()
endif()
execute_process(COMMAND ${EXE} verify --impl ${IMPL} --fixtures ${FIXTURES} --filter "fp32/*"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "expected exit code 1 for unavailable ${IMPL}, got ${rc}")
endif()
if(NOT err MATCHES "exit 1: implementation '${IMPL}' is unavailable: [^\n]+")
  message(FATAL_ERROR "stderr does not name the unavailable implementation and the reason")
endif()
if(NOT out MATCHES "UNAVAILABLE +${IMPL} ")
  message(FATAL_ERROR "rows are not reported as unavailable")
endif()
# --allow-unavailable accepts it (and still shows the rows as unavailable).
execute_process(COMMAND ${EXE} verify --impl ${IMPL} --fixtures ${FIXTURES} --filter "fp32/*" --allow-unavailable
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "unavailable [1-9]")
  message(FATAL_ERROR "--allow-unavailable: expected exit 0 with unavailable rows, got ${rc}:\n${out}${err}")
endif()
