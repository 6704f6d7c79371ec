# Runs a command and checks its exit code and output, because ctest alone can only tell zero from non-zero and
# the CLI's contract is exact: 0 pass, 1 verification failure, 2 usage or input error.
# cmake -DCMD=<;-list> -DRC=<code> [-DMATCH=<regex>] [-DMATCH2=<regex>] [-DNO_MATCH=<regex>] -P expect_run.cmake
execute_process(COMMAND ${CMD} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(all "${out}${err}")
message("${all}")
if(NOT rc STREQUAL "${RC}")
  message(FATAL_ERROR "expected exit code ${RC}, got ${rc}: ${CMD}")
endif()
if(DEFINED MATCH AND NOT all MATCHES "${MATCH}")
  message(FATAL_ERROR "output does not match '${MATCH}'")
endif()
if(DEFINED MATCH2 AND NOT all MATCHES "${MATCH2}")
  message(FATAL_ERROR "output does not match '${MATCH2}'")
endif()
if(DEFINED NO_MATCH AND all MATCHES "${NO_MATCH}")
  message(FATAL_ERROR "output matches '${NO_MATCH}' but must not")
endif()
