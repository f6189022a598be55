# Runs one compile-fail case (cmake -P). The source holds a valid program and,
# under `#ifdef KILN_SHOULD_FAIL`, the misuse. Lines `// expect: <regex>` give
# what the compiler must say. The case passes when the valid twin compiles and
# the misuse fails to compile with every expected line in its diagnostics, the
# first error being one of kiln's static_asserts. A line `// expect-errors: N`
# also asks for exactly N errors in all (`: error: ` lines), so that a misuse
# reported once stays reported once. A misuse of the build rather than of
# the code (a target kiln cannot build for) has its flags: `// flags: F`
# for both twins and `// misuse-flags: F` for the misuse alone; its first
# error may then be one of kiln's #errors. (`// compiler: GNU`: tests/
# CMakeLists.txt runs the case with that compiler only.)
foreach(var CXX INCLUDES SOURCE WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "kiln_compile_fail.cmake: ${var} is not set")
  endif()
endforeach()
include(${CMAKE_CURRENT_LIST_DIR}/kiln_syntax_flags.cmake)
kiln_syntax_flags(_flags "${INCLUDES}")
file(MAKE_DIRECTORY ${WORK_DIR})
file(STRINGS ${SOURCE} _case_flags REGEX "^// flags: ")
file(STRINGS ${SOURCE} _misuse_flags REGEX "^// misuse-flags: ")
string(REGEX REPLACE "^// flags: " "" _case_flags "${_case_flags}")
string(REGEX REPLACE "^// misuse-flags: " "" _misuse_flags "${_misuse_flags}")
separate_arguments(_case_flags UNIX_COMMAND "${_case_flags}")
separate_arguments(_misuse_flags UNIX_COMMAND "${_misuse_flags}")
list(APPEND _flags ${_case_flags})
# -DPCH=<file> -DPCH_FLAGS=<flags>: kiln/kiln.hpp precompiled with these very
# flags (tests/CMakeLists.txt). A case with flags of its own parses the
# header, and so does every case when a kiln header is newer than the PCH
# (neither compiler checks the headers inside it: they are -isystem ones).
# No header may test KILN_SHOULD_FAIL: clang would not notice it differs.
if(DEFINED PCH AND EXISTS "${PCH}" AND NOT _case_flags AND NOT _misuse_flags)
  list(TRANSFORM INCLUDES APPEND /kiln/*.hpp OUTPUT_VARIABLE _kiln_globs)
  file(GLOB_RECURSE _kiln_headers ${_kiln_globs})
  set(_use_pch ON)
  foreach(header IN LISTS _kiln_headers)
    if("${header}" IS_NEWER_THAN "${PCH}")
      set(_use_pch OFF)
    endif()
  endforeach()
  if(_use_pch)
    list(PREPEND _flags ${PCH_FLAGS})
  endif()
endif()

execute_process(COMMAND ${CXX} ${_flags} ${SOURCE} RESULT_VARIABLE ok_rc ERROR_VARIABLE ok_err OUTPUT_QUIET)
if(NOT ok_rc EQUAL 0)
  message(FATAL_ERROR "the valid twin of ${SOURCE} does not compile:\n${ok_err}")
endif()

execute_process(COMMAND ${CXX} ${_flags} ${_misuse_flags} -DKILN_SHOULD_FAIL ${SOURCE} RESULT_VARIABLE ko_rc ERROR_VARIABLE ko_err
                OUTPUT_QUIET)
if(ko_rc EQUAL 0)
  message(FATAL_ERROR "the misuse in ${SOURCE} compiled, but it must be rejected")
endif()

file(STRINGS ${SOURCE} _expects REGEX "^// expect: ")
if(NOT _expects)
  message(FATAL_ERROR "${SOURCE} has no `// expect:` line")
endif()
foreach(line IN LISTS _expects)
  string(REGEX REPLACE "^// expect: " "" regex "${line}")
  if(NOT ko_err MATCHES "${regex}")
    message(FATAL_ERROR "the diagnostics for ${SOURCE} do not match `${regex}`:\n${ko_err}")
  endif()
endforeach()
string(REPLACE ";" "," _ko_lines "${ko_err}")  # (the error lines become a CMake list)
string(REGEX MATCHALL "[^\n]*: (fatal )?error: [^\n]*" _errors "${_ko_lines}")
list(LENGTH _errors _error_count)
list(GET _errors 0 _first_error)
# (g++ and clang 16: `static assertion failed[ due to requirement '...']: kiln...`;
# clang 14: `static_assert failed due to requirement '...' "kiln..."`)
set(_kiln_error "error: (static assertion failed( due to requirement '.*')?: kiln|static_assert failed.* \"kiln)")
if(_misuse_flags)
  set(_kiln_error "${_kiln_error}|error: #error \"kiln")
endif()
if(NOT _first_error MATCHES "${_kiln_error}")
  message(FATAL_ERROR "the first error for ${SOURCE} is not kiln's:\n${ko_err}")
endif()
file(STRINGS ${SOURCE} _expect_count REGEX "^// expect-errors: [0-9]+$")
if(_expect_count)
  string(REGEX REPLACE "^// expect-errors: " "" _expect_count "${_expect_count}")
  if(NOT _error_count EQUAL _expect_count)
    message(FATAL_ERROR "${SOURCE} gave ${_error_count} errors, not ${_expect_count}:\n${ko_err}")
  endif()
endif()
message(STATUS "rejected as documented: ${SOURCE}")
