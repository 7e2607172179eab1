#include "inference/engine.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "common/error.h"
#include "common/json.h"
#include "hub/resolve.h"
#include "model/placement.h"
#include "model/site_layers.h"
#include "readout/first_pass.h"

namespace probekit::inference {

namespace {

// Probes remember the checkpoint they were trained on (its fingerprint); another one, even of the same width,
// gives meaningless scores.
void check_same_model(const probes::ProbeSet& set, const std::string& dir, const EngineOptions& options,
                      const std::string& fingerprint) {
  const std::string& recorded = set.recipe().model_fingerprint;
  if (recorded.empty() || recorded == fingerprint) return;
  std::string message = fmt::format(
      "{}: these probes were trained on another model ({}, fingerprint {}...), not the one in {} (fingerprint {}...)",
      dir, set.recipe().model_name.empty() ? "?" : set.recipe().model_name, recorded.substr(0, 12), options.model_dir,
      fingerprint.substr(0, 12));
  if (!options.force) fail_input("{}; pass --force to run them anyway", message);
  spdlog::warn("{}; running them anyway (--force)", message);
}


// Checks that the probes of `dir`, trained on `site`, fit the model and the layer they are run on.
void check_fits(const probes::ProbeSet& set, const std::string& dir, int64_t layer, Site site,
                const EngineOptions& options, const model::ModelConfig& config) {
  if (set.layer() < 0 && options.layer < 0) {
    fail_input("{}: the probes do not record the layer they were trained on; pass --layer", dir);
  }
  if (set.layer() >= 0 && set.layer() != layer) {
    spdlog::warn("{}: probes trained on layer {} are run on layer {} (--layer)", dir, set.layer(), layer);
  }
  if (layer >= config.num_layers) {
    const std::string message = fmt::format("{}: probes of layer {}, but the model in {} has {} layers (0 to {})", dir,
                                            layer, options.model_dir, config.num_layers, config.num_layers - 1);
    if (options.layer >= 0) throw UsageError("--layer " + std::to_string(options.layer) + ": " + message);
    throw std::invalid_argument(message);  // the probes' own record names it
  }
  const SiteRow& row = site_row(site);
  if (!row.scorable()) fail_input("{}: probes of site '{}' ({}) cannot score text", dir, row.name, row.meaning);
  const std::vector<int64_t> having = model::layers_having(site, config);
  if (having.empty()) {
    fail_input("{}: the probes read the {} of layer {}, but the model in {} {}", dir, row.name, layer,
               options.model_dir, model::why_no_layer_has(site, config));
  }
  if (std::find(having.begin(), having.end(), layer) == having.end()) {
    fail_input("{}: the probes read the {} of layer {}, but that layer of the model in {} has none (layers {}: {})", dir,
               row.name, layer, options.model_dir, row.routed() ? "with a router" : "that have it",
               fmt::join(having, ","));
  }
  if (set.recipe().sae) return;  // an SAE site's width is the SAE's (Engine::bind_sae)
  if (set.shape().input_dim != readout::site_width(site, config)) {
    fail_input("{}: the probes take {} inputs but {} (probes of another model?)", dir, set.shape().input_dim,
               readout::site_width_described(site, config, options.model_dir));
  }
}

// The model to run: --model, else the one recorded with the probes of the first layer (its hub name pinned to the
// recorded commit, or its folder), as the reference loads the model its probes name.
loading::ModelSource model_for(const EngineOptions& options, const probes::ProbeCatalog& catalog, int64_t layer) {
  if (!options.model_dir.empty()) return loading::find_model(options.model_dir);
  auto found = catalog.layer_dirs.find(layer);
  std::string index_path = (found != catalog.layer_dirs.end() ? found->second : catalog.layer_dirs.begin()->second) +
                           "/probes.json";
  const activations::ReadoutRecipe recipe = probes::recorded_recipe(read_json_file(index_path), index_path);
  std::string model = hub::pinned_model(recipe.model_name, recipe.model_revision);
  if (model.empty()) fail_usage("{} records no model: pass --model", index_path);
  spdlog::info("model {} (recorded in {})", model, index_path);
  try {
    return loading::find_model(model);
  } catch (const std::exception&) {
    rethrow_with_context(fmt::format("the model recorded in {} (pass --model to use another)", index_path));
  }
}

readout::PromptLimit limit_for(int64_t recorded, const model::ModelConfig& config) {
  // Described without capture's flag: multi_probe_inference and probe_server, which print it, have no --max-length.
  if (recorded > 0) return {recorded, fmt::format("the probes' limit of {} tokens (the cut their capture made)", recorded)};
  if (config.max_positions > 0) return {config.max_positions, fmt::format("the model's {} positions", config.max_positions)};
  return {};
}

}  // namespace

Engine::Engine(Engine&&) noexcept = default;
Engine::~Engine() = default;

void Engine::set_saes(std::vector<sae::SparseAutoencoder> saes, const std::vector<sae::SaeSpec>& labels) {
  sae::describe_latents(saes, labels);
  saes_.clear();
  for (const sae::SparseAutoencoder& sae : saes) saes_.push_back(sae.to(target_.device));
  shown_latents_.clear();
  for (const sae::SparseAutoencoder& sae : saes_) shown_latents_.push_back({&sae, SaeOutput::kLatents, kShownLatents, true, false});
}

Engine Engine::load(const EngineOptions& options) {
  auto start = std::chrono::steady_clock::now();
  auto since_start = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  Engine engine;
  engine.options_ = options;
  engine.catalog_ = probes::find_probes(options.probes_dir);
  engine.layers_ = probes::select_layers(engine.catalog_, options.layers, options.layer, options.best_layer);
  const loading::ModelSource source = model_for(options, engine.catalog_, engine.layers_.front());
  engine.options_.model_dir = source.resolved.dir;
  const std::string& model_dir = engine.options_.model_dir;
  const model::ModelConfig& config = source.config;
  model::LoadOptions load = loading::load_options(options);
  // Ranking reads the layers up to the deepest probe; generation runs the whole model to its LM head.
  load.last_layer = options.generate ? -1 : *std::max_element(engine.layers_.begin(), engine.layers_.end());
  // Per-token views show --sae latents, read at the SAEs' own layers.
  std::vector<sae::SparseAutoencoder> saes = sae::load_saes(options.saes, config);
  for (const sae::SparseAutoencoder& sae : saes) {
    if (load.last_layer >= 0) load.last_layer = std::max(load.last_layer, sae.layer);
  }
  load.final_norm = options.generate;
  load.lm_head = options.generate;
  load.embeddings_on_host = !options.generate;
  // The disk is the slowest part of a cold start: it works while the device, probes and tokenizer get ready.
  // The tokenizer and the first pass's one-time set-up on a GPU each take a fraction of a second of their own: they
  // run beside the model's load.
  model::WeightReadAhead read_ahead(model_dir, load);
  auto tokenizer = std::async(std::launch::async, [&model_dir] { return tokenizer::Tokenizer::from_file(model_dir); });
  const std::vector<device::ComputeTarget> targets = loading::select_targets(options);
  engine.target_ = targets.front();
  spdlog::debug("{:.2f} s: device ready", since_start());
  engine.set_saes(std::move(saes), options.sae_labels);
  engine.model_fingerprint_ = read_ahead.checkpoint()->fingerprint();
  engine.load_probes(config);
  if (options.texts_only) engine.require_texts();
  engine.index_labels();
  spdlog::debug("{:.2f} s: {} probes of {} layers loaded", since_start(), engine.labels_.size(), engine.layers_.size());
  std::future<void> rehearsal = engine.rehearse_first_pass(load);
  // Several devices hold one model's layers: inference runs one pass at a time, so replicas would idle.
  const model::DevicePlan placement = loading::place_model(options, source, targets, load);
  if (placement.replicas.size() > 1) spdlog::info("inference uses the first of {} replicas", placement.replicas.size());
  engine.model_ = loading::load_replica(model_dir, targets, placement, 0, load, &read_ahead);
  spdlog::debug("{:.2f} s: model loaded ({:.2f} GB of weights)", since_start(),
                static_cast<double>(engine.model_->weight_bytes()) / 1e9);

  engine.tokenizer_ = std::make_shared<const tokenizer::Tokenizer>(tokenizer.get());
  engine.prepare(config);
  rehearsal.get();
  spdlog::debug("{:.2f} s: tokenizer loaded, first pass rehearsed", since_start());
  return engine;
}

std::future<void> Engine::rehearse_first_pass(model::LoadOptions load) const {
  if (!target_.is_gpu()) return std::async(std::launch::deferred, [] {});
  load.device = target_.device;
  load.dtype = target_.dtype;
  // The probes' first products are part of the set-up too: they score the stand-in's rows where they take them.
  auto score_rows = [this](const at::Tensor& rows) {
    for (const LayerProbes& layer_probes : probes_) {
      const probes::ProbeShape& shape = layer_probes.set.shape();
      if (shape.kind->reads_every_token() || shape.input_dim != rows.size(-1)) continue;
      layer_probes.set.probabilities(rows.select(1, 0).to(at::kFloat));
    }
  };
  return readout::rehearse_first_pass(options_.model_dir, std::move(load), request_, score_rows);
}

Engine Engine::attach(const EngineOptions& options, const loading::SharedModel& model) {
  Engine engine;
  engine.options_ = options;
  engine.options_.model_dir = model.source.resolved.dir;
  engine.options_.generate = model.model->has_lm_head() && model.model->has_final_norm();
  engine.target_ = model.targets.front();
  engine.model_ = model.model;
  engine.tokenizer_ = model.tokenizer;
  const model::ModelConfig& config = model.model->config();
  engine.set_saes(sae::load_saes(options.saes, config), options.sae_labels);
  engine.model_fingerprint_ = model.fingerprint;
  if (!options.probes_dir.empty()) {
    engine.catalog_ = probes::find_probes(options.probes_dir);
    engine.layers_ = probes::select_layers(engine.catalog_, options.layers, options.layer, options.best_layer);
    engine.load_probes(config);
    engine.index_labels();
  }
  engine.prepare(config);
  return engine;
}

void Engine::prepare(const model::ModelConfig& config) {
  prompts_ = std::make_unique<readout::PromptBuilder>(*tokenizer_, recipe_.prompt_suffix, limit_for(recipe_.max_length, config));
  request_.skip_leading = prompts_->leading_specials();
  try {
    chat_template_ = std::make_shared<const chat::ChatTemplate>(chat::ChatTemplate::from_tokenizer_dir(model_dir()));
  } catch (const std::exception& e) {
    chat_problem_ = e.what();
  }
  for (const LayerProbes& layer_probes : probes_) {
    const probes::ProbeShape& shape = layer_probes.set.shape();
    if (shape.kind->reads_every_token() && !recipe_.mask && shape.skip_leading != prompts_->leading_specials()) {
      spdlog::warn("layer {}: the probes leave out {} leading special tokens of each text, but this tokenizer puts {} "
                   "in front",
                   layer_probes.layer, shape.skip_leading, prompts_->leading_specials());
    }
  }
  steer(options_.steering);
  warn_of_other_steering();
}

// Probes trained on steered activations are meant for passes steered the same way; steering at inference is an
// experiment of its own, so a difference is said, not refused.
void Engine::warn_of_other_steering() const {
  const Json applied = steering_.empty() ? Json() : steering_.record();
  if (recipe_.steering.is_null() || recipe_.steering == applied) return;
  spdlog::warn("the probes were trained on activations read with steering {}; these passes apply {}",
               recipe_.steering.dump(), applied.is_null() ? "none" : applied.dump());
}

void Engine::require_probes() const {
  if (probes_.empty()) fail_input("no probes loaded: scoring needs a probes directory");
}

// The probes of every selected layer; all layers must agree on how their activations were read, since one pass
// serves them all.
void Engine::load_probes(const model::ModelConfig& config) {
  for (int64_t layer : layers_) {
    auto found = catalog_.layer_dirs.find(layer);
    std::string dir = found != catalog_.layer_dirs.end() ? found->second : catalog_.layer_dirs.begin()->second;
    probes::ProbeSet set = probes::ProbeSet::load(dir, target_.device, at::kFloat);
    check_fits(set, dir, layer, set.recipe().site, options_, config);
    check_same_model(set, dir, options_, model_fingerprint_);
    if (probes_.empty()) {
      if (set.recipe().position == Position::kAll && !set.shape().kind->reads_every_token()) {
        fail_input("{}: probes trained on every token (position all) score one row per token; they are not "
                   "supported here",
                   dir);
      }
      recipe_ = set.recipe();
    } else {
      activations::ReadoutRecipe here = set.recipe();
      if (options_.force) here.model_fingerprint = recipe_.model_fingerprint;  // --force runs other models' probes
      const std::string difference =
          activations::recipe_difference(recipe_, here, fmt::format("layer {}'s probes", layers_.front()), dir);
      if (!difference.empty()) {
        fail_input("{}: these probes' activations were read otherwise than those of layer {} ({})", dir,
                   layers_.front(), difference);
      }
      if (set.multiclass() != probes_.front().set.multiclass()) {
        // Independent per-label probabilities and one distribution over classes do not rank together.
        fail_input("{}: mixes a multiclass probe (train_probes) with binary probes (train_binary_probes) at layer {}",
                   dir, layers_.front());
      }
    }
    probes_.push_back(LayerProbes{layer, std::move(set), {}});
  }
  request_ = readout::Request{recipe_.site, recipe_.position, layers_, 0};
  if (recipe_.sae) bind_sae(probes_.front().set, catalog_.layer_dirs.begin()->second);
}

// Probes trained on an SAE site read it through the SAE of that name given with --sae, which must be the dictionary
// the rows were read with (its record: layout, architecture, widths, site, layer); latents kept as the file kept them.
void Engine::bind_sae(const probes::ProbeSet& set, const std::string& dir) {
  const activations::SaeReading& reading = *recipe_.sae;
  const std::string what = fmt::format("{}: the probes read {}", dir, reading.site.text());
  const sae::SparseAutoencoder& found = sae::find_sae(saes_, reading.site.name, what);
  const Json record = found.record();
  for (const char* field : {"layout", "architecture", "site", "output_site", "layer", "d_in", "d_sae", "d_out", "k",
                            "input_scaling", "subtract_decoder_bias", "skip_connection", "output_scale", "fingerprint"}) {
    // Files written before SAEs had a fingerprint record none: their weights cannot be compared.
    if (std::string(field) == "fingerprint" && !reading.dictionary.contains(field)) continue;
    if (record.value(field, Json()) != reading.dictionary.value(field, Json())) {
      fail_input("{}, made with an SAE whose {} is {}; --sae {} has {} ({})", what, field,
                 reading.dictionary.value(field, Json()).dump(), reading.site.name, record.value(field, Json()).dump(),
                 found.path);
    }
  }
  if (layers_ != std::vector<int64_t>{found.layer}) {
    fail_input("{}: SAE '{}' reads layer {} only (select it with --layer {})", what, found.name, found.layer, found.layer);
  }
  latents_ = std::make_unique<sae::LatentReading>(sae::LatentReading{&found, reading.site.output, reading.top_k, false});
  if (set.shape().input_dim != latents_->width()) {
    fail_input("{}: the probes take {} inputs but SAE '{}' gives {}", what, set.shape().input_dim, found.name,
               latents_->width());
  }
  request_.latents = latents_.get();
}

std::string Engine::threshold_source() const {
  if (calibrated_count_ > 0 && validation_count_ > 0) return "calibration where set, else validation";
  return calibrated_count_ > 0 ? "calibration" : "validation";
}

// The labels in index order, each probe's column, and the thresholds and AUROCs of the probes in use.
void Engine::index_labels() {
  std::map<int64_t, std::string> label_by_index;
  for (const LayerProbes& layer_probes : probes_) {
    for (const auto& probe : layer_probes.set.probes()) label_by_index.emplace(probe.label_index, probe.label);
  }
  std::set<std::string> seen;
  for (const auto& [index, label] : label_by_index) {
    if (seen.insert(label).second) labels_.push_back(label);
  }
  std::map<std::string, size_t> column;
  for (size_t k = 0; k < labels_.size(); ++k) column[labels_[k]] = k;
  thresholds_.assign(layers_.size(), std::vector<double>(labels_.size(), std::numeric_limits<double>::quiet_NaN()));
  aucs_ = validation_thresholds_ = per_token_thresholds_ = thresholds_;
  calibrated_.assign(layers_.size(), std::vector<bool>(labels_.size(), false));
  for (size_t l = 0; l < probes_.size(); ++l) {
    LayerProbes& layer_probes = probes_[l];
    for (const auto& probe : layer_probes.set.probes()) {
      size_t k = column[probe.label];
      // In best-layer mode a label is scored at its best layer only.
      bool used = !options_.best_layer || catalog_.best_layer.count(probe.label) == 0 ||
                  catalog_.best_layer.at(probe.label) == layer_probes.layer;
      layer_probes.label_column.push_back(used ? static_cast<int64_t>(k) : -1);
      if (used) {
        // A threshold set at a target false-positive rate (calibrate_probes) replaces the validation-tuned one.
        const bool calibrated = !std::isnan(probe.calibrated_threshold);
        thresholds_[l][k] = calibrated ? probe.calibrated_threshold : probe.threshold;
        validation_thresholds_[l][k] = probe.threshold;
        per_token_thresholds_[l][k] = probe.per_token_threshold;
        calibrated_[l][k] = calibrated;
        aucs_[l][k] = probe.val_auc;
        (calibrated ? calibrated_count_ : validation_count_) += 1;
      }
    }
  }
}

}  // namespace probekit::inference
