#!/usr/bin/env bash
# The tree's rank at P = 1,024 on the `scale` scenario's 24,000 samples (issue 28), where
# full broadcast's clock-30 objective is its held-out minimum (`scripts/p1024_target.sh`):
# `--partial tree --tree-rank R` for Q = 3 and 10, 60 clocks; per run the bytes per peer
# per clock, the simulated time a clock and the held-out objective every 10 clocks. At
# Q = 10 a rank of 128 or more is exact (W is 128 × 128): it repeats FMS's curve. A run
# whose summary exists is not run again (about a minute each here).
# Usage: scripts/p1024_ranks.sh OUT_DIR   env: SFB (target/release/sfb)
set -euo pipefail
out=$1; SFB=${SFB:-target/release/sfb}
mkdir -p "$out"
for qr in 3:16 3:32 3:48 10:32 10:48 10:160; do
  q=${qr%:*}; r=${qr#*:}; tag="rank-q$q-r$r"
  [ -e "$out/$tag.json" ] && continue
  "$SFB" sim --model mlr --synthetic classes=128,features=128,samples=24000,test=500,rank=16,blobs=0.3 \
    --batch 16 --seed 2016 --eval-every 10 --bandwidth 10gbit --flops 9.12e11 \
    --peers 1024 --out-degree "$q" --partial tree --tree-rank "$r" --clocks 60 \
    --metrics "$out/$tag.jsonl" --summary "$out/$tag.json" > "$out/$tag.log" 2>&1
done
python3 - "$out" <<'PY'
import json, sys, glob, os, collections
out = sys.argv[1]
for f in sorted(glob.glob(f"{out}/rank-q*.json"), key=lambda f: [int(x) for x in os.path.basename(f)[6:-5].split("-r")]):
    tag = os.path.basename(f)[:-5]
    s = json.load(open(f))
    by = collections.defaultdict(list)
    for line in open(f"{out}/{tag}.jsonl"):
        r = json.loads(line)
        if r.get("objective") is not None:
            by[r["clock"]].append(r["objective"])
    c = {k: sum(v) / len(v) for k, v in sorted(by.items())}
    print(f"{tag:>14}: {s['bytes_per_clock_per_peer']:8.0f} B per peer per clock, "
          f"{1e3 * s['wall_s'] / s['clocks']:.3f} ms a clock (simulated), min {min(c.values()):.4f}; "
          + " ".join(f"{k}:{v:.4f}" for k, v in c.items()))
PY
