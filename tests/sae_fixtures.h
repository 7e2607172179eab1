// The shared fixtures' nine SAEs (tests/fixtures/saes: random SAEs in the published layouts for the gemma3_text
// fixture's layer 3, made with NumPy by tools/gen_sae_fixtures.py), by their name in reference.safetensors, the
// model they read, and the row-wise bound their tests compare with.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

#include "loading/model_loading.h"
#include "test_paths.h"
#include "test_util.h"

namespace probekit::testing {

inline const std::string kSaes = std::string(PROBEKIT_FIXTURES) + "/saes";

/// (name, folder under kSaes) of each fixture SAE.
inline const std::vector<std::pair<std::string, std::string>> kFixtureSaes = {
    {"saelens_standard", "saelens_standard"},
    {"saelens_standard_no_bdec", "saelens_standard_no_bdec"},
    {"saelens_topk", "saelens_topk"},
    {"saelens_jumprelu", "saelens_jumprelu"},
    {"saelens_gated", "saelens_gated"},
    {"saelens_norm_rescale", "saelens_norm_rescale"},
    {"gemma_scope", "gemma_scope/gemma-scope-2b-pt-res/layer_3/width_256/average_l0_20"},
    {"gemma_scope_2", "gemma_scope_2/resid_post/layer_3_width_256_l0_small"},
    {"sparsify", "sparsify/layers.3"},
};

/// The largest |ours - expected| of a row over the expected row's largest |value|: the SAE tests' bound.
inline double worst_row_error(const at::Tensor& ours, const at::Tensor& expected) {
  const at::Tensor scale = expected.abs().amax(-1).clamp_min(1e-30);
  return ((ours - expected).abs().amax(-1) / scale).max().item<double>();
}

/// The gemma3_text fixture the SAEs read, loaded once, on the CPU in fp32.
inline const loading::SharedModel& sae_fixture_model() {
  static const loading::SharedModel model = [] {
    loading::ModelRequest request;
    request.model_dir = fixture_model("gemma3_text");
    request.device = "cpu";
    request.dtype = "fp32";
    return loading::load_shared_model(request);
  }();
  return model;
}

}  // namespace probekit::testing
