#include "inference/engine.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "capture/pooling.h"
#include "capture/prompts.h"
#include "common/error.h"

namespace probekit::inference {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// Continuations scored per forward pass in per-token mode (bounds the keys/values held at once).
constexpr int64_t kContinuationsPerPass = 64;

std::string index_string(const probes::BinaryProbeSet& set, const char* key) {
  return set.index().value(key, std::string());
}

}  // namespace

Engine::Engine(Engine&&) noexcept = default;
Engine::~Engine() = default;

Engine Engine::load(const EngineOptions& options) {
  auto start = std::chrono::steady_clock::now();
  auto since_start = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  Engine engine;
  engine.options_ = options;
  engine.catalog_ = find_probes(options.probes_dir);
  const ProbeCatalog& catalog = engine.catalog_;
  engine.layers_ = select_layers(catalog, options.layers, options.layer, options.best_layer);
  model::ModelConfig config = model::load_config(options.model_dir);
  model::LoadOptions load;
  load.last_layer = *std::max_element(engine.layers_.begin(), engine.layers_.end());
  load.final_norm = false;
  load.embeddings_on_host = true;
  // The disk is the slowest part of a cold start: it works while the device, probes and tokenizer get ready.
  model::WeightReadAhead read_ahead(options.model_dir, load);
  engine.target_ = device::select_compute(options.device, options.dtype);
  spdlog::debug("{:.2f} s: device ready", since_start());

  // Probes of every selected layer; each layer must agree on how its activations were made.
  std::map<int64_t, std::string> label_by_index;
  for (int64_t layer : engine.layers_) {
    auto found = catalog.layer_dirs.find(layer);
    std::string dir = found != catalog.layer_dirs.end() ? found->second : catalog.layer_dirs.begin()->second;
    probes::BinaryProbeSet set = probes::BinaryProbeSet::load(dir, engine.target_.device, at::kFloat);
    if (set.layer() < 0 && options.layer < 0) {
      fail_input("{}: the probes do not record the layer they were trained on; pass --layer", dir);
    }
    if (set.layer() >= 0 && set.layer() != layer) {
      spdlog::warn("{}: probes trained on layer {} are run on layer {} (--layer)", dir, set.layer(), layer);
    }
    if (set.shape().input_dim != config.hidden_size) {
      fail_input("{}: the probes take {} inputs but the model in {} has hidden size {} (probes of another model?)",
                 dir, set.shape().input_dim, options.model_dir, config.hidden_size);
    }
    if (layer >= config.num_layers) {
      fail_input("{}: probes of layer {}, but the model in {} has {} layers (0 to {})", dir, layer, options.model_dir,
                 config.num_layers, config.num_layers - 1);
    }
    std::string suffix = set.index().value("prompt_suffix", std::string(capture::kDefaultPromptSuffix));
    std::string site = index_string(set, "site"), position = index_string(set, "position");
    if (engine.probes_.empty()) {
      engine.prompt_suffix_ = suffix;
      engine.site_ = capture::parse_site(site.empty() ? "resid_post" : site);
      engine.position_ = capture::parse_position(position.empty() ? "last" : position);
      if (engine.position_ == capture::Position::kAll) {
        fail_input("{}: probes trained on every token (position all) score one row per token; they are not "
                   "supported here",
                   dir);
      }
    } else if (suffix != engine.prompt_suffix_ || capture::parse_site(site.empty() ? "resid_post" : site) != engine.site_ ||
               capture::parse_position(position.empty() ? "last" : position) != engine.position_) {
      fail_input("{}: these probes were trained with another prompt suffix, site or position than those of layer {}",
                 dir, engine.layers_.front());
    }
    for (const auto& probe : set.probes()) label_by_index.emplace(probe.label_index, probe.label);
    engine.probes_.push_back(LayerProbes{layer, std::move(set), {}});
  }
  std::set<std::string> seen;
  for (const auto& [index, label] : label_by_index) {
    if (seen.insert(label).second) engine.labels_.push_back(label);
  }
  std::map<std::string, size_t> column;
  for (size_t k = 0; k < engine.labels_.size(); ++k) column[engine.labels_[k]] = k;
  engine.thresholds_.assign(engine.layers_.size(), std::vector<double>(engine.labels_.size(), kNaN));
  engine.aucs_ = engine.thresholds_;
  for (size_t l = 0; l < engine.probes_.size(); ++l) {
    LayerProbes& layer_probes = engine.probes_[l];
    for (const auto& probe : layer_probes.set.probes()) {
      size_t k = column[probe.label];
      layer_probes.label_column.push_back(static_cast<int64_t>(k));
      // In best-layer mode a label is scored at its best layer only.
      bool used = !options.best_layer || catalog.best_layer.count(probe.label) == 0 ||
                  catalog.best_layer.at(probe.label) == layer_probes.layer;
      if (!used) layer_probes.label_column.back() = -1;
      if (used) {
        engine.thresholds_[l][k] = probe.threshold;
        engine.aucs_[l][k] = probe.val_auc;
      }
    }
  }

  spdlog::debug("{:.2f} s: {} probes of {} layers loaded", since_start(), engine.labels_.size(), engine.layers_.size());
  engine.tokenizer_ = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_file(options.model_dir));
  spdlog::debug("{:.2f} s: tokenizer loaded", since_start());
  engine.leading_specials_ = capture::leading_special_tokens(*engine.tokenizer_);
  load.device = engine.target_.device;
  load.dtype = engine.target_.dtype;
  engine.model_ = std::make_unique<model::TransformerModel>(model::TransformerModel::load(options.model_dir, load, &read_ahead));
  spdlog::debug("{:.2f} s: model loaded ({:.2f} GB of weights)", since_start(),
                static_cast<double>(engine.model_->weight_bytes()) / 1e9);
  return engine;
}

