"""SparseAutoencoder: a published SAE (SAELens, Gemma Scope, Gemma Scope 2, Llama Scope, sparsify) read by probekit's
readers."""

import json
import os

import torch.utils.dlpack

from . import _native
from ._running import run_interruptibly


def load_sae(path, name=None):
    """Reads the SAE in folder (or file) path, recognising its layout by its files; name: how model.capture's site
    "sae:NAME" and steering refer to it (default: the folder's name).
    Raises ValueError (a missing folder, a tensor of the wrong shape) or RuntimeError (an unreadable file, a field of
    the wrong type) for an SAE that cannot be read, naming the file and the field."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str) or not path:
        raise ValueError(f"path: expected an SAE folder, got {path!r}")
    return SparseAutoencoder(run_interruptibly(_native.load_sae, path, name or ""))


def _capsule(tensor, what):
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"{what}: expected a torch.Tensor, got {type(tensor).__name__}")
    return torch.utils.dlpack.to_dlpack(tensor.detach().to("cpu", torch.float32).contiguous())


class SparseAutoencoder:
    """A loaded SAE: where it reads (site, layer), its widths, and its encoding and decoding of rows."""

    def __init__(self, native):
        self._native = native
        self.record = json.loads(_native.sae_record(native))

    name = property(lambda self: self.record["name"], doc="How tools and sites refer to it.")
    path = property(lambda self: self.record["path"], doc="The folder it was read from.")
    layout = property(lambda self: self.record["layout"], doc="saelens, gemma_scope, gemma_scope_2, sparsify, ...")
    site = property(lambda self: self.record["site"],
                    doc="The site it reads: resid_post, mlp_out, attn_out, mlp_in, ln2_normalized.")
    output_site = property(lambda self: self.record.get("output_site", self.record["site"]),
                           doc="The site it reconstructs: its own, or a transcoder's mlp_out.")
    layer = property(lambda self: self.record["layer"], doc="The decoder layer it reads.")
    d_in = property(lambda self: self.record["d_in"], doc="The width of the rows it encodes.")
    d_sae = property(lambda self: self.record["d_sae"], doc="Its latents.")

    def encode(self, rows):
        """The latents [..., d_sae] (fp32, CPU) of rows [..., d_in]."""
        return torch.utils.dlpack.from_dlpack(_native.sae_encode(self._native, _capsule(rows, "rows")))

    def decode(self, latents, rows=None):
        """The reconstruction [..., d_out] of latents [..., d_sae] (d_out: d_in, or a transcoder's output width);
        rows: the encoded rows, needed by an SAE that rescales its inputs to norm sqrt(d_in) (their norms are put
        back) and by a transcoder with a skip connection (which reads them)."""
        rows_capsule = None if rows is None else _capsule(rows, "rows")
        return torch.utils.dlpack.from_dlpack(_native.sae_decode(self._native, _capsule(latents, "latents"), rows_capsule))

    def __repr__(self):
        r = self.record
        # A transcoder reconstructs another site than it reads (mlp_out from ln2_normalized): both are named.
        reconstructs = "" if self.output_site == r["site"] else f", reconstructs {self.output_site}"
        return (f"probekit.SparseAutoencoder({r['name']!r}, {r['layout']}, {r['architecture']}, {r['site']} of layer "
                f"{r['layer']}, {r['d_in']} -> {r['d_sae']}{reconstructs})")
