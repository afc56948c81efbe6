#!/usr/bin/env python3
"""Data sets and scikit-learn 1-NN references for the DML table (docs/concepts.md).

Run from the workspace root (scripts/dml_table.sh calls it):

    pip install scikit-learn numpy
    python3 scripts/make_classification.py      # target/data/unscaled12_{train,test}.csv
    python3 scripts/dml_reference.py [--out DIR] > target/data/dml_reference.json

Writes OUT/{iris,wine,breast_cancer}_{train,test}.csv (OUT: --out, default target/data):
scikit-learn's bundled copies (sklearn.datasets.load_iris / load_wine /
load_breast_cancer; nothing is fetched), split by
train_test_split(test_size=0.3, random_state=0, stratify=y), in the CSV format sfb reads
(no header, label first, '%.6g'). Then, for those three, the committed digits fixture
(crates/sfb-models/tests/fixtures/digits_{train,test}.libsvm, see make_fixtures.py) and
make_classification.py's unscaled12 set, prints JSON with the test 1-NN accuracy
(KNeighborsClassifier(n_neighbors=1), the whole training split as reference) on features
scaled as `sfb run`'s default `--scale auto` does (a StandardScaler fit on the training
split when at least 75 % of its entries are non-zero, else a MaxAbsScaler: the digits):
`euclidean`, and `nca` after NeighborhoodComponentsAnalysis(random_state=0) (all
defaults: n_components = D, init='auto', max_iter=50) fit on the scaled training split.
"""

import argparse
import json
import os
import sys

import numpy as np
from sklearn import datasets
from sklearn.model_selection import train_test_split
from sklearn.neighbors import KNeighborsClassifier, NeighborhoodComponentsAnalysis
from sklearn.preprocessing import MaxAbsScaler, StandardScaler

from make_classification import read_csv, write_csv  # same CSV format as sfb reads

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_libsvm(path, d):
    xs, ys = [], []
    with open(path) as f:
        for line in f:
            parts = line.split()
            row = np.zeros(d)
            for p in parts[1:]:
                i, v = p.split(":")
                row[int(i) - 1] = float(v)
            xs.append(row)
            ys.append(int(float(parts[0])))
    return np.array(xs), np.array(ys)


def one_nn(xtr, ytr, xte, yte):
    return float(KNeighborsClassifier(n_neighbors=1).fit(xtr, ytr).score(xte, yte))


def references(xtr, ytr, xte, yte):
    # sfb's `--scale auto`: standard from 75 % non-zero training entries, else max-abs.
    if (xtr != 0).mean() >= 0.75:
        s = StandardScaler().fit(xtr)
    else:
        s = MaxAbsScaler().fit(xtr)
    xtr, xte = s.transform(xtr), s.transform(xte)
    nca = NeighborhoodComponentsAnalysis(random_state=0).fit(xtr, ytr)
    return {
        "n_train": int(len(ytr)),
        "n_test": int(len(yte)),
        "features": int(xtr.shape[1]),
        "classes": int(len(np.unique(ytr))),
        "euclidean": one_nn(xtr, ytr, xte, yte),
        "nca": one_nn(nca.transform(xtr), ytr, nca.transform(xte), yte),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "target", "data"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    out = {}
    for name, load in [
        ("iris", datasets.load_iris),
        ("wine", datasets.load_wine),
        ("breast_cancer", datasets.load_breast_cancer),
    ]:
        x, y = load(return_X_y=True)
        xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.3, random_state=0, stratify=y)
        write_csv(os.path.join(args.out, f"{name}_train.csv"), xtr, ytr)
        write_csv(os.path.join(args.out, f"{name}_test.csv"), xte, yte)
        # The values sfb reads (rounded to 6 digits).
        out[name] = references(
            *read_csv(os.path.join(args.out, f"{name}_train.csv")),
            *read_csv(os.path.join(args.out, f"{name}_test.csv")),
        )
    fx = os.path.join(ROOT, "crates", "sfb-models", "tests", "fixtures")
    out["digits"] = references(
        *read_libsvm(os.path.join(fx, "digits_train.libsvm"), 64),
        *read_libsvm(os.path.join(fx, "digits_test.libsvm"), 64),
    )
    u = os.path.join(args.out, "unscaled12_train.csv")
    if os.path.exists(u):
        out["unscaled12"] = references(
            *read_csv(u), *read_csv(os.path.join(args.out, "unscaled12_test.csv"))
        )
    else:
        print(f"{u} missing: run scripts/make_classification.py first", file=sys.stderr)
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
