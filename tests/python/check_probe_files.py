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
import torch.nn as nn
from safetensors import safe_open
from safetensors.torch import load_file


# ---- the reference's modules (brije src/probes/probe_models.py): the same parameters and state-dict names ----

class _LinearHead(nn.Module):
    """Dropout -> Linear(input_dim, outputs): BinaryLinearProbe has one output, LinearProbe one per class."""

    def __init__(self, input_dim, outputs, dropout):
        super().__init__()
        self.input_dim = input_dim
        self.dropout = nn.Dropout(dropout)
        self.linear = nn.Linear(input_dim, outputs)

    def forward(self, x):
        return self.linear(self.dropout(x))


class _MultiHeadAttentionHead(nn.Module):
    """Two ReLU layers -> self-attention over one position -> Linear(hidden_dim, outputs)."""

    def __init__(self, input_dim, outputs, hidden_dim, num_heads, dropout):
        super().__init__()
        self.input_dim = input_dim
        self.hidden_dim = hidden_dim
        self.encoder = nn.Sequential(
            nn.Linear(input_dim, hidden_dim), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden_dim, hidden_dim), nn.ReLU(), nn.Dropout(dropout))
        self.attention = nn.MultiheadAttention(embed_dim=hidden_dim, num_heads=num_heads, dropout=dropout,
                                               batch_first=True)
        self.classifier = nn.Linear(hidden_dim, outputs)

    def forward(self, x):
        h = self.encoder(x).unsqueeze(1)
        h_attn, _ = self.attention(h, h, h)
        return self.classifier(h_attn.squeeze(1))


class BinaryLinearProbe(_LinearHead):
    def __init__(self, input_dim, dropout=0.1):
        super().__init__(input_dim, 1, dropout)


class BinaryMultiHeadProbe(_MultiHeadAttentionHead):
    def __init__(self, input_dim, hidden_dim=512, num_heads=8, dropout=0.1):
        super().__init__(input_dim, 1, hidden_dim, num_heads, dropout)


class LinearProbe(_LinearHead):
    def __init__(self, input_dim, num_classes, dropout=0.1):
        super().__init__(input_dim, num_classes, dropout)
        self.num_classes = num_classes


class MultiHeadProbe(_MultiHeadAttentionHead):
    def __init__(self, input_dim, num_classes, hidden_dim=512, num_heads=8, dropout=0.1):
        super().__init__(input_dim, num_classes, hidden_dim, num_heads, dropout)
        self.num_classes = num_classes


CLASSES = {c.__name__: c for c in (BinaryLinearProbe, BinaryMultiHeadProbe, LinearProbe, MultiHeadProbe)}


def build_probe(path):
    """The reference's load_probe, from our safetensors metadata instead of a pickled model_config."""
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
    config = {"input_dim": int(meta["input_dim"])}
    if "num_classes" in meta:
        config["num_classes"] = int(meta["num_classes"])
    if "hidden_dim" in meta:
        config["hidden_dim"] = int(meta["hidden_dim"])
    state = load_file(str(path))
    probe = CLASSES[meta["model_class"]](**config)
    probe = probe.to(next(iter(state.values())).dtype)  # as load_probe: the first tensor's dtype
    probe.load_state_dict(state, strict=True)
    return probe.eval(), meta


def compare(directory, files):
    check = load_file(str(directory / "logits_check.safetensors"))
    inputs, expected = check["inputs"], check["logits"]
    worst = 0.0
    for column, path in enumerate(files):
        probe, meta = build_probe(path)
        with torch.no_grad():
            got = probe(inputs.to(next(probe.parameters()).dtype)).float()
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
    if (directory / "probes.json").exists():
        index = json.loads((directory / "probes.json").read_text())
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
