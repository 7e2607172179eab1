// The registry of families: one row each (docs/layout.md, "Adding a family"); what they share is in
// family_shared.cpp.
#include "model/families.h"

namespace probekit::model {

const std::vector<Family>& families() {
  static const std::vector<Family> all = {
      {"llama", resolve_llama, load_llama_style, llama_style_tensor_layer},
      {"mistral", resolve_mistral, load_llama_style, llama_style_tensor_layer},
      {"qwen2", resolve_qwen2, load_llama_style, llama_style_tensor_layer},
      {"qwen3", resolve_qwen3, load_llama_style, llama_style_tensor_layer},
      {"gemma", resolve_gemma, load_llama_style, llama_style_tensor_layer},
      {"gemma2", resolve_gemma2, load_llama_style, llama_style_tensor_layer},
      {"gemma3_text", resolve_gemma3_text, load_llama_style, llama_style_tensor_layer},
      {"gemma3", resolve_gemma3, load_gemma3_multimodal, gemma3_multimodal_tensor_layer},
      {"gpt2", resolve_gpt2, load_gpt2, gpt2_tensor_layer},
      {"gpt_neox", resolve_gpt_neox, load_gpt_neox, gpt_neox_tensor_layer},
      {"mixtral", resolve_mixtral, load_mixtral, llama_style_tensor_layer},
      {"qwen2_moe", resolve_qwen2_moe, load_qwen2_moe, llama_style_tensor_layer},
      {"qwen3_moe", resolve_qwen3_moe, load_qwen3_moe, llama_style_tensor_layer},
      {"phi3", resolve_phi3, load_phi3, llama_style_tensor_layer},
      {"olmo2", resolve_olmo2, load_llama_style, llama_style_tensor_layer},
      {"olmo3", resolve_olmo3, load_llama_style, llama_style_tensor_layer},
      {"smollm3", resolve_smollm3, load_llama_style, llama_style_tensor_layer},
      {"gemma4_text", resolve_gemma4_text, load_gemma4_text, llama_style_tensor_layer},
      {"gemma4", resolve_gemma4, load_gemma4_multimodal, gemma3_multimodal_tensor_layer},
      {"gpt_oss", resolve_gpt_oss, load_gpt_oss, llama_style_tensor_layer},
      {"qwen3_next", resolve_qwen3_next, load_qwen3_next, qwen3_next_tensor_layer},
      {"qwen3_5_text", resolve_qwen3_5_text, load_qwen3_5_text, qwen3_next_tensor_layer},
      {"qwen3_5", resolve_qwen3_5, load_qwen3_5_multimodal, gemma3_multimodal_tensor_layer},
      {"deepseek_v3", resolve_deepseek_v3, load_deepseek_v3, llama_style_tensor_layer},
  };
  return all;
}

const Family* find_family(const std::string& model_type) {
  for (const Family& family : families()) {
    if (model_type == family.model_type) return &family;
  }
  return nullptr;
}

}  // namespace probekit::model
