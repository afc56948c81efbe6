#!/usr/bin/env python3
"""Generate the test fixtures and golden values of sfb-models (crates/sfb-models/tests/fixtures/).

Run once from the workspace root; the outputs are committed, tests never download:

    pip install scikit-learn numpy
    python3 scripts/make_fixtures.py

Source of the data: scikit-learn's bundled copy of the UCI "Optical Recognition of
Handwritten Digits" test set (sklearn.datasets.load_digits: 1,797 images of 8x8 pixels,
values 0..16, 10 classes). It ships inside the scikit-learn package, so nothing is
fetched from the network.

Outputs (all in crates/sfb-models/tests/fixtures/):
- digits_train.libsvm, digits_test.libsvm: an 80/20 stratified split
  (train_test_split(test_size=0.2, random_state=0, stratify=y)), pixel values divided
  by 16 (so features are in [0, 1]; every value k/16 is exact in decimal and binary),
  1-based feature indices, zeros omitted, labels 0..9.
- digits_reference.json: scikit-learn LogisticRegression test accuracy on that split.
- mlr_golden.json: mean cross-entropy and its gradient (float64 numpy) for a fixed W
  on the first samples of the training split.
- sdca_reference.json: the optimum of L2-regularized multinomial logistic regression,
  (1/n) sum_i CE(W x_i, y_i) + lambda/2 ||W||^2 (no intercept), from
  LogisticRegression(C = 1/(lambda n), fit_intercept=False) on a subset of the training
  split, with the primal value evaluated here in float64.
- sc_reference.json: MiniBatchDictionaryLearning at dictionary size k and l1 weight
  lambda on the training split: the dictionary, and the test-set reconstruction error
  and objective of lasso codes at the same lambda.
"""

import json
import os
import sys

import numpy as np
import sklearn
from sklearn.datasets import load_digits
from sklearn.decomposition import MiniBatchDictionaryLearning, sparse_encode
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates", "sfb-models", "tests", "fixtures")


def write_libsvm(path, x, y):
    with open(path, "w") as f:
        for row, label in zip(x, y):
            parts = [str(int(label))]
            for j, v in enumerate(row):
                if v != 0.0:
                    parts.append(f"{j + 1}:{v:.6g}")
            f.write(" ".join(parts) + "\n")


def softmax_ce(w, x, y):
    """Mean cross-entropy of logits x w^T and its gradient (J x D), float64."""
    z = x @ w.T
    z = z - z.max(axis=1, keepdims=True)
    lse = np.log(np.exp(z).sum(axis=1))
    p = np.exp(z - lse[:, None])
    n = x.shape[0]
    loss = float(np.mean(lse - z[np.arange(n), y]))
    p[np.arange(n), y] -= 1.0
    grad = p.T @ x / n
    return loss, grad


def dump(name, obj):
    with open(os.path.join(OUT, name), "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")


def main():
    os.makedirs(OUT, exist_ok=True)
    meta = {
        "generator": "scripts/make_fixtures.py",
        "sklearn": sklearn.__version__,
        "numpy": np.__version__,
        "python": sys.version.split()[0],
    }
    digits = load_digits()
    x = digits.data.astype(np.float64) / 16.0
    y = digits.target.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    write_libsvm(os.path.join(OUT, "digits_train.libsvm"), xtr, ytr)
    write_libsvm(os.path.join(OUT, "digits_test.libsvm"), xte, yte)

    # Reference accuracy: scikit-learn's LogisticRegression (defaults: C=1, lbfgs,
    # multinomial, intercept) and the same without intercept (our MLR has none).
    ref = dict(meta, train=len(ytr), test=len(yte), features=64, classes=10)
    for key, kw in [("default", {}), ("no_intercept", {"fit_intercept": False})]:
        clf = LogisticRegression(max_iter=10000, **kw).fit(xtr, ytr)
        ref[f"sklearn_logreg_{key}_test_accuracy"] = float(clf.score(xte, yte))
    dump("digits_reference.json", ref)

    # MLR golden: a fixed W (float32 values, so Rust holds it exactly) on the first
    # 256 training samples.
    rng = np.random.default_rng(0)
    w = (0.5 * rng.standard_normal((10, 64))).astype(np.float32).astype(np.float64)
    m = 256
    loss, grad = softmax_ce(w, xtr[:m], ytr[:m])
    dump("mlr_golden.json", dict(meta, samples=m, w=w.tolist(), loss=loss, grad=grad.tolist()))

    # SDCA reference: L2-MLR optimum on the first n training samples.
    n, lam = 600, 1e-2
    xs, ys = xtr[:n], ytr[:n]
    clf = LogisticRegression(
        C=1.0 / (lam * n), fit_intercept=False, tol=1e-12, max_iter=100000
    ).fit(xs, ys)
    wopt = clf.coef_
    loss, grad = softmax_ce(wopt, xs, ys)
    primal = loss + 0.5 * lam * float(np.sum(wopt * wopt))
    gnorm = float(np.linalg.norm(grad + lam * wopt))
    dump("sdca_reference.json", dict(meta, samples=n, **{"lambda": lam}, primal=primal,
                                     gradient_norm=gnorm, test_accuracy=float(clf.score(xte, yte))))

    # Sparse coding reference.
    k, alpha = 32, 0.1
    dl = MiniBatchDictionaryLearning(
        n_components=k, alpha=alpha, batch_size=64, max_iter=50, random_state=0,
        transform_algorithm="lasso_cd", transform_alpha=alpha,
    ).fit(xtr)
    d = dl.components_  # k x 64, unit-norm rows (atoms)
    codes = sparse_encode(xte, d, algorithm="lasso_cd", alpha=alpha, max_iter=10000)
    resid = xte - codes @ d
    sq = np.sum(resid * resid, axis=1)
    dump("sc_reference.json", dict(
        meta, dict_size=k, **{"lambda": alpha},
        reconstruction_error=float(np.mean(sq)),
        objective=float(np.mean(0.5 * sq + alpha * np.abs(codes).sum(axis=1))),
        mean_nonzero_codes=float(np.mean(np.sum(codes != 0, axis=1))),
        mean_squared_norm=float(np.mean(np.sum(xte * xte, axis=1))),
        dictionary=d.tolist(),
    ))
    for f in ["digits_reference.json", "sdca_reference.json"]:
        print(f, open(os.path.join(OUT, f)).read())
    sc = json.load(open(os.path.join(OUT, "sc_reference.json")))
    print({k2: v for k2, v in sc.items() if k2 != "dictionary"})


if __name__ == "__main__":
    main()
