# Bakes the git revision into the binary. The git HEAD and the current branch ref are configure
# dependencies, so a commit re-runs this and recompiles one small file, nothing else.
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
