# verify --invariance CHECK --diagnose --repro DIR on an implementation that breaks that invariance, then the written
# fixture replayed with the same check: it must be smaller and still fail with the same tag.
# cmake -DATTNCHECK=<exe> -DPLUGIN=<so> -DIMPL=<name> -DFIXTURES=<dir> -DFILTER=<glob> -DCHECK=<kind> -DTAG=<tag>
#       -DDIR=<out> -P ...
file(REMOVE_RECURSE "${DIR}")
execute_process(COMMAND ${ATTNCHECK} verify --plugin ${PLUGIN} --impl ${IMPL} --fixtures ${FIXTURES} --filter ${FILTER}
                        --invariance ${CHECK} --diagnose --repro ${DIR} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                        ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc STREQUAL "1")
  message(FATAL_ERROR "first run: expected exit code 1, got ${rc}")
endif()
if(NOT out MATCHES "FAIL +${IMPL}/${CHECK} "
   OR NOT out MATCHES "repro: ([^ \n]+) -> ([^ \n]+) \\(still ${TAG}, [^\n]*written to")
  message(FATAL_ERROR "first run: no ${TAG} failure with a repro written")
endif()
if(CMAKE_MATCH_1 STREQUAL CMAKE_MATCH_2)
  message(FATAL_ERROR "the repro is the original case (${CMAKE_MATCH_1}): nothing was reduced")
endif()
file(GLOB written "${DIR}/*.h5")
list(LENGTH written n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "expected one repro fixture in ${DIR}, found ${n}")
endif()
execute_process(COMMAND ${ATTNCHECK} verify --plugin ${PLUGIN} --impl ${IMPL} --fixtures ${DIR} --invariance ${CHECK}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc STREQUAL "1" OR NOT out MATCHES "FAIL +${IMPL}/${CHECK} +[^ ]*/repro-${TAG} [^\n]*${TAG}: ")
  message(FATAL_ERROR "replay: expected the repro to fail its ${CHECK} check (exit 1) with ${TAG}, got exit ${rc}")
endif()
