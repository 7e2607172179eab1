"""The package held to the command-line tools on the built-in example model: the same rows, numbers and ids.

Numbers are compared within 1e-6 (assert_json_close): the package and the tools run the same library on the same
rows, and in fp32 on the CPU the products and attention are bitwise independent of batching and of OpenBLAS's kernel
(docs/testing.md), so what is left is the printing's rounding; .ci/run runs these tests under a second kernel."""

import ast
import json
import math
import os
import shutil
from pathlib import Path

import pytest
import torch

import probekit

from conftest import LAYERS, run_tool

try:
    import h5py
except ImportError:  # our reader stands in
    h5py = None


def assert_json_close(expected, got, where="", tolerance=1e-6):
    """Equal JSON values, numbers within `tolerance`; a failure names the path of the first difference."""
    if isinstance(expected, dict):
        assert isinstance(got, dict) and sorted(expected) == sorted(got), f"{where}: keys {sorted(expected)} vs {got}"
        for key in expected:
            assert_json_close(expected[key], got[key], f"{where}.{key}", tolerance)
    elif isinstance(expected, list):
        assert isinstance(got, list) and len(expected) == len(got), f"{where}: {expected} vs {got}"
        for index, (a, b) in enumerate(zip(expected, got)):
            assert_json_close(a, b, f"{where}[{index}]", tolerance)
    elif isinstance(expected, float) and not isinstance(got, bool) and isinstance(got, (int, float)):
        assert math.isclose(expected, got, rel_tol=tolerance, abs_tol=tolerance), f"{where}: {expected} vs {got}"
    else:
        assert expected == got, f"{where}: expected {expected!r}, got {got!r}"


def file_arrays(path):
    """Each split's arrays of an activation file, read with h5py when it is installed."""
    if h5py is None:
        return {split: {name: value.numpy() for name, value in arrays.items() if torch.is_tensor(value)}
                for split, arrays in probekit.read_activations(path).items()}
    with h5py.File(path, "r") as file:
        return {split: {name: file[split][name][()] for name in file[split]} for split in ("train", "val", "test")}


def rows_by_example(path):
    """{dataset line: row} of an activation file of position "last"."""
    rows = {}
    for arrays in file_arrays(path).values():
        for index, row in zip(arrays["example_index"], arrays["activations"]):
            rows[int(index)] = torch.from_numpy(row)
    return rows


def test_capture_gives_the_rows_capture_activations_writes(model, texts, tool_activations):
    captured = model.capture(texts, layers=LAYERS)
    assert sorted(captured) == LAYERS
    for layer in LAYERS:
        expected = rows_by_example(tool_activations / f"layer_{layer}_activations.h5")
        assert captured[layer].shape == (len(texts), model.hidden_size) and captured[layer].dtype == torch.float32
        for index, text in enumerate(texts):
            assert torch.allclose(captured[layer][index], expected[index], atol=1e-5, rtol=1e-5), \
                f"layer {layer}, text {index}: max difference {(captured[layer][index] - expected[index]).abs().max()}"


def test_capture_all_positions_gives_one_tensor_per_text(model, texts, workdir, dataset):
    captured = model.capture(texts[:4], layers=3, position="all", prompt_suffix="")
    output = workdir / "all_positions"
    summary = probekit.capture_activations(model, dataset, str(output), layers=[3], position="all", prompt_suffix="",
                                           max_examples=4, split="1,0,0")
    assert summary["layers"] == [3]
    arrays = file_arrays(output / "layer_3_activations.h5")["train"]
    offsets, rows = arrays["offsets"], torch.from_numpy(arrays["activations"])
    for position, index in enumerate(arrays["example_index"]):
        expected = rows[int(offsets[position]):int(offsets[position + 1])]
        assert torch.allclose(captured[3][int(index)], expected, atol=1e-5, rtol=1e-5)


