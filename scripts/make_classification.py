#!/usr/bin/env python3
"""Generate the unscaled 12-class synthetic data set and its scikit-learn references.

Run from the workspace root (the CSV files are not committed; the reference JSON is):

    pip install scikit-learn numpy
    python3 scripts/make_classification.py [--out DIR]

then, for example:

    cargo run --release --bin sfb -- run --peers 4 --clocks 50 \\
        --data target/data/unscaled12_train.csv --test-data target/data/unscaled12_test.csv

Source of the data: scikit-learn's generator
sklearn.datasets.make_classification(n_samples=5000, n_features=200, n_informative=20,
n_redundant=10, n_classes=12, n_clusters_per_class=1, class_sep=1.5, random_state=0)
(one cluster per class: with the default two, a linear model tops out near 0.45 test
accuracy and the comparison says little), all other arguments at their defaults:
n_repeated=0,
flip_y=0.01 (about 1% of the labels are replaced by random ones, so no classifier
reaches 100%), hypercube=True, shift=0, scale=1, shuffle=True. Its features are all
roughly centred and of similar spread; to make them *unscaled* the way real data is,
feature j is then transformed as x_j -> s_j * x_j + b_j, with, from
numpy.random.default_rng(1), first the 200 scales s_j = exp(U(log 1, log 20))
(log-uniform in [1, 20]) and then the 200 offsets b_j = U(-20, 20). Nothing is fetched
from the network.

Outputs:
- OUT/unscaled12_train.csv, OUT/unscaled12_test.csv (OUT: --out, default target/data
  under the workspace root, created if missing): a stratified split
  (train_test_split(test_size=0.2, random_state=0, stratify=y)) into 4,000 training and
  1,000 test rows. The format is what sfb's CSV reader expects (sfb_models::data::read_csv,
  chosen by the .csv name): no header, no comments, one sample per row, the label first
  (an integer 0..11), then the 200 feature values, comma-separated, '%.6g'.
- scripts/make_classification_reference.json: scikit-learn LogisticRegression references,
  computed on the values as written to the CSV files (read back), so on the data sfb sees:
  LogisticRegression() with all defaults (C=1, lbfgs, max_iter=100, intercept), as a new
  user would run it on the raw features, with whether it warned that it did not converge;
  and LogisticRegression(max_iter=5000) on features standardized by a StandardScaler fit on
  the training split, a better-converged reference. For each: test accuracy and test log
  loss (mean cross-entropy, natural log), and the same on the training split. The same two
  references for the committed digits fixture (crates/sfb-models/tests/fixtures/
  digits_{train,test}.libsvm, see scripts/make_fixtures.py). And the per-feature standard
  deviation (min / median / max over features, of the training split) of both data sets.
"""

import argparse
import json
import os
import sys
import warnings

import numpy as np
import sklearn
from sklearn.datasets import load_svmlight_file, make_classification
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
FIXTURES = os.path.join(ROOT, "crates", "sfb-models", "tests", "fixtures")
REFERENCE = os.path.join(HERE, "make_classification_reference.json")

GENERATOR = dict(n_samples=5000, n_features=200, n_informative=20, n_redundant=10,
                 n_classes=12, n_clusters_per_class=1, class_sep=1.5,
                 random_state=0)
SCALE_RANGE = (1.0, 20.0)    # per-feature scale, log-uniform
OFFSET_RANGE = (-20.0, 20.0)  # per-feature offset, uniform
UNSCALE_SEED = 1


def write_csv(path, x, y):
    with open(path, "w") as f:
        for row, label in zip(x, y):
            f.write(",".join([str(int(label))] + [f"{v:.6g}" for v in row]) + "\n")


def read_csv(path):
    a = np.loadtxt(path, delimiter=",", dtype=np.float64, ndmin=2)
    return a[:, 1:], a[:, 0].astype(np.int64)


def std_range(x):
    s = np.std(x, axis=0)
    return {"min": float(s.min()), "median": float(np.median(s)), "max": float(s.max())}


