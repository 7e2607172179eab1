#!/usr/bin/env python3
"""Round trip of scripts/export_reference_probes.py: probes trained by our tools (binary linear over two layers,
binary multihead, bf16, multiclass linear and multihead, fitted logistic and mean-diff) are exported to the reference's pickled dicts, loaded
back with torch.load(weights_only=True) into the reference's modules (load_state_dict strict, as its load_probe
does) and must give the eval-mode logits our trainers stored in logits_check.safetensors.

    python3 test_export_reference_probes.py TOOLS_DIR MODEL_DIR

Needs torch only (Debian's python3-torch); ctest runs it. Exits 1 on the first mismatch, naming the file."""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import export_reference_probes as export  # noqa: E402
from reference_probe_modules import reference_probe  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "export_reference_probes.py"
CUES = {"analyzing": "I examined each part of the problem step by step.",
        "reframing": "Instead of a setback, I saw it as a chance to learn.",
        "noticing": "Suddenly I noticed the small crack in the window."}


def fail(message):
    print(f"FAIL {message}")
    sys.exit(1)


def run(command):
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True)
    if result.returncode != 0:
        fail(f"{' '.join(map(str, command))} exited {result.returncode}:\n{result.stdout}{result.stderr}")


def reference_load(path):
    """The reference's load_probe on an exported file: the dict, the module it names, its strict state dict."""
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    if sorted(checkpoint) != ["metadata", "model_class", "model_config", "model_state_dict"]:
        fail(f"{path}: keys {sorted(checkpoint)}")
    state = checkpoint["model_state_dict"]
    probe = reference_probe(checkpoint["model_class"], checkpoint["model_config"])
    probe = probe.to(next(iter(state.values())).dtype)
    probe.load_state_dict(state, strict=True)
    return probe.eval(), checkpoint


def check_logits(path, probe, inputs, expected):
    with torch.no_grad():
        got = probe(inputs.to(next(probe.parameters()).dtype)).float()
    tolerance = 2e-2 if next(probe.parameters()).dtype == torch.bfloat16 else 1e-5
    error = ((got - expected).abs() / (1.0 + expected.abs())).max().item()
    if got.shape != expected.shape or error > tolerance:
        fail(f"{path}: logits {got.shape} differ from the trainer's {expected.shape} by {error:.3g} (tolerance "
             f"{tolerance})\n  expected {expected[:2].flatten().tolist()}\n  got      {got[:2].flatten().tolist()}")


def check_directory(trained, exported):
    """Every exported probe of one layer directory against its logits_check.safetensors; returns the count."""
    index = json.loads((trained / "probes.json").read_text())
    check, _ = export.read_safetensors(trained / "logits_check.safetensors")
    if index["format"] == "probekit.multiclass_probe":
        # logits_check holds the final probe's logits (the reference's test metrics use the final weights).
        probe, checkpoint = reference_load(exported / "final_probe.pth")
        check_logits(exported / "final_probe.pth", probe, check["inputs"], check["logits"])
        _, best = reference_load(exported / "best_probe.pth")
        if best["metadata"]["label_names"] != index["labels"] or best["model_config"]["num_classes"] != len(index["labels"]):
            fail(f"{exported / 'best_probe.pth'}: classes {best['metadata']['label_names']}, expected {index['labels']}")
        return 2
    for column, entry in enumerate(index["probes"]):
        path = exported / f"probe_{entry['label']}.pth"
        probe, checkpoint = reference_load(path)
        check_logits(path, probe, check["inputs"], check["logits"][:, column:column + 1])
        metadata = checkpoint["metadata"]
        if metadata["action"] != entry["label"] or metadata["layer"] != index["layer"] or \
                metadata["epoch"] != entry["best_epoch"] or metadata["model_name"] != index["readout"]["model_name"] or \
                float(metadata["val_auc"]) != entry["val_auc"] or float(metadata["threshold"]) != entry["threshold"]:
            fail(f"{path}: metadata {metadata} does not match {trained / 'probes.json'}")
    return len(index["probes"])


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    tools, model = Path(sys.argv[1]), Path(sys.argv[2])
    with tempfile.TemporaryDirectory(prefix="probekit-export-") as tmp:
        tmp = Path(tmp)
        with open(tmp / "data.jsonl", "w") as f:
            for i in range(48):
                label = list(CUES)[i % 3]
                f.write(json.dumps({"text": f"{CUES[label]} Day {i}.", "cognitive_action": label}) + "\n")
        quiet = ["--device", "cpu", "--quiet"]
        run([tools / "capture_activations", "--model", model, "--dataset", tmp / "data.jsonl", "--output-dir",
             tmp / "acts", "--layers", "2", "3", *quiet])
        layer_3 = tmp / "acts" / "layer_3_activations.h5"
        runs = {"linear": ["train_binary_probes", "--activations", tmp / "acts"],
                "multihead": ["train_binary_probes", "--activations", layer_3, "--model-type", "multihead",
                              "--hidden-dim", "16"],
                "bf16": ["train_binary_probes", "--activations", layer_3, "--dtype", "bf16"],
                "multiclass": ["train_probes", "--activations", layer_3],
                "multiclass_multihead": ["train_probes", "--activations", layer_3, "--model-type", "multihead",
                                         "--hidden-dim", "16"],
                # Fitted kinds, stored as linear probes: the reference's BinaryLinearProbe and LinearProbe load them.
                "logistic": ["train_binary_probes", "--activations", layer_3, "--model-type", "logistic"],
                "mean_diff": ["train_binary_probes", "--activations", layer_3, "--model-type", "mean-diff"],
                "multiclass_logistic": ["train_probes", "--activations", layer_3, "--model-type", "logistic"]}
        checked = 0
        for name, (tool, *arguments) in runs.items():
            trained, exported = tmp / name, tmp / f"{name}_exported"
            run([tools / tool, *arguments, "--epochs", "2", "--output-dir", trained, *quiet])
            run([sys.executable, SCRIPT, trained, "--output-dir", exported])
            layers = sorted(trained.glob("layer_*")) or [trained]
            for layer in layers:
                checked += check_directory(layer, exported / layer.relative_to(trained))
        print(f"ok   {checked} exported probe files load with torch.load(weights_only=True) into the reference's "
              "modules and give the trainers' logits")
        check_attention_skipped(tools, model, tmp, quiet)
    return 0


def check_attention_skipped(tools, model, tmp, quiet):
    """Attention probes have no reference class: their directory is skipped with a message, nothing written."""
    run([tools / "capture_activations", "--model", model, "--dataset", tmp / "data.jsonl", "--output-dir",
         tmp / "acts_all", "--layers", "3", "--position", "all", *quiet])
    run([tools / "train_binary_probes", "--activations", tmp / "acts_all", "--model-type", "attention", "--epochs", "2",
         "--output-dir", tmp / "attention", *quiet])
    result = subprocess.run([sys.executable, SCRIPT, tmp / "attention", "--output-dir", tmp / "attention_exported"],
                            capture_output=True, text=True)
    if result.returncode != 0 or "skipped: attention probes have no equivalent class" not in result.stdout or \
            list((tmp / "attention_exported").glob("**/*.pth")):
        fail(f"an attention directory was not skipped cleanly: {result.returncode} {result.stdout} {result.stderr}")
    print("ok   attention probes are skipped: the reference has no equivalent class")


if __name__ == "__main__":
    sys.exit(main())
