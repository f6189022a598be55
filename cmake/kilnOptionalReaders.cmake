# kiln::csv (kiln/data/csv.hpp: libcsv, Debian's libcsv-dev) and kiln::npz
# (kiln/data/npz.hpp: minizip, Debian's libminizip-dev), each defined when its
# library is found. Used by kiln's own build and, installed, by
# kilnConfig.cmake (find_package(kiln COMPONENTS csv npz)), so that a
# consumer finds the library on its own machine, never a path from kiln's.
function(kiln_optional_reader target header library)
  if(TARGET kiln::${target})
    set(kiln_${target}_FOUND TRUE PARENT_SCOPE)
    return()
  endif()
  find_path(KILN_${target}_INCLUDE_DIR ${header})
  find_library(KILN_${target}_LIBRARY ${library})
  if(KILN_${target}_INCLUDE_DIR AND KILN_${target}_LIBRARY)
    add_library(kiln::${target} INTERFACE IMPORTED GLOBAL)
    target_include_directories(kiln::${target} INTERFACE ${KILN_${target}_INCLUDE_DIR})
    target_link_libraries(kiln::${target} INTERFACE kiln::kiln ${KILN_${target}_LIBRARY})
    set(kiln_${target}_FOUND TRUE PARENT_SCOPE)
  else()
    set(kiln_${target}_FOUND FALSE PARENT_SCOPE)
  endif()
endfunction()
kiln_optional_reader(csv csv.h csv)
kiln_optional_reader(npz minizip/unzip.h minizip)
