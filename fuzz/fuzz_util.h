// What the fuzz targets share: where a clean refusal ends and a finding begins, and scratch files.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <typeinfo>

#include "common/files.h"

namespace probekit::fuzz {

/// Stops the run with a message; libFuzzer saves the input that got here as a crash.
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

/// Runs `parse` over untrusted input and returns whether it completed. Our parsers refuse bad input with
/// std::runtime_error or std::invalid_argument carrying the file and the place; any other exception
/// (std::bad_alloc, a container's std::out_of_range or std::length_error, a library's own exception type)
/// would reach the user as a message without context, so it is a finding, like an empty message.
template <typename Parse>
bool completes_or_refuses_cleanly(Parse&& parse) {
  try {
    parse();
    return true;
  } catch (const std::runtime_error& e) {
    if (std::string(e.what()).empty()) finding("std::runtime_error without a message");
  } catch (const std::invalid_argument& e) {
    if (std::string(e.what()).empty()) finding("std::invalid_argument without a message");
  } catch (const std::exception& e) {
    finding(std::string("uncontextualized exception ") + typeid(e).name() + ": " + e.what());
  }
  return false;
}

/// A scratch path for this process, for parsers that read files: $TMPDIR/probekit-fuzz-<pid>-<name>.
inline std::string scratch_path(const std::string& name) {
  return temp_directory() + "/probekit-fuzz-" + std::to_string(::getpid()) + "-" + name;
}

/// Replaces the file at `path` with `size` bytes.
inline void write_bytes(const std::string& path, const uint8_t* data, size_t size) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) finding("cannot create the scratch file " + path);
  for (size_t written = 0; written < size;) {
    ssize_t n = ::write(fd, data + written, size - written);
    if (n <= 0) finding("cannot write the scratch file " + path);
    written += static_cast<size_t>(n);
  }
  ::close(fd);
}

}  // namespace probekit::fuzz
