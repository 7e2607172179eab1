"""The Python side of the training benchmark (PROTOCOL section 2): the reference's parallel one-vs-rest trainer,
run beside train_binary_probes on the same activation file, for its time and its test AUROC.
  python3 reference_trainer_baseline.py ACTIVATIONS.h5 [--epochs 20] [--patience 1000] [--workers 8]
What the reference does, written again here (its code is not part of this project): activations read from the
HDF5 file and cast to bf16, moved to the GPU once; one Dropout(0.1) -> Linear(H, 1) probe per label, in bf16,
trained by a pool of 8 threads, each probe with its own DataLoader (batch 18, shuffled, rows gathered one by
one and stacked), AdamW (lr 5e-4, weight decay 1e-3), BCE with logits, cosine annealing to 1e-5, validation
AUROC after every epoch, early stopping; the reference reports the test metrics of the model of the last epoch,
and saves the probe of the first epoch with the highest validation AUROC.
Prints one JSON line: seconds for the training of all probes (the reference's total_training_time_seconds),
and the mean test AUROC and F1 at 0.5 of both, the last epoch's model and the saved probe."""
import json, time
from concurrent.futures import ThreadPoolExecutor

import h5py
import numpy as np
import torch
from sklearn.metrics import f1_score, roc_auc_score
from torch.utils.data import DataLoader, TensorDataset

from baselines import reference_optimizer, training_arguments


def read_split(f, name, device):
    group = f[name]
    acts = torch.from_numpy(group["activations"][:]).bfloat16().to(device)
    return acts, torch.from_numpy(group["labels"][:]).to(device)


def probabilities(probe, loader):
    probe.eval()
    with torch.no_grad():
        return np.concatenate([torch.sigmoid(probe(x)).float().cpu().numpy().ravel() for x, _ in loader])


def train_one(label, splits, a, device):
    (train_x, train_y), (val_x, val_y), (test_x, test_y) = splits
    def loader(x, y, shuffle):
        return DataLoader(TensorDataset(x, (y == label).to(torch.bfloat16)), batch_size=a.batch_size, shuffle=shuffle)
    train, val, test = loader(train_x, train_y, True), loader(val_x, val_y, False), loader(test_x, test_y, False)
    probe = torch.nn.Sequential(torch.nn.Dropout(0.1), torch.nn.Linear(train_x.shape[1], 1)).to(torch.bfloat16).to(device)
    optimizer, scheduler, loss_fn = reference_optimizer(probe, a)
    val_truth = (val_y == label).cpu().numpy()
    best_auc, best_state, epochs_without_gain = 0.0, None, 0
    for _ in range(a.epochs):
        probe.train()
        for x, y in train:
            loss = loss_fn(probe(x), y.unsqueeze(1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss.item()  # the reference sums each batch's loss on the host
        val_auc = roc_auc_score(val_truth, probabilities(probe, val))
        scheduler.step()
        if val_auc > best_auc:
            best_auc, epochs_without_gain = val_auc, 0
            best_state = {name: value.clone() for name, value in probe.state_dict().items()}
        else:
            epochs_without_gain += 1
        if epochs_without_gain >= a.patience:
            break
    truth, scores = (test_y == label).cpu().numpy(), probabilities(probe, test)
    last = roc_auc_score(truth, scores), f1_score(truth, scores >= 0.5, zero_division=0)
    probe.load_state_dict(best_state)  # the probe the reference saves: its first epoch of highest validation AUROC
    scores = probabilities(probe, test)
    return last + (roc_auc_score(truth, scores), f1_score(truth, scores >= 0.5, zero_division=0))


def main():
    ap = training_arguments(patience=1000)
    ap.add_argument("--workers", type=int, default=8)
    a = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with h5py.File(a.activations, "r") as f:
        splits = [read_split(f, name, device) for name in ("train", "val", "test")]
        label_count = len(f.attrs["label_names"])
    start = time.time()
    with ThreadPoolExecutor(max_workers=a.workers) as pool:
        results = list(pool.map(lambda label: train_one(label, splits, a, device), range(label_count)))
    seconds = time.time() - start
    means = [round(float(np.mean(column)), 5) for column in zip(*results)]
    print(json.dumps({"device": device, "labels": label_count, "epochs": a.epochs, "workers": a.workers,
                      "train_seconds": round(seconds, 2),
                      "last_epoch": {"mean_test_auc_roc": means[0], "mean_test_f1": means[1]},
                      "saved_probe": {"mean_test_auc_roc": means[2], "mean_test_f1": means[3]}}))


if __name__ == "__main__":
    main()
