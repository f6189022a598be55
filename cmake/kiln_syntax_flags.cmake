# The flags that check a C++20 file against kiln without building it:
# kiln_syntax_flags(<out-var> "<include dirs>").
function(kiln_syntax_flags out includes)
  set(flags -std=c++20 -fsyntax-only)
  foreach(dir IN LISTS includes)
    if(dir)
      list(APPEND flags -isystem ${dir})
    endif()
  endforeach()
  set(${out} ${flags} PARENT_SCOPE)
endfunction()
