"""Converts the reference's pickled probes (probe_{label}.pth, written by torch.save) into probekit's format:
probe_{label}.safetensors (same state-dict names and shapes) plus the probes.json index that
multi_probe_inference reads. probekit itself never unpickles files; this script loads them with
torch.load(weights_only=True), which refuses pickles that would run code.

  python3 convert_reference_probes.py PROBES_DIR [--layer L] [--output-dir DIR]

PROBES_DIR holds probe_*.pth (one layer), or layer_{L}/ folders of them (converted each, in place or under
--output-dir). Needs torch and safetensors (the reference's own dependencies)."""
import argparse
import json
import os
import re
import sys

import torch
from safetensors.torch import save_file

SUFFIX = "\n\nThe cognitive action being demonstrated here is"


def convert_layer(source, target, layer):
    files = sorted(f for f in os.listdir(source) if re.fullmatch(r"probe_.+\.pth", f))
    if not files:
        return False
    os.makedirs(target, exist_ok=True)
    entries, index = [], {}
    for position, name in enumerate(files):
        state = torch.load(os.path.join(source, name), map_location="cpu", weights_only=True)
        label = name[len("probe_"):-len(".pth")]
        model_class = state.get("model_class", "BinaryLinearProbe")
        if model_class not in ("BinaryLinearProbe", "BinaryMultiHeadProbe"):
            sys.exit(f"{name}: {model_class} is not a binary probe")
        config = state.get("model_config", {})
        metadata = state.get("metadata", {}) or {}
        tensors = {k: v.float().contiguous() for k, v in state["model_state_dict"].items()}
        val_auc = float(metadata.get("val_auc", 0.0))
        info = {"model_class": model_class, "input_dim": str(config.get("input_dim")), "label": label, "action": label,
                "label_index": str(position), "layer": str(layer), "epoch": str(metadata.get("epoch", 0)),
                "val_auc": repr(val_auc), "threshold": "0.5", "threshold_logit": "0.0"}
        if "hidden_dim" in config:
            info["hidden_dim"] = str(config["hidden_dim"])
        out = f"probe_{label}.safetensors"
        save_file(tensors, os.path.join(target, out), metadata=info)
        entries.append({"label": label, "label_index": position, "file": out, "threshold": 0.5,
                        "threshold_logit": 0.0, "val_auc": val_auc, "best_epoch": int(metadata.get("epoch", 0))})
        index = {"model_type": "multihead" if model_class == "BinaryMultiHeadProbe" else "linear",
                 "model_class": model_class, "input_dim": config.get("input_dim")}
        if "hidden_dim" in config:
            index["hidden_dim"] = config["hidden_dim"]
            index["num_heads"] = 8
    index.update({"format": "probekit.binary_probes", "version": 1, "dtype": "float32", "layer": layer,
                  "readout": {"model_name": "", "site": "resid_post", "position": "last", "prompt_suffix": SUFFIX},
                  "labels": [e["label"] for e in entries], "probes": entries, "skipped_labels": [],
                  "converted_from": os.path.abspath(source)})
    with open(os.path.join(target, "probes.json"), "w") as f:
        json.dump(index, f, indent=2)
    print(f"{source}: {len(entries)} probes -> {target}")
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("probes_dir")
    parser.add_argument("--layer", type=int, default=-1, help="layer of a single-layer directory (else pass --layer to inference)")
    parser.add_argument("--output-dir", default=None)
    args = parser.parse_args()
    out = args.output_dir or args.probes_dir
    converted = convert_layer(args.probes_dir, out, args.layer)
    for name in sorted(os.listdir(args.probes_dir)):
        match = re.fullmatch(r"layer_(\d+)", name)
        if match and os.path.isdir(os.path.join(args.probes_dir, name)):
            converted |= convert_layer(os.path.join(args.probes_dir, name), os.path.join(out, name), int(match.group(1)))
    if not converted:
        sys.exit(f"{args.probes_dir}: no probe_*.pth files")


if __name__ == "__main__":
    main()
