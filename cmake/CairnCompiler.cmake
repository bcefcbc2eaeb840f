# Compiler warnings and sanitizer settings shared by every cairn target.
add_library(cairn_warnings INTERFACE)
target_compile_options(cairn_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)

# CAIRN_SANITIZE: OFF, ON or address (ASan + UBSan), thread (TSan). The sanitizers instrument C and C++ only:
# sanitizer presets build without CUDA. UB aborts the test (-fno-sanitize-recover) instead of printing a line
# a passing test would hide. scripts/sanitize.sh runs these builds and sets the runtime options and suppressions.
set(CAIRN_SANITIZE OFF CACHE STRING "Sanitizers: OFF, ON/address (ASan + UBSan) or thread (TSan)")
set_property(CACHE CAIRN_SANITIZE PROPERTY STRINGS OFF ON address thread)
string(TOLOWER "${CAIRN_SANITIZE}" cairn_sanitize_kind)
if(cairn_sanitize_kind STREQUAL "on" OR cairn_sanitize_kind STREQUAL "address")
  set(cairn_sanitize_flags -fsanitize=address,undefined -fno-sanitize-recover=undefined)
elseif(cairn_sanitize_kind STREQUAL "thread")
  set(cairn_sanitize_flags -fsanitize=thread)
elseif(CAIRN_SANITIZE)
  message(FATAL_ERROR "CAIRN_SANITIZE=${CAIRN_SANITIZE}: expected OFF, ON, address or thread")
endif()
if(cairn_sanitize_flags)
  # Frame pointers: the sanitizers' fast unwinder needs them for full stacks in reports.
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${cairn_sanitize_flags};-fno-omit-frame-pointer>")
  add_link_options(${cairn_sanitize_flags})
endif()

find_program(CCACHE_PROGRAM ccache)
if(CCACHE_PROGRAM)
  set(CMAKE_CXX_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
  set(CMAKE_C_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
endif()

# The asan preset compiles at -O0 (half the compile time of -O1; its build is most of the asan phase): the code whose
# loops the tests spend their time in (tokenizer, kernels, the flash-attention emulation tests) keeps -O1.
function(cairn_optimize_when_sanitized target)
  if(cairn_sanitize_flags)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:C,CXX>:-O1>)
  endif()
endfunction()
