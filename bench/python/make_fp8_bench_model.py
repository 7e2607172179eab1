"""Write a Qwen3-8B-shaped checkpoint with random bf16 weights and its fine-grained FP8 copy, for the FP8 capture
benchmark on the accelerator machine: 36 layers, hidden 4096, MLP 12288, 32 query heads and 8 key/value heads of
128, untied embeddings. The copy quantizes every decoder projection as the Qwen3-*-FP8 releases do: float8_e4m3fn
values with one weight_scale_inv (the block's absolute maximum over 448) per 128x128 block, edge blocks partial;
embeddings, norms and the LM head stay bf16.
  python3 make_fp8_bench_model.py BF16_DIR FP8_DIR TOKENIZER_JSON
TOKENIZER_JSON: the real Qwen 3 tokenizer.json."""
import json, os, sys
import torch
from safetensors.torch import save_file
from transformers import AutoConfig
from random_models import random_bf16_model, write_qwen3_tokenizer

bf16_dir, fp8_dir, tok = sys.argv[1], sys.argv[2], sys.argv[3]
BLOCK = 128
cfg = AutoConfig.for_model(
    "qwen3", vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
    num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960, rms_norm_eps=1e-6,
    rope_parameters={"rope_type": "default", "rope_theta": 1e6}, tie_word_embeddings=False,
    bos_token_id=151643, eos_token_id=151645)
model = random_bf16_model(cfg)
model.save_pretrained(bf16_dir, safe_serialization=True)


def quantize(weight):
    """float8_e4m3fn values and their per-block inverse scales, as the FP8 releases store them."""
    out, inp = weight.shape
    rows, cols = -(-out // BLOCK), -(-inp // BLOCK)
    padded = torch.zeros(rows * BLOCK, cols * BLOCK, dtype=torch.float32, device=weight.device)
    padded[:out, :inp] = weight.float()
    blocks = padded.view(rows, BLOCK, cols, BLOCK)
    scale = (blocks.abs().amax(dim=(1, 3)) / 448.0).clamp(min=1e-12)
    values = (blocks / scale[:, None, :, None]).clamp(-448, 448).view(rows * BLOCK, cols * BLOCK)[:out, :inp]
    return values.to(torch.float8_e4m3fn).contiguous(), scale.contiguous()


tensors = {}
projections = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
for name, tensor in model.state_dict().items():
    if name.endswith(".weight") and name.split(".")[-2] in projections:
        values, scale = quantize(tensor)
        tensors[name] = values.cpu()
        tensors[name + "_scale_inv"] = scale.cpu()
    else:
        tensors[name] = tensor.contiguous().cpu()
os.makedirs(fp8_dir, exist_ok=True)
save_file(tensors, os.path.join(fp8_dir, "model.safetensors"), metadata={"format": "pt"})
config = json.load(open(os.path.join(bf16_dir, "config.json")))
config["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                 "weight_block_size": [BLOCK, BLOCK]}
json.dump(config, open(os.path.join(fp8_dir, "config.json"), "w"), indent=1)
for out in (bf16_dir, fp8_dir):
    write_qwen3_tokenizer(out, tok)
print("wrote", bf16_dir, fp8_dir, sum(p.numel() for p in model.parameters()), "parameters")
