#!/usr/bin/env python3
"""The sklearn side of the logistic-probe benchmark: 45 one-vs-rest LogisticRegression(C=1, max_iter=10000) fits
(sklearn's defaults otherwise: L2, lbfgs, tol 1e-4), one label after another on the train split, as a user of
sklearn would fit them; beside train_probes_bench --model-type logistic (its train_seconds) on the same rows.

  python3 sklearn_logistic_baseline.py [ACTIVATIONS.h5] [--labels 45] [--hidden 2560] [--signal 8] [--C 1]

With an activation file (train_probes_bench --work-dir keeps its synthetic one), its train and test splits;
without one, the benchmark's synthetic layout drawn with numpy: per label 70/15/15 train/val/test rows, each
N(0, I) around a mean of norm --signal of its own. Prints one JSON line: the seconds of all fits, the mean test
AUROC, the iterations sklearn took and its versions. Needs numpy and sklearn (Debian's python3-sklearn), and
h5py for a file."""
import argparse
import json
import time

import numpy as np
import sklearn
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score


def synthetic(labels, hidden, signal, seed=0):
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(labels, hidden))
    means *= signal / np.linalg.norm(means, axis=1, keepdims=True)
    splits = {}
    for name, per_label in (("train", 70), ("test", 15)):
        y = np.repeat(np.arange(labels), per_label)
        splits[name] = (means[y] + rng.normal(size=(len(y), hidden)), y)
    return splits


def from_file(path):
    import h5py
    with h5py.File(path, "r") as f:
        return {name: (f[name]["activations"][:].astype(np.float64), f[name]["labels"][:]) for name in ("train", "test")}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("activations", nargs="?")
    parser.add_argument("--labels", type=int, default=45)
    parser.add_argument("--hidden", type=int, default=2560)
    parser.add_argument("--signal", type=float, default=8.0)
    parser.add_argument("--C", type=float, default=1.0)
    a = parser.parse_args()
    splits = from_file(a.activations) if a.activations else synthetic(a.labels, a.hidden, a.signal)
    (train_x, train_y), (test_x, test_y) = splits["train"], splits["test"]
    labels = np.unique(train_y)
    aucs, iterations = [], []
    started = time.perf_counter()
    for label in labels:
        model = LogisticRegression(C=a.C, max_iter=10000).fit(train_x, (train_y == label).astype(int))
        iterations.append(int(model.n_iter_[0]))
        aucs.append((model, label))
    seconds = time.perf_counter() - started
    test_aucs = [roc_auc_score(test_y == label, model.decision_function(test_x)) for model, label in aucs
                 if 0 < np.sum(test_y == label) < len(test_y)]
    print(json.dumps({"benchmark": "sklearn LogisticRegression one-vs-rest, one label after another",
                      "source": a.activations or "synthetic", "probes": len(labels),
                      "shape": f"{train_x.shape[0]} train x {train_x.shape[1]}", "C": a.C, "max_iter": 10000,
                      "logistic_train_s": seconds, "mean_test_auc_roc": float(np.mean(test_aucs)),
                      "iterations_max": max(iterations), "iterations_mean": float(np.mean(iterations)),
                      "sklearn": sklearn.__version__, "numpy": np.__version__}))


if __name__ == "__main__":
    main()
