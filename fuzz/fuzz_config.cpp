// config.json resolution on arbitrary JSON: resolve_config either refuses the config with a message naming the
// key, or gives a ModelConfig keeping the invariants the runtime relies on (validate_config): positive and bounded
// dimensions, one layer setting per layer, each layer's heads bounded and its rotary dims inside them, routed
// experts that can be chosen from, longrope factors for every rotary frequency.
#include <cmath>
#include <cstdint>
#include <string_view>

#include "common/json.h"
#include "fuzz_util.h"
#include "model/config.h"

using namespace probekit;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  model::ModelConfig config;
  // What load_config does after reading the file.
  if (!fuzz::completes_or_refuses_cleanly([&] {
        config = model::resolve_config(parse_json(text, "config.json"), "config.json");
      })) {
    return 0;
  }
  if (config.vocab_size <= 0 || config.hidden_size <= 0 || config.intermediate_size <= 0 || config.num_layers <= 0 ||
      config.num_heads <= 0 || config.num_kv_heads <= 0 || config.head_dim <= 0) {
    fuzz::finding("a resolved config has a dimension that is not positive");
  }
  if (config.num_heads % config.num_kv_heads != 0) fuzz::finding("query heads are not a multiple of kv heads");
  if (static_cast<int64_t>(config.layers.size()) != config.num_layers) fuzz::finding("layer settings != layers");
  if (!(config.norm_eps > 0) || !(config.attention_scale > 0) || !std::isfinite(config.attention_scale)) {
    fuzz::finding("norm epsilon or attention scale is not a positive number");
  }
  for (int64_t index = 0; index < config.num_layers; ++index) {
    const model::LayerSpec& layer = config.layers[static_cast<size_t>(index)];
    if (layer.sliding_window < 0) fuzz::finding("negative sliding window");
    // A layer may have heads of its own (Gemma 4's full layers): its rotary dims lie inside those.
    const int64_t head_dim = model::layer_head_dim(config, index), kv_heads = model::layer_kv_heads(config, index);
    if (head_dim <= 0 || head_dim > 4096) fuzz::finding("a layer's head dimension is not positive or implausible");
    if (kv_heads <= 0 || config.num_heads % kv_heads != 0) fuzz::finding("a layer's kv heads do not divide the heads");
    if (layer.rope.type != model::RopeType::kNone &&
        (layer.rope.rotary_dim <= 0 || layer.rope.rotary_dim > head_dim || layer.rope.rotary_dim % 2 != 0)) {
      fuzz::finding("rotary dimension outside the head");
    }
    if (layer.rope.type == model::RopeType::kLongRope &&
        (layer.rope.short_factors.size() * 2 != static_cast<size_t>(layer.rope.rotary_dim) ||
         layer.rope.long_factors.size() != layer.rope.short_factors.size())) {
      fuzz::finding("longrope factors do not cover the rotary frequencies");
    }
    const model::RoutedExpertsSpec& experts = config.routed_experts;
    if (layer.feed_forward == model::FeedForward::kRoutedExperts &&
        (experts.top_k < 1 || experts.top_k > experts.experts || experts.intermediate_size <= 0)) {
      fuzz::finding("a layer routes to experts it cannot choose from");
    }
  }
  return 0;
}
