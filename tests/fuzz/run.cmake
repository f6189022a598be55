# Builds one libFuzzer target with clang (-fsanitize=fuzzer,address,undefined)
# and runs it briefly over its corpus, as a regression test:
#   cmake -DCXX=clang++-14 -DTARGET=idx_gzip -DSOURCE_DIR=<repo> -DWORK_DIR=<dir>
#         "-DINCLUDES=<dirs>" [-DSECONDS=5] ["-DLIBS=-lcsv"] -P tests/fuzz/run.cmake
# New inputs go to a scratch corpus in WORK_DIR; the committed corpus is only read.
if(NOT SECONDS)
  set(SECONDS 5)
endif()
set(fuzz ${SOURCE_DIR}/tests/fuzz)
set(exe ${WORK_DIR}/fuzz_${TARGET})
file(MAKE_DIRECTORY ${WORK_DIR})

set(flags -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all)
foreach(dir IN LISTS INCLUDES)
  list(APPEND flags -isystem ${dir})
endforeach()
# Rebuild when the target or any kiln header is newer than the binary.
file(GLOB_RECURSE inputs ${SOURCE_DIR}/include/kiln/*.hpp ${fuzz}/*.cpp ${fuzz}/*.hpp ${SOURCE_DIR}/tests/support/*.hpp)
set(stale TRUE)
if(EXISTS ${exe})
  set(stale FALSE)
  foreach(f IN LISTS inputs)
    if(${f} IS_NEWER_THAN ${exe})
      set(stale TRUE)
    endif()
  endforeach()
endif()
if(stale)
  execute_process(COMMAND ${CXX} ${flags} -I${SOURCE_DIR}/include ${fuzz}/${TARGET}.cpp -o ${exe} ${LIBS} -lfmt -lz
                  RESULT_VARIABLE built)
  if(NOT built EQUAL 0)
    message(FATAL_ERROR "building the fuzz target ${TARGET} failed")
  endif()
endif()

file(REMOVE_RECURSE ${WORK_DIR}/${TARGET}_new)
file(MAKE_DIRECTORY ${WORK_DIR}/${TARGET}_new)
execute_process(COMMAND ${exe} -max_total_time=${SECONDS} -timeout=10 -rss_limit_mb=1024 -dict=${fuzz}/${TARGET}.dict
                        -artifact_prefix=${WORK_DIR}/${TARGET}- ${WORK_DIR}/${TARGET}_new ${fuzz}/corpus/${TARGET}
                RESULT_VARIABLE ran ERROR_VARIABLE log)
string(REGEX MATCH "#[0-9]+[^\n]*DONE[^\n]*" done "${log}")
message(STATUS "${TARGET}: ${done}")
if(NOT ran EQUAL 0)
  message("${log}")
  message(FATAL_ERROR "the fuzz target ${TARGET} found a fault (input saved under ${WORK_DIR}/${TARGET}-*)")
endif()
