#!/bin/bash
# Reproduces the table of docs/fault-tolerance.md, "What is trusted" (SFB=path/to/sfb).
# The step bound's margin on healthy runs: max_step_ratio of long runs, several models and data sets.
SFB=${SFB:-target/debug/sfb}
F=crates/sfb-models/tests/fixtures
out=${OUT:-/tmp/step-ratios}; mkdir -p $out
run() { name=$1; shift; $SFB "$@" --summary $out/$name.json >/dev/null 2>$out/$name.err; r=$?; printf '%-28s exit %d  max_step_ratio %s  objective %s\n' "$name" $r "$(grep -o '"max_step_ratio": *[0-9.e+-]*' $out/$name.json | grep -o '[0-9.e+-]*$')" "$(grep -o '"objective": *[0-9.e+-]*' $out/$name.json | head -1 | grep -o '[0-9.e+-]*$')"; }
run mlr-digits-full      sim --peers 8 --data $F/digits_train.libsvm --test-data $F/digits_test.libsvm --clocks 2000 --eval-every 500
run mlr-digits-paper-q2  sim --peers 8 --out-degree 2 --partial paper --data $F/digits_train.libsvm --test-data $F/digits_test.libsvm --clocks 2000 --eval-every 500
run mlr-digits-gossip-q2 sim --peers 8 --out-degree 2 --partial gossip --data $F/digits_train.libsvm --test-data $F/digits_test.libsvm --clocks 2000 --eval-every 500
run mlr-digits-relay-q2  sim --peers 8 --out-degree 2 --relay --data $F/digits_train.libsvm --test-data $F/digits_test.libsvm --clocks 2000 --eval-every 500
run mlr-digits-async     sim --peers 8 --consistency async --data $F/digits_train.libsvm --test-data $F/digits_test.libsvm --clocks 2000 --eval-every 500
run mlr-synth-20x100     sim --peers 8 --synthetic classes=20,features=100,samples=20000 --clocks 2000 --eval-every 500
run mlr-synth-unscaled   sim --peers 8 --synthetic classes=20,features=100,samples=20000 --scale none --clocks 2000 --eval-every 500
run l2mlr-synth          sim --peers 8 --model l2mlr --synthetic classes=10,features=50,samples=8000 --clocks 1000 --eval-every 500
run dml-synth            sim --peers 8 --model dml --synthetic classes=10,features=50,samples=8000 --clocks 2000 --eval-every 500
run sc-synth             sim --peers 8 --model sc --synthetic classes=10,features=50,samples=8000 --clocks 1000 --eval-every 500
run mlr-sgd-lr5-diverging   sim --peers 8 --synthetic classes=20,features=100,samples=20000 --optimizer sgd --lr 5 --clocks 1000 --eval-every 500
run mlr-breast-csv       sim --peers 4 --data $F/uci/breast_cancer_train.csv --test-data $F/uci/breast_cancer_test.csv --clocks 2000 --eval-every 500
run mlr-breast-unscaled  sim --peers 4 --data $F/uci/breast_cancer_train.csv --test-data $F/uci/breast_cancer_test.csv --scale none --clocks 2000 --eval-every 500
run mlr-wine-fms         sim --peers 4 --backend fms --data $F/uci/wine_train.libsvm --test-data $F/uci/wine_test.libsvm --clocks 1000 --eval-every 500
