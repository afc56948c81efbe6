#!/bin/bash
# The paper's Fig. 9 (the Q sweep) on the simulator against real processes (README,
# "Simulating a cluster"): `sfb bench --scenario q-sweep` over libp2p (P = 12 processes on
# this machine, 1 Gbit/s token buckets), then the same scenario on the simulator with
# this machine's setting (calibrated once, then the same rates for every arm; ingress
# unlimited: loopback; --colocate 12:CORES: every node on this host's cores), and per arm the ratio of simulated to
# real time per clock (evaluations excluded). Extra flags go to both benches; SIM_FLAGS
# (e.g. "--transport-cpu 360MB") to the simulated one only.
#
#   cargo build --release && [SIM_FLAGS=…] scripts/fig9_validate.sh [OUT_DIR] [bench flags…]
set -euo pipefail
S=${SFB:-target/release/sfb}
OUT=${1:-target/fig9-validate}
shift || true
P=12
mkdir -p "$OUT"
$S bench --scenario q-sweep --peers $P "$@" -o "$OUT/real" >"$OUT/real.log" 2>&1
# Calibrate once (full broadcast's shapes; kernels timed together as the P processes run)
# and price every arm with the same rates, so arms of equal work get equal prices.
$S sim --peers $P --costs calibrate --ingress unlimited --colocate "$P:$(nproc)" --clocks 5 \
  --model mlr --synthetic 'classes=1024,features=1024,samples=24000,test=500,rank=16,blobs=0.3' \
  --batch 16 --bandwidth 1gbit --summary "$OUT/calibration.json" >/dev/null 2>"$OUT/calibration.log"
read -r flops mem_bw per_sample per_eval < <(python3 - "$OUT/calibration.json" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))["sim"]
# The summary's costs are one core's (the host's calendar shares them), as the flags take them.
print(b["flops"], b["mem_bw"], b["costs"]["compute_per_sample"], b["costs"]["evaluate"])
PY
)
$S bench --scenario q-sweep --peers $P --transport sim --flops "$flops" --mem-bw "$mem_bw" \
  --compute-per-sample "$per_sample" --evaluate-cost "$per_eval" --ingress unlimited \
  --colocate "$P:$(nproc)" ${SIM_FLAGS:-} "$@" -o "$OUT/sim" >"$OUT/sim.log" 2>&1
python3 - "$OUT/real/q-sweep.json" "$OUT/sim/q-sweep.json" <<'PY'
import json, sys
real, sim = (json.load(open(f)) for f in sys.argv[1:3])
ms = lambda s: 1e3 * (s["wall_s"] - s["eval_s"]) / s["clocks"]
by_name = {a["name"]: a for a in sim["arms"]}
print("| arm | real ms/clock | sim ms/clock | sim ÷ real | bytes/clock sim ÷ real |")
print("|---|---:|---:|---:|---:|")
ratios = []
for a in real["arms"]:
    b = by_name[a["name"]]
    r, s = ms(a["summary"]), ms(b["summary"])
    ratios.append(s / r)
    print(f"| {a['name']} | {r:.2f} | {s:.2f} | {s / r:.3f} | "
          f"{b['summary']['bytes_per_clock'] / a['summary']['bytes_per_clock']:.5f} |")
within = sum(abs(x - 1) <= 0.2 for x in ratios)
print(f"\n{within} of {len(ratios)} arms within 20%; ratios {min(ratios):.3f} … {max(ratios):.3f}")
PY
