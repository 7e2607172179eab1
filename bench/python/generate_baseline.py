"""transformers' generate as a user runs it (from_pretrained(dtype=bfloat16) on the GPU, its default attention
and cache, greedy, batch 1), the baseline of probekit's generation with live probes (PROTOCOL section 5).
Prints JSON: decode tokens/s ((time of N + 1 new tokens - time of 1) / N, so the prompt's pass is left out on
both sides) and whole-call tokens/s (N / time of N).

Usage: python3 generate_baseline.py MODEL_DIR PROMPT [--new-tokens 128] [--runs 3]
"""
import argparse
import json
import time

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer


def timed_generate(model, inputs, new_tokens):
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = model.generate(**inputs, do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens)
    torch.cuda.synchronize()
    assert out.shape[1] - inputs["input_ids"].shape[1] == new_tokens
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("prompt")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16).to("cuda")
    inputs = tokenizer(args.prompt, return_tensors="pt").to("cuda")
    timed_generate(model, inputs, 8)  # warm-up
    first = min(timed_generate(model, inputs, 1) for _ in range(args.runs))
    whole = min(timed_generate(model, inputs, args.new_tokens + 1) for _ in range(args.runs))
    print(json.dumps({
        "new_tokens": args.new_tokens,
        "decode_tokens_per_s": args.new_tokens / (whole - first),
        "whole_call_tokens_per_s": (args.new_tokens + 1) / whole,
        "attention_implementation": model.config._attn_implementation,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }))


if __name__ == "__main__":
    main()
