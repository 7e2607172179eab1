"""The PyTorch side of the attention-probe training benchmark (torch_attention_probe_train_s): the architecture
train_binary_probes --model-type attention trains (EleutherAI's attention-probes AttentionProbe: zero-initialised
query per head, a per-head position weight, a value head per head, logits summed over heads), trained here one
label at a time in plain PyTorch on the same --position all activation file.
  python3 torch_attention_probe.py ACTIVATIONS.h5 [--epochs 20] [--patience -1] [--heads 1] [--max-tokens 0]
                                   [--kind attention|multimax]
With --kind multimax it trains train_binary_probes --model-type multimax's architecture instead (torch_multimax_train_s):
per head a query and a value vector, the value of the token with the highest query, summed over heads with a bias;
the queries trained straight through a softmax (the hard maximum forward, the softmax's gradient backward).
Same data and semantics as ours, as closely as is reasonable: every text's token rows after the leading BOS (the
first token, when every text starts with the same id), at most its last --max-tokens; fp32; batches of 18 texts in
a shuffled order, padded with a mask and each token's position in its text; AdamW (lr 5e-4, weight decay 1e-3),
BCE with logits, cosine annealing to 1e-5 stepped per epoch; validation AUROC after every epoch, the best epoch's
weights kept (ties to the lower validation loss are not broken here), early stopping after --patience epochs
without a better AUROC (-1: never). Activations are read with h5py and moved to the GPU once.
Prints one JSON line: seconds (the training of every label, the reading excluded, as ours reports it in-process
and the benchmark times our whole process), mean_test_auroc of the best-epoch weights, labels, torch."""
import json
import math
import time

import h5py
import numpy as np
import torch
from sklearn.metrics import roc_auc_score

from baselines import reference_optimizer, training_arguments


class AttentionProbe(torch.nn.Module):
    """EleutherAI's AttentionProbe(d_in, n_heads, output_dim=1) without the MLP: forward(x, mask, position)."""

    def __init__(self, d_in, heads, outputs=1):
        super().__init__()
        self.heads, self.outputs = heads, outputs
        self.q = torch.nn.Linear(d_in, heads, bias=False)
        self.q.weight.data.zero_()
        self.v = torch.nn.Linear(d_in, heads * outputs)
        self.position_weight = torch.nn.Parameter(torch.zeros(heads))

    def forward(self, x, mask, position):
        k = self.q(x) - (1 - mask.unsqueeze(-1).float()) * 1e9 + position.unsqueeze(-1) * self.position_weight
        p = torch.softmax(k, dim=1)
        v = self.v(x).unflatten(-1, (self.heads, self.outputs))
        return (p.unsqueeze(-1) * v).sum((1, 2))


class MultiMaxProbe(torch.nn.Module):
    """--model-type multimax: forward(x, mask, position) = sum_h v_h . x_{argmax_t q_h . x_t} + b."""

    def __init__(self, d_in, heads, outputs=1):
        super().__init__()
        self.heads, self.outputs = heads, outputs
        self.q = torch.nn.Linear(d_in, heads, bias=False)
        self.v = torch.nn.Linear(d_in, heads * outputs, bias=False)
        self.bias = torch.nn.Parameter(torch.zeros(outputs))

    def forward(self, x, mask, position):
        k = self.q(x).masked_fill(mask.unsqueeze(-1) == 0, float("-inf"))
        soft = torch.softmax(k, dim=1)
        hard = torch.nn.functional.one_hot(k.argmax(1), k.shape[1]).transpose(1, 2).to(soft.dtype)
        p = hard + soft - soft.detach()
        v = self.v(x).unflatten(-1, (self.heads, self.outputs))
        return (p.unsqueeze(-1) * v).sum((1, 2)) + self.bias


def leading_specials(f):
    first = [f[s]["token_ids"][:][f[s]["offsets"][:-1]] for s in ("train", "val", "test")]
    ids = np.concatenate(first)
    return 1 if len(ids) and (ids == ids[0]).all() else 0


