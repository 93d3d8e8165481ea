#pragma once
// Whole-file replacement that a crash or SIGKILL can never leave half-written: the bytes go to an
// unnamed temporary file in the target's directory (O_TMPFILE where the filesystem has it, else a
// hidden named one), are flushed, and only then take the target's name with rename(2).
#include <string>

namespace ddpbench {

// The directory part of `path` ("." when it has none, "/" at the root) and its last component
// (empty when the path ends with '/').
std::string directory_of(const std::string& path);
std::string base_of(const std::string& path);

// Only regular files are replaced, and a replaced file keeps its permission bits: a symbolic link,
// a device, a FIFO or a socket at `path` is refused (rename(2) never writes through a link, but it
// would replace the link, or /dev/null, with a plain file).
// Throws std::runtime_error naming the path on any failure; the target is then untouched.
void write_file_atomically(const std::string& path, const std::string& contents);

// Checks, without creating anything that stays, that `path` can be written atomically: nothing is
// there or a regular file that is not read-only, its directory exists and accepts new files, and
// its name (and the temporary name beside it) fits the filesystem's limits. Throws UsageError
// naming `flag` and the path.
void check_writable_output(const std::string& flag, const std::string& path);

}  // namespace ddpbench
