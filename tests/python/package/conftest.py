"""Shared fixtures: the built-in example model, a small slice of the example dataset, and what the command-line tools
make of them (activations, probes), against which the package is held. The tools come from $PROBEKIT_TOOLS
(ctest passes build/tools)."""

import json
import os
import subprocess

import pytest

import probekit

TEXTS = 48  # examples of data/example.jsonl used: every label, a few seconds of capture on the CPU
LAYERS = [2, 4]


def tool(name):
    tools = os.environ.get("PROBEKIT_TOOLS") or os.path.join(os.path.dirname(__file__), "../../../build/tools")
    return os.path.join(tools, name)


def run_tool(name, *arguments):
    """Runs a tool and returns its stdout, failing with its stderr."""
    done = subprocess.run([tool(name), *map(str, arguments)], capture_output=True, text=True)
    assert done.returncode == 0, f"{name} {' '.join(map(str, arguments))} failed:\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="session")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("probekit")


@pytest.fixture(scope="session")
def model_dir(workdir):
    return probekit.example_model(str(workdir / "example_model"))


@pytest.fixture(scope="session")
def model(model_dir):
    return probekit.load_model(model_dir, device="cpu")


@pytest.fixture(scope="session")
def dataset(workdir):
    """The first TEXTS lines of the example dataset."""
    with open(probekit.example_dataset()) as source:
        lines = source.readlines()[:TEXTS]
    path = workdir / "dataset.jsonl"
    path.write_text("".join(lines))
    return str(path)


@pytest.fixture(scope="session")
def texts(dataset):
    with open(dataset) as source:
        return [json.loads(line)["text"] for line in source]


@pytest.fixture(scope="session")
def tool_activations(workdir, model_dir, dataset):
    """capture_activations' files for the dataset at LAYERS."""
    output = workdir / "tool_activations"
    run_tool("capture_activations", "--model", model_dir, "--dataset", dataset, "--output-dir", output,
             "--layers", ",".join(map(str, LAYERS)))
    return output


@pytest.fixture(scope="session")
def probes_dir(workdir, tool_activations):
    """train_binary_probes' probes of the tool's activations."""
    output = workdir / "probes"
    run_tool("train_binary_probes", "--activations", tool_activations, "--output-dir", output)
    return str(output)


@pytest.fixture(scope="session")
def multiclass_probes_dir(workdir, tool_activations):
    """train_probes' multiclass probe of the tool's activations at LAYERS[1]."""
    output = workdir / "multiclass_probes"
    run_tool("train_probes", "--activations", tool_activations / f"layer_{LAYERS[1]}_activations.h5", "--output-dir",
             output, "--epochs", 2, "--quiet")
    return str(output)


@pytest.fixture(scope="session")
def attention_probes_dir(workdir, model, dataset):
    """Attention probes (train_binary_probes --model-type attention, through the package) on every token of LAYERS[1]."""
    activations = workdir / "every_token"
    probekit.capture_activations(model, dataset, activations, progress=False, layers=[LAYERS[1]], position="all")
    output = workdir / "attention_probes"
    probekit.train_binary_probes(activations, output, progress=False, model_type="attention", heads=2, epochs=3)
    return str(output)
