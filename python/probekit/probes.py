"""Probes: a probes directory (train_binary_probes' or train_probes' output, any probe kind) run on a Model."""

import json
import os

from . import _native
from ._running import conversation_text, layer_selection, run_interruptibly, steer_items, text_list, whole_number
from .model import Model


def load_probes(directory, layers=None, layer=None, best_layer=False):
    """The probes of a directory, checked to hold probes.

    layers: which layers' probes run ([8, 17], "21-30", "all"; None: the directory's layers), or layer: one layer,
    or best_layer=True: each label's best layer only (multi_probe_inference's --layers, --layer, --best-layer).
    Raises ValueError when the directory is missing or holds no probes, RuntimeError when its probes.json is broken."""
    if isinstance(directory, os.PathLike):
        directory = os.fspath(directory)
    if not isinstance(directory, str) or not directory:
        raise ValueError(f"directory: expected a probes directory, got {directory!r}")
    return Probes(os.path.abspath(directory), layers, layer, best_layer)


class Probes:
    """Probes loaded from a directory (probekit.load_probes); each call returns what multi_probe_inference --json
    prints."""

    def __init__(self, directory, layers=None, layer=None, best_layer=False):
        if best_layer and (layer is not None or layers is not None):
            raise ValueError("best_layer scores each label at its best layer: it excludes layer and layers")
        self._info = _native.describe_probes(directory)
        self._selection = (layer_selection(layers), -1 if layer is None else whole_number(layer, "layer"), bool(best_layer))
        # Layers the directory has no probes for are refused here, as --layer and --layers refuse them.
        missing = [number for number in _layer_numbers(layers, layer) if number not in self._info["layers"]]
        if missing:
            raise ValueError(f"{'layer' if layer is not None else 'layers'}: {self._info['dir']} has no probes for layer "
                             f"{', '.join(map(str, missing))} (it has layers {', '.join(map(str, self._info['layers']))})")

    dir = property(lambda self: self._info["dir"], doc="The probes directory.")
    layers = property(lambda self: list(self._info["layers"]), doc="The layers the directory has probes for.")
    best_layer = property(lambda self: dict(self._info["best_layer"]), doc="Each label's best layer.")

    def __repr__(self):
        return f"probekit.Probes({self.dir!r}, layers {self.layers})"

    def rank(self, model, texts=None, top_k=5, threshold=0.1, calibrated=False, mode="all", aggregate="max", steer=None,
             messages=None, tools=None):
        """What multi_probe_inference --json prints for each text: the labels ranked by the probes' confidence.

        texts: a list of strings (a list of results) or one string (its result). messages: instead of texts, one
        conversation ([{"role", "content"}, ...]) ranked at the probes' token mask, as --messages ranks it (its
        result); tools: the functions it offers ([{"type": "function", "function": {"name", ...}}, ...]), rendered
        by the chat template as apply_chat_template(tools=...) renders them (messages only). top_k: how many labels
        each shows; threshold: the confidence a label needs to count as shown (calibrated=True: each probe's tuned
        threshold). mode, aggregate: the layout over several layers (all, by-action, by-layer; max or mean). steer:
        [(label or vector, layer, coefficient), ...] added to the stream while scoring (texts only)."""
        conversation = conversation_text(texts, messages, tools, steer, "texts")
        one = conversation is not None or isinstance(texts, str)
        found = json.loads(run_interruptibly(
            _native.rank, _model_of(model), self.dir, *self._selection, [] if conversation else text_list(texts),
            [conversation] if conversation else [], whole_number(top_k, "top_k"), float(threshold), bool(calibrated), mode, aggregate,
            steer_items(steer)))
        return found[0] if one else found

    def per_token(self, model, text=None, top_k=5, threshold=0.1, calibrated=False, steer=None, messages=None,
                  tools=None):
        """What multi_probe_inference --per-token --json prints for text: each token with every (label, layer)
        prediction for the text up to that token. Attention probes add each token's "attention" ([{label, layer,
        weight}]: the weight the whole text's pool puts on it, the mean over heads) and a top-level
        "suffix_attention" for the prompt suffix's tokens. messages: instead of text, one conversation, as
        --per-token --messages scores it (each token "in_mask" or not), with the tools it offers (tools=, as in
        rank)."""
        conversation = conversation_text(text, messages, tools, steer, "text")
        if conversation is None:
            text = text_list(text, "text")[0] if isinstance(text, str) else text
            if not isinstance(text, str):
                raise ValueError(f"text: expected a string, got {type(text).__name__}")
        return json.loads(run_interruptibly(
            _native.per_token, _model_of(model), self.dir, *self._selection, "" if conversation else text,
            conversation or "", whole_number(top_k, "top_k"), float(threshold), bool(calibrated), steer_items(steer)))


def _layer_numbers(layers, layer):
    """The layer numbers layer= or layers= name (a range or "all" as text names none here: the tools read it)."""
    if layer is not None:
        return [whole_number(layer, "layer")]
    if layers is None or isinstance(layers, str):
        return []
    if isinstance(layers, int):
        return [whole_number(layers, "layers")]
    return [int(number) for number in layers]


def _model_of(model):
    if not isinstance(model, Model):
        raise ValueError(f"model: expected probekit.load_model(...)'s Model, got {type(model).__name__}")
    return model._native
