#pragma once
// Whole-file replacement that a crash or SIGKILL can never leave half-written: the bytes go to an
// unnamed temporary file in the target's directory (O_TMPFILE where the filesystem has it, else a
// hidden named one), are flushed, and only then take the target's name with rename(2).
#include <string>

namespace ddpbench {

// Throws std::runtime_error naming the path on any failure; the target is then untouched.
void write_file_atomically(const std::string& path, const std::string& contents);

// Checks, without creating anything that stays, that `path` can be written atomically: its
// directory exists and is writable, and the path is not a directory. Throws UsageError naming
// `flag` and the path.
void check_writable_output(const std::string& flag, const std::string& path);

}  // namespace ddpbench
