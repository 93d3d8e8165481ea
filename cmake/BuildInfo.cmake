# Bakes the git revision into the binary, marked -dirty where tracked files differ from it. The git
# HEAD and the current branch ref are configure dependencies, so a commit re-runs this and recompiles
# one small file, nothing else.
set(_git_dir "${CMAKE_SOURCE_DIR}/.git")
set(DDPBENCH_GIT_SHA "unknown")
find_package(Git QUIET)
if(GIT_FOUND AND EXISTS "${_git_dir}/HEAD")
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short=12 HEAD
                  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
                  OUTPUT_VARIABLE DDPBENCH_GIT_SHA OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE _git_rc ERROR_QUIET)
  if(NOT _git_rc EQUAL 0)
    set(DDPBENCH_GIT_SHA "unknown")
  else()
    # A tracked file that differs from the commit marks the revision "-dirty": the results then
    # name no commit that holds what ran (the GPU machine's copy carries the landed commit's .git
    # under the working tree sent, and said e1eaf31 for a tree that was fc7724e). Checked when
    # CMake configures, which a commit triggers (below).
    execute_process(COMMAND ${GIT_EXECUTABLE} status --porcelain --untracked-files=no
                    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
                    OUTPUT_VARIABLE _git_status RESULT_VARIABLE _git_status_rc ERROR_QUIET)
    if(_git_status_rc EQUAL 0 AND NOT _git_status STREQUAL "")
      string(APPEND DDPBENCH_GIT_SHA "-dirty")
    endif()
  endif()
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_git_dir}/HEAD")
  file(READ "${_git_dir}/HEAD" _head)
  if(_head MATCHES "^ref: ([^\n]+)")
    if(EXISTS "${_git_dir}/${CMAKE_MATCH_1}")
      set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_git_dir}/${CMAKE_MATCH_1}")
    endif()
  endif()
endif()
set(DDPBENCH_BUILD_INFO_SOURCE "${CMAKE_BINARY_DIR}/generated/build_info.cpp")
configure_file("${CMAKE_SOURCE_DIR}/base/build_info.cpp.in" "${DDPBENCH_BUILD_INFO_SOURCE}" @ONLY)
