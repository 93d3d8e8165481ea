#pragma once
// Every file a run will write, claimed before anything is measured: each must be writable as
// atomic_file.h checks it, no two outputs of one run may name the same file (the JSON, the trace
// files, the checkpoint), and no two live runs on this machine may write the same file at once.
#include <string>
#include <vector>

namespace ddpbench {

// Makes `dir` and any missing parents, as tools that take an output directory do. Throws
// UsageError naming `flag` when it cannot (a file in the way, no permission).
void make_output_directory(const std::string& flag, const std::string& dir);

class OutputClaims {
 public:
  OutputClaims() = default;
  ~OutputClaims();
  OutputClaims(const OutputClaims&) = delete;
  OutputClaims& operator=(const OutputClaims&) = delete;

  // Claims `path` as the output of `flag` for this process's life. Throws UsageError naming the
  // flag (and the other flag, or that another run holds it) when the path cannot be written, is
  // "-", names a file already claimed, or another live ddpbench on this machine claimed it.
  void claim(const std::string& flag, const std::string& path);
  // Names `path` as a file the run reads (`flag`'s: a model, its sidecar, a plug-in library):
  // claiming it as an output afterwards throws UsageError, so no run writes over its own inputs.
  void protect_input(const std::string& flag, const std::string& path);

  // The file a path names for writing by rename: its directory's device and inode, and its name
  // (one directory reached through a symbolic link or a bind mount gives the same output; two hard
  // links are two names, each replaced on its own). Empty when the directory cannot be looked up.
  static std::string identity(const std::string& path);

 private:
  struct Claim {
    std::string flag;
    std::string path;
    std::string identity;
    int lock_fd = -1;
  };
  std::vector<Claim> claims_;
  std::vector<Claim> inputs_;  // no lock: only this run's outputs are kept off them
};

}  // namespace ddpbench
