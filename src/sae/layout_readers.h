// The readers of the published layouts (one file each) and what they share: tensors read with their shapes checked,
// hook names mapped onto our sites. Private to src/sae; layouts.cpp holds the table that chooses among them.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/json.h"
#include "io/npz.h"
#include "io/safetensors.h"
#include "sae/sae.h"

namespace probekit::sae {

SparseAutoencoder read_saelens(const std::string& dir);
SparseAutoencoder read_gemma_scope(const std::string& dir);
SparseAutoencoder read_gemma_scope_2(const std::string& dir);
SparseAutoencoder read_sparsify(const std::string& dir);
SparseAutoencoder read_llama_scope(const std::string& dir);

/// Tensor `name` of a safetensors file in fp32 on the host, refused naming the file unless its shape is `shape`.
at::Tensor read_tensor(const safetensors::File& file, const std::string& name, const std::vector<int64_t>& shape);
/// The same for an array of an .npz archive read from `path`.
at::Tensor read_array(const std::map<std::string, npz::Array>& arrays, const std::string& name,
                      const std::vector<int64_t>& shape, const std::string& path);

/// An SAE's config file: a JSON object, refused naming the file otherwise.
Json read_config(const std::string& path);
/// A config field, refused naming the file and the field when absent or of another type.
int64_t config_int(const Json& config, const std::string& field, const std::string& path);
std::string config_string(const Json& config, const std::string& field, const std::string& path);
double config_number(const Json& config, const std::string& field, const std::string& path);

/// Sets the site and layer an SAE reads from its hook: a TransformerLens hook name ("blocks.12.hook_resid_post") or a
/// Hugging Face module path ("model.layers.12.output", "model.layers.12.post_feedforward_layernorm.output",
/// "layers.12.mlp": an attention or MLP module's own output, before any post-norm, sets raw_module_output); per-head
/// attention hooks (hook_z, o_proj's input) and names of no site are refused, naming `where`.
void read_input_site(SparseAutoencoder& sae, const std::string& hook, const std::string& where);

/// Sets a transcoder's output_site from the hook it reconstructs (raw_module_output as read_input_site sets it),
/// refused naming `where` unless that hook is of the layer it reads (sae.layer).
void read_output_site(SparseAutoencoder& sae, const std::string& hook, const std::string& where);

/// The last component of a folder path without a trailing slash ("a/layers.12" -> "layers.12").
std::string folder_name(const std::string& dir);

}  // namespace probekit::sae
