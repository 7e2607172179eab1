// Counter-based random numbers: every draw is a pure function of (key, index), so results do not depend on how
// work is split over probes, threads or devices. Draws hash their counter with SplitMix64's finaliser (Steele,
// Lea and Flood 2014), which passes BigCrush as a counter-based generator. Torch-free: the probe trainers
// (probes/random_streams.h) and the metrics' bootstrap (metrics/bootstrap.h) share it.
#pragma once

#include <cstdint>

namespace probekit {

/// SplitMix64's output function: a bijective mix of 64 bits.
inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
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

}  // namespace probekit
