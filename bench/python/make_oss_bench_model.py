"""Write a gpt-oss-20b-shaped checkpoint in MXFP4 with random weights (no real weights can be fetched here), for the
capture benchmark on the accelerator machine: 24 layers alternating sliding (128) and full attention, hidden 2880,
64 query heads and 8 key/value heads of 64 with sinks, 32 experts of width 2880 of which each token takes 4, YaRN x32,
the experts in MXFP4 as OpenAI publishes them (`*_blocks`: e2m1 values two to a byte, `*_scales`: one e8m0 scale per
32 inputs; about 13.7 GB), everything else bf16.
  python3 make_oss_bench_model.py OUT_DIR TOKENIZER_JSON
TOKENIZER_JSON: a real tokenizer whose ids fit the 201,088-row embedding (the Qwen 3 one: o200k is not in the npm
packages); its token counts per text are close to o200k's on English. The expert values are random bytes with
scales 2^-9 to 2^-5, so weights are of the size a trained model's are (no overflow through 24 layers)."""
import json, os, shutil, sys
import torch
from safetensors.torch import save_file

out, tok = sys.argv[1], sys.argv[2]
H, I, E, HEADS, KV, HD, VOCAB, LAYERS = 2880, 2880, 32, 64, 8, 64, 201088, 24
config = {
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": True, "attention_dropout": 0.0,
    "head_dim": HD, "hidden_act": "silu", "hidden_size": H, "intermediate_size": I, "initial_context_length": 4096,
    "initializer_range": 0.02, "layer_types": ["sliding_attention", "full_attention"] * (LAYERS // 2),
    "max_position_embeddings": 131072, "num_attention_heads": HEADS, "num_experts_per_tok": 4,
    "experts_per_token": 4, "num_hidden_layers": LAYERS, "num_key_value_heads": KV, "num_local_experts": E,
    "output_router_logits": False, "rms_norm_eps": 1e-5, "router_aux_loss_coef": 0.9, "sliding_window": 128,
    "swiglu_limit": 7.0, "tie_word_embeddings": False, "use_cache": True, "vocab_size": VOCAB, "dtype": "bfloat16",
    "bos_token_id": 151643, "eos_token_id": 151645, "pad_token_id": 151643,
    "rope_parameters": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                        "original_max_position_embeddings": 4096, "rope_theta": 150000.0, "truncate": False},
    "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]},
}
torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"


def normal(*shape, std=0.02):
    return (torch.randn(*shape, device=device) * std).to(torch.bfloat16).cpu()


def mxfp4(rows, inputs):
    blocks = torch.randint(0, 256, (E, rows, inputs // 32, 16), dtype=torch.uint8, device=device).cpu()
    scales = torch.randint(118, 123, (E, rows, inputs // 32), dtype=torch.uint8, device=device).cpu()
    return blocks, scales


os.makedirs(out, exist_ok=True)
weight_map, total = {}, 0
shards = LAYERS + 1
for shard in range(shards):
    tensors = {}
    if shard == LAYERS:
        tensors = {"model.embed_tokens.weight": normal(VOCAB, H), "lm_head.weight": normal(VOCAB, H),
                   "model.norm.weight": torch.ones(H, dtype=torch.bfloat16)}
    else:
        p = f"model.layers.{shard}."
        gate_up, gate_up_scales = mxfp4(2 * I, H)
        down, down_scales = mxfp4(H, I)
        tensors = {
            p + "input_layernorm.weight": torch.ones(H, dtype=torch.bfloat16),
            p + "post_attention_layernorm.weight": torch.ones(H, dtype=torch.bfloat16),
            p + "self_attn.q_proj.weight": normal(HEADS * HD, H), p + "self_attn.q_proj.bias": normal(HEADS * HD),
            p + "self_attn.k_proj.weight": normal(KV * HD, H), p + "self_attn.k_proj.bias": normal(KV * HD),
            p + "self_attn.v_proj.weight": normal(KV * HD, H), p + "self_attn.v_proj.bias": normal(KV * HD),
            p + "self_attn.o_proj.weight": normal(H, HEADS * HD), p + "self_attn.o_proj.bias": normal(H),
            p + "self_attn.sinks": normal(HEADS, std=1.0),
            p + "mlp.router.weight": normal(E, H), p + "mlp.router.bias": normal(E),
            p + "mlp.experts.gate_up_proj_blocks": gate_up, p + "mlp.experts.gate_up_proj_scales": gate_up_scales,
            p + "mlp.experts.gate_up_proj_bias": normal(E, 2 * I),
            p + "mlp.experts.down_proj_blocks": down, p + "mlp.experts.down_proj_scales": down_scales,
            p + "mlp.experts.down_proj_bias": normal(E, H),
        }
    name = f"model-{shard + 1:05d}-of-{shards:05d}.safetensors"
    save_file(tensors, os.path.join(out, name), metadata={"format": "pt"})
    for key, value in tensors.items():
        weight_map[key] = name
        total += value.numel() * value.element_size()
json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
          open(os.path.join(out, "model.safetensors.index.json"), "w"), indent=1)
json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=1)
shutil.copy(tok, os.path.join(out, "tokenizer.json"))
json.dump({"tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
           "add_bos_token": False}, open(os.path.join(out, "tokenizer_config.json"), "w"), indent=1)
print("wrote", out, total, "bytes of weights")
