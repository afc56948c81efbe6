#!/usr/bin/env python3
"""scikit-learn's optimum of sfb's L2-MLR problem on the four UCI sets (issue 30).

sfb's `l2mlr` minimizes P(W) = (1/n) sum_i CE(W x_i, y_i) + (lambda/2) ||W||^2 over
W in R^{J x (D+1)} on the training data as `sfb run` prepares it with no flags: scaled by
`--scale auto` (standard when at least 75 % of the training entries are non-zero, else
max-abs; a constant column is divided by its magnitude, an all-zero one left alone) and a
constant-1 column appended, the intercept, whose weight is *not* regularized (the sum of
squares runs over the other D columns), as scikit-learn's lbfgs does.

This script builds the same matrix in float64 and solves the same problem with
LogisticRegression(fit_intercept=True) on the scaled columns:
- J >= 3 classes, multinomial: C = 1 / (lambda n);
- J = 2: sfb keeps two rows and a softmax; the optimum has W = [-w/2, w/2] with w
  scikit-learn's single vector, so ||W||^2 = ||w||^2 / 2 and C = 2 / (lambda n), and
  intercepts [-b/2, b/2].
It records the optimum's primal value in sfb's convention.

Run once from the workspace root; the output is committed:

    python3 scripts/l2mlr_reference.py

Writes crates/sfb-models/tests/fixtures/uci/l2mlr_reference.json.
"""

import json

import numpy as np
import sklearn
from sklearn.linear_model import LogisticRegression

DIR = "crates/sfb-models/tests/fixtures/uci"
LAMBDA = 1e-3  # sfb's default --lambda
SETS = ["iris", "wine", "breast_cancer", "digits"]


def load(name):
    a = np.loadtxt(f"{DIR}/{name}_train.csv", delimiter=",", ndmin=2)
    return a[:, 1:], a[:, 0].astype(int)


def prepare(x):
    """sfb's --scale auto and intercept column, in float64."""
    nonzero = np.count_nonzero(x) / x.size
    if nonzero >= 0.75:
        how = "standard"
        mean = x.mean(axis=0)
        std = np.sqrt(((x - mean) ** 2).mean(axis=0))
        out = np.empty_like(x)
        for k in range(x.shape[1]):
            if std[k] > 1e-12 * abs(mean[k]):
                out[:, k] = (x[:, k] - mean[k]) / std[k]
            elif mean[k] != 0:
                out[:, k] = x[:, k] / abs(mean[k])
            else:
                out[:, k] = x[:, k]
    else:
        how = "maxabs"
        m = np.abs(x).max(axis=0)
        m[m == 0] = 1.0
        out = x / m
    return out, how, nonzero


def softmax_ce(z, y):
    z = z - z.max(axis=1, keepdims=True)
    lse = np.log(np.exp(z).sum(axis=1))
    return float(np.mean(lse - z[np.arange(len(y)), y]))


def main():
    out = {"sklearn": sklearn.__version__, "lambda": LAMBDA}
    for name in SETS:
        x, y = load(name)
        xs, how, nonzero = prepare(x)
        n = len(y)
        classes = int(y.max()) + 1
        binary = classes == 2
        c = (2.0 if binary else 1.0) / (LAMBDA * n)
        clf = LogisticRegression(C=c, fit_intercept=True, tol=1e-12, max_iter=100000)
        clf.fit(xs, y)
        if binary:
            w, b0 = clf.coef_[0], clf.intercept_[0]
            W, b = np.vstack([-w / 2, w / 2]), np.array([-b0 / 2, b0 / 2])
        else:
            W, b = clf.coef_, clf.intercept_
        primal = softmax_ce(xs @ W.T + b, y) + 0.5 * LAMBDA * float((W**2).sum())
        out[name] = {
            "samples": n,
            "classes": classes,
            "scaling": how,
            "nonzero": nonzero,
            "C": c,
            "primal": primal,
            "iterations": int(np.max(clf.n_iter_)),
        }
        print(f"{name}: {how} ({nonzero:.0%} non-zero), C = {c:.6g}, primal {primal:.10f}")
    with open(f"{DIR}/l2mlr_reference.json", "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
