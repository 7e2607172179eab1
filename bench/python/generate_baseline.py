"""transformers' generate as a user runs it (from_pretrained(dtype=bfloat16) on the GPU, its default attention
and cache, greedy, batch 1), the baseline of probekit's generation with live probes (PROTOCOL section 5).
Prints JSON: decode tokens/s ((time of N + 1 new tokens - time of 1) / N, so the prompt's pass is left out on
both sides) and whole-call tokens/s (N / time of N).

--compiled: its static cache (cache_implementation="static"), whose decoding step generate compiles with
torch.compile on first use: the first call (compiling) is timed apart as compile_s and left out of the rates.

Usage: python3 generate_baseline.py MODEL_DIR PROMPT [--new-tokens 128] [--runs 3] [--compiled]
"""
import argparse
import json

from baselines import generation_rates, load_for_generation, versions


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("prompt")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--compiled", action="store_true")
    args = parser.parse_args()
    tokenizer, model = load_for_generation(args.model)
    inputs = tokenizer(args.prompt, return_tensors="pt").to("cuda")
    compiled = {}
    if args.compiled:
        # The warm-up, which compiles, generates as many tokens as the timed calls: one static cache shape.
        model.generation_config.cache_implementation = "static"
        decode, whole_call, compile_s = generation_rates(model, inputs, args.new_tokens, args.runs, args.new_tokens + 1)
        compiled = {"cache_implementation": "static", "compile_s": compile_s}
    else:
        decode, whole_call, _ = generation_rates(model, inputs, args.new_tokens, args.runs)
    print(json.dumps({
        **compiled,
        "new_tokens": args.new_tokens,
        "decode_tokens_per_s": decode,
        "whole_call_tokens_per_s": whole_call,
        "attention_implementation": model.config._attn_implementation,
        **versions(),
    }))


if __name__ == "__main__":
    main()
