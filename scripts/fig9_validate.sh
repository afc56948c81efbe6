#!/bin/bash
# The paper's Fig. 9 (the Q sweep) on the simulator against real processes (results/README.md,
# "The Q sweep at P = 12"): `sfb bench --scenario q-sweep` over libp2p (P = 12 processes on
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
read -r flops mem_bw per_sample per_eval per_call < <(python3 - "$OUT/calibration.json" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))["sim"]
# The summary's costs are one core's (the host's calendar shares them), as the flags take them.
c = b["costs"]
print(b["flops"], b["mem_bw"], c["compute_per_sample"], c["evaluate"], c["apply_per_call"])
PY
)
$S bench --scenario q-sweep --peers $P --transport sim --flops "$flops" --mem-bw "$mem_bw" \
  --compute-per-sample "$per_sample" --evaluate-cost "$per_eval" --apply-per-call "$per_call" \
  --ingress unlimited \
  --colocate "$P:$(nproc)" ${SIM_FLAGS:-} "$@" -o "$OUT/sim" >"$OUT/sim.log" 2>&1
python3 - "$OUT/real/q-sweep.json" "$OUT/sim/q-sweep.json" <<'PY'
import json, sys
real, sim = (json.load(open(f)) for f in sys.argv[1:3])
# Training time per clock: wall less evaluations and the end-of-run drain (flush_s,
# once after the last clock; see scripts/sim_validate.sh); with the drain in brackets.
ms = lambda s: 1e3 * (s["wall_s"] - s["eval_s"]) / s["clocks"]
mf = lambda s: ms(s) - 1e3 * s["flush_s"] / s["clocks"]
by_name = {a["name"]: a for a in sim["arms"]}
print("| arm | real ms/clock | sim ms/clock | sim ÷ real | (with the drain) | bytes/clock sim ÷ real |")
print("|---|---:|---:|---:|---:|---:|")
ratios, drained = [], []
for a in real["arms"]:
    b = by_name[a["name"]]
    r, s = a["summary"], b["summary"]
    ratios.append(mf(s) / mf(r))
    drained.append(ms(s) / ms(r))
    print(f"| {a['name']} | {mf(r):.2f} | {mf(s):.2f} | {mf(s) / mf(r):.3f} | {ms(s) / ms(r):.3f} | "
          f"{s['bytes_per_clock'] / r['bytes_per_clock']:.5f} |")
for name, xs in (("", ratios), (" (with the drain)", drained)):
    within = sum(abs(x - 1) <= 0.2 for x in xs)
    print(f"\n{within} of {len(xs)} arms within 20%{name}; ratios {min(xs):.3f} … {max(xs):.3f}")
PY