def fit_eval(clf, xtr, ytr, xte, yte):
    """Fits clf; returns its accuracy and log loss on both splits and convergence facts."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf.fit(xtr, ytr)
    conv = [w for w in caught if issubclass(w.category, ConvergenceWarning)]
    out = {
        "test_accuracy": float(clf.score(xte, yte)),
        "test_log_loss": float(log_loss(yte, clf.predict_proba(xte), labels=clf.classes_)),
        "train_accuracy": float(clf.score(xtr, ytr)),
        "train_log_loss": float(log_loss(ytr, clf.predict_proba(xtr), labels=clf.classes_)),
        "n_iter": int(np.max(clf.n_iter_)),
        "max_iter": int(clf.max_iter),
        "convergence_warning": bool(conv),
    }
    if conv:
        out["convergence_warning_text"] = str(conv[0].message).strip().splitlines()[0]
    return out


def references(xtr, ytr, xte, yte):
    """The two LogisticRegression references: raw features with all defaults, and
    standardized features (scaler fit on train) with max_iter=5000."""
    raw = fit_eval(LogisticRegression(), xtr, ytr, xte, yte)
    sc = StandardScaler().fit(xtr)
    std = fit_eval(LogisticRegression(max_iter=5000), sc.transform(xtr), ytr,
                   sc.transform(xte), yte)
    return {"logreg_default_raw": raw, "logreg_standardized_max_iter_5000": std}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "target", "data"),
                    help="directory of the CSV files (default: target/data of the workspace)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    # The data set, then unscaled per feature.
    x, y = make_classification(**GENERATOR)
    rng = np.random.default_rng(UNSCALE_SEED)
    d = x.shape[1]
    scales = np.exp(rng.uniform(np.log(SCALE_RANGE[0]), np.log(SCALE_RANGE[1]), size=d))
    offsets = rng.uniform(OFFSET_RANGE[0], OFFSET_RANGE[1], size=d)
    x = x * scales + offsets
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    train_path = os.path.join(args.out, "unscaled12_train.csv")
    test_path = os.path.join(args.out, "unscaled12_test.csv")
    write_csv(train_path, xtr, ytr)
    write_csv(test_path, xte, yte)
    # References on exactly what was written.
    xtr, ytr = read_csv(train_path)
    xte, yte = read_csv(test_path)

    ref = {
        "generator": "scripts/make_classification.py",
        "sklearn": sklearn.__version__,
        "numpy": np.__version__,
        "python": sys.version.split()[0],
        "unscaled12": {
            "files": ["unscaled12_train.csv", "unscaled12_test.csv"],
            "format": "CSV, no header, label (integer 0..11) first, then 200 features, '%.6g'",
            "make_classification": dict(GENERATOR, n_repeated=0,
                                        flip_y=0.01, hypercube=True, shuffle=True),
            "unscaling": {
                "rule": "x_j -> scale_j * x_j + offset_j",
                "rng": f"numpy.random.default_rng({UNSCALE_SEED}): scales first, then offsets",
                "scale": f"log-uniform in [{SCALE_RANGE[0]:g}, {SCALE_RANGE[1]:g}]",
                "offset": f"uniform in [{OFFSET_RANGE[0]:g}, {OFFSET_RANGE[1]:g}]",
                "drawn_scale_min_max": [float(scales.min()), float(scales.max())],
                "drawn_offset_min_max": [float(offsets.min()), float(offsets.max())],
            },
            "split": "train_test_split(test_size=0.2, random_state=0, stratify=y)",
            "train": int(len(ytr)),
            "test": int(len(yte)),
            "features": int(xtr.shape[1]),
            "classes": int(len(np.unique(ytr))),
            "labels": sorted(int(v) for v in np.unique(ytr)),
            "train_feature_std": std_range(xtr),
            "train_feature_abs_max": float(np.abs(xtr).max()),
            **references(xtr, ytr, xte, yte),
        },
    }

    # The committed digits fixture (labels 0..9, features k/16 in [0, 1]).
    dtr, dytr = load_svmlight_file(os.path.join(FIXTURES, "digits_train.libsvm"), n_features=64)
    dte, dyte = load_svmlight_file(os.path.join(FIXTURES, "digits_test.libsvm"), n_features=64)
    dtr, dte = dtr.toarray(), dte.toarray()
    dytr, dyte = dytr.astype(np.int64), dyte.astype(np.int64)
    ref["digits"] = {
        "files": ["crates/sfb-models/tests/fixtures/digits_train.libsvm",
                  "crates/sfb-models/tests/fixtures/digits_test.libsvm"],
        "train": int(len(dytr)),
        "test": int(len(dyte)),
        "features": 64,
        "classes": int(len(np.unique(dytr))),
        "labels": sorted(int(v) for v in np.unique(dytr)),
        "train_feature_std": std_range(dtr),
        **references(dtr, dytr, dte, dyte),
    }

    with open(REFERENCE, "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    print(f"wrote {train_path} ({len(ytr)} rows), {test_path} ({len(yte)} rows), {REFERENCE}")
    print(open(REFERENCE).read(), end="")


if __name__ == "__main__":
    main()
