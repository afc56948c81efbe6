#!/usr/bin/env bash
# Partial broadcast by the aggregation tree at scale (issue 28), on the simulator: for each P,
# full broadcast (60 clocks) and --partial tree at Q = 3 and 10 (CLOCKS clocks), 128 × 128
# MLR, K = 16, 10 Gbit/s NICs, 9.12e11 flop/s (the `scale` scenario's settings). Prints the
# target (full broadcast's held-out objective at its clock 30), when each arm first reaches
# it (clock and simulated seconds), its minimum and final objective, bytes per peer per clock
# and the replicas' distinct checksums.
# Usage: scripts/tree_scale.sh OUT_DIR   env: PS ("64 256") CLOCKS (150) SFB (target/release/sfb)
#   MODE (tree): the partial arms' --partial; MODE=default names none (the run's own choice,
#   which its log's topology line states).
set -euo pipefail
out=$1; PS=${PS:-"64 256"}; CLOCKS=${CLOCKS:-150}; SFB=${SFB:-target/release/sfb}
MODE=${MODE:-tree}
partial=(--partial "$MODE"); [ "$MODE" = default ] && partial=()
mkdir -p "$out"
data=(--model mlr --synthetic classes=128,features=128,samples=24000,test=500,rank=16,blobs=0.3
      --batch 16 --seed 2016 --eval-every 10 --bandwidth 10gbit --flops 9.12e11)
for p in $PS; do
  "$SFB" sim "${data[@]}" --peers "$p" --clocks 60 --metrics "$out/p$p-full.jsonl" \
    --summary "$out/p$p-full.json" > "$out/p$p-full.log" 2>&1
  for q in 3 10; do
    "$SFB" sim "${data[@]}" --peers "$p" --clocks "$CLOCKS" --out-degree "$q" "${partial[@]}" \
      --metrics "$out/p$p-$MODE-q$q.jsonl" --summary "$out/p$p-$MODE-q$q.json" \
      > "$out/p$p-$MODE-q$q.log" 2>&1
  done
  python3 - "$out" "$p" "$MODE" <<'PY'
import json, sys, collections
out, p, mode = sys.argv[1], sys.argv[2], sys.argv[3]
def curve(tag):
    by = collections.defaultdict(list)
    for line in open(f"{out}/p{p}-{tag}.jsonl"):
        r = json.loads(line)
        if r.get("objective") is not None:
            by[r["clock"]].append((r["objective"], r["wall_s"]))
    return [(c, sum(o for o, _ in v) / len(v), max(w for _, w in v)) for c, v in sorted(by.items())]
full = curve("full")
target = next(o for c, o, _ in full if c == 30)
print(f"P = {p}: target {target:.4f} (full broadcast's objective at clock 30)")
for tag in ["full", f"{mode}-q3", f"{mode}-q10"]:
    c = curve(tag); s = json.load(open(f"{out}/p{p}-{tag}.json"))
    hit = next(((cl, w) for cl, o, w in c if o <= target), None)
    lo = min(o for _, o, _ in c)
    when = f"clock {hit[0]}, {hit[1]:.4f} s" if hit else "not reached"
    print(f"  {tag:>8}: target at {when}; min {lo:.4f}, final {c[-1][1]:.4f}; "
          f"{s['bytes_per_clock_per_peer']:.0f} B per peer per clock; "
          f"{len(set(s['replica_checksums']))} distinct replica(s); "
          + next((l.strip() for l in open(f"{out}/p{p}-{tag}.log") if "topology:" in l), ""))
PY
done
