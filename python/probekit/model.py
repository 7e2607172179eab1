"""Model: one copy of a model's weights, loaded once and run by capture, ranking, per-token scores and generation."""

import atexit
import json
import os
import queue
import threading

import torch.utils.dlpack

from . import _native
from ._running import (conversation_text, given_text, json_text, layer_selection, positive_whole_number, progress_callback,
                       run_interruptibly, seed_value, steer_items, stop_and_wait, text_list, whole_number)


def load_model(model, device="auto", dtype="auto", devices=None, max_gpu_memory=0):
    """Loads a model once for every later call.

    model: a checkpoint folder (config.json, *.safetensors, tokenizer.json) or a hub name "org/name[@revision]".
    device: auto|cpu|cuda|cuda:N|rocm|mps; dtype: auto|fp32|bf16|fp16 (as the tools' --device and --dtype).
    devices: several devices (["cuda:0", "cuda:1"]) the layers are split over; max_gpu_memory: bytes a run may use
    on each GPU (0: the free memory).
    Raises ValueError for a bad argument or a missing checkpoint, RuntimeError for a broken one (config.json that is
    not JSON) or an unusable device."""
    if isinstance(model, os.PathLike) or (isinstance(model, str) and os.path.isdir(model)):
        model = os.path.abspath(model)  # a folder stays the same folder after os.chdir
    if not isinstance(model, str) or not model:
        raise ValueError(f"model: expected a checkpoint folder or a hub name, got {model!r}")
    device, dtype = (given_text(value, name, has_default=True) for value, name in ((device, "device"), (dtype, "dtype")))
    devices = [given_text(value, f"devices[{index}]") for index, value in enumerate(devices or [])]
    native = run_interruptibly(_native.load_model, model, device, dtype, devices, whole_number(max_gpu_memory, "max_gpu_memory"))
    return Model(native)


def _sae_items(saes):
    if saes is None:
        return []
    if not isinstance(saes, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in saes.items()):
        raise ValueError(f"saes: expected {{name: folder}}, got {saes!r}")
    return list(saes.items())


