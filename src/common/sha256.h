// SHA-256, to record which dataset a capture came from and to refuse resuming over a changed one.
#pragma once

#include <string>

#include "common/block_hash.h"

namespace probekit {

/// update() the bytes, then take hex_digest().
class Sha256 : public BlockHash<8> {
 public:
  Sha256();
};

/// Hex SHA-256 of a file's bytes, read in chunks.
std::string sha256_file(const std::string& path);

}  // namespace probekit
