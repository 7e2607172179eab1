// Comparing two activation files as runs that batch differently should agree: everything but the activations
// bitwise, the activations within 1e-5 of the largest value (a batch's shape changes the last bits of a product).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "activations/activation_store.h"

namespace probekit::testing {

inline void check_same_rows(const activations::ActivationFile& a, const activations::ActivationFile& b) {
  for (activations::Split split : activations::kSplits) {
    const auto &x = a.split(split), &y = b.split(split);
    CHECK(x.labels == y.labels);
    CHECK(x.example_index == y.example_index);
    CHECK(x.offsets == y.offsets);
    CHECK(x.token_ids == y.token_ids);
    CHECK(x.metadata == y.metadata);
    REQUIRE(x.activations.size() == y.activations.size());
    double largest = 0, difference = 0;
    for (size_t i = 0; i < x.activations.size(); ++i) {
      largest = std::max(largest, std::fabs(static_cast<double>(y.activations[i])));
      difference = std::max(difference, std::fabs(static_cast<double>(x.activations[i]) - y.activations[i]));
    }
    CHECK_MESSAGE(difference <= 1e-5 * largest, activations::split_name(split), ": ", difference);
  }
}

}  // namespace probekit::testing
