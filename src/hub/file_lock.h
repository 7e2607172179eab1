// An exclusive lock on a file, held by flock(2) as huggingface_hub's FileLock does on Unix: our tools and Python
// downloading the same blob at once exclude each other. The lock file itself is left in place (both sides only
// lock it, never remove it).
#pragma once

#include <string>

namespace probekit::hub {

class FileLock {
 public:
  /// Blocks until the lock on `path` (created if missing, with its folder) is held; `waiting` is logged once if
  /// another process holds it.
  FileLock(const std::string& path, const std::string& waiting);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace probekit::hub
