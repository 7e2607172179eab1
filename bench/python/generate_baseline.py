"""transformers' generate as a user runs it (from_pretrained(dtype=bfloat16) on the GPU, its default attention
and cache, greedy, batch 1), the baseline of probekit's generation with live probes (PROTOCOL section 5).
Prints JSON: decode tokens/s ((time of N + 1 new tokens - time of 1) / N, so the prompt's pass is left out on
both sides) and whole-call tokens/s (N / time of N).

Usage: python3 generate_baseline.py MODEL_DIR PROMPT [--new-tokens 128] [--runs 3]
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
    args = parser.parse_args()
    tokenizer, model = load_for_generation(args.model)
    inputs = tokenizer(args.prompt, return_tensors="pt").to("cuda")
    decode, whole_call = generation_rates(model, inputs, args.new_tokens, args.runs)
    print(json.dumps({
        "new_tokens": args.new_tokens,
        "decode_tokens_per_s": decode,
        "whole_call_tokens_per_s": whole_call,
        "attention_implementation": model.config._attn_implementation,
        **versions(),
    }))


if __name__ == "__main__":
    main()