at::Tensor Engine::probabilities(const LayerProbes& probes, const at::Tensor& rows) const {
  return at::sigmoid(probes.set.logits(rows.to(at::kFloat))).to(at::kCPU, at::kDouble).contiguous();
}

std::vector<TextScores> Engine::score(const std::vector<std::string>& texts) const {
  std::vector<std::string> prompts;
  for (const std::string& text : texts) prompts.push_back(text + prompt_suffix_);
  std::vector<std::vector<int32_t>> ids = tokenizer_->encode_batch(prompts, true);
  std::vector<TextScores> scores(texts.size());
  std::map<int64_t, size_t> slot;
  for (size_t l = 0; l < layers_.size(); ++l) slot[layers_[l]] = l;
  auto batch_size = static_cast<size_t>(std::max<int64_t>(1, options_.batch_size));
  for (size_t start = 0; start < ids.size(); start += batch_size) {
    size_t end = std::min(ids.size(), start + batch_size);
    int64_t longest = 0;
    for (size_t i = start; i < end; ++i) {
      model_->check_inputs(ids[i]);
      longest = std::max<int64_t>(longest, static_cast<int64_t>(ids[i].size()));
    }
    auto count = static_cast<int64_t>(end - start);
    at::Tensor input = at::zeros({count, longest}, at::kLong), lengths = at::empty({count}, at::kLong);
    for (int64_t b = 0; b < count; ++b) {
      const auto& row = ids[start + static_cast<size_t>(b)];
      std::copy(row.begin(), row.end(), input[b].data_ptr<int64_t>());
      lengths[b] = static_cast<int64_t>(row.size());
    }
    at::Tensor device_lengths = lengths.to(target_.device);
    std::vector<at::Tensor> rows(layers_.size());
    model::TensorHook hook = [&](std::string_view name, int64_t layer, const at::Tensor& hidden) {
      auto found = slot.find(layer);
      if (name == capture::hook_name(site_) && found != slot.end()) {
        rows[found->second] = capture::pool(hidden, device_lengths, position_, leading_specials_);
      }
    };
    model::ForwardPass pass;
    pass.input_ids = input.to(target_.device);
    pass.last_layer = layers_.back();
    pass.hook = &hook;
    pass.hook_sites = model::hook_site(capture::hook_name(site_));
    model_->forward(pass);
    for (size_t l = 0; l < layers_.size(); ++l) {
      at::Tensor p = probabilities(probes_[l], rows[l]);
      const double* data = p.data_ptr<double>();
      for (int64_t b = 0; b < count; ++b) {
        TextScores& s = scores[start + static_cast<size_t>(b)];
        if (s.probability.empty()) s.probability.assign(layers_.size(), std::vector<double>(labels_.size(), kNaN));
        for (size_t j = 0; j < probes_[l].label_column.size(); ++j) {
          int64_t k = probes_[l].label_column[j];
          if (k >= 0) s.probability[l][static_cast<size_t>(k)] = data[b * p.size(1) + static_cast<int64_t>(j)];
        }
      }
    }
  }
  spdlog::debug("{} texts scored", texts.size());
  return scores;
}

