#!/bin/bash
# The transport's CPU per frame beyond its bytes (`sfb sim --frame-cpu`), measured with
# real processes (results/README.md, "The simulator against real processes"): P peers over libp2p on this machine
# (1 Gbit/s token buckets, as the validation runs) on an MLR model too small to compute
# (J = D = 16, frames of ~2 KB), at out-degree 1 and P − 1, each for 2 and 2 + CLOCKS
# clocks under /usr/bin/time (the launcher waits for its peers, so their CPU is counted).
# The extra clocks' CPU per node per clock grows with the frames each node sends and takes
# (2·Q a clock); its slope is the CPU per frame at one end. With RATE (e.g. 879MB,
# --transport-cpu's figure) the frame's bytes at that rate are taken off. Median of
# REPEATS runs per point.
#
#   cargo build --release && scripts/frame_cpu.sh [P] [RATE]
set -euo pipefail
S=${SFB:-target/release/sfb}
P=${1:-12}
RATE=${2:-}
CLOCKS=${CLOCKS:-200}
REPEATS=${REPEATS:-3}
# D of the model: 16 gives ~2 KB frames; larger D, larger frames (K·(J + D)·4 bytes) at
# little more compute, for the transport's CPU per byte among the processes.
FEATURES=${FEATURES:-16}
SAMPLES=${SAMPLES:-4000}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
run() { # Q CLOCKS -> "cpu_seconds bytes_per_clock_per_peer"
  /usr/bin/time -f "%U %S" -o "$TMP/time" "$S" run --transport libp2p --peers "$P" \
    --out-degree "$1" --clocks "$2" --eval-every 0 --bandwidth 1gbit --batch 16 --seed 2016 \
    --synthetic "classes=16,features=$FEATURES,samples=$SAMPLES,test=100" --summary "$TMP/s.json" \
    >/dev/null 2>"$TMP/err" || { cat "$TMP/err" >&2; exit 1; }
  python3 -c 'import json,sys; u,s=open(sys.argv[1]).read().split(); b=json.load(open(sys.argv[2]))
print(float(u)+float(s), b["bytes_per_clock_per_peer"])' "$TMP/time" "$TMP/s.json"
}
for Q in 1 $((P - 1)); do
  for C in 2 $((CLOCKS + 2)); do
    for _ in $(seq "$REPEATS"); do echo "$Q $C $(run "$Q" "$C")"; done
  done
done >"$TMP/points"
python3 - "$TMP/points" "$P" "$CLOCKS" "$RATE" <<'PY'
import statistics, sys
points, p, clocks, rate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
cpu, size = {}, {}
for line in open(points):
    q, c, s, b = line.split()
    cpu.setdefault((int(q), int(c)), []).append(float(s))
    size[int(q)] = float(b) / int(q)
med = {k: statistics.median(v) for k, v in cpu.items()}
per = {}
for q in (1, p - 1):
    per[q] = (med[(q, clocks + 2)] - med[(q, 2)]) / clocks / p
    print(f"Q = {q}: {per[q] * 1e6:.1f} µs of CPU per node per clock "
          f"(2·Q = {2 * q} frame-ends of {size[q]:.0f} bytes)")
slope = (per[p - 1] - per[1]) / (2 * (p - 2))
bytes_part = 0.0
if rate:
    units = {"gb": 1e9, "mb": 1e6, "kb": 1e3, "b": 1.0}
    r = rate.lower()
    unit = next(u for u in units if r.endswith(u))
    bytes_part = size[p - 1] / (float(r[: -len(unit)]) * units[unit])
print(f"per frame-end: {slope * 1e6:.1f} µs"
      + (f", {bytes_part * 1e6:.1f} µs of it the bytes at {rate}" if rate else ""))
print(f"--frame-cpu {max(slope - bytes_part, 0.0) * 1e6:.1f}us")
print(f"per node per clock besides frames: {(per[1] - 2 * slope) * 1e6:.1f} µs")
PY