def test_capture_activations_writes_what_the_tool_writes(model, workdir, dataset, tool_activations):
    output = workdir / "package_activations"
    probekit.capture_activations(model, dataset, str(output), layers=LAYERS)
    for layer in LAYERS:
        name = f"layer_{layer}_activations.h5"
        expected, got = file_arrays(tool_activations / name), file_arrays(output / name)
        for split in expected:
            assert (expected[split]["example_index"] == got[split]["example_index"]).all()
            assert torch.allclose(torch.from_numpy(got[split]["activations"]),
                                  torch.from_numpy(expected[split]["activations"]), atol=1e-5, rtol=1e-5)


def test_read_activations_gives_the_files_arrays(tool_activations):
    path = tool_activations / f"layer_{LAYERS[0]}_activations.h5"
    read = probekit.read_activations(str(path))
    assert read.attributes["layer"] == LAYERS[0] and "reframing" in read.attributes["label_names"]
    for split, arrays in file_arrays(path).items():
        for name in ("activations", "labels", "example_index"):
            assert torch.equal(read[split][name], torch.from_numpy(arrays[name])), f"{split}/{name}"


def test_rank_gives_multi_probe_inferences_numbers(model, texts, probes_dir, workdir):
    file = workdir / "rank_texts.txt"
    file.write_text("\n".join(texts[:5]) + "\n")
    expected = json.loads(run_tool("multi_probe_inference", "--probes-dir", probes_dir, "--model", model.dir,
                                   "--file", file, "--json", "--top-k", 3, "--threshold", 0.2))
    got = probekit.load_probes(probes_dir).rank(model, texts[:5], top_k=3, threshold=0.2)
    assert_json_close(expected, got)
    best = json.loads(run_tool("multi_probe_inference", "--probes-dir", probes_dir, "--model", model.dir,
                               "--text", texts[0], "--json", "--best-layer"))
    assert_json_close(best, probekit.load_probes(probes_dir, best_layer=True).rank(model, texts[0]))


def test_per_token_gives_multi_probe_inferences_numbers(model, texts, probes_dir):
    text = texts[1][:80]
    expected = json.loads(run_tool("multi_probe_inference", "--probes-dir", probes_dir, "--model", model.dir,
                                   "--layer", LAYERS[1], "--text", text, "--per-token", "--json"))
    probes = probekit.load_probes(probes_dir, layer=LAYERS[1])
    assert_json_close(expected, probes.per_token(model, text))
    calibrated = json.loads(run_tool("multi_probe_inference", "--probes-dir", probes_dir, "--model", model.dir,
                                     "--layer", LAYERS[1], "--text", text, "--per-token", "--calibrated", "--json"))
    assert "thresholds" in calibrated
    assert_json_close(calibrated, probes.per_token(model, text, calibrated=True))


def test_attention_probes_rank_and_per_token_as_multi_probe_inference(model, texts, attention_probes_dir):
    probes = probekit.load_probes(attention_probes_dir)
    expected = json.loads(run_tool("multi_probe_inference", "--probes-dir", attention_probes_dir, "--model", model.dir,
                                   "--text", texts[0], "--json"))
    assert_json_close(expected, probes.rank(model, texts[0]))
    text = texts[1][:60]
    expected = json.loads(run_tool("multi_probe_inference", "--probes-dir", attention_probes_dir, "--model", model.dir,
                                   "--text", text, "--per-token", "--json"))
    got = probes.per_token(model, text)
    assert_json_close(expected, got)
    assert got["tokens"][-1]["attention"] and "suffix_attention" in got


def test_generate_gives_inspect_models_ids(model, workdir):
    output = workdir / "generation.json"
    run_tool("inspect_model", "generate", "--model", model.dir, "--text", "The garage was", "--max-new-tokens", 8,
             "--output", output)
    expected = json.loads(output.read_text())["cases"][0]["generated_ids"]
    events = list(model.generate("The garage was", max_new_tokens=8))
    assert [event["id"] for event in events if "id" in event] == expected
    assert events[-1]["done"] and events[-1]["generated_ids"] == expected


