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

namespace {

// Label means: random directions scaled to the label's signal.
std::vector<float> label_means(const SyntheticActivations& spec, int64_t labels) {
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
  return means;
}

// Each split's labels in a shuffled order, with per-token offsets and token ids when the spec has tokens.
std::array<activations::SplitLayout, 3> synthetic_layouts(const SyntheticActivations& spec, int64_t labels) {
  std::array<activations::SplitLayout, 3> layouts;
  for (size_t s = 0; s < 3; ++s) {
    activations::SplitLayout& layout = layouts[s];
    std::vector<int64_t> in_order;
    for (int64_t c = 0; c < labels; ++c) in_order.insert(in_order.end(), spec.examples[c][s], c);
    for (int64_t i : shuffled_order(stream_key(spec.seed, Stream::kBatchOrder, 1000 + s),
                                    static_cast<int64_t>(in_order.size()))) {
      layout.labels.push_back(in_order[i]);
    }
    for (size_t i = 0; i < layout.labels.size(); ++i) layout.example_index.push_back(static_cast<int64_t>(i));
    if (spec.max_tokens <= 0) continue;
    uint64_t length_key = stream_key(spec.seed, Stream::kBatchOrder, 3000 + s);
    layout.offsets.push_back(0);
    for (size_t i = 0; i < layout.labels.size(); ++i) {
      auto span = static_cast<double>(spec.max_tokens - spec.min_tokens + 1);
      auto tokens = spec.min_tokens + static_cast<int64_t>(draw_uniform(length_key, i) * span);
      for (int64_t t = 0; t < tokens; ++t) layout.token_ids.push_back(t);
      layout.offsets.push_back(layout.offsets.back() + tokens);
    }
  }
  return layouts;
}

// A split's rows: noise, plus the label's mean on every row (one row per example) or on one marker token.
std::vector<float> synthetic_rows(const SyntheticActivations& spec, const activations::SplitLayout& layout,
                                  const std::vector<float>& means, uint64_t split) {
  const int64_t rows = layout.rows();
  std::vector<float> data(static_cast<size_t>(rows * spec.hidden));
  uint64_t noise_key = stream_key(spec.seed, Stream::kDropout, 2000 + split);
  for (int64_t r = 0; r < rows * spec.hidden; ++r) data[r] = static_cast<float>(draw_normal(noise_key, r));
  uint64_t marker_key = stream_key(spec.seed, Stream::kDropout, 4000 + split);
  for (int64_t e = 0; e < layout.examples(); ++e) {
    int64_t row = e;
    if (!layout.offsets.empty()) {
      const int64_t tokens = layout.offsets[e + 1] - layout.offsets[e];
      const auto at = 1 + static_cast<int64_t>(draw_uniform(marker_key, e) * static_cast<double>(tokens - 2));
      row = layout.offsets[e] + at;
    }
    for (int64_t j = 0; j < spec.hidden; ++j) data[row * spec.hidden + j] += means[layout.labels[e] * spec.hidden + j];
  }
  return data;
}

}  // namespace

void write_synthetic_activation_file(const std::string& path, const SyntheticActivations& spec) {
  auto labels = static_cast<int64_t>(spec.label_names.size());
  if (static_cast<int64_t>(spec.examples.size()) != labels) {
    fail_input("synthetic activations: {} labels but {} example counts", labels, spec.examples.size());
  }
  if (spec.max_tokens > 0 && (spec.min_tokens < 3 || spec.min_tokens > spec.max_tokens)) {
    fail_input("synthetic activations: tokens per text {} to {} (at least 3)", spec.min_tokens, spec.max_tokens);
  }
  std::vector<float> means = label_means(spec, labels);
  activations::FileAttributes attributes;
  attributes.recipe.model_name = "synthetic";
  attributes.layers = {spec.layer};
  attributes.layer = spec.layer;
  attributes.label_names = spec.label_names;
  attributes.hidden_size = spec.hidden;
  attributes.recipe.dtype = "fp32";
  attributes.seed = static_cast<int64_t>(spec.seed);
  if (spec.max_tokens > 0) attributes.recipe.position = Position::kAll;
  std::array<activations::SplitLayout, 3> layouts = synthetic_layouts(spec, labels);
  auto writer = activations::ActivationWriter::create(path, attributes, layouts, false);
  int64_t done = 0;
  for (activations::Split split : activations::kSplits) {
    const activations::SplitLayout& layout = layouts[static_cast<size_t>(split)];
    std::vector<float> data = synthetic_rows(spec, layout, means, static_cast<uint64_t>(split));
    writer.write_rows(split, 0, layout.rows(), data.data());
    done += layout.examples();
    writer.commit(done);
  }
  writer.finish();
}

}  // namespace probekit::probes
