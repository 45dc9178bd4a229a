#!/usr/bin/env bash
# The RDMA suite on real verbs: boots a Soft-RoCE (rdma_rxe) QEMU guest that shares
# this machine's filesystem and runs the integration tests inside it, in two
# guests at once (each prints when both are done, one after the other):
#   1. single topology (rxe0, 10.77.0.1): over rdma, every suite but those
#      that run on the host only (HOST_ONLY in scripts/rdma-suite-in-guest.sh)
#      and those the pair topology runs;
#   2. pair topology (rxe1 10.77.1.1 <-> rxe2 10.77.1.2): the suites that set
#      up, lose and restore links, over rdma, one node per address, plus
#      ib_write_lat as the latency floor.
# Each suite runs over rdma once.
# Over TCP the suite runs on the host (scripts/test.sh), on both servers.
# Usage: scripts/test-rdma.sh [filter]   (filter is passed to every test binary)
set -euo pipefail
cd "$(dirname "$0")/.."
FILTER=${1:-}
scripts/softroce-vm.sh --check >/dev/null || scripts/softroce-vm.sh --install-deps
cargo build
# Integration test executables (not the lib's unit tests: those need no device).
BINS=$(cargo test --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "test" in m["target"]["kind"]:
        print(m["executable"])
')
[ -n "$BINS" ] || { echo "test-rdma: no integration test binaries found" >&2; exit 1; }
export RDMASYNC_TEST_BINS="$BINS" RDMASYNC_TEST_FILTER="$FILTER"
start=$(date +%s)
# Both guests at once: their suites wait on the network and on each other's
# nodes much of the time, so together they took 337 s against 435 s one
# after the other (stop 53, this machine: each suite 1.2-2x slower, none
# near a limit). Each guest's output goes to its own log, printed whole.
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
# Limits well above what the passes take, so that a hang still leaves CI its
# time (stop 22's CI, before the tcp pass and hotkeys left the guest: 3,030 s
# for both guests, of which hotkeys 770 s in the pair pass alone).
scripts/softroce-vm.sh -t 1500 -n single -- scripts/rdma-suite-in-guest.sh single \
  >"$logs/single" 2>&1 & single=$!
scripts/softroce-vm.sh -t 1000 -n pair -- scripts/rdma-suite-in-guest.sh pair \
  >"$logs/pair" 2>&1 & pair=$!
rc=0
wait "$single" || rc=$?
wait "$pair" || rc=$((rc ? rc : $?))
cat "$logs/single" "$logs/pair"
echo "test-rdma: guest runs took $(( $(date +%s) - start )) s in all, exit status $rc"
exit "$rc"
