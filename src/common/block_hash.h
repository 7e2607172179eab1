// The Merkle-Damgård frame that SHA-1 and SHA-256 share (FIPS 180-4): the bytes are cut into 64-byte blocks,
// each compressed into a state of 32-bit words; the message ends with a 0x80 byte, zeros up to byte 56 of a block
// and its length in bits as a big-endian 64-bit number. Only the compression function and the initial state differ.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace probekit {

/// The 16 big-endian 32-bit words of a 64-byte block.
inline void load_block_words(const uint8_t* block, uint32_t* words) {
  for (int i = 0; i < 16; ++i) {
    words[i] = (uint32_t{block[4 * i]} << 24) | (uint32_t{block[4 * i + 1]} << 16) |
               (uint32_t{block[4 * i + 2]} << 8) | uint32_t{block[4 * i + 3]};
  }
}

template <size_t kStateWords>
class BlockHash {
 public:
  using State = std::array<uint32_t, kStateWords>;
  /// Mixes one 64-byte block into the state.
  using Compress = void (*)(State& state, const uint8_t* block);

  BlockHash(const State& initial, Compress compress) : state_(initial), compress_(compress) {}

  void update(std::string_view bytes) {
    const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
    size_t size = bytes.size();
    length_ += size;
    while (size > 0) {
      size_t take = std::min(size, sizeof(buffer_) - buffered_);
      std::memcpy(buffer_ + buffered_, data, take);
      buffered_ += take;
      data += take;
      size -= take;
      if (buffered_ == sizeof(buffer_)) {
        compress_(state_, buffer_);
        buffered_ = 0;
      }
    }
  }

  /// Lower-case hex digest; the object must not be updated afterwards.
  std::string hex_digest() {
    uint64_t bits = length_ * 8;
    uint8_t padding[72] = {0x80};
    size_t pad = (buffered_ < 56 ? 56 : 120) - buffered_;
    uint8_t length_bytes[8];
    for (int i = 0; i < 8; ++i) length_bytes[i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
    update(std::string_view(reinterpret_cast<const char*>(padding), pad));
    update(std::string_view(reinterpret_cast<const char*>(length_bytes), 8));
    static const char* kHex = "0123456789abcdef";
    std::string hex;
    for (uint32_t word : state_) {
      for (int shift = 28; shift >= 0; shift -= 4) hex.push_back(kHex[(word >> shift) & 0xf]);
    }
    return hex;
  }

 private:
  State state_;
  Compress compress_;
  uint8_t buffer_[64] = {};
  uint64_t length_ = 0;
  size_t buffered_ = 0;
};

}  // namespace probekit
