"""Probes: a probes directory (train_binary_probes' or train_probes' output, any probe kind) run on a Model."""

import json

from . import _native
from ._running import layer_selection, run_interruptibly, steer_items, text_list
from .model import Model


def load_probes(directory, layers=None, layer=None, best_layer=False):
    """The probes of a directory, checked to hold probes.

    layers: which layers' probes run ([8, 17], "21-30", "all"; None: the directory's layers), or layer: one layer,
    or best_layer=True: each label's best layer only (multi_probe_inference's --layers, --layer, --best-layer).
    Raises RuntimeError when the directory holds no probes."""
    if not isinstance(directory, str) or not directory:
        raise ValueError(f"directory: expected a probes directory, got {directory!r}")
    return Probes(directory, layers, layer, best_layer)


class Probes:
    """Probes loaded from a directory (probekit.load_probes); each call returns what multi_probe_inference --json
    prints."""

    def __init__(self, directory, layers=None, layer=None, best_layer=False):
        self._info = _native.describe_probes(directory)
        self._selection = (layer_selection(layers), -1 if layer is None else int(layer), bool(best_layer))

    dir = property(lambda self: self._info["dir"], doc="The probes directory.")
    layers = property(lambda self: list(self._info["layers"]), doc="The layers the directory has probes for.")
    best_layer = property(lambda self: dict(self._info["best_layer"]), doc="Each label's best layer.")

    def __repr__(self):
        return f"probekit.Probes({self.dir!r}, layers {self.layers})"

    def rank(self, model, texts, top_k=5, threshold=0.1, calibrated=False, mode="all", aggregate="max", steer=None):
        """What multi_probe_inference --json prints for each text: the labels ranked by the probes' confidence.

        texts: a list of strings (a list of results) or one string (its result). top_k: how many labels each
        shows; threshold: the confidence a label needs to count as shown (calibrated=True: each probe's tuned
        threshold). mode, aggregate: the layout over several layers (all, by-action, by-layer; max or mean).
        steer: [(label or vector, layer, coefficient), ...] added to the stream while scoring."""
        one = isinstance(texts, str)
        found = json.loads(run_interruptibly(
            _native.rank, _model_of(model), self.dir, *self._selection, text_list(texts), int(top_k), float(threshold),
            bool(calibrated), mode, aggregate, steer_items(steer)))
        return found[0] if one else found

    def per_token(self, model, text, top_k=5, threshold=0.1, calibrated=False, steer=None):
        """What multi_probe_inference --per-token --json prints for text: each token with every (label, layer)
        prediction for the text up to that token. Attention probes add each token's "attention" ([{label, layer,
        weight}]: the weight the whole text's pool puts on it, the mean over heads) and a top-level
        "suffix_attention" for the prompt suffix's tokens."""
        if not isinstance(text, str):
            raise ValueError(f"text: expected a string, got {type(text).__name__}")
        return json.loads(run_interruptibly(
            _native.per_token, _model_of(model), self.dir, *self._selection, text, int(top_k), float(threshold),
            bool(calibrated), steer_items(steer)))


def _model_of(model):
    if not isinstance(model, Model):
        raise ValueError(f"model: expected probekit.load_model(...)'s Model, got {type(model).__name__}")
    return model._native
