#include "hub/file_lock.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/error.h"
#include "common/files.h"

namespace probekit::hub {

FileLock::FileLock(const std::string& path, const std::string& waiting) {
  make_directories(parent_directory(path));
  // 0664 as huggingface_hub: a cache shared by a group is locked by each of its users.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0664);
  if (fd_ < 0) fail("cannot open the lock file {}: {}", path, std::strerror(errno));
  // The mode whatever the umask, as filelock sets it (regression: 0644 under umask 022 locked the group out). Only the
  // file's owner may change it: another's lock file keeps the mode its owner gave it.
  ::fchmod(fd_, 0664);
  // Said at once and every 10 s, as huggingface_hub says it, so that a wait on another process is not taken for a
  // hang (regression: said once, at info, which --quiet hides).
  auto next_notice = std::chrono::steady_clock::now();
  while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) {
      int err = errno;
      ::close(fd_);
      fail("cannot lock {}: {}", path, std::strerror(err));
    }
    if (std::chrono::steady_clock::now() >= next_notice) {
      spdlog::warn("{} (still waiting: {})", waiting, path);
      next_notice += std::chrono::seconds(10);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

FileLock::~FileLock() {
  // Closing the descriptor releases the flock.
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace probekit::hub
