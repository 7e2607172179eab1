"""Write a Qwen3.5-shaped hybrid checkpoint (about 4 B parameters) with random bf16 weights, for the hybrid capture
benchmark on the accelerator machine, where transformers is installed: 32 layers, three Gated DeltaNet layers
(16 key heads and 32 value heads of 128, convolution 4) to each full-attention layer (16 query heads and 4
key/value heads of 256, an output gate, rotary on a quarter of each head), hidden 2560, MLP 9216, tied embeddings.
  python3 make_hybrid_bench_model.py OUT_DIR TOKENIZER_JSON
TOKENIZER_JSON: the real Qwen 3 tokenizer.json (Qwen3.5 keeps its vocabulary of 151,936 for text)."""
import sys
from transformers import AutoConfig
from random_models import random_bf16_model, write_qwen3_tokenizer

out, tok = sys.argv[1], sys.argv[2]
layers = 32
cfg = AutoConfig.for_model(
    "qwen3_5_text", vocab_size=151936, hidden_size=2560, intermediate_size=9216, num_hidden_layers=layers,
    num_attention_heads=16, num_key_value_heads=4, head_dim=256, linear_num_key_heads=16, linear_num_value_heads=32,
    linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
    layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)],
    rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25},
    partial_rotary_factor=0.25, max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=True,
    bos_token_id=151643, eos_token_id=151645)
model = random_bf16_model(cfg)
model.save_pretrained(out, safe_serialization=True)
write_qwen3_tokenizer(out, tok)
print("wrote", out, sum(p.numel() for p in model.parameters()), "parameters",
      "fla" if getattr(model.model.layers[0].linear_attn, "chunk_gated_delta_rule", None) else "")
