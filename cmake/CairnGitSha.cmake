# Writes OUT (cairn/git_sha.h) with the checkout's commit at build time, "-dirty" when tracked files differ from it,
# and rewrites it only when that changes, so a commit rebuilds provenance.cpp alone and an unchanged tree nothing.
# Run with cmake -DSOURCE_DIR=... -DOUT=... -P CairnGitSha.cmake (libcommon's cairn_git_sha target, every build):
# reading the commit when CMake configures left binaries naming a commit several behind the one they were built from.
set(sha "unknown")
find_package(Git QUIET)
if(GIT_FOUND AND EXISTS "${SOURCE_DIR}/.git")
  execute_process(COMMAND "${GIT_EXECUTABLE}" rev-parse --short=12 HEAD WORKING_DIRECTORY "${SOURCE_DIR}"
    OUTPUT_VARIABLE head OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc ERROR_QUIET)
  if(rc EQUAL 0 AND head)
    set(sha "${head}")
    execute_process(COMMAND "${GIT_EXECUTABLE}" diff-index --quiet HEAD -- WORKING_DIRECTORY "${SOURCE_DIR}"
      RESULT_VARIABLE dirty ERROR_QUIET)
    if(dirty EQUAL 1)
      string(APPEND sha "-dirty")
    endif()
  endif()
endif()
set(text "// Generated at build time by cmake/CairnGitSha.cmake: the commit this build is from.\n#pragma once\n#define CAIRN_GIT_SHA \"${sha}\"\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
