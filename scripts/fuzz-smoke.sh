#!/usr/bin/env bash
# Short coverage-guided fuzz run of every decoder of network bytes (frames,
# link messages, the ring poller, the handshake). Usage: scripts/fuzz-smoke.sh [seconds per target]
# cargo-fuzz needs nightly features; RUSTC_BOOTSTRAP lets the stable toolchain build it.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-20}
cargo fuzz --version >/dev/null 2>&1 || cargo install cargo-fuzz --locked
export RUSTC_BOOTSTRAP=1
for target in frame_decode control_decode ring_poller handshake; do
  echo "== fuzz $target for ${SECS}s"
  log=$(mktemp)
  rc=0
  cargo fuzz run "$target" -O -- -max_total_time="$SECS" -print_final_stats=1 >"$log" 2>&1 || rc=$?
  grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|==[0-9]+== ERROR|SUMMARY)' "$log" || true
  if [ "$rc" != 0 ]; then
    tail -30 "$log"
    echo "fuzz $target FAILED (rc $rc; crash input under fuzz/artifacts/$target)"
    exit 1
  fi
  rm -f "$log"
done
