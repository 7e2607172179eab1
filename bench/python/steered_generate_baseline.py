"""transformers' generate with a steering vector added by a forward hook to one decoder layer's output at every
position (as repeng and the fixtures' steering.json do it), the baseline of probekit's steered generation (issue
31's hf_steered_generate_tokens_per_s); and, with --sweep-cells, the steering sweep's cells run one by one the same
way (each a generate with the hook set to that cell's label direction and coefficient), for
steering_sweep_cells_per_s's baseline. Prints one JSON line.

Usage: python3 steered_generate_baseline.py MODEL_DIR VECTOR.safetensors PROMPT [--coefficient 4] [--new-tokens 128]
       python3 steered_generate_baseline.py MODEL_DIR VECTOR.safetensors --sweep-cells N --prompts FILE
                                            [--new-tokens 48] [--coefficients -8,-4,4,8]
"""
import argparse
import json
import time

import torch
from safetensors.torch import load_file

from baselines import decoder_layers, generation_rates, load_for_generation, timed_generate, versions


def steer(model, layer, vector):
    """Adds state["coefficient"] * vector to the layer's output at every position; returns the state dict."""
    state = {"coefficient": 0.0}

    def hook(module, inputs, output):
        if isinstance(output, tuple):
            return (output[0] + state["coefficient"] * vector,) + tuple(output[1:])
        return output + state["coefficient"] * vector

    decoder_layers(model)[layer].register_forward_hook(hook)
    return state


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("vector")
    parser.add_argument("prompt", nargs="?")
    parser.add_argument("--coefficient", type=float, default=4.0)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sweep-cells", type=int, default=0)
    parser.add_argument("--prompts")
    parser.add_argument("--coefficients", default="-8,-4,4,8")
    args = parser.parse_args()
    tokenizer, model = load_for_generation(args.model)
    tensors = load_file(args.vector)
    layer = int(next(iter(tensors)).split(".")[1])
    vector = tensors[f"layer.{layer}"].to("cuda", torch.bfloat16)
    state = steer(model, layer, vector)
    if args.sweep_cells:
        prompts = [line.strip() for line in open(args.prompts) if line.strip()]
        coefficients = [float(c) for c in args.coefficients.split(",")]
        timed_generate(model, tokenizer(prompts[0], return_tensors="pt").to("cuda"), 4)
        start = time.perf_counter()
        for cell in range(args.sweep_cells):
            state["coefficient"] = coefficients[cell % len(coefficients)]
            inputs = tokenizer(prompts[cell % len(prompts)], return_tensors="pt").to("cuda")
            timed_generate(model, inputs, args.new_tokens)
        seconds = time.perf_counter() - start
        print(json.dumps({"cells": args.sweep_cells, "seconds": seconds, "cells_per_s": args.sweep_cells / seconds,
                          "new_tokens": args.new_tokens, **versions()}))
        return
    state["coefficient"] = args.coefficient
    inputs = tokenizer(args.prompt, return_tensors="pt").to("cuda")
    decode, _, _ = generation_rates(model, inputs, args.new_tokens, args.runs)
    print(json.dumps({"new_tokens": args.new_tokens, "layer": layer, "coefficient": args.coefficient,
                      "decode_tokens_per_s": decode, "attention_implementation": model.config._attn_implementation,
                      **versions()}))


if __name__ == "__main__":
    main()
