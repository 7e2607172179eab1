// Counter-based random numbers for probe training: every draw is a pure function of (seed, purpose, a, b,
// index), so a probe's initialisation, the batch order and the dropout masks do not depend on how many
// probes train together, on the device, or on the number of threads (common/counter_random.h).
#pragma once

#include <cstdint>
#include <numeric>
#include <vector>

#include "common/counter_random.h"

namespace probekit::probes {

/// What a stream of draws is for; part of its key so that streams never overlap.
enum class Stream : uint64_t { kInitialization = 1, kBatchOrder = 2, kDropout = 3 };

/// The key of one stream: the seed, its purpose and two coordinates (a label, an epoch, a parameter...).
inline uint64_t stream_key(uint64_t seed, Stream purpose, uint64_t a = 0, uint64_t b = 0) {
  return mix64(mix64(mix64(mix64(seed) ^ static_cast<uint64_t>(purpose)) ^ a) ^ b);
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