def test_patch_gives_patch_activations_grids(model, workdir):
    clean, corrupted = "The garage was dark and cold", "The garage was dark and warm"
    output = workdir / "patching"
    run_tool("patch_activations", "--model", model.dir, "--clean", clean, "--corrupted", corrupted, "--site",
             "resid_post,mlp_out", "--method", "both", "--output-dir", output)
    expected = json.loads((output / "patching.json").read_text())
    result = model.patch(clean, corrupted, site=["resid_post", "mlp_out"], method="both", progress=False)
    for key in ("grid", "attribution", "restored"):
        for site in ("resid_post", "mlp_out"):
            assert result[key][site].shape == (model.num_layers, len(expected["tokens"]))
            tool_grid = torch.tensor(expected[key][site], dtype=torch.float64)
            # The backward pass's sums run on several threads: attribution agrees to fp32 rounding of its largest value.
            tolerance = 0 if key == "grid" else 1e-5 * float(tool_grid.abs().max())
            assert torch.allclose(result[key][site], tool_grid, rtol=0, atol=tolerance)
    assert result["answer"] == expected["answer"] and result["foil"] == expected["foil"]
    for _ in range(2):  # the calls that capture and replay attribution's graph on a GPU
        again = model.patch(clean, corrupted, site=["resid_post", "mlp_out"], method="attribution", progress=False)
        assert torch.equal(again["attribution"]["mlp_out"], result["attribution"]["mlp_out"])
    one = model.patch(clean, corrupted, layers=[1, 2], positions="0-1", progress=False)
    assert one["grid"].shape == (2, 2)
    assert torch.equal(one["grid"], result["grid"]["resid_post"][1:3, 0:2])
    with pytest.raises(ValueError) as raised:
        model.patch(clean, "The kitchen was dark and cold", progress=False)
    assert "same number of tokens" in str(raised.value)
    # Regression: neither corrupted nor subject was refused as "not both".
    with pytest.raises(ValueError, match=r"give corrupted \(the corrupted prompt\) or subject \(the text of clean to noise\)$"):
        model.patch(clean, progress=False)
    # Regression: an empty clean prompt was reported as a missing corrupted one, with CLI flags for advice; empty
    # layers, positions and output_dir ran the defaults; a wrong type showed the native call's signature.
    for arguments, message in ((("", corrupted), "clean is empty: give a value$"), ((clean, ""), "corrupted is empty"),
                               ((None, corrupted), "clean: expected a string, got NoneType"),
                               ((clean, corrupted, 5), "metric: expected a string, got int")):
        with pytest.raises(ValueError, match=message):
            model.patch(*arguments, progress=False)
    for keywords, message in (({"layers": ""}, "layers: an empty text selects nothing"),
                              ({"positions": " "}, "positions: an empty text selects nothing"),
                              ({"output_dir": ""}, "output_dir is empty"), ({"layer_window": True}, "layer_window True"),
                              ({"layers": True}, "layers True"), ({"layers": [True, 2]}, "True is not a layer")):
        with pytest.raises(ValueError, match=message):
            model.patch(clean, corrupted, progress=False, **keywords)


def test_steered_generation_gives_multi_probe_inferences_events(model, probes_dir):
    probes = probekit.load_probes(probes_dir, layer=LAYERS[1])
    steer = [("reframing", LAYERS[0], 8.0)]
    lines = run_tool("multi_probe_inference", "--probes-dir", probes_dir, "--model", model.dir, "--layer", LAYERS[1],
                     "--text", "I looked again", "--generate", "--max-new-tokens", 6, "--json",
                     "--steer", f"reframing@{LAYERS[0]}=8").splitlines()
    expected = [json.loads(line) for line in lines if line.startswith("{")]
    got = list(model.generate("I looked again", max_new_tokens=6, probes=probes, steer=steer))
    assert_json_close(expected, got)
    # The random example model generates the same ids either way; the probes read the steered stream.
    unsteered = list(model.generate("I looked again", max_new_tokens=6, probes=probes))
    assert "steering" in got[-1] and "steering" not in unsteered[-1]
    assert got[0]["predictions"] != unsteered[0]["predictions"]


