#include "capture/batching.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "common/error.h"

namespace probekit::capture {

std::string Batching::encode() const {
  return fmt::format("{},{},{}{}", window, token_budget, max_examples, packed ? ",packed" : "");
}

Batching Batching::decode(const std::string& text) {
  Batching b;
  char packed[8] = {};
  // Files written before packed batches were planned by their own tokens record three numbers.
  const int fields = std::sscanf(text.c_str(), "%ld,%ld,%ld,%7s", &b.window, &b.token_budget, &b.max_examples, packed);
  b.packed = fields == 4 && std::string(packed) == "packed";
  if ((fields != 3 && !b.packed) || b.window <= 0 || b.token_budget <= 0 || b.max_examples <= 0) {
    fail("the partial file records no usable batching ('{}'); start again with --overwrite", text);
  }
  return b;
}

std::vector<std::vector<int64_t>> plan_window_batches(const std::vector<int64_t>& lengths, int64_t begin, int64_t end,
                                                      const Batching& batching) {
  std::vector<int64_t> order(static_cast<size_t>(end - begin));
  std::iota(order.begin(), order.end(), begin);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return lengths[static_cast<size_t>(a)] > lengths[static_cast<size_t>(b)];
  });
  std::vector<std::vector<int64_t>> batches;
  int64_t tokens = 0;  // the current batch's own tokens
  for (int64_t position : order) {
    const int64_t length = lengths[static_cast<size_t>(position)];
    if (!batches.empty()) {
      auto& current = batches.back();
      // Sorted longest first, so a padded batch's first example sets its padded length.
      const auto count = static_cast<int64_t>(current.size());
      const int64_t cost =
          batching.packed ? tokens + length : (count + 1) * lengths[static_cast<size_t>(current.front())];
      if (count < batching.max_examples && cost <= batching.token_budget) {
        current.push_back(position);
        tokens += length;
        continue;
      }
    }
    batches.push_back({position});
    tokens = length;
  }
  return batches;
}

std::vector<std::vector<int64_t>> with_finer_tail(std::vector<std::vector<int64_t>> batches, size_t count, size_t parts) {
  const size_t first = batches.size() - std::min(count, batches.size());
  std::vector<std::vector<int64_t>> result(std::make_move_iterator(batches.begin()),
                                           std::make_move_iterator(batches.begin() + static_cast<std::ptrdiff_t>(first)));
  for (size_t b = first; b < batches.size(); ++b) {
    const std::vector<int64_t>& batch = batches[b];
    const size_t pieces = std::max<size_t>(1, std::min(parts, batch.size()));
    for (size_t p = 0; p < pieces; ++p) {
      result.emplace_back(batch.begin() + static_cast<std::ptrdiff_t>(batch.size() * p / pieces),
                          batch.begin() + static_cast<std::ptrdiff_t>(batch.size() * (p + 1) / pieces));
    }
  }
  return result;
}

}  // namespace probekit::capture
