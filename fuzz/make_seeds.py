#!/usr/bin/env python3
"""Writes the seed corpus of every fuzz target into OUT/<target>/, made from the test fixtures.

Seeds are small on purpose: libFuzzer mutates short inputs much faster, so the fixture files are cut down
(safetensors files keep their header's names, dtypes and metadata with tiny shapes; tokenizers keep their
pipeline with the first 300 vocabulary entries and the merges among them).

Usage: fuzz/make_seeds.py OUT
"""
import glob
import json
import os
import random
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
DTYPE_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


def write(out, target, name, data):
    directory = os.path.join(out, target)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode("utf-8"))


def safetensors_bytes(tensors, metadata=None, pad=True):
    """tensors: list of (name, dtype, shape); data are bytes counting up."""
    header, data, offset = {}, b"", 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape in tensors:
        count = DTYPE_SIZES[dtype]
        for dim in shape:
            count *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + count]}
        data += bytes(i % 251 for i in range(count))
        offset += count
    text = json.dumps(header, separators=(",", ":"))
    if pad:
        text += " " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text.encode() + data


def read_safetensors_header(path):
    with open(path, "rb") as f:
        length = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(length))


def safetensors_seeds(out):
    paths = sorted(glob.glob(os.path.join(FIXTURES, "models", "*", "*.safetensors")))
    for path in paths[::3]:
        header = read_safetensors_header(path)
        metadata = header.pop("__metadata__", None)
        tensors = [(name, entry["dtype"], [min(d, 2) for d in entry["shape"]]) for name, entry in list(header.items())[:6]]
        name = os.path.basename(os.path.dirname(path)) + "_" + os.path.basename(path)
        write(out, "fuzz_safetensors", name, safetensors_bytes(tensors, metadata))
    write(out, "fuzz_safetensors", "empty_header", safetensors_bytes([]))
    write(out, "fuzz_safetensors", "metadata_only", safetensors_bytes([], {"format": "pt"}))
    write(out, "fuzz_safetensors", "every_dtype",
          safetensors_bytes([(f"t_{d.lower()}", d, [2, 1]) for d in DTYPE_SIZES], {"note": "all dtypes"}, pad=False))
    write(out, "fuzz_safetensors", "scalar_and_empty", safetensors_bytes([("scalar", "F32", []), ("empty", "F16", [0, 3])]))


def config_seeds(out):
    for path in sorted(glob.glob(os.path.join(FIXTURES, "models", "*", "config.json"))):
        write(out, "fuzz_config", os.path.basename(os.path.dirname(path)) + ".json", open(path, "rb").read())


def shrink_tokenizer(tokenizer, keep=300):
    model = tokenizer["model"]
    vocab = {token: id for token, id in model["vocab"].items() if id < keep}
    model["vocab"] = vocab
    merges = []
    for merge in model["merges"]:
        left, right = merge if isinstance(merge, list) else merge.split(" ", 1)
        if left in vocab and right in vocab and left + right in vocab:
            merges.append(merge)
    model["merges"] = merges
    tokenizer["added_tokens"] = [t for t in tokenizer["added_tokens"] if t["id"] < keep]
    return tokenizer


def tokenizer_seeds(out):
    names = ["bytelevel_gpt2", "bytelevel_llama3", "bytelevel_qwen", "spm_llama2", "spm_gemma"]
    for index, name in enumerate(names):
        directory = os.path.join(FIXTURES, "tokenizers", name)
        tokenizer = json.load(open(os.path.join(directory, "tokenizer.json"), encoding="utf-8"))
        write(out, "fuzz_tokenizer_json", name + ".json", json.dumps(shrink_tokenizer(tokenizer), ensure_ascii=False))
        cases = json.load(open(os.path.join(directory, "cases.json"), encoding="utf-8"))["cases"]
        for number, case in enumerate(cases[::4]):
            # The encode target's first byte picks the tokenizer (modulo 5) and add_special_tokens (next bit).
            prefix = bytes([index + 5 * (number % 2)])
            write(out, "fuzz_tokenizer_encode", f"{name}_{number}", prefix + case["text"].encode("utf-8"))
    texts = json.load(open(os.path.join(FIXTURES, "tokenizers", "stress", "texts.json"), encoding="utf-8"))["texts"]
    for number, text in enumerate(texts[:20]):
        write(out, "fuzz_tokenizer_encode", f"stress_{number}", bytes([number % 10]) + text.encode("utf-8")[:2000])


