// What rows of activations were read with: the model, where (site, position), the text around them (prompt suffix,
// the cut under max_length; a conversation's token mask and chat template), the forward pass's dtype and the
// steering it applied. Capture writes it into every
// activation file's attributes, training copies it into probes.json, inference and the server read it back: one
// record with one codec to JSON and one to HDF5 attributes, its fields rows of one table (readout_recipe.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/json.h"
#include "io/hdf5.h"
#include "sites/positions.h"
#include "sites/sae_site.h"
#include "sites/sites.h"

namespace probekit::activations {

/// The reference's prompt suffix, appended to every text before tokenization; files and indexes that predate the
/// field were made with it.
inline const char* const kDefaultPromptSuffix = "\n\nThe cognitive action being demonstrated here is";

/// Rows read through an SAE (--site sae:NAME or sae-error:NAME): which dictionary, what of it, and how latents are
/// stored. The recipe's site and layer are then the SAE's own.
struct SaeReading {
  SaeSite site;
  int64_t top_k = 0;  // latents stored as each row's top k (latent_indices, latent_values, l0, relative_error); 0: dense
  Json dictionary;    // the SAE's record (sae::SparseAutoencoder::record()): layout, path, architecture, d_in, d_sae, ...

  /// Whether rows are stored sparse: the latents as their top k.
  bool sparse() const { return site.output == SaeOutput::kLatents && top_k > 0; }
  /// The dictionary's width (its latents), from its record.
  int64_t latent_count() const;
  /// {"site": "sae:NAME", "top_k": 64, "dictionary": {...}}.
  Json to_json() const;
  static SaeReading from_json(const Json& object, const std::string& where);
};

/// Floats per stored row of sparse latents as the readout gives them: k indices (exact in fp32), k values, the row's
/// L0 and the reconstruction's relative error.
constexpr int64_t sparse_latent_row_width(int64_t top_k) { return 2 * top_k + 2; }

struct ReadoutRecipe {
  std::string model_name;         // the hub name the user gave, or the checkpoint folder's absolute path
  std::string model_revision;     // the commit of the weights (empty for a folder outside the hub cache)
  std::string model_fingerprint;  // model::Checkpoint::fingerprint() of the weights the rows came from
  Site site = Site::kResidPost;
  Position position = Position::kLast;
  std::string prompt_suffix = kDefaultPromptSuffix;
  int64_t max_length = 0;  // the prompts' limit in tokens; 0: none
  std::string dtype;       // the forward pass's dtype (fp32, bf16, ...)
  Json steering;           // what the pass applied (steering::SteeringVectors::record()); null: none
  std::optional<TokenMask> mask;     // conversations: the tokens read (--mask); none for texts
  std::string chat_template_sha256;  // conversations: of the chat template that rendered them
  bool add_generation_prompt = false;  // conversations: rendered with the template's generation prompt
  std::optional<SaeReading> sae;       // rows of an SAE site; none for a site of the model
  // Texts: the special tokens the tokenizer puts in front of each (its BOS), which pooling and every-token probes
  // leave out; none in files made before it was recorded.
  std::optional<int64_t> leading_specials;

  /// The --site value: the site's name, or "sae:NAME" / "sae-error:NAME".
  std::string site_text() const;

  /// As JSON: {"model_name": ..., "site": "resid_post", "max_length": 0, "steering": null, "sae": null, ...}.
  Json to_json() const;
  /// Reads the fields of `object` (each absent one takes its default), checking their types and values; errors
  /// name `where` and the field.
  static ReadoutRecipe from_json(const Json& object, const std::string& where);
  /// As root attributes of an HDF5 file (an empty revision and no steering are left out, as files always had them).
  void write_attributes(hid_t object) const;
  static ReadoutRecipe read_attributes(hid_t object, const std::string& where);
  /// The fields as "name=value" lines in the table's order (part of a resumed capture's identity).
  std::vector<std::string> identity() const;
};

/// The first field that rows depend on (the model's fingerprint, site, position, prompt suffix, max_length,
/// steering) in which `b` differs from `a`, as "site: resid_post in A, mlp_out in B" with the names given;
/// empty when they agree. The model's name, revision and the pass's dtype change no row's meaning.
std::string recipe_difference(const ReadoutRecipe& a, const ReadoutRecipe& b, const std::string& a_name,
                              const std::string& b_name);

}  // namespace probekit::activations