def test_monitored_generation_gives_multi_probe_inferences_events(model, probes_dir):
    probes = probekit.load_probes(probes_dir, layer=LAYERS[1])
    lines = run_tool("multi_probe_inference", "--probes-dir", probes_dir, "--model", model.dir, "--layer", LAYERS[1],
                     "--text", "I looked again", "--generate", "--max-new-tokens", 4, "--no-stop", "--json",
                     "--monitor", "reframing=0:flag").splitlines()
    expected = [json.loads(line) for line in lines if line.startswith("{")]
    got = list(model.generate("I looked again", max_new_tokens=4, stop=False, probes=probes,
                              monitors=[{"label": "reframing", "threshold": 0, "action": "flag"}]))
    assert_json_close(expected, got)
    assert got[0]["monitor_firings"][0]["label"] == "reframing"
    stopped = list(model.generate("I looked again", max_new_tokens=4, probes=probes,
                                  monitors={"label": "reframing", "threshold": 0, "action": "stop"}))
    assert stopped[-1]["stop"] == "monitor" and stopped[-1]["generated_ids"] == []
    with pytest.raises(ValueError, match=r"monitors\[0\]\.action"):
        list(model.generate("I looked again", probes=probes, monitors=[{"label": "reframing", "action": "explode"}]))
    with pytest.raises(ValueError, match="pass probes= too"):
        list(model.generate("I looked again", monitors=[{"label": "reframing"}]))


def test_conversations_ranked_and_scored_per_token_as_the_tool(model, probes_dir, workdir):
    # The example model carries Gemma 3's chat template (make_example model writes it).
    assert (Path(model.dir) / "chat_template.jinja").is_file()
    messages = [{"role": "user", "content": "How did the review go?"},
                {"role": "assistant", "content": "I looked again and saw a chance to learn."}]
    conversation = workdir / "chat.json"
    conversation.write_text(json.dumps(messages))
    probes = probekit.load_probes(probes_dir, layer=LAYERS[1])
    flags = ("--probes-dir", probes_dir, "--model", model.dir, "--layer", LAYERS[1], "--messages", conversation,
             "--json")
    assert_json_close(json.loads(run_tool("multi_probe_inference", *flags)), probes.rank(model, messages=messages))
    per_token = probes.per_token(model, messages=messages)
    assert_json_close(json.loads(run_tool("multi_probe_inference", *flags, "--per-token")), per_token)
    assert_json_close(json.loads(run_tool("multi_probe_inference", *flags, "--per-token", "--calibrated")),
                      probes.per_token(model, messages=messages, calibrated=True))
    assert any(token["in_mask"] for token in per_token["tokens"])
    with pytest.raises(ValueError, match="not both"):
        probes.rank(model, ["a text"], messages=messages)
    with pytest.raises(ValueError, match="steer applies to texts"):
        probes.rank(model, messages=messages, steer=[("reframing", LAYERS[0], 2.0)])
    # NaN is not JSON (Python's json.dumps writes it anyway by default): refused naming messages.
    with pytest.raises(ValueError, match="messages: Out of range float values"):
        probes.rank(model, messages=[{"role": "user", "content": "a", "score": float("nan")}])


