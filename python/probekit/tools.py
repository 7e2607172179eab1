"""The tools as functions: capture_activations and train_binary_probes take their flags as keyword arguments;
read_activations reads a layer's file; the built-in example's model and dataset."""

import json
import os

import torch.utils.dlpack

from . import _native
from ._running import flag_arguments, progress_callback, run_interruptibly, seed_value, whole_number
from .model import Model

_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def capture_activations(model, dataset, output_dir, progress=True, **flags):
    """capture_activations --model MODEL --dataset DATASET --output-dir OUTPUT_DIR with the tool's other flags as
    keyword arguments (layers=[8, 17], position="all", max_examples=100, resume=True, ...: --flag-name value, True
    for a flag alone). model: a loaded Model (captured with as it is) or a checkpoint folder or hub name.
    Returns the summary its --json prints. Ctrl-C stops it; resume=True goes on from what was written."""
    native = None
    if isinstance(model, Model):
        native, model = model._native, model.dir
    arguments = ["--model", str(model), "--dataset", str(dataset), "--output-dir", str(output_dir)]
    summary = run_interruptibly(_native.capture_activations, native, arguments + flag_arguments(flags),
                                progress_callback(progress))
    return json.loads(summary)


def train_binary_probes(activations_dir, output_dir, progress=True, **flags):
    """train_binary_probes --activations ACTIVATIONS_DIR --output-dir OUTPUT_DIR with the tool's other flags as
    keyword arguments (model_type="logistic", epochs=20, overwrite=True, ...; model_type="attention", heads=2,
    max_tokens=256 for attention probes, which train on a capture_activations(..., position="all")). activations_dir:
    a directory of layer_{L}_activations.h5 files, one file, or a list of them. Returns the summary its --json
    prints."""
    inputs = activations_dir if isinstance(activations_dir, (list, tuple)) else [activations_dir]
    arguments = ["--activations", *map(str, inputs), "--output-dir", str(output_dir)]
    summary = run_interruptibly(_native.train_binary_probes, arguments + flag_arguments(flags),
                                progress_callback(progress))
    return json.loads(summary)


class Activations(dict):
    """A layer's activation file: {"train" | "val" | "test": {"activations": [N, H], "labels": [N], "example_index",
    "offsets", "token_ids", "positions" (position "all"), "token_labels" (conversations with "spans"), "metadata":
    {column: [str]} (--keep-fields)}}, each split with the same arrays (empty ones for a split without examples);
    `attributes` says how it was made (model, layer, label_names, site, position, ...)."""

    def __init__(self, splits, attributes):
        super().__init__(splits)
        self.attributes = attributes


def read_activations(path):
    """Reads and checks a layer_{L}_activations.h5 file (ours or the reference's) into torch tensors."""
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"path: expected a file name, got {type(path).__name__}")
    splits, attributes, recipe = _native.read_activations(os.fspath(path))
    attributes.update(json.loads(recipe))
    for arrays in splits.values():
        for name, value in arrays.items():
            if type(value).__name__ == "PyCapsule":
                arrays[name] = torch.utils.dlpack.from_dlpack(value)
    return Activations(splits, attributes)


def example_model(directory, overwrite=False, hidden_size=256, layers=6, seed=0):
    """The built-in example model: a small random-weight Gemma 3 checkpoint (make_example model), written to
    directory unless it is there already. Returns directory, for load_model."""
    seed = seed_value(seed)
    if overwrite or not os.path.exists(os.path.join(directory, "model.safetensors")):
        _native.write_example_model(str(directory), os.path.join(_DATA, "example_tokenizer.json"), whole_number(hidden_size, "hidden_size"),
                                    whole_number(layers, "layers"), seed, bool(overwrite))
    return str(directory)


def example_dataset():
    """The built-in example dataset: 320 labelled texts of 8 labels (JSONL: text, cognitive_action, domain)."""
    return os.path.join(_DATA, "example.jsonl")
