// SHA-1, only to check small files against their etag: the hub names a file kept in git (not LFS) by git's blob
// hash, sha1("blob <size>\0" + bytes).
#pragma once

#include <cstdint>
#include <string>

#include "common/block_hash.h"

namespace probekit::hub {

/// update() the bytes, then take hex_digest().
class Sha1 : public BlockHash<5> {
 public:
  Sha1();
};

/// The header git hashes in front of a blob's bytes: "blob <size>\0".
std::string git_blob_header(uint64_t size);

}  // namespace probekit::hub
