#!/usr/bin/env bash
# Regenerates the DML tables of docs/concepts.md: learned vs Euclidean vs NCA 1-NN accuracy
# on five data sets, default DML settings (no flags beyond --model dml, the data and the
# clocks), with the bytes per clock per peer next to what FMS ships. Run from the workspace
# root; needs python3 with numpy and scikit-learn.
#
#   scripts/dml_table.sh [CLOCKS...]                 # default: 100 3000
#   scripts/dml_table.sh --candidates "C..." [CLOCKS] # the --candidates sweep (3000)
#
# Data: target/data (scripts/make_classification.py's unscaled12 set, scripts/
# dml_reference.py's iris / wine / breast_cancer splits, the committed digits fixture).
# Prints the markdown table; the per-run summaries stay in target/data/dml-*.json.
# Bytes: the run summary's bytes_per_clock_per_peer (a peer's factors to its 3
# out-neighbours); FMS: latent·D·4 (one ΔW) and a measured `--backend fms --fms-push
# dense` client (20 clocks, SGD at lr 1e-5: only its bytes are read; it pushes ΔW and
# pulls W).
set -euo pipefail
cd "$(dirname "$0")/.."
sweep=()
if [ "${1:-}" = --candidates ]; then
  read -r -a sweep <<<"$2"
  shift 2
  set -- "${@:-3000}"
fi
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
sets=(iris wine breast_cancer digits unscaled12)
for s in "${sets[@]}"; do
  ext=csv
  [ "$s" = digits ] && ext=libsvm
  data=(--data "$D/${s}_train.$ext" --test-data "$D/${s}_test.$ext")
  "$SFB" run --model dml "${data[@]}" --backend fms --fms-push dense --optimizer sgd \
    --lr 1e-5 --clocks 20 --summary "$D/dml-$s-fms.json" >/dev/null
  for c in "${clocks[@]}"; do
    if [ ${#sweep[@]} -eq 0 ]; then
      "$SFB" run --model dml "${data[@]}" --clocks "$c" --summary "$D/dml-$s-$c.json" >/dev/null
    fi
    for k in "${sweep[@]}"; do
      "$SFB" run --model dml "${data[@]}" --clocks "$c" --candidates "$k" \
        --summary "$D/dml-$s-$c-c$k.json" >/dev/null
    done
  done
done
python3 - "$D" "${clocks[*]}" "${sweep[*]}" <<'PY'
import json, sys
d, clocks, sweep = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
ref = json.load(open(f"{d}/dml_reference.json"))
sets = ["iris", "wine", "breast_cancer", "digits", "unscaled12"]
load = lambda name: json.load(open(f"{d}/{name}.json"))
fms = {s: load(f"dml-{s}-fms")["bytes_per_clock_per_peer"] for s in sets}
dw = {s: min(ref[s]["features"], 64) * ref[s]["features"] * 4 for s in sets}

def row(*cells):
    print("| " + " | ".join(str(c) for c in cells) + " |")

if sweep:
    c = clocks[-1]
    row("candidates", *(f"{s} 1-NN / bytes" for s in sets))
    print("|" + "---|" * (len(sets) + 1))
    for k in sweep:
        runs = [load(f"dml-{s}-{c}-c{k}") for s in sets]
        row(k, *(f"{r['knn_accuracy']:.3f} / {r['bytes_per_clock_per_peer']:,.0f}" for r in runs))
    row("Euclidean / latent·D·4", *(
        f"{ref[s]['euclidean']:.3f} / {dw[s]:,}" for s in sets))
    row("NCA / FMS client", *(f"{ref[s]['nca']:.3f} / {fms[s]:,.0f}" for s in sets))
    print()
    print(f"command: sfb run --model dml --data target/data/SET_train.EXT "
          f"--test-data target/data/SET_test.EXT --clocks {c} --candidates C")
    sys.exit()
head = ["data set", "n train / test", "D", "classes",
        *(f"learned 1-NN, {c} clocks" for c in clocks), "Euclidean 1-NN", "NCA 1-NN",
        f"bytes / clock / peer ({clocks[-1]} clocks)", "FMS: latent·D·4", "FMS client, measured"]
row(*head)
print("|" + "---|" * len(head))
for s in sets:
    r = ref[s]
    runs = [load(f"dml-{s}-{c}") for c in clocks]
    eu = runs[-1]["knn_accuracy_euclidean"]
    assert abs(eu - r["euclidean"]) < 1e-9, (s, eu, r["euclidean"])
    row(s, f"{r['n_train']} / {r['n_test']}", r["features"], r["classes"],
        *(f"{x['knn_accuracy']:.3f}" for x in runs), f"{eu:.3f}", f"{r['nca']:.3f}",
        f"{runs[-1]['bytes_per_clock_per_peer']:,.0f}", f"{dw[s]:,}", f"{fms[s]:,.0f}")
print()
print("command: sfb run --model dml --data target/data/SET_train.EXT "
      "--test-data target/data/SET_test.EXT --clocks N (4 peers, all else default)")
PY
