"""The GPU memory bandwidth a plain device-to-device copy reaches (read + write bytes per second), and the decode
rate it allows a model whose weights are read once per token: the bound of decode_bound_fraction.

    python3 hbm_bandwidth.py MODEL_DIR   ->  {"bandwidth_gb_per_s", "weight_bytes", "bound_tokens_per_s"}"""
import glob
import json
import os
import sys

import torch


def copy_bandwidth(gib=2, repeats=20):
    source = torch.empty(gib << 30, dtype=torch.uint8, device="cuda")
    target = torch.empty_like(source)
    for _ in range(3):
        target.copy_(source)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        target.copy_(source)
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1e3
    return 2 * source.numel() * repeats / seconds


def main():
    weights = sum(os.path.getsize(f) for f in glob.glob(os.path.join(sys.argv[1], "*.safetensors")))
    bandwidth = copy_bandwidth()
    print(json.dumps({"bandwidth_gb_per_s": bandwidth / 1e9, "weight_bytes": weights,
                      "bound_tokens_per_s": bandwidth / weights, "device": torch.cuda.get_device_name()}))


if __name__ == "__main__":
    main()
