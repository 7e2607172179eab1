"""probekit in Python: the same engine as the command-line tools, in-process.

    import probekit
    model = probekit.load_model("google/gemma-3-4b-it")
    acts = model.capture(["a text", "another"], layers=[8, 17])      # {layer: torch.Tensor [N, H]}
    probes = probekit.load_probes("runs/probes")
    probes.rank(model, ["a text"], top_k=5)                          # what multi_probe_inference --json prints
    sae = probekit.load_sae("saes/layer_17")                         # sae.encode(rows), sae.decode(latents)
    latents = model.capture(["a text"], saes={"res": "saes/layer_17"}, site="sae:res")
    for event in model.generate("Tell me", probes=probes, steer=[("reframing", 17, 4.0)]):
        ...

Errors: ValueError for bad arguments, RuntimeError for files and the environment, with the tools' messages."""

import torch  # noqa: F401  (LibTorch's libraries come from torch before the extension module needs them)

from .model import Model, load_model
from .probes import Probes, load_probes
from .sae import SparseAutoencoder, load_sae
from .tools import Activations, capture_activations, example_dataset, example_model, read_activations, train_binary_probes

__all__ = ["Activations", "Model", "Probes", "SparseAutoencoder", "capture_activations", "example_dataset",
           "example_model", "load_model", "load_probes", "load_sae", "read_activations", "train_binary_probes"]
__version__ = "0.1.0"
