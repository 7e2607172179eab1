// SHA-1, only to check small files against their etag: the hub names a file kept in git (not LFS) by git's blob
// hash, sha1("blob <size>\0" + bytes).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace probekit::hub {

class Sha1 {
 public:
  Sha1();
  void update(std::string_view bytes);
  /// Lower-case hex digest; the object must not be updated afterwards.
  std::string hex_digest();

 private:
  void compress(const uint8_t* block);
  uint32_t state_[5];
  uint8_t buffer_[64];
  uint64_t length_ = 0;
  size_t buffered_ = 0;
};

/// The header git hashes in front of a blob's bytes: "blob <size>\0".
std::string git_blob_header(uint64_t size);

}  // namespace probekit::hub
