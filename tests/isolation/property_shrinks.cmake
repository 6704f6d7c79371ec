# `attncheck property` against a deliberately wrong plugin: it must fail, shrink, and write the shrunk case as a
# fixture that verify replays (failing for the wrong plugin, passing for the correct example).
# cmake -DEXE=<attncheck> -DBUGGY=<lib> -DGOOD=<lib> -DDIR=<scratch dir> -P property_shrinks.cmake
file(REMOVE_RECURSE ${DIR})
file(MAKE_DIRECTORY ${DIR})
execute_process(COMMAND ${EXE} property --plugin ${BUGGY} --cases 30 --property agreement --regressions ${DIR}/reg
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 1 OR NOT out MATCHES "FAIL +example-plugin-buggy +agreement .*shrunk case written to")
  message(FATAL_ERROR "expected exit 1 with a shrunk failure, got ${rc}")
endif()
# Shrunk: the softmax bug needs two visible keys, so the smallest failing case is tiny (Lq, Lk < 10).
if(NOT out MATCHES "Lq[1-9]-Lk[2-9]-")
  message(FATAL_ERROR "the failing case was not shrunk to a small one")
endif()
file(GLOB fixtures ${DIR}/reg/*.h5)
list(LENGTH fixtures n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "expected one regression fixture in ${DIR}/reg, found ${n}")
endif()
execute_process(COMMAND ${EXE} verify --plugin ${BUGGY} --impl example-plugin-buggy --fixtures ${DIR}/reg
                RESULT_VARIABLE rc OUTPUT_VARIABLE out)
if(NOT rc EQUAL 1 OR NOT out MATCHES "FAIL +example-plugin-buggy")
  message(FATAL_ERROR "replaying the fixture must fail the wrong plugin (rc ${rc}):\n${out}")
endif()
execute_process(COMMAND ${EXE} verify --plugin ${GOOD} --impl example-plugin --fixtures ${DIR}/reg
                RESULT_VARIABLE rc OUTPUT_VARIABLE out)
if(NOT rc EQUAL 0 OR NOT out MATCHES "PASS +example-plugin ")
  message(FATAL_ERROR "replaying the fixture must pass the correct example (rc ${rc}):\n${out}")
endif()
