#include "hub/file_lock.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"
#include "common/files.h"

namespace probekit::hub {

FileLock::FileLock(const std::string& path, const std::string& waiting) {
  make_directories(parent_directory(path));
  // 0664 as huggingface_hub: a cache shared by a group is locked by each of its users.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0664);
  if (fd_ < 0) fail("cannot open the lock file {}: {}", path, std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
  if (errno != EWOULDBLOCK) {
    int err = errno;
    ::close(fd_);
    fail("cannot lock {}: {}", path, std::strerror(err));
  }
  spdlog::info("{}", waiting);
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    int err = errno;
    ::close(fd_);
    fail("cannot lock {}: {}", path, std::strerror(err));
  }
}

FileLock::~FileLock() {
  // Closing the descriptor releases the flock.
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace probekit::hub
