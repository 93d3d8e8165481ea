#pragma once
// A POSIX shared-memory object mapped into this process and handed to child processes by file
// descriptor. Its name exists only between shm_open and the shm_unlink right after it, so no exit
// path, not even SIGKILL of every process involved, can leave an object behind in /dev/shm: the
// memory lives as long as some process maps it or holds the descriptor.
#include <cstddef>
#include <string>

namespace ddpbench {

class SharedMemoryRegion {
 public:
  // A new zero-filled object of `bytes`, named `<prefix>-<pid>-<n>` for the moment it has a name.
  // Throws std::runtime_error with the failing call and errno's text.
  static SharedMemoryRegion create(std::size_t bytes, const std::string& prefix);
  // Maps an object received as descriptor `fd` (this object takes the descriptor over).
  static SharedMemoryRegion attach(int fd);

  SharedMemoryRegion() = default;  // no object
  SharedMemoryRegion(SharedMemoryRegion&& other) noexcept;
  SharedMemoryRegion& operator=(SharedMemoryRegion&& other) noexcept;
  SharedMemoryRegion(const SharedMemoryRegion&) = delete;
  SharedMemoryRegion& operator=(const SharedMemoryRegion&) = delete;
  ~SharedMemoryRegion();

  void* data() const { return data_; }
  std::size_t size() const { return size_; }
  int fd() const { return fd_; }  // close-on-exec: a child gets it only through an explicit dup2

 private:
  SharedMemoryRegion(int fd, void* data, std::size_t size) : fd_(fd), data_(data), size_(size) {}
  void release();

  int fd_ = -1;
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace ddpbench