def dataset_seeds(out):
    lines = [
        {"text": "I examined each part of the problem step by step.", "cognitive_action": "analyzing", "domain": "work"},
        {"text": "Instead of a setback, I saw a chance to learn.", "cognitive_action": "reframing", "domain": "life"},
        {"text": "Suddenly I noticed the small crack in the window.", "cognitive_action": "noticing"},
    ]
    reference = "\n".join(json.dumps(line) for line in lines) + "\n"
    sentiment = "\n".join(json.dumps({"text": t, "sentiment": s}) for t, s in [("great", "positive"), ("awful", "negative")])
    mixed = (reference + "\n   \n" + '{"text": "x", "cognitive_action": 3}\r\n' + "not json\n" + '{"text": ""}\n'
             + '["a", "list"]\n' + '{"content": "other field", "label": "a", "text": "t"}\n')
    unicode = '{"text": "caf\u00e9 \u65e5\u672c \\ud83d\\ude00", "cognitive_action": "noticing"}\n'
    for choice in (0, 1, 2, 3, 4, 12, 16, 32):
        write(out, "fuzz_dataset", f"reference_{choice}", bytes([choice]) + reference.encode())
        write(out, "fuzz_dataset", f"mixed_{choice}", bytes([choice]) + mixed.encode())
    write(out, "fuzz_dataset", "sentiment", bytes([0]) + sentiment.encode())
    write(out, "fuzz_dataset", "unicode", bytes([1]) + unicode.encode("utf-8") + b'{"text": "\xff\xfe", "cognitive_action": "a"}\n')


def activation_file_seeds(out):
    # The target decodes any bytes into a file's structure; random bytes of a few lengths start it off.
    generator = random.Random(7)
    for length in (0, 16, 64, 128, 256, 512, 1024):
        write(out, "fuzz_activation_file", f"random_{length}", bytes(generator.randrange(256) for _ in range(length)))


def probe_files_seeds(out):
    def probe_input(index, tensors, metadata):
        text = json.dumps(index).encode()
        return struct.pack("<I", len(text)) + text + safetensors_bytes(tensors, metadata)

    entry = {"label": "a", "label_index": 0, "file": "probe_a.safetensors", "threshold": 0.5, "threshold_logit": 0.0,
             "val_auc": 0.9, "best_epoch": 3}
    linear_index = {"format": "probekit.binary_probes", "version": 1, "model_type": "linear", "input_dim": 4,
                    "layer": 2, "probes": [entry]}
    write(out, "fuzz_probe_files", "linear",
          probe_input(linear_index, [("linear.weight", "F32", [1, 4]), ("linear.bias", "F32", [1])],
                      {"model_class": "BinaryLinearProbe", "input_dim": "4"}))
    write(out, "fuzz_probe_files", "linear_bf16",
          probe_input(linear_index, [("linear.weight", "BF16", [1, 4]), ("linear.bias", "BF16", [1])], None))
    multihead_index = dict(linear_index, model_type="multihead", hidden_dim=8, num_heads=2)
    write(out, "fuzz_probe_files", "multihead",
          probe_input(multihead_index,
                      [("encoder.0.weight", "F32", [8, 4]), ("encoder.0.bias", "F32", [8]),
                       ("encoder.3.weight", "F32", [8, 8]), ("encoder.3.bias", "F32", [8]),
                       ("attention.in_proj_weight", "F32", [24, 8]), ("attention.in_proj_bias", "F32", [24]),
                       ("attention.out_proj.weight", "F32", [8, 8]), ("attention.out_proj.bias", "F32", [8]),
                       ("classifier.weight", "F32", [1, 8]), ("classifier.bias", "F32", [1])],
                      {"model_class": "BinaryMultiHeadProbe"}))


