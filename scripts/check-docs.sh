#!/usr/bin/env bash
# Runs every command of the README's tour and of the guide (docs/*.md), as written.
#
#   scripts/check-docs.sh [FILE.md …]      (default: README.md docs/*.md)
#
# Which blocks run: fenced blocks whose info string is exactly `sh`. A block that must not
# run here says why in its info string, `sh skip: REASON` (the script prints the reason);
# blocks of any other language (`text`, `toml`, `rust`, …) are shown, not run.
#
# How: the blocks of one page run one after another, each as its own `bash -euo pipefail`
# script, in one fresh directory per page (so a later block can use a file an earlier one
# wrote), with `sfb` on the PATH. That directory lies under the workspace's target/ so that
# `cargo run --example …` finds the workspace. Each block runs in a session of its own,
# under a time limit (SFB_DOCS_TIMEOUT, default 300 s); when it ends, anything it left
# running is killed and counted as a failure. Every temporary file is removed on exit.
#
# SFB_DOCS_VERBOSE=1 prints every block's output, not only a failed one's.
#
# SFB_EXAMPLES=DIR runs `cargo run [--release] --example NAME [-- ARGS]` as DIR/NAME ARGS,
# through a `cargo` first on the PATH that does only this and hands every other command to
# the real cargo: CI checks the pages with the binaries its test build made instead of
# building the examples again in another profile.
#
# The `sfb` used: $SFB if set, else ${CARGO_TARGET_DIR:-target}/release/sfb, built first
# with `cargo build --release --bin sfb` if it is missing. Exit status: 0 when every block
# ran and exited 0, 1 otherwise.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
TIMEOUT="${SFB_DOCS_TIMEOUT:-300}"

if [ -z "${SFB:-}" ]; then
  SFB="${CARGO_TARGET_DIR:-$ROOT/target}/release/sfb"
  if [ ! -x "$SFB" ]; then
    cargo build --release --bin sfb || exit 1
  fi
fi
SFB="$(cd "$(dirname "$SFB")" && pwd)/$(basename "$SFB")"
[ -x "$SFB" ] || { echo "check-docs: no sfb binary at $SFB" >&2; exit 1; }

[ -d "$ROOT/target" ] || made_target=1
mkdir -p "$ROOT/target"
WORK="$(mktemp -d "$ROOT/target/check-docs.XXXXXX")"
mkdir "$WORK/bin"
ln -s "$SFB" "$WORK/bin/sfb"
if [ -n "${SFB_EXAMPLES:-}" ]; then
  examples="$(cd "$SFB_EXAMPLES" && pwd)" || exit 1
  real_cargo="$(command -v cargo)"
  cat >"$WORK/bin/cargo" <<SHIM
#!/usr/bin/env bash
# check-docs: \`cargo run [--release] --example NAME [-- ARGS]\` runs $examples/NAME.
if [ "\${1:-}" = run ]; then
  args=("\${@:2}")
  [ "\${args[0]:-}" = --release ] && args=("\${args[@]:1}")
  if [ "\${args[0]:-}" = --example ] && [ -n "\${args[1]:-}" ]; then
    name="\${args[1]}"
    args=("\${args[@]:2}")
    [ "\${args[0]:-}" = -- ] && args=("\${args[@]:1}")
    exec "$examples/\$name" "\${args[@]}"
  fi
fi
exec "$real_cargo" "\$@"
SHIM
  chmod +x "$WORK/bin/cargo"
fi
current=""
cleanup() {
  if [ -n "$current" ]; then kill -KILL -- "-$current" 2>/dev/null; fi
  rm -rf "$WORK"
  if [ -n "${made_target:-}" ]; then rmdir "$ROOT/target" 2>/dev/null; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ "$#" -gt 0 ]; then pages=("$@"); else pages=(README.md docs/*.md); fi

# Splits a page into $2/NNN.sh (runnable blocks) and $2/NNN.skip (the reason), in order.
extract() {
  awk -v dir="$2" '
    BEGIN { n = 0; inside = 0 }
    !inside && /^```/ {
      info = substr($0, 4); inside = 1; n++; line = NR
      if (info == "sh") { out = sprintf("%s/%03d.sh", dir, n); printf "" > out }
      else if (info ~ /^sh skip: /) {
        out = ""; printf "%s (line %d)\n", substr(info, 10), line > sprintf("%s/%03d.skip", dir, n)
      } else { out = "" }
      if (out != "") printf "# line %d\n", line > out
      next
    }
    inside && /^```/ { inside = 0; if (out != "") close(out); next }
    inside && out != "" { print > out }
  ' "$1"
}

total=0 passed=0 failed=0 skipped=0
failures=()
start_all=$(date +%s)
for page in "${pages[@]}"; do
  name="$(echo "$page" | tr '/.' '__')"
  blocks="$WORK/blocks-$name"
  run="$WORK/run-$name"
  mkdir -p "$blocks" "$run"
  extract "$page" "$blocks"
  for f in $(ls "$blocks" | sort); do
    case "$f" in
      *.skip)
        skipped=$((skipped + 1))
        echo "skip  $page: $(cat "$blocks/$f")"
        continue ;;
    esac
    total=$((total + 1))
    line="$(head -1 "$blocks/$f" | sed 's/# line //')"
    t0=$(date +%s.%N)
    # A session of its own (setsid: its pid is the group id), so that whatever the block
    # starts can be found and killed.
    (cd "$run" && PATH="$WORK/bin:$PATH" exec setsid bash -euo pipefail "$blocks/$f" \
      >"$blocks/$f.out" 2>&1) &
    current=$!
    status=""
    for ((i = 0; i < TIMEOUT * 10; i++)); do
      if ! kill -0 "$current" 2>/dev/null; then break; fi
      sleep 0.1
    done
    if kill -0 "$current" 2>/dev/null; then
      status="timed out after ${TIMEOUT} s"
      kill -KILL -- "-$current" 2>/dev/null
    fi
    wait "$current"
    rc=$?
    left="$(pgrep -g "$current" 2>/dev/null | tr '\n' ' ')"
    if [ -n "$left" ]; then
      kill -KILL -- "-$current" 2>/dev/null
      status="${status:+$status; }left processes behind: $left"
    fi
    current=""
    [ -z "$status" ] && [ "$rc" -ne 0 ] && status="exit $rc"
    secs=$(echo "$(date +%s.%N) - $t0" | bc)
    if [ -z "$status" ]; then
      passed=$((passed + 1))
      printf 'ok    %s:%s (%.1f s)\n' "$page" "$line" "$secs"
      if [ -n "${SFB_DOCS_VERBOSE:-}" ]; then sed 's/^/      > /' "$blocks/$f.out"; fi
    else
      failed=$((failed + 1))
      failures+=("$page:$line")
      printf 'FAIL  %s:%s (%.1f s): %s\n' "$page" "$line" "$secs" "$status"
      sed 's/^/      | /' "$blocks/$f" | tail -n +2
      echo "      output (last 30 lines):"
      tail -30 "$blocks/$f.out" | sed 's/^/      > /'
    fi
  done
done
echo "check-docs: $passed of $total blocks ok, $failed failed, $skipped skipped, $(($(date +%s) - start_all)) s"
[ "$failed" -eq 0 ]