def read_split(f, name, skip, max_tokens, device):
    """The split's texts padded once: x [N, T, H], mask [N, T], position [N, T], labels [N], on the device."""
    group = f[name]
    rows, offsets = group["activations"][:], group["offsets"][:]
    kept = []
    for begin, end in zip(offsets[:-1], offsets[1:]):
        first = min(begin + skip, end - 1)
        if max_tokens > 0:
            first = max(first, end - max_tokens)
        kept.append((first, end, first - begin))
    longest = max(end - first for first, end, _ in kept)
    x = np.zeros((len(kept), longest, rows.shape[1]), dtype=np.float32)
    mask = np.zeros((len(kept), longest), dtype=np.float32)
    position = np.zeros((len(kept), longest), dtype=np.float32)
    for i, (first, end, start) in enumerate(kept):
        n = end - first
        x[i, :n] = rows[first:end]
        mask[i, :n] = 1
        position[i, :n] = np.arange(start, start + n)
    to = lambda a: torch.from_numpy(a).to(device)
    return to(x), to(mask), to(position), torch.from_numpy(group["labels"][:]).to(device)


def scores(probe, split, batch):
    x, mask, position, _ = split
    with torch.no_grad():
        return torch.cat([probe(x[i:i + batch], mask[i:i + batch], position[i:i + batch]).squeeze(1)
                          for i in range(0, len(x), batch)])


def train_one(label, train, val, test, a, device):
    x, mask, position, labels = train
    target = (labels == label).float()
    # Texts of a batch share the padded length of the longest among them, as ours pads only the batch.
    lengths = mask.sum(1).long()
    probe = (MultiMaxProbe(x.shape[2], a.heads) if a.kind == "multimax" else AttentionProbe(x.shape[2], a.heads)).to(device)
    optimizer, scheduler, loss_fn = reference_optimizer(probe, a)
    val_truth = (val[3] == label).cpu().numpy()
    best_auc, best_state, without_gain = -1.0, None, 0
    for _ in range(a.epochs):
        order = torch.randperm(len(x), device=device)
        for i in range(0, len(x), a.batch_size):
            rows = order[i:i + a.batch_size]
            t = int(lengths[rows].max())
            logits = probe(x[rows, :t], mask[rows, :t], position[rows, :t]).squeeze(1)
            loss = loss_fn(logits, target[rows])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        scheduler.step()
        val_auc = roc_auc_score(val_truth, scores(probe, val, 256).cpu().numpy())
        if val_auc > best_auc:
            best_auc, without_gain = val_auc, 0
            best_state = {name: value.clone() for name, value in probe.state_dict().items()}
        else:
            without_gain += 1
        if a.patience >= 0 and without_gain >= a.patience:
            break
    probe.load_state_dict(best_state)
    test_truth = (test[3] == label).cpu().numpy()
    if test_truth.min() == test_truth.max():
        return math.nan
    return roc_auc_score(test_truth, scores(probe, test, 256).cpu().numpy())


def main():
    parser = training_arguments(patience=-1)
    parser.add_argument("--heads", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=0)
    parser.add_argument("--kind", choices=("attention", "multimax"), default="attention")
    a = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    with h5py.File(a.activations, "r") as f:
        skip = leading_specials(f)
        splits = [read_split(f, name, skip, a.max_tokens, device) for name in ("train", "val", "test")]
        label_count = len(f.attrs["label_names"])
    train, val, test = splits
    present = [i for i in range(label_count)
               if all(((s[3] == i).any() and not (s[3] == i).all()) for s in (train, val))]
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    aurocs = [train_one(label, train, val, test, a, device) for label in present]
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    defined = [x for x in aurocs if not math.isnan(x)]
    print(json.dumps({"seconds": seconds, "mean_test_auroc": sum(defined) / len(defined), "labels": len(present),
                      "skip_leading": skip, "kind": a.kind, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