def test_generation_after_a_conversation_gives_the_tools_events(model, probes_dir, workdir):
    # Probes trained on conversations' assistant tokens read the chat prompt at their mask, then the reply.
    chats = workdir / "chats.jsonl"
    labels = ("calm", "curious", "tense")
    chats.write_text("".join(json.dumps({"messages": [
        {"role": "user", "content": f"Question number {i} about the day"},
        {"role": "assistant", "content": f"I feel {labels[i % 3]} today, {i} times over"}],
        "label": labels[i % 3]}) + "\n" for i in range(24)))
    run_tool("capture_activations", "--model", model.dir, "--dataset", chats, "--label-field", "label", "--layers", 2,
             "--output-dir", workdir / "chat_activations")
    run_tool("train_binary_probes", "--activations", workdir / "chat_activations", "--output-dir", workdir / "chat_probes",
             "--epochs", 3)
    messages = [{"role": "user", "content": "How did the review go?"}]
    conversation = workdir / "generation_chat.json"
    conversation.write_text(json.dumps(messages))
    for probes, selection in ((probekit.load_probes(str(workdir / "chat_probes")), ("--probes-dir", workdir / "chat_probes")),
                              (probekit.load_probes(probes_dir, layer=LAYERS[1]), ("--probes-dir", probes_dir, "--layer", LAYERS[1]))):
        lines = run_tool("multi_probe_inference", *selection, "--model", model.dir, "--generate",
                         "--messages", conversation, "--max-new-tokens", 3, "--no-stop", "--json").splitlines()
        expected = [json.loads(line) for line in lines if line.startswith("{")]
        got = list(model.generate(messages=messages, max_new_tokens=3, stop=False, probes=probes))
        assert_json_close(expected, got)
        assert got[0]["predictions"] and got[-1]["done"]
    # Regression: a chat could not be generated after from Python; a text is refused by conversation probes.
    with pytest.raises(ValueError, match="trained on conversations"):
        list(model.generate("How did the review go?", probes=probekit.load_probes(str(workdir / "chat_probes"))))
    with pytest.raises(ValueError, match="not both"):
        list(model.generate("a text", messages=messages))


def test_a_conversations_tools_reach_the_template_as_the_tool_renders_them(model_dir, probes_dir, workdir):
    # Gemma 3's template prints no tools: a copy of the example model whose template prints them before the turns.
    tools_model_dir = workdir / "tools_model"
    shutil.copytree(model_dir, tools_model_dir)
    (tools_model_dir / "chat_template.jinja").write_text(
        "{{ bos_token }}{% if tools %}<tools>{{ tools | tojson }}</tools>\n{% endif %}{% for m in messages %}"
        "<start_of_turn>{% if m.role == 'assistant' %}model{% else %}{{ m.role }}{% endif %}\n{{ m.content }}"
        "<end_of_turn>\n{% endfor %}")
    model = probekit.load_model(str(tools_model_dir), device="cpu")
    messages = [{"role": "user", "content": "How did the review go?"},
                {"role": "assistant", "content": "I looked again and saw a chance to learn."}]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    conversation = workdir / "chat_with_tools.json"
    conversation.write_text(json.dumps({"messages": messages, "tools": tools}))
    probes = probekit.load_probes(probes_dir, layer=LAYERS[1])
    flags = ("--probes-dir", probes_dir, "--model", tools_model_dir, "--layer", LAYERS[1], "--messages", conversation,
             "--json")
    ranked = probes.rank(model, messages=messages, tools=tools)
    assert_json_close(json.loads(run_tool("multi_probe_inference", *flags)), ranked)
    # Rendered, not dropped (regression: rank and per_token took no tools): the assistant's tokens read them.
    assert ranked != probes.rank(model, messages=messages)
    per_token = probes.per_token(model, messages=messages, tools=tools)
    assert_json_close(json.loads(run_tool("multi_probe_inference", *flags, "--per-token")), per_token)
    assert len(per_token["tokens"]) > len(probes.per_token(model, messages=messages)["tokens"]) + 5
    with pytest.raises(ValueError, match="tools need messages"):
        probes.rank(model, ["a text"], tools=tools)
    with pytest.raises(ValueError, match=r"'tools\[0\]\.type' must be \"function\""):
        probes.per_token(model, messages=messages, tools=[{"type": "web"}])
    with pytest.raises(ValueError, match="tools: Out of range float values"):
        probes.rank(model, messages=messages, tools=[{"name": "f", "parameters": {"maximum": float("inf")}}])


