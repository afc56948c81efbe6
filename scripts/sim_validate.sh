#!/bin/bash
# The simulator against real processes (results/README.md, "The simulator against real processes"): for P = 4 and 8,
# SFB full broadcast and FMS, one `sfb run --transport libp2p --bandwidth 1gbit` (token
# bucket, processes on this machine) and one `sfb sim --costs calibrate` of the same run
# with the processes' setting (ingress unlimited: loopback; --colocate NODES:CORES: all
# nodes on this host's cores). Prints time per clock, bytes per clock, staleness
# histogram and checksum agreement per pair (time: evaluation excluded). Extra sim flags (e.g. --transport-cpu 360MB)
# are passed through; REAL_FLAGS (e.g. --netns, as root) to the real runs only.
#
#   cargo build --release && [REAL_FLAGS=…] scripts/sim_validate.sh [OUT_DIR] [sim flags…]
set -euo pipefail
S=${SFB:-target/release/sfb}
OUT=${1:-target/sim-validate}
shift || true
CORES=$(nproc)
mkdir -p "$OUT"
for P in 4 8; do for B in sfb fms; do
  C="--peers $P --backend $B --clocks 100 --synthetic classes=256,features=1024,samples=20000 --optimizer sgd --eval-every 0 --bandwidth 1gbit"
  nodes=$P; [ "$B" = fms ] && nodes=$((P+1))
  $S run --transport libp2p $C ${REAL_FLAGS:-} --summary "$OUT/real-$B-$P.json" >/dev/null 2>"$OUT/real-$B-$P.err"
  $S sim --costs calibrate --ingress unlimited --colocate "$nodes:$CORES" "$@" $C \
    --summary "$OUT/sim-$B-$P.json" >/dev/null 2>"$OUT/sim-$B-$P.err"
  python3 - "$OUT/real-$B-$P.json" "$OUT/sim-$B-$P.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); s = json.load(open(sys.argv[2]))
# Training time per clock: wall time less the one evaluation, at the end (evaluations
# between clocks would hide co-located processes' waits for each other in their
# evaluation time: wall less evaluation would not be the training time), and less the
# end-of-run drain (flush_s: waiting once, after the last clock, for the last frames; on
# the simulator's calendar the nodes that finish first start their final evaluation
# ahead of the others' last work, where the OS would share the cores). Both printed.
ms = lambda x: 1e3 * (x["wall_s"] - x.get("eval_s", 0.0)) / x["clocks"]
mf = lambda x: ms(x) - 1e3 * x.get("flush_s", 0.0) / x["clocks"]
print(f"{r['backend']} P={r['peers']}: ms/clock real {mf(r):.2f} sim {mf(s):.2f} "
      f"(sim/real {mf(s) / mf(r):.3f}; with the drain {ms(s) / ms(r):.3f}); "
      f"bytes/clock real {r['bytes_per_clock']:.0f} "
      f"sim {s['bytes_per_clock']:.0f} ({s['bytes_per_clock'] / r['bytes_per_clock']:.6f}); "
      f"staleness equal {r['staleness_histogram'] == s['staleness_histogram']}; "
      f"checksums equal {r['replica_checksums'] == s['replica_checksums']}")
PY
done; done
