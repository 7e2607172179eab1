#include "sae/sae_flags.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>
#include <set>
#include <tuple>

#include "common/error.h"
#include "common/json.h"
#include "common/units.h"
#include "model/site_layers.h"

namespace probekit::sae {

SaeSpec parse_sae_spec(const std::string& text) {
  const size_t equals = text.find('=');
  if (equals == std::string::npos || text.substr(0, equals).find('/') != std::string::npos) return {"", text};
  SaeSpec spec{text.substr(0, equals), text.substr(equals + 1)};
  if (spec.name.empty() || spec.path.empty()) fail_usage("--sae {}: expected [NAME=]PATH", text);
  return spec;
}

void add_sae_flags(CLI::App& app, std::vector<SaeSpec>& specs, SaeStorage* storage, std::vector<SaeSpec>* labels) {
  app.add_option_function<std::vector<std::string>>(
         "--sae",
         [&specs](const std::vector<std::string>& values) {
           for (const std::string& value : values) specs.push_back(parse_sae_spec(value));
         },
         "[NAME=]PATH: a sparse autoencoder (SAELens, Gemma Scope, Gemma Scope 2, Llama Scope or sparsify folder, "
         "or a hub folder org/name/sub/folder[@revision] fetched through the hub cache); NAME (default: the folder's name) is how --site sae:NAME and the latent flags refer to it; repeatable")
      ->type_name("[NAME=]PATH");
  if (labels != nullptr) {
    app.add_option_function<std::vector<std::string>>(
           "--sae-labels",
           [labels](const std::vector<std::string>& values) {
             for (const std::string& value : values) {
               SaeSpec spec = parse_sae_spec(value);
               if (spec.name.empty()) fail_usage("--sae-labels {}: expected NAME=FILE (NAME: an --sae's name)", value);
               labels->push_back(std::move(spec));
             }
           },
           "NAME=FILE: descriptions of SAE NAME's latents (a Neuronpedia export: a JSON list of {\"index\", "
           "\"description\"}), shown beside them; repeatable")
        ->type_name("NAME=FILE");
  }
  if (storage == nullptr) return;
  app.add_option_function<int64_t>(
         "--sae-top-k", [storage](int64_t k) { storage->top_k = k; },
         "--site sae:NAME stores each row's K largest latents (latent_indices, latent_values) with its L0 and "
         "relative error")
      ->check(CLI::PositiveNumber)
      ->default_str(std::to_string(SaeStorage::kDefaultTopK));
  app.add_flag("--sae-dense", storage->dense, "--site sae:NAME stores every latent (activations [rows, d_sae])");
}

void SaeStorage::check(const std::optional<SaeSite>& site, const std::string& site_text) const {
  if (!site && (top_k || dense)) {
    fail_usage("{}: it says how an SAE site's latents are stored, and --site is {}", dense ? "--sae-dense" : "--sae-top-k",
               site_text);
  }
  if (top_k && dense) fail_usage("--sae-top-k {} with --sae-dense: give one (K latents a row, or all of them)", *top_k);
  if (top_k && site && site->output == SaeOutput::kError) {
    fail_usage("--sae-top-k {}: --site {} stores the SAE's error, a row as wide as the model's, not latents", *top_k,
               site_text);
  }
}

int64_t SaeStorage::stored_top_k(const SaeSite& site, int64_t d_sae) const {
  if (dense || site.output == SaeOutput::kError) return 0;
  if (!top_k) return std::min(kDefaultTopK, d_sae);
  if (*top_k > d_sae) {
    fail_usage("--sae-top-k {}: SAE '{}' has {} latents (a row keeps at most all of them)", *top_k, site.name, d_sae);
  }
  return *top_k;
}

std::vector<SparseAutoencoder> load_saes(const std::vector<SaeSpec>& specs, const model::ModelConfig& config) {
  std::vector<SparseAutoencoder> saes;
  std::set<std::string> names;
  for (const SaeSpec& spec : specs) {
    SparseAutoencoder sae = load(spec.path, spec.name);
    if (!names.insert(sae.name).second) {
      fail_usage("--sae {}: a second SAE named '{}' (give each a name: --sae NAME=PATH)", spec.path, sae.name);
    }
    if (sae.layer >= config.num_layers) {
      fail_input("{}: SAE '{}' reads layer {}, but the model has {} layers", sae.path, sae.name, sae.layer,
                 config.num_layers);
    }
    for (const auto& [width, site, what] : {std::tuple{sae.d_in, sae.site, "reads"}, std::tuple{sae.d_out, sae.output_site, "writes"}}) {
      if (width != config.hidden_size) {
        fail_input("{}: SAE '{}' {} rows of width {}, but the model's {} has width {} (hidden size)", sae.path,
                   sae.name, what, width, site_name(site), config.hidden_size);
      }
    }
    const std::vector<int64_t> having = model::layers_having(sae.site, config);
    if (std::find(having.begin(), having.end(), sae.layer) == having.end()) {
      fail_input("{}: SAE '{}' reads the {} of layer {}, but the model ({}) {}", sae.path, sae.name,
                 site_name(sae.site), sae.layer, config.text_model_type,
                 having.empty() ? model::why_no_layer_has(sae.site, config)
                                 : fmt::format("has it at layers {} only", fmt::join(having, ",")));
    }
    const Site module = sae.is_transcoder() ? sae.output_site : sae.site;
    if (sae.raw_module_output && ((module == Site::kMlpOut && config.features.mlp_output_norm) ||
                                  (module == Site::kAttnOut && config.features.attention_output_norm))) {
      fail_input("{}: SAE '{}' {} the {} module's output before its post-norm, which this model's {} (after the "
                 "post-norm) is not", sae.path, sae.name, sae.is_transcoder() ? "predicts" : "reads",
                 module == Site::kMlpOut ? "MLP" : "attention", site_name(module));
    }
    saes.push_back(std::move(sae));
  }
  return saes;
}

namespace {

// One item's latent index: a number or its digits (Neuronpedia writes them as strings).
int64_t latent_index(const Json& item, const std::string& where) {
  const auto index = item.find("index");
  if (index == item.end()) fail_input("{}: no \"index\"", where);
  if (index->is_number_integer()) return index->get<int64_t>();
  if (index->is_string()) {
    const std::optional<int> digits = parse_count(index->get<std::string>());
    if (digits) return *digits;
  }
  fail_input("{}: \"index\" must be a latent's number, got {}", where, dump_json(*index));
}

}  // namespace

void describe_latents(std::vector<SparseAutoencoder>& saes, const std::vector<SaeSpec>& labels) {
  for (const SaeSpec& spec : labels) {
    SparseAutoencoder& sae = saes[static_cast<size_t>(&find_sae(saes, spec.name, "--sae-labels " + spec.name) - saes.data())];
    const Json items = read_json_file(spec.path);
    if (!items.is_array()) fail_input("{}: expected a JSON list of {{\"index\", \"description\"}}", spec.path);
    for (size_t i = 0; i < items.size(); ++i) {
      const std::string where = fmt::format("{}: item {}", spec.path, i);
      if (!items[i].is_object()) fail_input("{}: expected an object with \"index\" and \"description\"", where);
      const int64_t index = latent_index(items[i], where);
      if (index < 0 || index >= sae.d_sae) {
        fail_input("{}: latent {} is not one of SAE '{}': its latents are 0 to {}", where, index, sae.name, sae.d_sae - 1);
      }
      // Exports may hold several explainers' descriptions of one latent: the first is shown.
      sae.descriptions.emplace(index, json_at<std::string>(items[i], "description", where));
    }
  }
}

const SparseAutoencoder& find_sae(const std::vector<SparseAutoencoder>& saes, const std::string& name,
                                  const std::string& what) {
  std::vector<std::string> names;
  for (const SparseAutoencoder& sae : saes) {
    if (sae.name == name) return sae;
    names.push_back(sae.name);
  }
  if (names.empty()) fail_usage("{}: no SAE named '{}': load it with --sae {}=PATH", what, name, name);
  fail_usage("{}: no SAE named '{}' (loaded: {})", what, name, fmt::join(names, ", "));
}

}  // namespace probekit::sae
