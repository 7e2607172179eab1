"""SAEs in the package and in capture_activations' files: probekit.load_sae's encode and decode against the formula
in torch, model.capture at site "sae:NAME" against encode of the resid_post rows, and the sparse latents the tool
stores (--site sae:NAME --sae-top-k K) read back with h5py."""

import json
import os
import struct
import subprocess
import sys

import pytest
import torch

import probekit

from conftest import run_tool

h5py = pytest.importorskip("h5py")

LAYER = 2


def write_saelens(folder, d_in, d_sae, seed=3, skip_transcoder=False):
    """A standard SAELens SAE of random weights at blocks.LAYER.hook_resid_post (or a skip transcoder from
    blocks.LAYER.ln2.hook_normalized to blocks.LAYER.hook_mlp_out): cfg.json + sae_weights.safetensors."""
    generator = torch.Generator().manual_seed(seed)
    tensors = {"W_enc": torch.randn(d_in, d_sae, generator=generator) * 0.3,
               "b_enc": torch.randn(d_sae, generator=generator) * 0.1 - 0.05,
               "W_dec": torch.randn(d_sae, d_in, generator=generator) * 0.3,
               "b_dec": torch.randn(d_in, generator=generator) * 0.1}
    if skip_transcoder:
        tensors["W_skip"] = torch.randn(d_in, d_in, generator=generator) * 0.1
    header, data, offset = {}, b"", 0
    for name, tensor in tensors.items():
        raw = tensor.contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensor.shape), "data_offsets": [offset, offset + len(raw)]}
        data += raw
        offset += len(raw)
    encoded = json.dumps(header).encode()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sae_weights.safetensors").write_bytes(struct.pack("<Q", len(encoded)) + encoded + data)
    config = {"architecture": "standard", "d_in": d_in, "d_sae": d_sae, "apply_b_dec_to_input": True,
              "normalize_activations": "none", "metadata": {"hook_name": f"blocks.{LAYER}.hook_resid_post"}}
    if skip_transcoder:
        config.update({"architecture": "skip_transcoder", "d_out": d_in, "apply_b_dec_to_input": False,
                       "metadata": {"hook_name": f"blocks.{LAYER}.ln2.hook_normalized",
                                    "hook_name_out": f"blocks.{LAYER}.hook_mlp_out"}})
    (folder / "cfg.json").write_text(json.dumps(config))
    return tensors


@pytest.fixture(scope="module")
def sae_folder(workdir, model):
    folder = workdir / "sae_res"
    write_saelens(folder, model.hidden_size, 48)
    return folder


def test_load_sae_encodes_and_decodes_as_the_formula(sae_folder, model):
    sae = probekit.load_sae(sae_folder)  # a pathlib.Path (regression: refused)
    assert (sae.name, sae.layout, sae.site, sae.layer, sae.d_sae) == ("sae_res", "saelens", "resid_post", LAYER, 48)
    weights = write_saelens(sae_folder.parent / "again", model.hidden_size, 48)
    rows = torch.randn(5, 3, model.hidden_size)
    expected = torch.relu((rows - weights["b_dec"]) @ weights["W_enc"] + weights["b_enc"])
    latents = sae.encode(rows)
    assert latents.shape == (5, 3, 48)
    torch.testing.assert_close(latents, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sae.decode(latents), expected @ weights["W_dec"] + weights["b_dec"], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="the last dimension must be"):
        sae.encode(torch.zeros(2, 3))


def test_decode_refuses_rows_of_another_shape_than_the_latents(sae_folder, model):
    sae = probekit.load_sae(str(sae_folder))
    latents, width = torch.zeros(4, 48), model.hidden_size
    for rows in (torch.zeros(1, width), torch.zeros(2, 2, width), torch.zeros(3, width)):  # broadcast, mixed, wrong
        shape = ", ".join(map(str, rows.shape))
        with pytest.raises(ValueError, match=rf"latents of shape \[4, 48\] and rows of shape \[{shape}\]"):
            sae.decode(latents, rows)
    assert sae.decode(latents.reshape(2, 2, 48), torch.zeros(2, 2, width)).shape == (2, 2, width)


