// One process at a time in a directory: an exclusive flock(2) on a lock file there, held while the object lives
// and released by the system however the process ends, the holder's process id written in the file so that the
// next one can name it.
#pragma once

#include <string>

namespace probekit {

class RunLock {
 public:
  /// Takes the lock on `path` (created if missing) without waiting. When another process holds it, throws
  /// std::invalid_argument: "`busy` (process PID holds PATH); `advice`".
  RunLock(const std::string& path, const std::string& busy, const std::string& advice);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace probekit