def hub_responses_seeds(out):
    """The first byte picks the parser: 0 headers, 1 index, 2 Content-Range, 3 hub name."""
    commit = "2b6a1d4e0e1c04b5e9fd5cd3e1a5b71a1f0b7c3d"
    lfs = (f"HTTP/1.1 302 Found\r\nX-Repo-Commit: {commit}\r\nX-Linked-Etag: \"{'ab' * 32}\"\r\n"
           "X-Linked-Size: 1302608\r\nETag: \"4a1f0c8b2d0e6a9f3c7b5e1d2a4c6e8f0b1d3a5c\"\r\n"
           "Location: https://cdn.example/x?sig=1\r\n\r\n")
    small = f"HTTP/1.1 200 OK\r\nContent-Length: 663\r\nETag: W/\"{'cd' * 20}\"\r\nX-Repo-Commit: {commit}\r\n\r\n"
    refused = "HTTP/1.1 401 Unauthorized\r\nX-Error-Code: GatedRepo\r\nX-Error-Message: Access restricted\r\n\r\n"
    for name, text in [("lfs_redirect", lfs), ("small_file", small), ("gated", refused)]:
        write(out, "fuzz_hub_responses", name, b"\x00" + text.encode())
    index = open(os.path.join(FIXTURES, "models", "qwen3_sharded", "model.safetensors.index.json"), "rb").read()
    write(out, "fuzz_hub_responses", "index", b"\x01" + index)
    for number, value in enumerate(["bytes 100-199/200", "bytes 0-0/*"]):
        write(out, "fuzz_hub_responses", f"range_{number}", b"\x02" + value.encode())
    for number, value in enumerate(["google/gemma-3-4b-it", "Qwen/Qwen3-0.6B@v1.0", f"org/name@{commit}", "org/name@refs/pr/1"]):
        write(out, "fuzz_hub_responses", f"name_{number}", b"\x03" + value.encode())


def server_requests_seeds(out):
    """The first byte picks the endpoint (0, 1 rank, 2 per-token, 3 generate; +4 tight bounds)."""
    bodies = [
        (0, {"texts": ["Instead of a setback, I saw a chance to learn.", "A second text."], "top_k": 5, "threshold": 0.1}),
        (1, {"texts": ["one"], "layers": [2, 5], "mode": "by-action", "aggregate": "mean", "calibrated": True}),
        (2, {"text": "Suddenly I noticed the crack.", "layers": [5], "threshold": 0.5}),
        (3, {"prompt": "Once upon a time", "max_new_tokens": 16, "temperature": 0.7, "sample_top_k": 40, "top_p": 0.9,
             "seed": 7, "stop": False, "top_k": 3}),
        (4, {"texts": ["a", "b", "c"]}),
    ]
    for number, (selector, body) in enumerate(bodies):
        write(out, "fuzz_server_requests", f"body_{number}", bytes([selector]) + json.dumps(body).encode())


def request_framing_seeds(out):
    """The first byte picks the bounds (1: a 64-byte body, 2: 256 bytes of headers), the second the piece size."""
    body = json.dumps({"texts": ["Instead of a setback, I saw a chance to learn."]}).encode()
    head = b"POST /v1/rank HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 7]), body[i:i + 7]) for i in range(0, len(body), 7))
    streams = [
        head + b"Content-Length: %d\r\n\r\n" % len(body) + body,
        head + b"Transfer-Encoding: chunked\r\n\r\n" + chunked + b"0\r\n\r\n",
        head + b"Transfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n" + chunked + b"0;x=1\r\nTrailer: y\r\n\r\n",
        head + b"Content-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/info HTTP/1.1\r\nAuthorization: Bearer k\r\n\r\n",
    ]
    for number, stream in enumerate(streams):
        for selector in (0, 3):
            write(out, "fuzz_request_framing", f"stream_{number}_{selector}", bytes([selector, 5 + number]) + stream)