TokenScores Engine::score_tokens(const std::string& text) const {
  if (position_ != capture::Position::kLast) {
    fail_input("--per-token needs probes trained on the last token (these used position '{}')",
               capture::position_name(position_));
  }
  TokenScores result;
  result.ids = tokenizer_->encode(text, true);
  std::vector<int32_t> suffix = tokenizer_->encode(prompt_suffix_, false);
  result.tokens = tokenizer_->tokens(result.ids);
  for (int32_t id : result.ids) result.texts.push_back(tokenizer_->decode({id}));
  std::vector<int32_t> longest = result.ids;
  longest.insert(longest.end(), suffix.begin(), suffix.end());
  model_->check_inputs(longest);
  const auto tokens = static_cast<int64_t>(result.ids.size()), suffix_length = static_cast<int64_t>(suffix.size());
  result.probability.assign(static_cast<size_t>(tokens),
                            std::vector<std::vector<double>>(layers_.size(), std::vector<double>(labels_.size(), kNaN)));
  std::map<int64_t, size_t> slot;
  for (size_t l = 0; l < layers_.size(); ++l) slot[layers_[l]] = l;
  auto options = at::TensorOptions().dtype(at::kLong);

  // Rows [N, H] per layer at the site, for N token positions -> probabilities into result rows [first, first + N).
  auto store = [&](const std::vector<at::Tensor>& rows, int64_t first) {
    for (size_t l = 0; l < layers_.size(); ++l) {
      at::Tensor p = probabilities(probes_[l], rows[l]);
      const double* data = p.data_ptr<double>();
      for (int64_t t = 0; t < p.size(0); ++t) {
        for (size_t j = 0; j < probes_[l].label_column.size(); ++j) {
          int64_t k = probes_[l].label_column[j];
          if (k >= 0) result.probability[static_cast<size_t>(first + t)][l][static_cast<size_t>(k)] = data[t * p.size(1) + static_cast<int64_t>(j)];
        }
      }
    }
  };

  std::vector<at::Tensor> rows(layers_.size());
  model::KvCache cache;
  model::ForwardPass text_pass;
  text_pass.input_ids = at::tensor(std::vector<int64_t>(result.ids.begin(), result.ids.end()), options).unsqueeze(0).to(target_.device);
  text_pass.last_layer = layers_.back();
  // Without a suffix, position t of the text itself is what the probes see for prefix t.
  model::TensorHook text_hook = [&](std::string_view name, int64_t layer, const at::Tensor& hidden) {
    auto found = slot.find(layer);
    if (name == capture::hook_name(site_) && found != slot.end()) rows[found->second] = hidden[0];
  };
  if (suffix.empty()) {
    text_pass.hook = &text_hook;
    text_pass.hook_sites = model::hook_site(capture::hook_name(site_));
    model_->forward(text_pass);
    store(rows, 0);
    return result;
  }
  text_pass.record = &cache;
  model_->forward(text_pass);

  // Continuation t: the suffix at positions t + 1 ... t + S, attending to text positions [0, t].
  at::Tensor suffix_ids = at::tensor(std::vector<int64_t>(suffix.begin(), suffix.end()), options);
  for (int64_t first = 0; first < tokens; first += kContinuationsPerPass) {
    int64_t count = std::min(kContinuationsPerPass, tokens - first);
    at::Tensor prefix_lengths = at::arange(first + 1, first + count + 1, options);
    model::ForwardPass pass;
    pass.input_ids = suffix_ids.unsqueeze(0).expand({count, suffix_length}).contiguous().to(target_.device);
    pass.positions = (prefix_lengths.unsqueeze(1) + at::arange(suffix_length, options).unsqueeze(0)).to(target_.device);
    pass.prefix = &cache;
    pass.prefix_lengths = prefix_lengths.to(target_.device);
    pass.last_layer = layers_.back();
    model::TensorHook hook = [&](std::string_view name, int64_t layer, const at::Tensor& hidden) {
      auto found = slot.find(layer);
      if (name == capture::hook_name(site_) && found != slot.end()) rows[found->second] = hidden.select(1, suffix_length - 1);
    };
    pass.hook = &hook;
    pass.hook_sites = model::hook_site(capture::hook_name(site_));
    model_->forward(pass);
    store(rows, first);
  }
  return result;
}

}  // namespace probekit::inference
