"""The SAE benchmark's dictionary (sae_capture_examples_per_s): a 16,384-wide JumpReLU SAE of random weights in
Gemma Scope 2's layout (params.safetensors with w_enc, w_dec, b_enc, b_dec, threshold + config.json) reading the
residual stream of decoder layer LAYER, thresholds set so that about 64 latents of a row pass.
  python3 make_bench_sae.py MODEL_DIR OUT_DIR [--layer 17] [--width 16384]"""
import argparse
import json
import os

import torch
from safetensors.torch import save_file


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("out")
    parser.add_argument("--layer", type=int, default=17)
    parser.add_argument("--width", type=int, default=16384)
    args = parser.parse_args()
    with open(os.path.join(args.model, "config.json")) as source:
        config = json.load(source)
    hidden = config.get("text_config", config)["hidden_size"]
    generator = torch.Generator().manual_seed(17)
    w_enc = torch.randn(hidden, args.width, generator=generator) / hidden ** 0.5
    # Pre-activations of unit-variance rows are ~N(0, 1) per latent: a threshold of 2.7 passes ~0.35% (~57 of 16,384).
    tensors = {"w_enc": w_enc, "w_dec": w_enc.t().contiguous(), "b_enc": torch.zeros(args.width),
               "b_dec": torch.zeros(hidden), "threshold": torch.full((args.width,), 2.7)}
    folder = os.path.join(args.out, "resid_post", f"layer_{args.layer}_width_16k_l0_small")
    os.makedirs(folder, exist_ok=True)
    save_file(tensors, os.path.join(folder, "params.safetensors"))
    hook = f"model.layers.{args.layer}.output"
    with open(os.path.join(folder, "config.json"), "w") as out:
        json.dump({"architecture": "jump_relu", "width": args.width, "l0": "small", "hf_hook_point_in": hook,
                   "hf_hook_point_out": hook, "affine_connection": False}, out)
    print(folder)


if __name__ == "__main__":
    main()
