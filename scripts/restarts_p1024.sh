#!/usr/bin/env bash
# Issue 31's must-show: `sfb sim` at P = 1,024 (partial broadcast, Q = 10, the default gossip
# mode, BSP) with 5 % of the peers crashing at seeded clocks and half of those restarting
# and rejoining, against the same run without faults. Writes the summaries, logs and each
# run's mean held-out objective per evaluation (curves.csv) to OUT_DIR, and prints the
# fault-free run's target (its objective at clock 150, the benches' half-way rule), the
# clock at which the faulted run reaches it, and the faults the summary lists.
# Usage: scripts/restarts_p1024.sh OUT_DIR   (env SFB: the binary, default target/release/sfb)
# About 6 minutes here (release build).
set -euo pipefail
out=$1; SFB=${SFB:-target/release/sfb}
mkdir -p "$out"
args=(sim --peers 1024 --out-degree 10 --clocks 300
      --synthetic classes=16,features=32,samples=65536
      --on-peer-loss continue --peer-timeout 0.005 --eval-every 30)
"$SFB" "${args[@]}" --summary "$out/free.json" --metrics "$out/free.jsonl" > "$out/free.log" 2>&1
"$SFB" "${args[@]}" --crash-fraction 0.05 --restart-fraction 0.5 \
  --summary "$out/faults.json" --metrics "$out/faults.jsonl" > "$out/faults.log" 2>&1
python3 - "$out" <<'PY'
import json, sys, collections
out = sys.argv[1]
def curve(name):
    by = collections.defaultdict(list)
    for line in open(f"{out}/{name}.jsonl"):
        r = json.loads(line)
        if r.get("objective") is not None:
            by[r["clock"]].append(r["objective"])
    return {c: (sum(v) / len(v), len(v)) for c, v in sorted(by.items())}
free, hit = curve("free"), curve("faults")
with open(f"{out}/curves.csv", "w") as f:
    f.write("clock,free_objective,free_replicas,faults_objective,faults_replicas\n")
    for c in free:
        f.write(f"{c},{free[c][0]:.6f},{free[c][1]},{hit[c][0]:.6f},{hit[c][1]}\n")
target = next(o for c, (o, _) in free.items() if c >= 150)
reached = next((c for c, (o, _) in hit.items() if o <= target), None)
s, sf = json.load(open(f"{out}/faults.json")), json.load(open(f"{out}/free.json"))
faults = s["sim"]["faults"]
count = lambda w: sum(w in x for x in faults)
print(f"target {target:.4f} (fault-free at clock 150); faulted run reaches it at clock {reached}")
print(f"final objective: faults {s['objective']:.4f}, fault-free {sf['objective']:.4f}; "
      f"replicas {len(s['replica_checksums'])} of 1024; simulated {s['sim']['simulated_s']:.4f} s "
      f"against {sf['sim']['simulated_s']:.4f} s")
print(f"sim.faults: {count('crash:')} crashes, {count('restart:')} restarts, "
      f"{count('rejoined at')} rejoined, {count('not taken back')} not taken back, "
      f"{count('differs')} with a W unlike the state sent")
PY
rm -f "$out/free.jsonl" "$out/faults.jsonl"
