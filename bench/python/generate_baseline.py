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
import time

from baselines import generation_rates, load_for_generation, timed_generate, versions


def compiled_rates(model, inputs, new_tokens, runs):
    """Seconds of the first (compiling) generate of new_tokens + 1 tokens, then the rates as generation_rates
    measures them, every generate of the same length (one static cache shape, compiled once)."""
    model.generation_config.cache_implementation = "static"
    start = time.perf_counter()
    timed_generate(model, inputs, new_tokens + 1)
    compile_s = time.perf_counter() - start
    first = min(timed_generate(model, inputs, 1) for _ in range(runs))
    whole = min(timed_generate(model, inputs, new_tokens + 1) for _ in range(runs))
    return compile_s, new_tokens / (whole - first), (new_tokens + 1) / whole


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
        compile_s, decode, whole_call = compiled_rates(model, inputs, args.new_tokens, args.runs)
        compiled = {"cache_implementation": "static", "compile_s": compile_s}
    else:
        decode, whole_call = generation_rates(model, inputs, args.new_tokens, args.runs)
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
