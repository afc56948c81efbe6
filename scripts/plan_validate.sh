#!/bin/bash
# `sfb plan` against the real P = 8 fms-vs-sfb bench (results/README.md, "The planner against the simulator and the bench"): the
# bench over libp2p on this machine, then three plans right after it, each calibrated two
# ways: kernels timed together as the co-located nodes run (`--calibrate --colocate`) and
# each kernel timed alone (`--calibrate` without --colocate, its rates then priced with
# the --colocate share). Compare each plan's "per clock" with the bench's "ms per clock"
# (evaluation excluded on both sides).
#
#   cargo build --release && scripts/plan_validate.sh [OUT_DIR]
set -euo pipefail
S=${SFB:-target/release/sfb}
OUT=${1:-target/plan-validate}
mkdir -p "$OUT"
CORES=$(nproc)
$S bench --scenario fms-vs-sfb -o "$OUT" > "$OUT/bench.log" 2>&1
PLAN="-P 8 --size 4096 --batch 16 --bandwidth 1gbit --ingress unlimited"
for i in 1 2 3; do
  for arm in "sfb 8 --q 3" "fms 9"; do
    set -- $arm
    name=$1; nodes=$2; shift 2
    $S plan $PLAN --calibrate --colocate "$nodes:$CORES" "$@" > "$OUT/plan-$name-together-$i.txt" 2>&1
    # Alone: one thread's rates, priced with the share.
    read -r flops mem_bw per_sample < <($S plan $PLAN --calibrate --json 2>/dev/null | python3 -c '
import json, sys
p = json.load(sys.stdin)
print(p["flops"], p["mem_bw"], p["compute_per_sample_s"])')
    $S plan $PLAN --flops "$flops" --mem-bw "$mem_bw" --compute-per-sample "$per_sample" \
      --colocate "$nodes:$CORES" "$@" > "$OUT/plan-$name-alone-$i.txt" 2>&1
  done
done
grep "^| SFB full (Q=7) | [0-9]* |\|^| SFB partial (Q=3) | [0-9]* |\|^| FMS | [0-9]* |" "$OUT/fms-vs-sfb.md"
grep -H "^sfb-full \|^sfb-partial     3\|^fms-factors" "$OUT"/plan-*.txt
