#!/usr/bin/env bash
# Short coverage-guided fuzz run of every decoder of network bytes (frames,
# link messages, the ring poller, the handshake). Usage: scripts/fuzz-smoke.sh [seconds per target]
# cargo-fuzz needs nightly features; RUSTC_BOOTSTRAP lets the stable toolchain build it.
# The targets are built once (all with the same flags), then fuzzed two at
# a time: libFuzzer runs one process per target, one core each.
# No sanitizer: the project's code the targets drive is safe Rust (unsafe
# lives in the FFI folders, tests/architecture.rs, which no target reaches;
# the checksum's SIMD is crc-fast's, tested upstream), where
# AddressSanitizer finds nothing a panic or a debug assertion (-O keeps
# them) would not; without it the build took 115 s against 155 s (stop 53).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-20}
cargo fuzz --version >/dev/null 2>&1 || cargo install cargo-fuzz --locked
export RUSTC_BOOTSTRAP=1
cargo fuzz build -O --sanitizer none
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
fuzz() { # target: runs it, its output in $logs/target.log, its status in $logs/target.rc
  local rc=0
  cargo fuzz run "$1" -O --sanitizer none -- -max_total_time="$SECS" -print_final_stats=1 >"$logs/$1.log" 2>&1 || rc=$?
  echo "$rc" > "$logs/$1.rc"
}
report() { # target: prints its summary; fails if it failed
  local target=$1 rc
  rc=$(cat "$logs/$target.rc")
  echo "== fuzz $target for ${SECS}s"
  grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|==[0-9]+== ERROR|SUMMARY)' "$logs/$target.log" || true
  if [ "$rc" != 0 ]; then
    tail -30 "$logs/$target.log"
    echo "fuzz $target FAILED (rc $rc; crash input under fuzz/artifacts/$target)"
    return 1
  fi
}
failed=0
for pair in "frame_decode control_decode" "ring_poller handshake"; do
  read -r first second <<< "$pair"
  fuzz "$first" & fuzz "$second" & wait
  report "$first" || failed=1
  report "$second" || failed=1
done
exit "$failed"