class Model:
    """A loaded model (probekit.load_model). Its weights stay loaded while the object lives."""

    def __init__(self, native):
        self._native = native
        self._info = _native.describe(native)
        # Attribution's CUDA graph, replayed by the next patch of a pair of the same token count (on a GPU).
        self._patch_graphs = _native.patch_graphs(native)

    name = property(lambda self: self._info["name"], doc="The hub name given, or the checkpoint folder's path.")
    dir = property(lambda self: self._info["dir"], doc="The checkpoint folder.")
    num_layers = property(lambda self: self._info["num_layers"], doc="Decoder layers.")
    hidden_size = property(lambda self: self._info["hidden_size"], doc="The residual stream's width.")
    device = property(lambda self: self._info["device"], doc="The device it runs on.")
    dtype = property(lambda self: self._info["dtype"], doc="The dtype of its weights.")

    def __repr__(self):
        info = self._info
        return (f"probekit.Model({info['name']!r}, {info['model_type']}, {info['num_layers']} layers, "
                f"hidden {info['hidden_size']}, {info['device']}, {info['dtype']})")

    def capture(self, texts, layers=None, site="resid_post", position="last", prompt_suffix=None, batch_size=None,
                steer=None, probes=None, max_length=0, progress=True, saes=None):
        """The activations of texts at layers, as capture_activations computes them, kept in memory.

        texts: a string or a list of strings. layers: [8, 17], 8, "21-30", "all" or None (capture's default:
        n/4, n/2, 3n/4, n-1). site: resid_post, resid_mid, attn_out, mlp_out, ... (capture_activations --site).
        position: last, mean, max or all. prompt_suffix: None for capture's default, "" for none.
        batch_size: texts per forward pass (None: chosen from the memory). steer: [(label or vector, layer,
        coefficient), ...] added to the stream while capturing (labels take their direction from probes).
        max_length: cut prompts to this many tokens (0: no limit). progress: a tqdm bar (when tqdm is installed).
        saes: {"NAME": folder} SAEs (capture_activations --sae); site "sae:NAME" then gives that SAE's latents
        [.., d_sae] at its own layer, "sae-error:NAME" what it misses (x - reconstruction).

        Returns {layer: torch.Tensor [len(texts), H]} in the texts' order, fp32 on the CPU; with position "all",
        {layer: [torch.Tensor [T_i, H], ...]}. Ctrl-C stops it (KeyboardInterrupt)."""
        texts = text_list(texts)
        if batch_size is not None:
            positive_whole_number(batch_size, "batch_size")
        layers_found, tensors, offsets, _ = run_interruptibly(
            _native.capture, self._native, texts, layer_selection(layers), site, position, prompt_suffix,
            batch_size or 0, whole_number(max_length, "max_length"), steer_items(steer), _probes_dir(probes), progress_callback(progress),
            _sae_items(saes))
        rows = [torch.utils.dlpack.from_dlpack(tensor) for tensor in tensors]
        if offsets:
            sizes = [end - begin for begin, end in zip(offsets, offsets[1:])]
            rows = [list(torch.split(layer_rows, sizes)) for layer_rows in rows]
        return dict(zip(layers_found, rows))

    def generate(self, prompt=None, max_new_tokens=64, stop=True, temperature=0.0, probes=None, steer=None, top_k=5,
                 threshold=0.1, calibrated=False, sample_top_k=0, top_p=1.0, seed=0, monitors=None, messages=None,
                 tools=None):
        """Generates after prompt, yielding what multi_probe_inference --generate --json prints: a dict per new token
        ({"row", "index", "position", "id", "token", "text", "predictions", ...}, with the probes' scores when probes
        are given), then one per prompt when it ends ({"row", "done": True, "stop", "prompt_ids", "generated_ids",
        "text"}).

        prompt: a string or a list of strings (rows). messages: instead of prompt, one conversation
        ([{"role", "content"}, ...], with the functions it offers in tools=) rendered with the model's chat template and
        its generation prompt, as --generate --messages renders it; probes trained on conversations read its tokens in
        their mask, then the reply's, as capture read them (they refuse a prompt). stop: stop at the model's end-of-sequence tokens (False: run
        max_new_tokens). temperature: 0 is greedy; sample_top_k, top_p, seed: sampling. probes: Probes scoring every
        new token. steer: [(label or vector, layer, coefficient), ...] (labels take their direction from probes).
        top_k, threshold, calibrated: what each token's predictions show (the top_k most confident). monitors:
        policies as the server's "monitors" take them ([{"label": "deception", "threshold": 0.8, "action": "stop"},
        ...]; needs probes): a token where one fires carries "monitor_firings", and a row a monitor stopped ends with
        stop "monitor".
        Leaving the loop early stops the generation."""
        conversation = conversation_text(prompt, messages, tools, None, "prompt")
        prompts = text_list(prompt, "prompt") if conversation is None else []
        positive_whole_number(max_new_tokens, "max_new_tokens")
        arguments = (self._native, prompts, _probes_dir(probes), *_probe_selection(probes), max_new_tokens, bool(stop), float(temperature),
                     whole_number(sample_top_k, "sample_top_k"), float(top_p), seed_value(seed), whole_number(top_k, "top_k"), float(threshold), bool(calibrated),
                     steer_items(steer), _monitor_policies(monitors, probes), conversation or "")
        return _generation_events(arguments)

    def patch(self, clean, corrupted=None, metric="logit-diff", site="resid_post", method="exact", layers="all",
              positions="all", layer_window=1, direction="denoise", subject=None, noise=None, seed=None, output_dir=None,
              overwrite=False, progress=True):
        """Activation patching, as patch_activations runs it: the corrupted run with one (layer, position) of a site
        replaced by the clean run's value (direction "noise": the reverse), for every cell of the grid.

        clean, corrupted: prompts of the same token count (special tokens, no template); or subject (text inside
        clean) instead of corrupted for ROME's corruption, noise (noise x the embeddings' std, default 3) on its tokens
        (seed, default 0).
        metric: "logit-diff[:ANSWER,FOIL]", "prob[:TOKEN]" or "kl". site: "resid_post", "attn_out", "mlp_out" or a
        list of them. method: "exact", "attribution" or "both". layers, positions: [0, 3], "0-5" or "all".
        layer_window: layers patched together, centred on each. output_dir: also write patching.json and
        patching.html there.

        Returns patching.json as a dict, with "grid", "attribution" and "restored" as torch tensors [layers,
        positions] in float64 (with several sites, a dict of them by site). On a GPU, attribution's passes are
        captured as a CUDA graph by the second call for pairs of one token count (and request) and replayed by the
        calls after it: a sweep over a templated dataset."""
        clean = given_text(clean, "clean")
        metric, direction, method = (given_text(value, name, has_default=True) for value, name in
                                     ((metric, "metric"), (direction, "direction"), (method, "method")))
        sites = [given_text(s, "site", has_default=True) for s in ([site] if isinstance(site, str) else site)]
        if corrupted is None and subject is None:
            raise ValueError("give corrupted (the corrupted prompt) or subject (the text of clean to noise)")
        if corrupted is not None and subject is not None:
            raise ValueError("give corrupted (the corrupted prompt) or subject (the text of clean to noise), not both")
        if subject is not None and not given_text(subject, "subject").strip():
            raise ValueError("subject: a blank text names no token to noise")
        if corrupted is not None:
            given_text(corrupted, "corrupted")
        if subject is None and (noise is not None or seed is not None):
            raise ValueError("noise and seed go with subject (ROME's noise corruption): a corrupted prompt draws no noise")
        positive_whole_number(layer_window, "layer_window")
        text = run_interruptibly(
            _native.patch, self._native, self._patch_graphs, clean, corrupted or "", subject or "",
            3.0 if noise is None else float(noise), seed_value(0 if seed is None else seed), metric, sites,
            layer_selection(layers) or "all",
            layer_selection(positions, "positions") or "all", layer_window, direction, method,
            "" if output_dir is None else given_text(output_dir, "output_dir", has_default=True, path=True),
            bool(overwrite), progress_callback(progress))
        result = json.loads(text)
        for key in ("grid", "attribution", "restored"):
            if key in result:
                value = result[key]
                result[key] = ({name: _grid(rows) for name, rows in value.items()} if isinstance(value, dict)
                               else _grid(value))
        return result