def test_a_coefficient_past_the_bound_is_refused_naming_the_item(model):
    vector = [1.0] + [0.0] * (model.hidden_size - 1)
    for coefficient in (float("inf"), float("nan"), 1e30):
        with pytest.raises(ValueError, match=r"steer\[0\]: the coefficient"):
            list(model.generate("The garage was", max_new_tokens=2, steer=[(vector, 1, coefficient)]))


def test_layers_and_texts_refused_as_the_tools_refuse_them(model, probes_dir, tmp_path):
    with pytest.raises(ValueError, match=r"layer: .* has no probes for layer 99 \(it has layers"):
        probekit.load_probes(probes_dir, layer=99)
    with pytest.raises(ValueError, match=r"layers: .* has no probes for layer 98, 99"):
        probekit.load_probes(probes_dir, layers=[LAYERS[0], 98, 99])
    for selection in ({"layer": LAYERS[0]}, {"layers": LAYERS}, {"layers": "all"}):
        with pytest.raises(ValueError, match="best_layer scores each label at its best layer: it excludes layer and"):
            probekit.load_probes(probes_dir, best_layer=True, **selection)
    with pytest.raises(ValueError, match="layers: an empty list selects nothing"):
        probekit.load_probes(probes_dir, layers=[])
    with pytest.raises(ValueError, match="layer: 1.5 is not a whole number"):  # regression: read as layer 1
        probekit.load_probes(probes_dir, layer=1.5)
    probes = probekit.load_probes(probes_dir, layers=LAYERS)
    for call in (lambda: probes.rank(model, ["a text", "  "]), lambda: probes.per_token(model, ""),
                 lambda: model.capture(["", "a text"], layers=LAYERS[0])):
        with pytest.raises(ValueError, match="is empty"):
            call()
    # The tools' flags as keywords: an empty value is refused as on the command line (regression: it read as the flag
    # left out, or failed after the work naming no flag).
    with pytest.raises(ValueError, match="--dataset is empty: give a value"):
        probekit.capture_activations(model, "", tmp_path / "capture")
    with pytest.raises(ValueError, match="--output-dir is empty: give a value"):
        probekit.train_binary_probes(tmp_path / "activations", "")


def test_calibrated_is_refused_for_a_multiclass_probe_as_the_tool_refuses_it(model, multiclass_probes_dir):
    probes = probekit.load_probes(multiclass_probes_dir)
    assert probes.rank(model, "The garage was")["predictions"]
    for call in (lambda: probes.rank(model, "The garage was", calibrated=True),
                 lambda: probes.per_token(model, "The garage was", calibrated=True),
                 lambda: list(model.generate("The garage was", max_new_tokens=1, probes=probes, calibrated=True))):
        with pytest.raises(ValueError, match="calibrated: .* holds a multiclass probe"):
            call()


