"""transformers' activation patching as TransformerLens and nnsight users run it, the baseline of probekit's
patching_grid_s (hf_patching_grid_s): the clean run's decoder-layer outputs recorded by forward hooks, then for every
(layer, position) one forward pass of the corrupted prompt with a hook replacing that layer's output at that position,
and the logit difference read; the model loaded (bf16, on the GPU) and warm, the loop timed with the device
synchronised. With --sample N only every (layers / N)-th layer's cells are timed and the time is scaled to the whole
grid (said in the output). Also finds the prompt pair: two texts of --tokens tokens (BOS included) that differ in one
word, written to --pair-out for probekit's benchmark; and the median time of one clean plus one corrupted forward
pass (hf_clean_and_corrupted_forward_s). Prints one JSON line.

Usage: python3 patching_baseline.py MODEL_DIR --tokens 32 --pair-out pair.json [--sample 0]
"""
import argparse
import json
import time

import torch

from baselines import decoder_layers, load_for_generation, versions

TEXT = ("When Mary and John went to the store on a cold and rainy afternoon in the middle of November, John gave a "
        "small bottle of water and a warm loaf of bread to the")
SWAPS = ["Paul", "Anna", "Tom", "Sara", "Mark", "Kate"]


def prompt_pair(tokenizer, tokens):
    """The longest prefix of TEXT's words with `tokens` tokens, and the same with one name swapped, as many tokens."""
    words = TEXT.split()
    for end in range(len(words), 0, -1):
        clean = " ".join(words[:end])
        ids = tokenizer(clean)["input_ids"]
        if len(ids) != tokens:
            continue
        for i, word in enumerate(words[:end]):
            if word.strip(",") != "John":
                continue
            for swap in SWAPS:
                corrupted = " ".join(words[:i] + [word.replace("John", swap)] + words[i + 1:end])
                if len(tokenizer(corrupted)["input_ids"]) == tokens:
                    return clean, corrupted
    raise SystemExit(f"no prompt pair of {tokens} tokens")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--pair-out", required=True)
    parser.add_argument("--sample", type=int, default=0, help="time this many layers' cells and scale (0: all)")
    a = parser.parse_args()
    tokenizer, model = load_for_generation(a.model_dir)
    model.eval()
    clean, corrupted = prompt_pair(tokenizer, a.tokens)
    json.dump({"clean": clean, "corrupted": corrupted}, open(a.pair_out, "w"))
    layers = decoder_layers(model)
    clean_ids = tokenizer(clean, return_tensors="pt")["input_ids"].cuda()
    corrupted_ids = tokenizer(corrupted, return_tensors="pt")["input_ids"].cuda()
    saved = {}
    hooks = [layer.register_forward_hook(lambda m, i, o, k=k: saved.__setitem__(k, (o[0] if isinstance(o, tuple) else o).clone()))
             for k, layer in enumerate(layers)]
    with torch.no_grad():
        clean_logits = model(clean_ids).logits[0, -1].float()
    for hook in hooks:
        hook.remove()
    with torch.no_grad():
        corrupted_logits = model(corrupted_ids).logits[0, -1].float()
    answer, foil = int(clean_logits.argmax()), int(corrupted_logits.argmax())
    if foil == answer:
        foil = int(clean_logits.topk(2).indices[1])

    def cell(layer, position):
        def patch(module, inputs, output):
            hidden = (output[0] if isinstance(output, tuple) else output).clone()
            hidden[:, position] = saved[layer][:, position]
            return (hidden,) + tuple(output[1:]) if isinstance(output, tuple) else hidden
        hook = layers[layer].register_forward_hook(patch)
        with torch.no_grad():
            logits = model(corrupted_ids).logits[0, -1].float()
        hook.remove()
        return float(logits[answer] - logits[foil])

    def forward_pair():
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():
            model(clean_ids), model(corrupted_ids)
        torch.cuda.synchronize()
        return time.perf_counter() - start

    forward_pair()
    pair_seconds = sorted(forward_pair() for _ in range(5))[2]
    count, tokens = len(layers), clean_ids.shape[1]
    timed_layers = list(range(count)) if a.sample <= 0 else list(range(0, count, max(1, count // a.sample)))
    cell(0, 0)  # warm-up
    torch.cuda.synchronize()
    start = time.perf_counter()
    grid = {layer: [cell(layer, p) for p in range(tokens)] for layer in timed_layers}
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) * count / len(timed_layers)
    print(json.dumps({"hf_patching_grid_s": seconds, "hf_clean_and_corrupted_forward_s": pair_seconds, "cells": count * tokens, "cells_timed": len(timed_layers) * tokens,
                      "scaled": len(timed_layers) < count, "tokens": tokens, "layers": count, "answer": answer,
                      "foil": foil, "first_row": grid[timed_layers[0]][:4], **versions()}))


if __name__ == "__main__":
    main()
