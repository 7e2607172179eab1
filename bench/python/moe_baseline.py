"""transformers' batched capture on a MoE or hybrid checkpoint as a user runs it, beside capture_activations in the same
sitting: from_pretrained with its defaults (bf16, on the GPU), batches of 32 with right padding, forward hooks
on the captured layers, the last real token of each text.
  python3 moe_baseline.py MODEL_DIR DATASET_JSONL [--layers 6 12 18 23] [--batch 32] [--device-map cuda|auto]
Prints one JSON line: the examples, examples/s, and how transformers ran the experts (its experts
implementation where the version has that setting, the experts module, the attention implementation).
Its batched capture is python_baseline.py's, repeated rather than shared: that script is the benchmark
protocol's own (../shared/bench), kept identical to it."""
import json, time
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from baselines import SUFFIX, capture_arguments, read_texts, versions

ap = capture_arguments([6, 12, 18, 23])
ap.add_argument("--batch", type=int, default=32)
ap.add_argument("--device-map", default="cuda", help='"auto": the layers split over every GPU (a model larger than one)')
a = ap.parse_args()
texts = read_texts(a.dataset, a.text_field)
tok = AutoTokenizer.from_pretrained(a.model)
tok.padding_side = "right"
model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16, device_map=a.device_map).eval()
layers = model.model.layers
sparse = next((layer.mlp for layer in layers if hasattr(layer.mlp, "experts")), None)  # None: a dense model


def capture(ts):
    for i in range(0, len(ts), a.batch):
        enc = tok([t + SUFFIX for t in ts[i:i + a.batch]], return_tensors="pt", padding=True).to("cuda")
        saved = {}
        hs = [layers[k].register_forward_hook(
            (lambda k: lambda m, inp, out: saved.__setitem__(k, out[0] if isinstance(out, tuple) else out))(k))
            for k in a.layers]
        with torch.no_grad():
            model.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"])
        for h in hs: h.remove()
        last = enc["attention_mask"].sum(1) - 1
        rows = torch.arange(last.shape[0], device="cuda")
        # With device_map="auto" a layer's output lies on its own GPU.
        [saved[k][rows.to(saved[k].device), last.to(saved[k].device)].float().cpu() for k in a.layers]


capture(texts[:64]); torch.cuda.synchronize()
t0 = time.time(); capture(texts); torch.cuda.synchronize()
print(json.dumps({
    "examples": len(texts),
    "batched_examples_per_s": len(texts) / (time.time() - t0),
    "experts_implementation": getattr(model.config, "_experts_implementation", None)
                              or "not a setting of this version (its experts module's own loop)",
    "experts_module": type(sparse.experts).__module__ + "." + type(sparse.experts).__name__ if sparse else None,
    "linear_attention": type(layers[0].linear_attn).__module__ if hasattr(layers[0], "linear_attn") else None,
    "attention_implementation": getattr(model.config, "_attn_implementation", None),
    "devices": sorted({str(p.device) for p in model.parameters()}), **versions()}))