def test_read_activations_keeps_metadata_apart_and_every_array_in_an_empty_split(model, dataset, workdir):
    """Metadata columns named as arrays ("labels", "activations") do not replace them; val and test, without examples
    (split 1,0,0), have every array train has, empty."""
    with open(dataset) as source:
        lines = [json.loads(line) for line in source][:8]
    named_as_arrays = workdir / "named_as_arrays.jsonl"
    named_as_arrays.write_text("".join(json.dumps({**line, "labels": f"x{index}", "activations": "y"}) + "\n"
                                       for index, line in enumerate(lines)))
    output = workdir / "metadata_columns"
    probekit.capture_activations(model, str(named_as_arrays), str(output), progress=False, layers=[2], position="all",
                                 split="1,0,0", keep_fields=["labels", "activations", "domain"])
    read = probekit.read_activations(str(output / "layer_2_activations.h5"))
    train = read["train"]
    assert sorted(train) == ["activations", "example_index", "labels", "metadata", "offsets", "positions", "token_ids"]
    assert train["labels"].dtype == torch.int64 and train["activations"].shape[1] == model.hidden_size
    assert train["metadata"] == {"labels": [f"x{int(index)}" for index in train["example_index"]],
                                 "activations": ["y"] * len(lines),
                                 "domain": [lines[int(index)]["domain"] for index in train["example_index"]]}
    for split in ("val", "test"):
        arrays = read[split]
        assert sorted(arrays) == sorted(train), split
        assert arrays["metadata"] == {"labels": [], "activations": [], "domain": []}
        for name, value in arrays.items():
            if name == "metadata":
                continue
            expected = (1 if name == "offsets" else 0, *train[name].shape[1:])
            assert value.dtype == train[name].dtype and value.shape == expected, \
                f"{split}/{name}: {value.dtype} {tuple(value.shape)}, expected {train[name].dtype} {expected}"


