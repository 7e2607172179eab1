// Synthetic activation files in the capture layout, for tests and benchmarks of the probe trainers: each
// label's examples are Gaussian noise around a mean of its own, so probes can learn them to a chosen degree.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace probekit::probes {

struct SyntheticActivations {
  std::vector<std::string> label_names;
  std::vector<std::array<int64_t, 3>> examples;  // per label: train, val and test examples
  std::vector<double> signal;                    // per label: norm of its mean (0: pure noise); default 1.0
  int64_t hidden = 64;
  // Tokens per text, drawn uniformly in [min_tokens, max_tokens]; 0: one row per example. With tokens the file is
  // a --position all capture: every token is N(0, I) but one, at a uniformly drawn index in [1, T - 2], which is
  // noise + the mean of the text's label (a marker word placed anywhere); the first token id of every text is
  // the same (a BOS).
  int64_t min_tokens = 0, max_tokens = 0;
  int64_t layer = 0;
  uint64_t seed = 1;
};

/// A spec with `labels` labels named label_00, label_01, ..., each with the same split counts.
SyntheticActivations uniform_synthetic(int64_t labels, std::array<int64_t, 3> examples_per_label, int64_t hidden);

/// Writes a complete activation file: x = mean(label) + N(0, I) (or per token, as above), rows of each split in
/// a shuffled order.
void write_synthetic_activation_file(const std::string& path, const SyntheticActivations& spec);

}  // namespace probekit::probes
