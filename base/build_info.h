#pragma once

namespace ddpbench {
// Values baked in at configure time (see cmake/BuildInfo.cmake).
const char* build_version();
const char* build_git_sha();
const char* build_type();
}  // namespace ddpbench