def chat_template_seeds(out):
    """The first byte picks the bounds (bit 0: tight), tools (bit 1) and the generation prompt (bit 2)."""
    sources = [open(os.path.join(FIXTURES, "models", "gemma3_text", "chat_template.jinja"), encoding="utf-8").read()]
    cache = os.path.join(FIXTURES, "..", "..", ".cache", "tokenizers")
    for name in sorted(os.listdir(cache)) if os.path.isdir(cache) else []:
        config = os.path.join(cache, name, "tokenizer_config.json")
        if os.path.isfile(config) and isinstance(json.load(open(config)).get("chat_template"), str):
            sources.append(json.load(open(config))["chat_template"])
    sources += [
        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
        "{{ ((((1)))) }}{{ [[1, 2], {'a': (3,)}] | tojson(indent=2) }}{{ 'x' * 3 }}{{ messages | map(attribute='role') | join(',') }}",
        "{% for m in messages %}{{ m.content if m.content is string else m.content | map(attribute='text') | join }}{% endfor %}",
    ]
    for number, source in enumerate(sources):
        for choice in (0, 3, 6):
            write(out, "fuzz_chat_template", f"template_{number}_{choice}", bytes([choice]) + source.encode("utf-8"))


def chat_request_seeds(out):
    """Request bodies of /v1/chat/completions: the dialogue fixtures' conversations, and bodies with tools, stop
    strings, probes and monitors; and conversations' turns (bit 5). The first byte: bits 0-2 the checkpoint, bit 3 tight
    bounds, bit 4 no generation prompt, bit 5 turns split at \\x01 in place of a body."""
    bodies = []
    for path in sorted(glob.glob(os.path.join(FIXTURES, "dialogues", "*.json"))):
        for conversation in json.load(open(path, encoding="utf-8"))["conversations"][:4]:
            bodies.append({"model": "m", "messages": conversation["messages"]})
    tools = [{"type": "function", "function": {"name": "lookup", "description": "Finds a fact.",
                                               "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]
    bodies += [
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Caf\u00e9 \u65e5\u672c \U0001F916"}],
         "tools": tools, "tool_choice": "auto", "max_tokens": 3, "stop": ["\n", "."], "stream": True,
         "stream_options": {"include_usage": True}},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "Look it up."}]},
                      {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "id": "c1", "function":
                                                                              {"name": "lookup", "arguments": "{\"q\": \"x\"}"}}]},
                      {"role": "tool", "tool_call_id": "c1", "content": "42"}, {"role": "user", "content": "  and?  "}],
         "tools": tools, "temperature": 0.5, "top_p": 0.9, "seed": 3},
        {"messages": [{"role": "user", "content": "Hi"}], "probes": {"top_k": 3, "threshold": 0.2, "calibrated": True},
         "monitors": [{"label": "a", "threshold": 0.5, "aggregate": "ema", "alpha": 0.2, "action": "stop"}],
         "steer": [{"label": "a", "coefficient": 2.0}]},
    ]
    for number, body in enumerate(bodies):
        for choice in (number % 5, 8 + number % 5, 16 + number % 5):
            write(out, "fuzz_chat_request", f"body_{number}_{choice}", bytes([choice]) + json.dumps(body).encode())
    turns = ["Hi\x01Hello there\x01Again", "  spaced  \x01<think>\nhidden\n</think>\n\nshown\x01Next",
             "Caf\u00e9 \u65e5\u672c\x01\U0001F916 <start_of_turn> <|im_end|> <|eot_id|>\x01\u00e9t\u00e9"]
    for number, text in enumerate(turns):
        for checkpoint in range(5):
            choice = 32 + checkpoint
            write(out, "fuzz_chat_request", f"turns_{number}_{choice}", bytes([choice]) + text.encode("utf-8"))


