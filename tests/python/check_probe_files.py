#!/usr/bin/env python3
"""Checks probe files written by train_binary_probes / train_probes with the reference's own modules.

    python3 check_probe_files.py OUTPUT_DIR [OUTPUT_DIR ...]     (needs torch and safetensors)

For every directory (and its layer_*/ folders): builds the reference's module for each probe file
(BinaryLinearProbe, BinaryMultiHeadProbe, LinearProbe, MultiHeadProbe, exactly as brije's probe_models.py),
loads the tensors with load_state_dict(strict=True), and compares its eval-mode logits on the inputs stored in
logits_check.safetensors with the logits the C++ tool stored there. Exits 1 on any mismatch.
"""
import json
import sys
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file

from reference_probe_modules import AttentionProbe, reference_probe


def build_probe(path):
    """The reference's load_probe, from our safetensors metadata instead of a pickled model_config; an attention
    probe (no reference class) as EleutherAI's AttentionProbe."""
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
    if meta["model_class"] == "AttentionProbe":
        probe = AttentionProbe(int(meta["input_dim"]), int(meta["num_heads"]))
        state = load_file(str(path))
        probe = probe.to(next(iter(state.values())).dtype)
        probe.load_state_dict(state, strict=True)
        return probe.eval(), meta
    config = {"input_dim": int(meta["input_dim"])}
    if "num_classes" in meta:
        config["num_classes"] = int(meta["num_classes"])
    if "hidden_dim" in meta:
        config["hidden_dim"] = int(meta["hidden_dim"])
    state = load_file(str(path))
    probe = reference_probe(meta["model_class"], config)
    probe = probe.to(next(iter(state.values())).dtype)  # as load_probe: the first tensor's dtype
    probe.load_state_dict(state, strict=True)
    return probe.eval(), meta


def padded_texts(rows, offsets, skip_leading):
    """The token rows of each text (as logits_check stores them: the rows the probes read) padded, with the mask
    and each row's position in its text (the rows start after the skip_leading leading specials)."""
    lengths = [end - begin for begin, end in zip(offsets[:-1], offsets[1:])]
    x = torch.zeros(len(lengths), max(lengths), rows.shape[1])
    mask, position = torch.zeros(len(lengths), max(lengths)), torch.zeros(len(lengths), max(lengths))
    for i, (begin, n) in enumerate(zip(offsets[:-1], lengths)):
        x[i, :n], mask[i, :n] = rows[begin:begin + n], 1
        position[i, :n] = torch.arange(skip_leading, skip_leading + n)
    return x, mask, position


def run_probe(probe, meta, inputs, check_meta):
    dtype = next(probe.parameters()).dtype
    if meta["model_class"] != "AttentionProbe":
        return probe(inputs.to(dtype)).float()
    # Positions hold only where --max-tokens cut nothing (max_tokens 0), the case checked here.
    x, mask, position = padded_texts(inputs, json.loads(check_meta["offsets"]), int(meta["skip_leading"]))
    return probe(x.to(dtype), mask, position.to(dtype)).float()


def compare(directory, files):
    check = load_file(str(directory / "logits_check.safetensors"))
    with safe_open(str(directory / "logits_check.safetensors"), framework="pt") as f:
        check_meta = f.metadata()
    inputs, expected = check["inputs"], check["logits"]
    worst = 0.0
    for column, path in enumerate(files):
        probe, meta = build_probe(path)
        with torch.no_grad():
            got = run_probe(probe, meta, inputs, check_meta)
        want = expected[:, column:column + 1] if got.shape[1] == 1 else expected
        tolerance = 2e-2 if next(probe.parameters()).dtype == torch.bfloat16 else 1e-4
        error = ((got - want).abs() / (1.0 + want.abs())).max().item()
        worst = max(worst, error)
        if error > tolerance:
            print(f"FAIL {path}: logits differ by {error:.3g} (relative), tolerance {tolerance}")
            print(f"  expected {want[:3].flatten().tolist()}\n  got      {got[:3].flatten().tolist()}")
            return False
    print(f"ok   {directory}: {len(files)} probe file(s) load strictly; logits within {worst:.2g} of the tool's")
    return True


def check_directory(directory):
    directory = Path(directory)
    ok = True
    index_path = directory / "probes.json"
    if index_path.exists() and json.loads(index_path.read_text())["format"] == "probekit.binary_probes":
        index = json.loads(index_path.read_text())
        ok &= compare(directory, [directory / entry["file"] for entry in index["probes"]])
    if (directory / "final_probe.safetensors").exists():
        ok &= compare(directory, [directory / "final_probe.safetensors"])
        build_probe(directory / "best_probe.safetensors")
    for layer in sorted(directory.glob("layer_*")):
        if layer.is_dir():
            ok &= check_directory(layer)
    return ok


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    results = [check_directory(d) for d in sys.argv[1:]]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
