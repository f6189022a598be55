# Installs the kiln build tree into a fresh prefix, then configures, builds and
# runs tests/package/consumer against it with find_package(kiln CONFIG REQUIRED):
# once as found on this machine, once with MPI and nlohmann-json hidden.
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
execute_process(COMMAND ${CMAKE_COMMAND} --install ${KILN_BUILD_DIR} --prefix ${prefix} RESULT_VARIABLE rc
                OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "installing kiln failed")
endif()
if(NOT EXISTS ${prefix}/share/cmake/kiln/kilnConfig.cmake OR NOT EXISTS ${prefix}/include/kiln/kiln.hpp)
  message(FATAL_ERROR "the install lacks the package config or the headers")
endif()

# Configures, builds and runs the consumer in ${WORK_DIR}/<dir> (`what` names
# the case in messages; further arguments go to the configure step); its
# output in <dir>_output.
function(run_consumer dir what)
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/${dir} -DCMAKE_PREFIX_PATH=${prefix}
                          -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=Release ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "configuring the consumer ${what} failed (find_package(kiln)):\n${out}")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/${dir} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "building the consumer ${what} failed")
  endif()
  execute_process(COMMAND ${WORK_DIR}/${dir}/consumer RESULT_VARIABLE rc OUTPUT_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the consumer ${what} failed:\n${out}")
  endif()
  set(${dir}_output "${out}" PARENT_SCOPE)
endfunction()

run_consumer(build "")

# Without MPI and nlohmann-json (as CMake sees them): kiln::kiln is found and
# works, and the components that need them are simply absent.
run_consumer(bare "without MPI and nlohmann-json" -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON
             -DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON)
file(READ ${WORK_DIR}/bare/CMakeCache.txt cache)
if(cache MATCHES "MPI_CXX_COMPILER:" OR cache MATCHES "nlohmann_json_DIR:PATH=/")
  message(FATAL_ERROR "without MPI and nlohmann-json, the consumer still looked them up")
endif()
if(bare_output MATCHES "safetensors")
  message(FATAL_ERROR "without nlohmann-json, the consumer still used safetensors:\n${bare_output}")
endif()