def test_the_type_stubs_declare_every_public_name():
    stubs = ast.parse(Path(probekit.__file__).with_name("__init__.pyi").read_text())
    declared = {node.name: node for node in stubs.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
    for name in probekit.__all__:
        assert name in declared, f"{name} is not in __init__.pyi"
        if isinstance(declared[name], ast.ClassDef):
            members = {item.name if isinstance(item, ast.FunctionDef) else item.target.id
                       for item in declared[name].body if isinstance(item, (ast.FunctionDef, ast.AnnAssign))}
            public = {member for member in vars(getattr(probekit, name)) if not member.startswith("_")}
            assert public <= members, f"{name}: {sorted(public - members)} not in __init__.pyi"


@pytest.mark.parametrize("call, error, message", [
    (lambda m: m.capture(["a"], layers=[2], position="middle"), ValueError, "middle"),
    (lambda m: m.capture(["a"], layers=[99]), ValueError, "99"),
    (lambda m: m.capture(["a"], site="nowhere"), ValueError, "nowhere"),
    (lambda m: m.capture(["a"], batch_size=0), ValueError, "batch_size"),
    (lambda m: m.capture([1]), ValueError, "texts[0]"),
    (lambda m: m.capture(["a"], steer=[("reframing", 2, 1.0)]), ValueError, "needs probes"),
    (lambda m: m.capture(["a"], steer=[([1.0, 2.0], 2, 1.0)]), ValueError, "2"),
    (lambda m: list(m.generate("a", max_new_tokens=0)), ValueError, "max_new_tokens"),
    (lambda m: list(m.generate("a", temperature=-1)), ValueError, "temperature"),
    (lambda m: list(m.generate("a", top_k=0)), ValueError, "top_k 0: must be 1 or more"),
    (lambda m: list(m.generate("a", threshold=2)), ValueError, "threshold 2.000000: must be a number from 0 to 1"),
    (lambda m: list(m.generate("a", threshold=-5)), ValueError, "threshold -5.000000: must be a number from 0 to 1"),
    (lambda m: list(m.generate("a", threshold=float("nan"))), ValueError, "must be a number from 0 to 1"),
    (lambda m: m.capture(["a"], layers=[]), ValueError, "layers: an empty list selects nothing"),
    (lambda m: m.patch("a b", "a c", layers=[]), ValueError, "layers: an empty list selects nothing"),
    (lambda m: m.patch("a b", "a c", positions=[]), ValueError, "positions: an empty list selects nothing"),
    (lambda m: m.patch("a b", "a c", positions=[0.5]), ValueError, "positions: 0.5 is not a whole number"),
    (lambda m: m.capture(["a"], layers=2.0), ValueError, "layers 2.0: expected a whole number"),
    (lambda m: m.capture(["a"], steer=[([1.0] * m.hidden_size, 1.5, 1.0)]), ValueError, "steer: the layer: 1.5 is not"),
    (lambda m: m.patch("a b", "a c", seed=0), ValueError, "noise and seed go with subject"),
    (lambda m: list(m.generate("a", seed=-1)), ValueError, "seed -1: must be a whole number"),
    # Regression: pybind11's TypeError listing the native signature.
    (lambda m: list(m.generate("a", max_new_tokens=2**70)), ValueError, "max_new_tokens: 1180591620717411303424 is past"),
    (lambda m: list(m.generate("a", top_k=2.5)), ValueError, "top_k: 2.5 is not a whole number"),
    (lambda m: m.capture(["a"], max_length=-2**64), ValueError, "max_length: -18446744073709551616 is past the 64-bit"),
    (lambda m: probekit.load_model("/nonexistent/model", device=0), ValueError, "device: expected a string, got int"),
    (lambda m: m.patch("a b", subject="a", seed=-1), ValueError, "seed -1: must be a whole number"),
    (lambda m: probekit.example_model("/nonexistent/example", seed=-1), ValueError, "seed -1: must be a whole number"),
    (lambda m: probekit.example_model("/nonexistent/example", seed=2**64), ValueError, "seed 18446744073709551616"),
    (lambda m: probekit.capture_activations(m, "d.jsonl", "out", no_such_flag=1), ValueError, "--no-such-flag"),
    (lambda m: probekit.capture_activations(m, "/nonexistent.jsonl", "out"), ValueError, "/nonexistent.jsonl"),
    (lambda m: probekit.load_model("/nonexistent/model"), ValueError, "/nonexistent/model"),
    (lambda m: probekit.load_probes("/nonexistent/probes"), ValueError, "/nonexistent/probes"),
    (lambda m: probekit.train_binary_probes("/nonexistent", "out"), ValueError, "/nonexistent"),
])
def test_bad_arguments_raise_with_the_message(model, call, error, message):
    with pytest.raises(error) as raised:
        call(model)
    assert message in str(raised.value)


def test_folders_as_paths_or_relative_stay_the_same_after_chdir(model, model_dir, probes_dir, monkeypatch):
    """Regression: pathlib.Path was refused, and a relative folder was read from each later call's directory."""
    monkeypatch.chdir(os.path.dirname(probes_dir))
    relative = probekit.load_probes(os.path.basename(probes_dir))
    by_path = probekit.load_probes(Path(probes_dir))
    monkeypatch.chdir(os.path.dirname(model_dir))
    relative_model = probekit.load_model(os.path.basename(model_dir), device="cpu")
    monkeypatch.chdir("/")
    assert relative.dir == by_path.dir == probes_dir
    assert relative.rank(model, "The garage was") == by_path.rank(model, "The garage was")
    assert list(relative_model.generate("The garage was", max_new_tokens=2)) == list(model.generate("The garage was",
                                                                                                    max_new_tokens=2))
    assert probekit.load_model(Path(model_dir), device="cpu").hidden_size == model.hidden_size
    # A threshold that is not a number is refused naming monitors (regression: "invalid JSON" from the native side).
    with pytest.raises(ValueError, match="monitors: Out of range float values"):
        list(model.generate("a", probes=by_path, monitors=[{"label": "reframing", "threshold": float("nan")}]))


def test_broken_files_raise_runtime_error_with_the_message(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{")
    (tmp_path / "probes").mkdir()
    (tmp_path / "probes" / "probes.json").write_text("{")
    (tmp_path / "layer_1_activations.h5").write_text("not HDF5")
    for call, message in [(lambda: probekit.load_model(str(tmp_path / "model")), "config.json: invalid JSON"),
                          (lambda: probekit.load_probes(str(tmp_path / "probes")), "probes.json: invalid JSON"),
                          (lambda: probekit.read_activations(str(tmp_path / "layer_1_activations.h5")), "HDF5")]:
        with pytest.raises(RuntimeError) as raised:
            call()
        assert message in str(raised.value)
