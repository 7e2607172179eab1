// Counter-based random numbers for probe training: every draw is a pure function of (seed, purpose, a, b,
// index), so a probe's initialisation, the batch order and the dropout masks do not depend on how many
// probes train together, on the device, or on the number of threads. Draws hash their counter with
// SplitMix64's finaliser (Steele, Lea and Flood 2014), which passes BigCrush as a counter-based generator.
#pragma once

#include <cstdint>
#include <numeric>
#include <vector>

namespace probekit::probes {

/// What a stream of draws is for; part of its key so that streams never overlap.
enum class Stream : uint64_t { kInitialization = 1, kBatchOrder = 2, kDropout = 3 };

/// SplitMix64's output function: a bijective mix of 64 bits.
inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// The key of one stream: the seed, its purpose and two coordinates (a label, an epoch, a parameter...).
inline uint64_t stream_key(uint64_t seed, Stream purpose, uint64_t a = 0, uint64_t b = 0) {
  return mix64(mix64(mix64(mix64(seed) ^ static_cast<uint64_t>(purpose)) ^ a) ^ b);
}

/// The 64 random bits at position `index` of stream `key`.
inline uint64_t draw_bits(uint64_t key, uint64_t index) { return mix64(key ^ mix64(index)); }

/// A uniform double in [0, 1) with 53 random bits.
inline double draw_uniform(uint64_t key, uint64_t index) {
  return static_cast<double>(draw_bits(key, index) >> 11) * 0x1.0p-53;
}

/// A uniform integer in [0, bound) by Lemire's multiply-shift (bias below bound / 2^64).
inline uint64_t draw_below(uint64_t key, uint64_t index, uint64_t bound) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(draw_bits(key, index)) * bound) >> 64);
}

/// A permutation of 0..n-1 by Fisher-Yates driven by stream `key`.
inline std::vector<int64_t> shuffled_order(uint64_t key, int64_t n) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  for (int64_t i = n - 1; i > 0; --i) {
    auto j = static_cast<int64_t>(draw_below(key, static_cast<uint64_t>(i), static_cast<uint64_t>(i) + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

}  // namespace probekit::probes
