#!/usr/bin/env bash
# Memory soak (issue 13): runs `sfb run` (4 peers, in memory) for SECONDS and samples the
# process's resident set every 10 s. Prints "t_s rss_kb" lines, then the ratio of the
# last sample to the one at 60 s. The run is stopped by PID at the end.
#   scripts/soak.sh SFB_BINARY SECONDS sfb-run-options...
set -euo pipefail
sfb=$1; secs=$2; shift 2
"$sfb" run --peers 4 --clocks 100000000 --eval-every 0 --timeout 600 "$@" >/dev/null 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true' EXIT
at60=""
for ((t = 10; t <= secs; t += 10)); do
    sleep 10
    rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")
    echo "$t $rss"
    [[ $t -eq 60 ]] && at60=$rss
    last=$rss
done
awk -v a="$at60" -v b="$last" 'BEGIN { printf "rss at 60 s: %d kB, at end: %d kB, change: %+.1f%%\n", a, b, (b - a) * 100 / a }'