def test_encode_and_decode_make_their_tensors_with_the_gil(sae_folder):
    """Under PYTHONMALLOC=debug, a Python object made without the GIL aborts the process (encode's and decode's
    capsules once were)."""
    script = ("import sys, torch, probekit; sae = probekit.load_sae(sys.argv[1]); rows = torch.randn(3, sae.d_in); "
              "sae.decode(sae.encode(rows), rows)")
    done = subprocess.run([sys.executable, "-c", script, str(sae_folder)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONMALLOC": "debug"})
    assert done.returncode == 0, f"exit {done.returncode}:\n{done.stderr[-3000:]}"


def test_capture_at_an_sae_site_gives_the_latents_of_its_layer(model, texts, sae_folder):
    sae = probekit.load_sae(str(sae_folder))
    rows = model.capture(texts[:6], layers=[LAYER])[LAYER]
    latents = model.capture(texts[:6], saes={"res": str(sae_folder)}, site="sae:res")
    assert list(latents) == [LAYER]
    torch.testing.assert_close(latents[LAYER], sae.encode(rows), rtol=1e-4, atol=1e-5)
    errors = model.capture(texts[:6], saes={"res": str(sae_folder)}, site="sae-error:res")[LAYER]
    torch.testing.assert_close(errors, rows - sae.decode(sae.encode(rows)), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="no SAE named 'other'"):
        model.capture(texts[:2], saes={"res": str(sae_folder)}, site="sae:other")


def test_the_tools_sparse_latents_read_by_h5py(model, model_dir, dataset, workdir, sae_folder):
    out = workdir / "sae_capture"
    run_tool("capture_activations", "--model", model_dir, "--dataset", dataset, "--output-dir", out, "--device", "cpu",
             "--sae", f"res={sae_folder}", "--site", "sae:res", "--sae-top-k", 4, "--quiet")
    sae = probekit.load_sae(str(sae_folder))
    tool_rows = workdir / "sae_rows"
    run_tool("capture_activations", "--model", model_dir, "--dataset", dataset, "--output-dir", tool_rows,
             "--device", "cpu", "--layers", LAYER, "--quiet")
    with h5py.File(out / f"layer_{LAYER}_activations.h5", "r") as latents_file, \
            h5py.File(tool_rows / f"layer_{LAYER}_activations.h5", "r") as rows_file:
        assert json.loads(latents_file.attrs["sae"])["site"] == "sae:res"
        for split in ("train", "val", "test"):
            group = latents_file[split]
            assert "activations" not in group
            indices, values = group["latent_indices"][()], group["latent_values"][()]
            assert indices.dtype.name == "int32" and values.dtype.name == "float32" and indices.shape[1] == 4
            full = sae.encode(torch.from_numpy(rows_file[split]["activations"][()]))
            top = full.topk(4, dim=1)
            torch.testing.assert_close(torch.from_numpy(values), top.values * (top.values > 0), rtol=1e-4, atol=1e-5)
            held = torch.from_numpy(values) > 0
            assert torch.equal(torch.from_numpy(indices)[held], top.indices[held].to(torch.int32))
            assert (indices[~held.numpy()] == -1).all()
            assert torch.equal(torch.from_numpy(group["l0"][()]), (full > 0).sum(1).to(torch.int32))
            reconstruction = sae.decode(full)
            x = torch.from_numpy(rows_file[split]["activations"][()])
            error = (x - reconstruction).norm(dim=1) / x.norm(dim=1)
            torch.testing.assert_close(torch.from_numpy(group["relative_error"][()]), error, rtol=1e-4, atol=1e-5)


def test_a_skip_transcoder_reads_ln2_normalized_and_decodes_with_its_skip_from_the_rows(workdir, model):
    weights = write_saelens(workdir / "tc", model.hidden_size, 48, skip_transcoder=True)
    transcoder = probekit.load_sae(str(workdir / "tc"))
    # TransformerLens' ln2.hook_normalized: the pre-MLP norm's output before its weight, not mlp_in.
    assert (transcoder.site, transcoder.output_site) == ("ln2_normalized", "mlp_out")
    assert repr(transcoder).endswith("ln2_normalized of layer 2, 256 -> 48, reconstructs mlp_out)")  # regression: mlp_out unsaid
    rows = torch.randn(4, model.hidden_size)
    latents = transcoder.encode(rows)
    torch.testing.assert_close(latents, torch.relu(rows @ weights["W_enc"] + weights["b_enc"]), rtol=1e-5, atol=1e-5)
    expected = latents @ weights["W_dec"] + weights["b_dec"] + rows @ weights["W_skip"].T
    torch.testing.assert_close(transcoder.decode(latents, rows), expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="adds a skip connection from its input: decode needs the rows"):
        transcoder.decode(latents)
