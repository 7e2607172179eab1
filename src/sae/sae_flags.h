// The SAE flags, declared once for every tool that runs a model: --sae [NAME=]PATH (repeatable) and, where rows are
// stored, --sae-top-k and --sae-dense; and the SAEs they name, loaded and checked against the model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/app_fwd.h"
#include "model/config.h"
#include "sae/sae.h"
#include "sites/sae_site.h"

namespace probekit::sae {

/// One --sae value: the name tools refer to it by (empty: the folder's last component) and where it is.
struct SaeSpec {
  std::string name;
  std::string path;
};

/// Parses --sae's [NAME=]PATH: NAME= is a prefix without '/' before the first '='.
SaeSpec parse_sae_spec(const std::string& text);

/// How an SAE site's latents are stored: their top k (K > 0) or dense.
struct SaeStorage {
  static constexpr int64_t kDefaultTopK = 64;  // a dictionary narrower than this stores all of its latents
  std::optional<int64_t> top_k;                // --sae-top-k; unset: kDefaultTopK, at most the SAE's width
  bool dense = false;
  /// Usage errors for the flags where they cannot apply, before anything is read: any of them without an SAE site
  /// (`site_text`: what --site is), --sae-top-k beside --sae-dense or with an error site.
  void check(const std::optional<SaeSite>& site, const std::string& site_text) const;
  /// The K stored of SAE `site` (`d_sae` wide): 0 for dense latents or an error site (which is dense); a K past
  /// the width is a usage error.
  int64_t stored_top_k(const SaeSite& site, int64_t d_sae) const;
};

/// Adds --sae bound to `specs`; with `storage`, --sae-top-k and --sae-dense too; with `labels`, --sae-labels
/// NAME=FILE (the tools that show latents).
void add_sae_flags(CLI::App& app, std::vector<SaeSpec>& specs, SaeStorage* storage = nullptr,
                   std::vector<SaeSpec>* labels = nullptr);

/// Loads every spec (names must differ) and checks each against `config`'s model: its layer in range and its input
/// width the site's (the hidden size). Errors name the SAE's folder.
std::vector<SparseAutoencoder> load_saes(const std::vector<SaeSpec>& specs, const model::ModelConfig& config);

/// Gives each SAE named by a --sae-labels NAME=FILE the descriptions of its latents in FILE: a Neuronpedia export of
/// explanations, a JSON list of {"index": latent (a number or its digits), "description": text, ...}. Errors name the
/// file, the item and the field; an index past the SAE's width is refused.
void describe_latents(std::vector<SparseAutoencoder>& saes, const std::vector<SaeSpec>& labels);

/// The SAE named `name` among `saes`; a usage error naming `what` (the flag and value) and the names there are.
const SparseAutoencoder& find_sae(const std::vector<SparseAutoencoder>& saes, const std::string& name,
                                  const std::string& what);

}  // namespace probekit::sae
