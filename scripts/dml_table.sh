#!/usr/bin/env bash
# Regenerates the DML table of docs/concepts.md: learned vs Euclidean vs NCA 1-NN accuracy
# on five data sets, default DML settings (no flags beyond --model dml, the data and the
# clocks). Run from the workspace root; needs python3 with numpy and scikit-learn.
#
#   scripts/dml_table.sh [CLOCKS...]      # default: 100 3000
#
# Data: target/data (scripts/make_classification.py's unscaled12 set, scripts/
# dml_reference.py's iris / wine / breast_cancer splits, the committed digits fixture).
# Prints the markdown table; the per-run summaries stay in target/data/dml-*.json.
set -euo pipefail
cd "$(dirname "$0")/.."
clocks=("${@:-100 3000}")
read -r -a clocks <<<"${clocks[*]}"
D=target/data
mkdir -p "$D"
[ -f "$D/unscaled12_train.csv" ] || python3 scripts/make_classification.py --out "$D" >/dev/null
# make_classification.py rewrites its committed reference JSON; keep the committed one.
git checkout -- scripts/make_classification_reference.json 2>/dev/null || true
python3 scripts/dml_reference.py --out "$D" >"$D/dml_reference.json"
cp crates/sfb-models/tests/fixtures/digits_train.libsvm crates/sfb-models/tests/fixtures/digits_test.libsvm "$D/"
cargo build --release --bin sfb >/dev/null 2>&1
SFB=${CARGO_TARGET_DIR:-target}/release/sfb
for s in iris wine breast_cancer digits unscaled12; do
  ext=csv
  [ "$s" = digits ] && ext=libsvm
  for c in "${clocks[@]}"; do
    "$SFB" run --model dml --data "$D/${s}_train.$ext" --test-data "$D/${s}_test.$ext" \
      --clocks "$c" --summary "$D/dml-$s-$c.json" >/dev/null
  done
done
python3 - "$D" "${clocks[@]}" <<'PY'
import json, sys
d, clocks = sys.argv[1], sys.argv[2:]
ref = json.load(open(f"{d}/dml_reference.json"))
ext = {"digits": "libsvm"}
head = "| data set | n train / test | D | classes | " + " | ".join(
    f"learned 1-NN, {c} clocks" for c in clocks) + " | Euclidean 1-NN | NCA 1-NN |"
print(head)
print("|" + "---|" * (head.count("|") - 1))
for s in ["iris", "wine", "breast_cancer", "digits", "unscaled12"]:
    r = ref[s]
    runs = [json.load(open(f"{d}/dml-{s}-{c}.json")) for c in clocks]
    eu = runs[-1]["knn_accuracy_euclidean"]
    assert abs(eu - r["euclidean"]) < 1e-9, (s, eu, r["euclidean"])
    print(f"| {s} | {r['n_train']} / {r['n_test']} | {r['features']} | {r['classes']} | "
          + " | ".join(f"{x['knn_accuracy']:.3f}" for x in runs)
          + f" | {eu:.3f} | {r['nca']:.3f} |")
print()
print("command: sfb run --model dml --data target/data/SET_train.EXT "
      "--test-data target/data/SET_test.EXT --clocks N (4 peers, all else default)")
PY