def sae_files_seeds(out):
    """The SAE fixtures' layouts cut to d_in 4 and d_sae 8: the first byte picks the layout (0 SAELens, 1 sparsify,
    2 Gemma Scope 2, 3 Llama Scope, 4 Gemma Scope), then the config's length (4 bytes, little-endian), the config and
    the weights."""
    def seed(layout, config, weights):
        config_bytes = json.dumps(config).encode() if config is not None else b""
        return bytes([layout]) + struct.pack("<I", len(config_bytes)) + config_bytes + weights

    def cut(shape):
        return [{64: 4, 256: 8}.get(d, d) for d in shape]

    for path in sorted(glob.glob(os.path.join(FIXTURES, "saes", "saelens_*", "cfg.json"))):
        config = json.load(open(path))
        config.update({"d_in": 4, "d_sae": 8})
        if "k" in config:
            config["k"] = 3
        header = read_safetensors_header(os.path.join(os.path.dirname(path), "sae_weights.safetensors"))
        header.pop("__metadata__", None)
        tensors = [(name, "F32", cut(entry["shape"])) for name, entry in header.items()]
        name = os.path.basename(os.path.dirname(path))
        write(out, "fuzz_sae_files", name, seed(0, config, safetensors_bytes(tensors)))
    sparsify = json.load(open(os.path.join(FIXTURES, "saes", "sparsify", "layers.3", "cfg.json")))
    sparsify.update({"num_latents": 8, "k": 3, "d_in": 4})
    write(out, "fuzz_sae_files", "sparsify", seed(1, sparsify, safetensors_bytes(
        [("encoder.weight", "F32", [8, 4]), ("encoder.bias", "F32", [8]), ("W_dec", "F32", [8, 4]), ("b_dec", "F32", [4])])))
    sparsify.update({"transcode": True, "skip_connection": True})
    write(out, "fuzz_sae_files", "sparsify_transcoder", seed(1, sparsify, safetensors_bytes(
        [("encoder.weight", "F32", [8, 4]), ("encoder.bias", "F32", [8]), ("W_dec", "F32", [8, 4]), ("b_dec", "F32", [4]),
         ("W_skip", "F32", [4, 4])])))
    gemma_scope_2 = glob.glob(os.path.join(FIXTURES, "saes", "gemma_scope_2", "*", "*", "config.json"))[0]
    write(out, "fuzz_sae_files", "gemma_scope_2", seed(2, json.load(open(gemma_scope_2)), safetensors_bytes(
        [("w_enc", "F32", [4, 8]), ("w_dec", "F32", [8, 4]), ("b_enc", "F32", [8]), ("b_dec", "F32", [4]),
         ("threshold", "F32", [8])])))
    llama_scope = {"d_model": 4, "d_sae": 8, "hook_point_in": "blocks.3.ln2.hook_normalized",
                   "hook_point_out": "blocks.3.hook_mlp_out", "act_fn": "jumprelu", "norm_activation": "dataset-wise",
                   "jump_relu_threshold": 0.5, "dataset_average_activation_norm": {"in": 2.5, "out": 1.5}}
    weights = safetensors_bytes([("encoder.weight", "F32", [8, 4]), ("encoder.bias", "F32", [8]),
                                 ("decoder.weight", "F32", [4, 8]), ("decoder.bias", "F32", [4])])
    write(out, "fuzz_sae_files", "llama_scope_transcoder", seed(3, llama_scope, weights))
    llama_scope["hook_point_out"] = llama_scope["hook_point_in"] = "blocks.3.hook_resid_post"
    write(out, "fuzz_sae_files", "llama_scope", seed(3, llama_scope, weights))
    for path in glob.glob(os.path.join(FIXTURES, "saes", "gemma_scope", "**", "params.npz"), recursive=True):
        write(out, "fuzz_sae_files", "gemma_scope", seed(4, None, open(path, "rb").read()))


def npz_seeds(out):
    """The SAE fixtures' .npz archives, stored and deflated, as NumPy wrote them."""
    for path in sorted(glob.glob(os.path.join(FIXTURES, "saes", "**", "*.npz"), recursive=True)):
        with open(path, "rb") as f:
            write(out, "fuzz_npz", os.path.basename(os.path.dirname(path)) + "_" + os.path.basename(path), f.read())


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    safetensors_seeds(out)
    config_seeds(out)
    tokenizer_seeds(out)
    dataset_seeds(out)
    activation_file_seeds(out)
    probe_files_seeds(out)
    hub_responses_seeds(out)
    server_requests_seeds(out)
    request_framing_seeds(out)
    chat_template_seeds(out)
    chat_request_seeds(out)
    npz_seeds(out)
    sae_files_seeds(out)


if __name__ == "__main__":
    main()
