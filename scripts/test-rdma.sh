#!/usr/bin/env bash
# The RDMA suite on real verbs: boots a Soft-RoCE (rdma_rxe) QEMU guest that shares
# this machine's filesystem and runs the integration tests inside it, serially:
#   1. single topology (rxe0, 10.77.0.1): every suite over tcp, then over rdma;
#   2. pair topology (rxe1 10.77.1.1 <-> rxe2 10.77.1.2): the suites over rdma,
#      one node per address, plus ib_write_lat as the latency floor.
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
rc=0
# Two passes (tcp, rdma) of the emulated suite in this guest: about 22 minutes
# on a 2-vCPU host without KVM.
scripts/softroce-vm.sh -t 1800 -n single -- scripts/rdma-suite-in-guest.sh single || rc=$?
scripts/softroce-vm.sh -t 1500 -n pair -- scripts/rdma-suite-in-guest.sh pair || rc=$((rc ? rc : $?))
echo "test-rdma: guest runs took $(( $(date +%s) - start )) s in all, exit status $rc"
exit "$rc"
