// OLMo 3: OLMo 2's decoder (norms after each sublayer only, q/k RMSNorm over the whole projections) with
// sliding-window attention on three layers of every four, and a rope per layer type: rope_scaling (YaRN in the
// long-context checkpoints) applies to the full-attention layers only.
#include "model/families.h"

namespace probekit::model {

void resolve_olmo3(const ConfigReader& config_json, ModelConfig& c) {
  resolve_olmo2(config_json, c);
  const double theta = config_json.read<double>("rope_theta").value_or(500000.0);
  const LayerTypeRopes ropes = resolve_layer_type_ropes(config_json, c.head_dim, theta, theta);
  std::vector<bool> sliding = sliding_from_layer_types(config_json, c.num_layers);
  if (sliding.empty()) {
    for (int64_t i = 0; i < c.num_layers; ++i) sliding.push_back((i + 1) % 4 != 0);
  }
  for (size_t i = 0; i < c.layers.size(); ++i) c.layers[i].rope = sliding[i] ? ropes.sliding : ropes.full;
  // Olmo3Config's window is 4096; an explicit null turns it off.
  const Field<int64_t> window = config_json.read<int64_t>("sliding_window");
  apply_sliding_windows(c, sliding, window.present ? window.value_or(0) : 4096);
}

}  // namespace probekit::model
