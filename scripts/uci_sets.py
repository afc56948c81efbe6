#!/usr/bin/env python3
"""Export scikit-learn's four bundled UCI classification sets as CSV *and* LIBSVM, and
record scikit-learn's LogisticRegression() test accuracy on each (issue 30).

Run once from the workspace root; the outputs are committed, tests never download:

    pip install scikit-learn numpy
    python3 scripts/uci_sets.py

Sources (all ship inside the scikit-learn package, nothing is fetched):
- iris:          sklearn.datasets.load_iris           (150 x 4, 3 classes)
- wine:          sklearn.datasets.load_wine           (178 x 13, 3 classes)
- breast_cancer: sklearn.datasets.load_breast_cancer  (569 x 30, 2 classes)
- digits:        sklearn.datasets.load_digits         (1797 x 64, 10 classes, raw 0..16)

Each is split 75/25 (train_test_split(test_size=0.25, random_state=0, stratify=y)) and
written raw (no scaling) to crates/sfb-models/tests/fixtures/uci/NAME_{train,test}.csv
(label first, no header) and NAME_{train,test}.libsvm (1-based indices, zeros omitted).
Values are written with repr() so both formats hold the same float64 numbers.

reference.json: per set, scikit-learn's test accuracy of LogisticRegression() with its
defaults (lbfgs, C = 1, an intercept, max_iter = 100, on raw features: what a user would
run) and of the same on standardized features with max_iter = 10000 (converged).
"""

import json
import os
import warnings

import numpy as np
import sklearn
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

OUT = "crates/sfb-models/tests/fixtures/uci"


def num(v):
    v = float(v)
    return str(int(v)) if v == int(v) else repr(v)


def write(name, part, X, y):
    with open(os.path.join(OUT, f"{name}_{part}.csv"), "w") as f:
        for row, label in zip(X, y):
            f.write(",".join([str(int(label))] + [num(v) for v in row]) + "\n")
    with open(os.path.join(OUT, f"{name}_{part}.libsvm"), "w") as f:
        for row, label in zip(X, y):
            cells = [f"{k + 1}:{num(v)}" for k, v in enumerate(row) if v != 0]
            f.write(" ".join([str(int(label))] + cells) + "\n")


def main():
    os.makedirs(OUT, exist_ok=True)
    ref = {"sklearn": sklearn.__version__, "split": "75/25 stratified, random_state=0"}
    for name, load in [
        ("iris", load_iris),
        ("wine", load_wine),
        ("breast_cancer", load_breast_cancer),
        ("digits", load_digits),
    ]:
        X, y = load(return_X_y=True)
        Xtr, Xte, ytr, yte = train_test_split(
            X, y, test_size=0.25, random_state=0, stratify=y
        )
        write(name, "train", Xtr, ytr)
        write(name, "test", Xte, yte)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            raw = LogisticRegression().fit(Xtr, ytr).score(Xte, yte)
        s = StandardScaler().fit(Xtr)
        std = (
            LogisticRegression(max_iter=10000)
            .fit(s.transform(Xtr), ytr)
            .score(s.transform(Xte), yte)
        )
        ref[name] = {
            "samples": int(X.shape[0]),
            "features": int(X.shape[1]),
            "classes": int(len(set(y))),
            "test": int(len(yte)),
            "logreg_default_accuracy": raw,
            "logreg_standardized_accuracy": std,
        }
        print(name, ref[name])
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
