#!/usr/bin/env python3
"""scikit-learn's fits that the logistic and mean-diff probe kinds must reproduce (tests/torch/test_probe_kinds.cpp).

    python3 sklearn_logistic_reference.py PROBLEM.json OUT.json

PROBLEM.json: {"mode": "ovr" | "mean-diff" | "multinomial", "C": float, "x": [[...], ...] (the train rows),
"y": [class index per row], "labels": [the classes fitted one-vs-rest]}.
OUT.json: for "ovr" and "mean-diff", {label: {"coef": [H], "intercept": b}} (mean-diff: coef = a * d for the
direction d = mean of the label's rows - mean of the others' and the scale a of a logistic fit of X d); for
"multinomial", {"classes", "coef": [[H] per class], "intercept": [per class]}. Every fit is
LogisticRegression(C=C, max_iter=10000) with sklearn's other defaults (penalty l2, lbfgs, fit_intercept); an optional
"tol" replaces sklearn's 1e-4 and "solver" its lbfgs: {"solver": "newton-cholesky", "tol": 1e-12} reaches the optimum
(lbfgs, even at tol 1e-10, stops on its relative decrease of the objective up to 1e-3 short of it on hard rows)."""
import json
import sys

import numpy as np
from sklearn.linear_model import LogisticRegression


def fit(x, y, c, tol, solver):
    return LogisticRegression(C=c, max_iter=10000, tol=tol, solver=solver).fit(x, y)


def main():
    problem = json.load(open(sys.argv[1]))
    x = np.array(problem["x"], dtype=np.float64)
    y = np.array(problem["y"])
    c = problem["C"]
    tol = problem.get("tol", 1e-4)
    solver = problem.get("solver", "lbfgs")
    if problem["mode"] == "multinomial":
        model = fit(x, y, c, tol, solver)
        out = {"classes": model.classes_.tolist(), "coef": model.coef_.tolist(), "intercept": model.intercept_.tolist()}
    else:
        out = {}
        for label in problem["labels"]:
            target = (y == label).astype(int)
            if problem["mode"] == "mean-diff":
                direction = x[target == 1].mean(axis=0) - x[target == 0].mean(axis=0)
                model = fit((x @ direction)[:, None], target, c, tol, solver)
                coef = model.coef_[0, 0] * direction
            else:
                model = fit(x, target, c, tol, solver)
                coef = model.coef_[0]
            out[str(label)] = {"coef": coef.tolist(), "intercept": float(model.intercept_[0])}
    json.dump(out, open(sys.argv[2], "w"))


if __name__ == "__main__":
    main()