def _grid(rows):
    return torch.tensor([[float("nan") if v is None else v for v in row] for row in rows], dtype=torch.float64)


def _monitor_policies(monitors, probes):
    """monitors= as the native side reads it: the policies' JSON text ("" for none)."""
    if monitors is None:
        return ""
    if isinstance(monitors, dict):
        monitors = [monitors]
    if not isinstance(monitors, (list, tuple)) or not all(isinstance(m, dict) for m in monitors):
        raise ValueError("monitors: expected a list of policy dicts, e.g. [{'label': 'deception', 'action': 'stop'}]")
    if monitors and probes is None:
        raise ValueError("monitors: watch probes' scores; pass probes= too")
    return json_text(list(monitors), "monitors")


def _probes_dir(probes):
    if probes is None:
        return ""
    directory = getattr(probes, "dir", None)
    if not isinstance(directory, str):
        raise ValueError(f"probes: expected probekit.load_probes(...)'s Probes, got {type(probes).__name__}")
    return directory


def _probe_selection(probes):
    """The layers of the probes that run, as load_probes selected them: (layers, layer, best_layer)."""
    return ("", -1, False) if probes is None else probes._selection


_DONE = object()
_EVENTS_AHEAD = 256  # events a generation may make before its reader takes them; then it waits for the reader


def _generation_events(arguments):
    """The events of a generation running on a worker thread, as they come. The generation waits while its reader
    does not read, and stops when the reader leaves (the generator closed or collected), on Ctrl-C, or at exit."""
    generation = _Generation(arguments)
    try:
        generation.start()
        while (event := generation.events.get()) is not _DONE:
            if isinstance(event, BaseException):
                raise event
            yield json.loads(event)
    except KeyboardInterrupt:
        generation.stop(interrupt=True)
        raise
    finally:
        generation.stop()


class _ReaderLeft(Exception):
    """Raised by a generation's callback once its reader has left: the native generation unwinds at its next token,
    the --batch-size parts still to come included."""


class _Generation:
    """One generation on its worker thread, handing its events to the reader through a bounded queue."""

    running = set()  # generations whose worker has not ended, stopped at exit

    def __init__(self, arguments):
        self.arguments = arguments
        self.events = queue.Queue(_EVENTS_AHEAD)
        self.stopped, self.finished = threading.Event(), threading.Event()
        self.worker = threading.Thread(target=self._work, name="probekit-generate", daemon=True)

    def start(self):
        _Generation.running.add(self)
        try:
            self.worker.start()
        except BaseException:
            _Generation.running.discard(self)
            raise

    def stop(self, interrupt=False):
        """Stops the generation at its next token (interrupt: at its next pass too, through the library's
        interruption, which is the whole process's) and waits for its worker: a thread that reaches for the GIL
        during the interpreter's shutdown aborts the process."""
        self.stopped.set()
        # Not started; or closed by the garbage collector on the worker itself, which would wait for itself.
        if self.worker.ident is None or threading.current_thread() is self.worker:
            return
        if interrupt:
            stop_and_wait(self.finished)
        while not self.finished.wait(0.1):
            pass

    def _queue(self, item):
        """Queues item for the reader, waiting while the queue is full; False once the reader has left."""
        while not self.stopped.is_set():
            try:
                self.events.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _on_event(self, line):
        if not self._queue(line):
            raise _ReaderLeft()
        return True

    def _work(self):
        try:
            _native.generate(*self.arguments, self._on_event)
        except BaseException as error:  # raised in the reader's thread, unless the reader has left
            self._queue(error)
        finally:
            self._queue(_DONE)
            _Generation.running.discard(self)
            self.finished.set()


@atexit.register
def _stop_generations_at_exit():
    """Generations whose reader is still alive at exit (a generator kept unfinished) are stopped first."""
    for generation in list(_Generation.running):
        generation.stop(interrupt=True)
