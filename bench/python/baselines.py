"""What the Python baselines share: the capture baselines' command line and dataset, transformers' generate timed
as probekit's generation is, a model's decoder layers (for forward hooks), the training baselines' command line and optimizer (the reference trainer's), and the
versions a figure was measured with. python_baseline.py and make_bench_model.py use none of it: they are the
benchmark protocol's own scripts (../shared/bench), kept identical to them."""
import argparse
import json
import time

import torch

# The reference's prompt suffix, which capture_activations appends to every text.
SUFFIX = "\n\nThe cognitive action being demonstrated here is"


class LayerList(argparse.Action):
    """--layers as python_baseline.py takes them (8 17 25 33) or as capture_activations does (8,17,25,33)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, [int(layer) for value in values for layer in value.split(",")])


def capture_arguments(layers):
    """MODEL_DIR DATASET_JSONL [--layers ...] [--text-field text], `layers` captured by default."""
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("dataset")
    parser.add_argument("--layers", nargs="+", action=LayerList, default=layers)
    parser.add_argument("--text-field", default="text")
    return parser


def read_texts(path, field):
    """The `field` of every non-blank line of a JSONL dataset."""
    with open(path) as lines:
        return [json.loads(line)[field] for line in lines if line.strip()]


# transformers is imported where it is used: the training baselines also run where it is not installed.
def load_for_generation(model_dir):
    """transformers' tokenizer and model as a user loads them to generate: from_pretrained(dtype=bfloat16), then on
    the GPU."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return tokenizer, AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).to("cuda")


def timed_generate(model, inputs, new_tokens):
    """Seconds of a greedy generate of exactly `new_tokens` tokens (no stop before them)."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = model.generate(**inputs, do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens)
    torch.cuda.synchronize()
    assert out.shape[1] - inputs["input_ids"].shape[1] == new_tokens
    return time.perf_counter() - start


def generation_rates(model, inputs, new_tokens, runs, warm_up_tokens=8):
    """After a warm-up generate of warm_up_tokens tokens, the best of `runs`: decode tokens/s ((time of N + 1 new
    tokens - time of 1) / N, so the prompt's pass is left out, as on probekit's side) and whole-call tokens/s
    ((N + 1) / time of N + 1), then the warm-up's seconds (a compiling model's compile time)."""
    warm_up_s = timed_generate(model, inputs, warm_up_tokens)
    first = min(timed_generate(model, inputs, 1) for _ in range(runs))
    whole = min(timed_generate(model, inputs, new_tokens + 1) for _ in range(runs))
    return new_tokens / (whole - first), (new_tokens + 1) / whole, warm_up_s


def versions():
    """The versions of transformers and torch, for the figure's record."""
    import transformers
    return {"transformers": transformers.__version__, "torch": torch.__version__}


def training_arguments(patience):
    """ACTIVATIONS.h5 and the reference trainer's settings (20 epochs, batches of 18, AdamW lr 5e-4 and weight decay
    1e-3); --patience: epochs without a better validation AUROC before a probe stops."""
    parser = argparse.ArgumentParser()
    parser.add_argument("activations")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--patience", type=int, default=patience)
    parser.add_argument("--batch-size", type=int, default=18)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--weight-decay", type=float, default=1e-3)
    return parser


def reference_optimizer(probe, a):
    """The reference's training of one probe: AdamW, cosine annealing to 1e-5 over the epochs, BCE with logits."""
    optimizer = torch.optim.AdamW(probe.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=a.epochs, eta_min=1e-5)
    return optimizer, scheduler, torch.nn.BCEWithLogitsLoss()


def decoder_layers(model):
    """The decoder layers of a transformers causal LM, under a multimodal wrapper or not, for forward hooks."""
    for path in ("model.language_model.layers", "model.layers"):
        found = model
        try:
            for part in path.split("."):
                found = getattr(found, part)
            return found
        except AttributeError:
            continue
    raise RuntimeError("no decoder layers found")
