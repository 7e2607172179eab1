#!/usr/bin/env python3
"""Exports probes trained by probekit into the reference's pickled format, so that the reference's streaming
script, viewers and notebooks load them: probe_{label}.pth for every probe of a train_binary_probes directory,
best_probe.pth and final_probe.pth for a train_probes directory. Each file is what the reference's torch.save
wrote: a dict of model_state_dict (the same tensor names and shapes), model_class, model_config and metadata
(its floats as 0-dim tensors: see loadable()). The files load with torch.load(path, weights_only=True),
torch 1.13 included. The opposite direction is convert_reference_probes.py.

  python3 export_reference_probes.py PROBES_DIR [--output-dir DIR]

PROBES_DIR holds probes.json (one layer) or layer_{L}/ folders of them (exported each, in place or under
--output-dir). Attention probes (--model-type attention) have no class in the reference: their directories are
skipped with a message (their safetensors files load strictly into EleutherAI's attention-probes
AttentionProbe(d_in, n_heads, output_dim=1), called as probe(x, mask, position)). Needs torch only: Debian packages no safetensors for Python, so the .safetensors files are read
here by hand."""
import argparse
import json
import os
import re
import struct
import sys

import torch

SAFETENSORS_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "F64": torch.float64}


def read_safetensors(path):
    """The tensors and the string metadata of a .safetensors file: an 8-byte little-endian header length, the
    JSON header (each tensor's dtype, shape and data_offsets; __metadata__), then the raw data."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        sys.exit(f"{path}: too short for a safetensors file")
    (header_length,) = struct.unpack("<Q", blob[:8])
    if 8 + header_length > len(blob):
        sys.exit(f"{path}: header length {header_length} runs past the end of the file")
    header = json.loads(blob[8:8 + header_length])
    metadata = header.pop("__metadata__", None) or {}
    data = blob[8 + header_length:]
    tensors = {}
    for name, info in header.items():
        if info["dtype"] not in SAFETENSORS_DTYPES:
            sys.exit(f"{path}: tensor '{name}' has dtype {info['dtype']}, expected a float type")
        begin, end = info["data_offsets"]
        if not 0 <= begin <= end <= len(data):
            sys.exit(f"{path}: tensor '{name}' has data_offsets {begin}, {end} outside the data (file truncated?)")
        values = torch.frombuffer(bytearray(data[begin:end]), dtype=SAFETENSORS_DTYPES[info["dtype"]])
        tensors[name] = values.reshape(info["shape"])
    return tensors, metadata


def model_config(metadata):
    """The reference's model_config: the arguments of its probe class's constructor."""
    config = {"input_dim": int(metadata["input_dim"])}
    for key in ("num_classes", "hidden_dim", "num_heads"):
        if key in metadata:
            config[key] = int(metadata[key])
    return config


# The metadata that model_config holds instead, and the entries that are numbers (safetensors metadata holds
# strings only); the others (label, action) stay strings whatever they spell.
CONFIG_KEYS = {"model_class", "model_type", "input_dim", "num_classes", "hidden_dim", "num_heads", "dropout", "format"}
NUMBER_KEYS = {"layer", "epoch", "label_index", "val_auc", "val_accuracy", "val_loss", "threshold", "threshold_logit",
               "test_accuracy", "test_f1_macro"}


def metadata_value(key, value):
    """A metadata string as the value the reference stored: numbers as numbers ("nan" included), label_names as
    its list."""
    if key == "label_names":
        return json.loads(value)
    if key in NUMBER_KEYS:
        try:
            return int(value)
        except ValueError:
            return float(value)
    return value


def loadable(value):
    """A metadata value that torch.load(weights_only=True) reads back: a float becomes a 0-dim float64 tensor,
    because torch 1.13's (Debian's) weights-only unpickler refuses pickled floats; float(), comparisons and
    f"{value:.3f}" work on it as on a float."""
    return torch.tensor(value, dtype=torch.float64) if isinstance(value, float) else value


def save_reference_probe(source, target, extra_metadata):
    tensors, metadata = read_safetensors(source)
    info = {key: metadata_value(key, value) for key, value in metadata.items() if key not in CONFIG_KEYS}
    info.update(extra_metadata)
    info = {key: loadable(value) for key, value in info.items()}
    torch.save({"model_state_dict": tensors, "model_class": metadata["model_class"], "model_config": model_config(metadata),
                "metadata": info}, target)


# Probe kinds the reference has no class for, and what loads them instead.
NO_REFERENCE_CLASS = {
    "attention": "attention probes have no equivalent class in the reference (probe_models.py); their safetensors "
                 "files load with load_state_dict(strict=True) into EleutherAI's attention-probes AttentionProbe(d_in, "
                 "n_heads, output_dim=1), called as probe(x, mask, position)"}


def export_layer(source, target):
    """Exports the probes of one directory (a probes.json); returns how many files were written."""
    index_path = os.path.join(source, "probes.json")
    if not os.path.isfile(index_path):
        return 0
    with open(index_path) as f:
        index = json.load(f)
    if index.get("model_type") in NO_REFERENCE_CLASS:
        print(f"{source}: skipped: {NO_REFERENCE_CLASS[index['model_type']]}")
        return 0
    os.makedirs(target, exist_ok=True)
    readout = index.get("readout", index)  # indexes written before the readout recipe kept its fields at the top
    recorded = {key: readout[key] for key in ("model_name", "model_revision", "site", "position", "prompt_suffix")
                if readout.get(key) is not None}
    if index.get("format") == "probekit.multiclass_probe":
        names = ["best_probe", "final_probe"]
        for name in names:
            save_reference_probe(os.path.join(source, name + ".safetensors"), os.path.join(target, name + ".pth"), recorded)
    else:
        names = []
        for entry in index["probes"]:
            name = "probe_" + entry["label"]
            extra = dict(recorded, threshold=entry["threshold"], threshold_logit=entry["threshold_logit"])
            save_reference_probe(os.path.join(source, entry["file"]), os.path.join(target, name + ".pth"), extra)
            names.append(name)
    print(f"{source}: {len(names)} probe(s) -> {target}")
    return len(names)


def skipped_only(probes_dir):
    """Whether probes_dir holds probes, all of kinds without a reference class (skipped, not an error)."""
    indexes = [os.path.join(probes_dir, "probes.json")] + [
        os.path.join(probes_dir, name, "probes.json") for name in sorted(os.listdir(probes_dir))
        if re.fullmatch(r"layer_\d+", name)]
    kinds = []
    for path in indexes:
        if os.path.isfile(path):
            with open(path) as f:
                kinds.append(json.load(f).get("model_type"))
    return bool(kinds) and all(kind in NO_REFERENCE_CLASS for kind in kinds)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("probes_dir")
    parser.add_argument("--output-dir", default=None, help="where the .pth files go (default: beside the probes)")
    args = parser.parse_args()
    if not os.path.isdir(args.probes_dir):
        sys.exit(f"{args.probes_dir}: no such directory")
    out = args.output_dir or args.probes_dir
    exported = export_layer(args.probes_dir, out)
    for name in sorted(os.listdir(args.probes_dir)):
        if re.fullmatch(r"layer_\d+", name) and os.path.isdir(os.path.join(args.probes_dir, name)):
            exported += export_layer(os.path.join(args.probes_dir, name), os.path.join(out, name))
    if not exported and not skipped_only(args.probes_dir):
        sys.exit(f"{args.probes_dir}: no probes.json and no layer_{{L}}/probes.json (train probes with "
                 "train_binary_probes or train_probes)")


if __name__ == "__main__":
    main()
