# Installs the kiln build tree into a fresh prefix, then configures, builds and
# runs tests/package/consumer against it with find_package(kiln CONFIG REQUIRED).
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
execute_process(COMMAND ${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/build -DCMAKE_PREFIX_PATH=${prefix}
                        -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=Release RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the consumer failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the consumer failed")
endif()
execute_process(COMMAND ${WORK_DIR}/build/consumer RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the consumer failed")
endif()

# Again on a machine without MPI and nlohmann-json (as CMake sees it): kiln::kiln
# is found and works, and the components that need them are simply absent.
execute_process(COMMAND ${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/bare -DCMAKE_PREFIX_PATH=${prefix}
                        -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=Release
                        -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON -DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "without MPI and nlohmann-json, find_package(kiln) failed:\n${out}")
endif()
file(READ ${WORK_DIR}/bare/CMakeCache.txt cache)
if(cache MATCHES "MPI_CXX_COMPILER:" OR cache MATCHES "nlohmann_json_DIR:PATH=/")
  message(FATAL_ERROR "without MPI and nlohmann-json, the consumer still looked them up")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/bare RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the consumer without MPI and nlohmann-json failed")
endif()
execute_process(COMMAND ${WORK_DIR}/bare/consumer RESULT_VARIABLE rc OUTPUT_VARIABLE out)
if(NOT rc EQUAL 0 OR out MATCHES "safetensors")
  message(FATAL_ERROR "the consumer without MPI and nlohmann-json failed or used safetensors:\n${out}")
endif()
