#!/usr/bin/env bash
# Long partial-broadcast runs (issue 28): P peers in memory, each Q of QS with the mode(s)
# given, plus full broadcast, CLOCKS clocks; prints per run the final objective, its ratio
# to full broadcast's, the largest rise after the minimum (of the evaluations as printed,
# and of their running mean over 5 evaluations: on digits' 360 test samples the objective
# moves by a median 1.2-1.7 % and at most 4.7 % from one evaluation to the next in the
# second half of a 2,000-clock run, full broadcast's as much), bytes per clock
# (and the ratio to Q/(P−1) of full broadcast's) and the replica divergence.
# Usage: scripts/partial_long.sh OUT_DIR DATA_NAME [sfb run data flags…]
#   env: P (12) QS ("2 3 4") MODES ("gossip"; or tree, paper, default) CLOCKS (2000) EVAL (50)
#   SFB (target/release/sfb)
set -euo pipefail
out=$1; name=$2; shift 2
P=${P:-12}; QS=${QS:-"2 3 4"}; MODES=${MODES:-gossip}; CLOCKS=${CLOCKS:-2000}; EVAL=${EVAL:-50}
SFB=${SFB:-target/release/sfb}
mkdir -p "$out"
run() { # tag, flags…
  local tag=$1; shift
  "$SFB" run --peers "$P" --clocks "$CLOCKS" --eval-every "$EVAL" "$@" \
    --metrics "$out/$name-$tag.jsonl" --summary "$out/$name-$tag.json" > "$out/$name-$tag.log" 2>&1
}
run full "$@"
for q in $QS; do for m in $MODES; do
  # MODES may hold `default`: no --partial named, the run's own choice (its log says which).
  if [ "$m" = default ]; then run "q$q-$m" --out-degree "$q" "$@"
  else run "q$q-$m" --out-degree "$q" --partial "$m" "$@"; fi
done; done
python3 - "$out" "$name" "$P" <<'PY'
import json, sys, glob, os, collections
out, name, P = sys.argv[1], sys.argv[2], int(sys.argv[3])
def curve(tag):
    by = collections.defaultdict(list)
    for line in open(f"{out}/{name}-{tag}.jsonl"):
        r = json.loads(line)
        if r.get("objective") is not None:
            by[r["clock"]].append(r["objective"])
    return sorted((c, sum(v) / len(v)) for c, v in by.items())
full = json.load(open(f"{out}/{name}-full.json"))
def tail_mean(c):  # mean held-out objective over the last quarter of the evaluations
    t = [v for _, v in c[len(c) * 3 // 4:]]
    return sum(t) / len(t)
full_tail = tail_mean(curve("full"))
def rises(c):  # (min, its clock, rise after it) of the curve and of its 5-evaluation running mean
    m = [(c[k][0], sum(v for _, v in c[max(0, k - 4):k + 1]) / len(c[max(0, k - 4):k + 1]))
         for k in range(len(c))]
    out = []
    for x in (c, m):
        i = min(range(len(x)), key=lambda k: x[k][1]); lo = x[i][1]
        out.append((lo, x[i][0], max(v for _, v in x[i:]) / lo - 1))
    return out
(flo, fat, frise), (_, _, fsmooth) = rises(curve("full"))
print(f"{name}: full broadcast objective {full['objective']:.4f} (last quarter's mean {full_tail:.4f}), "
      f"min {flo:.4f} at clock {fat}, rise after it {100 * frise:.2f}% ({100 * fsmooth:.2f}% of the "
      f"running mean), bytes/clock {full['bytes_per_clock']:.0f}")
for f in sorted(glob.glob(f"{out}/{name}-q*.json")):
    tag = os.path.basename(f)[len(name) + 1:-5]
    s = json.load(open(f)); c = curve(tag)
    q = int(tag[1:].split("-")[0])
    (lo, at, rise), (_, _, smooth) = rises(c)
    budget = q / (P - 1) * full["bytes_per_clock"]
    print(f"  {tag:>10}: objective {s['objective']:.4f} (x{s['objective'] / full['objective']:.4f} of full), "
          f"min {lo:.4f} at clock {at}, rise after it {100 * rise:.2f}% ({100 * smooth:.2f}% of the running mean), "
          f"bytes/clock {s['bytes_per_clock']:.0f} = {s['bytes_per_clock'] / budget:.3f} x Q/(P-1) of full, "
          f"divergence {s['max_replica_divergence']:.4g}, mix pairs/clock {s.get('mix_pairs_per_clock', 0):.2f}")
    print(f"{'':>14}last quarter's mean {tail_mean(c):.4f} (x{tail_mean(c) / full_tail:.4f} of full's)")
    mid = [v for cl, v in c if cl in (500, 1000, 1500, 2000)]
    print(f"{'':>14}curve at 500/1000/1500/2000: " + " ".join(f"{v:.4f}" for v in mid))
PY
