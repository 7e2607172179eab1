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
#include "sites/sites.h"

namespace probekit::activations {

/// The reference's prompt suffix, appended to every text before tokenization; files and indexes that predate the
/// field were made with it.
inline const char* const kDefaultPromptSuffix = "\n\nThe cognitive action being demonstrated here is";

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

  /// As JSON: {"model_name": ..., "site": "resid_post", "max_length": 0, "steering": null, ...}.
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
