#include "distributed/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace ddpbench {
namespace {

std::runtime_error system_error(const std::string& what) {
  return std::runtime_error("shared memory: " + what + ": " + std::strerror(errno));
}

void* map(int fd, std::size_t bytes) {
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    const auto error = system_error("mmap of " + std::to_string(bytes) + " bytes");
    ::close(fd);
    throw error;
  }
  return data;
}

}  // namespace

SharedMemoryRegion SharedMemoryRegion::create(std::size_t bytes, const std::string& prefix) {
  static std::atomic<int> counter{0};
  const std::string name = "/" + prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw system_error("shm_open " + name);
  ::shm_unlink(name.c_str());  // nameless from here on: nothing to clean up on any exit path
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const auto error = system_error("ftruncate to " + std::to_string(bytes) + " bytes");
    ::close(fd);
    throw error;
  }
  // ftruncate only sets the size: a page the file system (tmpfs, /dev/shm) cannot back would be
  // found at the first write into it, as SIGBUS in whichever process touched it. Allocating every
  // page now turns a /dev/shm too small (a container's 64 MiB) into an error here, with its size.
  if (const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)); rc != 0) {
    ::close(fd);
    throw std::runtime_error("shared memory: /dev/shm cannot hold " + std::to_string(bytes) + " bytes (" +
                             std::strerror(rc) + "); give it more room (a container's --shm-size)");
  }
  return SharedMemoryRegion(fd, map(fd, bytes), bytes);
}

SharedMemoryRegion SharedMemoryRegion::attach(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw system_error("fstat of descriptor " + std::to_string(fd));
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  const auto bytes = static_cast<std::size_t>(st.st_size);
  return SharedMemoryRegion(fd, map(fd, bytes), bytes);
}

SharedMemoryRegion::SharedMemoryRegion(SharedMemoryRegion&& other) noexcept
    : fd_(other.fd_), data_(other.data_), size_(other.size_) {
  other.fd_ = -1;
  other.data_ = nullptr;
  other.size_ = 0;
}

SharedMemoryRegion& SharedMemoryRegion::operator=(SharedMemoryRegion&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = other.fd_;
    data_ = other.data_;
    size_ = other.size_;
    other.fd_ = -1;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

SharedMemoryRegion::~SharedMemoryRegion() { release(); }

void SharedMemoryRegion::release() {
  if (data_ != nullptr) ::munmap(data_, size_);
  if (fd_ >= 0) ::close(fd_);
  data_ = nullptr;
  fd_ = -1;
}

}  // namespace ddpbench
