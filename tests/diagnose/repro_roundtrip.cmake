# verify --diagnose --repro DIR on a failing implementation, then the written fixture replayed by plain verify: it
# must fail in the same way (same top tag) and be much smaller than the original case.
# cmake -DATTNCHECK=<exe> -DPLUGIN=<so> -DIMPL=<name> -DFIXTURES=<dir> -DFILTER=<glob> -DDIR=<out> -DTAG=<tag> -P ...
file(REMOVE_RECURSE "${DIR}")
execute_process(COMMAND ${ATTNCHECK} verify --plugin ${PLUGIN} --impl ${IMPL} --fixtures ${FIXTURES} --filter ${FILTER}
                        --diagnose --repro ${DIR} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc STREQUAL "1")
  message(FATAL_ERROR "first run: expected exit code 1, got ${rc}")
endif()
if(NOT out MATCHES "diagnosis: ${TAG}\n"
   OR NOT out MATCHES "repro: [^\n]* -> [^\n]*B1-Hq1-Hkv1-Lq1-[^\n]*still ${TAG}[^\n]*written to")
  message(FATAL_ERROR "first run: no '${TAG}' diagnosis with a one-row repro written")
endif()
file(GLOB written "${DIR}/*.h5")
list(LENGTH written n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "expected one repro fixture in ${DIR}, found ${n}")
endif()
execute_process(COMMAND ${ATTNCHECK} verify --plugin ${PLUGIN} --impl ${IMPL} --fixtures ${DIR} --diagnose
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc STREQUAL "1" OR NOT out MATCHES "FAIL +${IMPL} +[^ ]*/B1-Hq1-Hkv1-Lq1-[^ ]*/repro-${TAG}"
   OR NOT out MATCHES "diagnosis: ${TAG}\n")
  message(FATAL_ERROR "replay: expected the repro to fail (exit 1) with diagnosis ${TAG}, got exit ${rc}")
endif()
