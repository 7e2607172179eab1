#include "probes/synthetic_activations.h"

#include <cmath>

#include "common/error.h"
#include "activations/activation_store.h"
#include "probes/random_streams.h"

namespace probekit::probes {

namespace {

// A standard normal draw by Box-Muller from two uniforms of stream `key`.
double draw_normal(uint64_t key, uint64_t index) {
  double u1 = 1.0 - draw_uniform(key, 2 * index);  // (0, 1]: log stays finite
  double u2 = draw_uniform(key, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace

SyntheticActivations uniform_synthetic(int64_t labels, std::array<int64_t, 3> examples_per_label, int64_t hidden) {
  SyntheticActivations spec;
  for (int64_t i = 0; i < labels; ++i) {
    spec.label_names.push_back("label_" + std::string(i < 10 ? "0" : "") + std::to_string(i));
  }
  spec.examples.assign(static_cast<size_t>(labels), examples_per_label);
  spec.hidden = hidden;
  return spec;
}

void write_synthetic_activation_file(const std::string& path, const SyntheticActivations& spec) {
  auto labels = static_cast<int64_t>(spec.label_names.size());
  if (static_cast<int64_t>(spec.examples.size()) != labels) {
    fail_input("synthetic activations: {} labels but {} example counts", labels, spec.examples.size());
  }
  // Label means: random directions scaled to the label's signal.
  std::vector<float> means(static_cast<size_t>(labels * spec.hidden));
  uint64_t mean_key = stream_key(spec.seed, Stream::kInitialization, 1);
  for (int64_t c = 0; c < labels; ++c) {
    double signal = spec.signal.empty() ? 1.0 : spec.signal.at(static_cast<size_t>(c));
    double norm = 0.0;
    std::vector<double> direction(static_cast<size_t>(spec.hidden));
    for (int64_t j = 0; j < spec.hidden; ++j) {
      direction[j] = draw_normal(mean_key, static_cast<uint64_t>(c * spec.hidden + j));
      norm += direction[j] * direction[j];
    }
    for (int64_t j = 0; j < spec.hidden; ++j) {
      means[c * spec.hidden + j] = static_cast<float>(signal * direction[j] / std::sqrt(norm));
    }
  }

  activations::FileAttributes attributes;
  attributes.model_name = "synthetic";
  attributes.layers = {spec.layer};
  attributes.layer = spec.layer;
  attributes.label_names = spec.label_names;
  attributes.hidden_size = spec.hidden;
  attributes.dtype = "fp32";
  attributes.seed = static_cast<int64_t>(spec.seed);
  std::array<activations::SplitLayout, 3> layouts;
  for (size_t s = 0; s < 3; ++s) {
    std::vector<int64_t>& split_labels = layouts[s].labels;
    for (int64_t c = 0; c < labels; ++c) split_labels.insert(split_labels.end(), spec.examples[c][s], c);
    std::vector<int64_t> order =
        shuffled_order(stream_key(spec.seed, Stream::kBatchOrder, 1000 + s), static_cast<int64_t>(split_labels.size()));
    std::vector<int64_t> shuffled;
    for (int64_t i : order) shuffled.push_back(split_labels[i]);
    split_labels = shuffled;
    for (size_t i = 0; i < split_labels.size(); ++i) layouts[s].example_index.push_back(static_cast<int64_t>(i));
  }
  auto writer = activations::ActivationWriter::create(path, attributes, layouts, false);
  int64_t done = 0;
  for (activations::Split split : activations::kSplits) {
    const auto& split_labels = layouts[static_cast<size_t>(split)].labels;
    auto rows = static_cast<int64_t>(split_labels.size());
    std::vector<float> data(static_cast<size_t>(rows * spec.hidden));
    uint64_t noise_key = stream_key(spec.seed, Stream::kDropout, 2000 + static_cast<uint64_t>(split));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < spec.hidden; ++j) {
        double noise = draw_normal(noise_key, static_cast<uint64_t>(r * spec.hidden + j));
        data[r * spec.hidden + j] = means[split_labels[r] * spec.hidden + j] + static_cast<float>(noise);
      }
    }
    writer.write_rows(split, 0, rows, data.data());
    done += rows;
    writer.commit(done);
  }
  writer.finish();
}

}  // namespace probekit::probes
